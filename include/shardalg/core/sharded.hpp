// shardalg/core/sharded.hpp — Sharded<T, Layout>: one rank's block of a global matrix, the
// global shape, and the group the matrix lives on. The layout is in the type, so the result
// layout of every operation, and every layout mistake, is known at compile time.
#pragma once

#include <ostream>
#include <utility>

#include "shardalg/comm/communicator.hpp"
#include "shardalg/core/backend_cpu.hpp"
#include "shardalg/core/errors.hpp"
#include "shardalg/core/layout.hpp"

namespace shardalg {

/// The local block shape of a `rows × cols` matrix in layout `k` on `p` ranks.
constexpr std::pair<Index, Index> local_shape(LayoutKind k, Index rows, Index cols, int p) {
  if (k == LayoutKind::row) return {rows / p, cols};
  if (k == LayoutKind::col) return {rows, cols / p};
  return {rows, cols};
}

namespace detail {
/// Throw DivisibilityError unless the split dimension of layout `k` divides by `p`.
/// `what...` names the operation in the message. It is formatted only when the check fails:
/// this runs on every Sharded construction, where building a string would cost more than a
/// small collective (hundreds of ns).
template <class... What>
void check_divisible(LayoutKind k, Index rows, Index cols, int p, const What&... what) {
  if (k == LayoutKind::row && rows % p != 0)
    throw DivisibilityError(cat(what..., ": rows ", rows, " is not divisible by group size ", p));
  if (k == LayoutKind::col && cols % p != 0)
    throw DivisibilityError(cat(what..., ": cols ", cols, " is not divisible by group size ", p));
}
}  // namespace detail

template <Element T, Layout L, class Backend = CpuBackend>
class Sharded {
 public:
  using value_type = T;
  using layout = L;
  using backend = Backend;
  using local_type = typename Backend::template matrix<T>;

  /// An empty tensor on no group (a placeholder to assign to).
  Sharded() = default;

  /// Adopt a local block. Checks that it is this rank's share of `rows × cols` in layout L on
  /// `group`; throws DivisibilityError or GroupSizeError (naming the shapes) otherwise.
  Sharded(local_type local, Index rows, Index cols, Group group)
      : local_(std::move(local)), rows_(rows), cols_(cols), group_(std::move(group)) {
    const int p = group_.size();
    detail::check_divisible(L::kind, rows_, cols_, p, "Sharded<", L::name, ">");
    const auto [lr, lc] = local_shape(L::kind, rows_, cols_, p);
    if (local_.rows() != lr || local_.cols() != lc)
      throw GroupSizeError(detail::cat("Sharded<", L::name, ">: local block ", local_.rows(), "x",
                                       local_.cols(), " is not the share of ", rows_, "x", cols_,
                                       " on a group of size ", p, " (expected ", lr, "x", lc, ")"));
  }

  /// Another layout is not convertible: a compile error [shardalg.E150] naming the collective.
  template <Layout From>
    requires(!std::same_as<From, L>)
  Sharded(const Sharded<T, From, Backend>&) {  // NOLINT: implicit, so the mistake meets the diagnostic
    diagnose_conversion<From::kind, L::kind>();
  }

  // Shapes
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] Index local_rows() const { return local_.rows(); }
  [[nodiscard]] Index local_cols() const { return local_.cols(); }
  /// Global index of the local block's first row / column.
  [[nodiscard]] Index row_offset() const { return L::kind == LayoutKind::row ? rank() * local_rows() : 0; }
  [[nodiscard]] Index col_offset() const { return L::kind == LayoutKind::col ? rank() * local_cols() : 0; }

  // Group
  [[nodiscard]] const Group& group() const { return group_; }
  [[nodiscard]] int rank() const { return group_.rank(); }
  [[nodiscard]] int size() const { return group_.size(); }

  // Local block
  [[nodiscard]] const local_type& local() const& { return local_; }
  [[nodiscard]] local_type& local() & { return local_; }
  [[nodiscard]] local_type local() && { return std::move(local_); }

  /// The same matrix on another handle of a group of the same size (e.g. a ledgered one).
  [[nodiscard]] Sharded rebind(Group g) const& {
    check_rebind(g);
    return Sharded(local_, rows_, cols_, std::move(g));
  }
  [[nodiscard]] Sharded rebind(Group g) && {
    check_rebind(g);
    return Sharded(std::move(local_), rows_, cols_, std::move(g));
  }

  /// Layout notation, e.g. "4x12[C]".
  friend std::ostream& operator<<(std::ostream& os, const Sharded& x) {
    return os << x.rows_ << "x" << x.cols_ << "[" << L::notation << "]";
  }

 private:
  void check_rebind(const Group& g) const {
    if (g.size() != group_.size())
      throw GroupSizeError(detail::cat("rebind: a ", L::name, " tensor on a group of size ", group_.size(),
                                       " handed to a communicator of size ", g.size()));
  }

  local_type local_;
  Index rows_ = 0, cols_ = 0;
  Group group_;
};

template <class X>
struct is_sharded : std::false_type {};
template <class T, class L, class B>
struct is_sharded<Sharded<T, L, B>> : std::true_type {};
template <class X>
concept ShardedTensor = is_sharded<std::remove_cvref_t<X>>::value;

namespace detail {
/// The same group, or GroupMismatchError naming the operation.
inline void check_same_group(const Group& a, const Group& b, std::string_view op) {
  if (!same_group(a, b))
    throw GroupMismatchError(cat(op, ": operands belong to different communicator groups (sizes ",
                                 a.size(), " and ", b.size(), ")"));
}
}  // namespace detail

}  // namespace shardalg
