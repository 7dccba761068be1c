// shardalg/core/sharded.hpp — Sharded<T, Layout>: one rank's block of a global matrix, the
// global shape, and the group the matrix lives on. The layout is in the type, so the result
// layout of every operation, and every layout mistake, is known at compile time.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "shardalg/base/linkage.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/base/blocks.hpp"
#include "shardalg/base/diagnostics.hpp"
#include "shardalg/base/errors.hpp"
#include "shardalg/base/layout.hpp"

namespace shardalg {

/// The local block shape of rank r's share of a `rows × cols` matrix in layout `k` on `p` ranks
/// (the balanced blocks of base/blocks.hpp: sizes differ by at most one, a rank may hold none).
constexpr std::pair<Index, Index> local_shape(LayoutKind k, Index rows, Index cols, int p, int r) {
  if (k == LayoutKind::row) return {block_size(rows, p, r), cols};
  if (k == LayoutKind::col) return {rows, block_size(cols, p, r)};
  return {rows, cols};
}

/// Whether the split dimension of layout `k` divides by `p` (every block equal: the collectives'
/// equal-count path). R, I and Partial always do.
constexpr bool even_split(LayoutKind k, Index rows, Index cols, int p) {
  if (k == LayoutKind::row) return even_blocks(rows, p);
  if (k == LayoutKind::col) return even_blocks(cols, p);
  return true;
}

namespace detail {
/// Throw DivisibilityError unless the split dimension of layout `k` divides by `p`: for the few
/// places whose mathematics needs equal blocks (a halo's own rows, a pipeline stage's
/// activation buffers). `what...` names the operation; formatted only when the check fails.
template <class... What>
void check_divisible(LayoutKind k, Index rows, Index cols, int p, const What&... what) {
  if (rows < 0 || cols < 0) [[unlikely]]
    throw ShapeError(cat(what..., ": shape ", rows, "x", cols, " has a negative dimension"));
  if (k == LayoutKind::row && rows % p != 0)
    throw DivisibilityError(cat(what..., ": rows ", rows, " is not divisible by group size ", p));
  if (k == LayoutKind::col && cols % p != 0)
    throw DivisibilityError(cat(what..., ": cols ", cols, " is not divisible by group size ", p));
}

/// Throw ShapeError for a negative dimension. `what...` names the operation in the message. It is
/// formatted only when the check fails: this runs on every Sharded construction, where building a
/// string would cost more than a small collective (hundreds of ns).
template <class... What>
void check_shape(Index rows, Index cols, const What&... what) {
  if (rows < 0 || cols < 0) [[unlikely]]
    throw ShapeError(cat(what..., ": shape ", rows, "x", cols, " has a negative dimension"));
}

/// Throw EmptyTensorError unless `g` is a group: an operand of a default-constructed Sharded has
/// none. `what...` names the operation.
template <class... What>
void check_operand(const Group& g, const What&... what) {
  if (!g.valid()) [[unlikely]]
    throw EmptyTensorError(cat(what..., ": operand is an empty Sharded (default-constructed, no group)"));
}
}  // namespace detail

template <Element T, Layout L, class Backend = CpuBackend>
class Sharded {
 public:
  using value_type = T;
  using layout = L;
  using backend = Backend;
  using local_type = typename Backend::template matrix<T>;

  /// An empty tensor on no group (a placeholder to assign to). Every operation on it throws
  /// EmptyTensorError naming the operation.
  Sharded() = default;

  /// Adopt a local block. Checks that it is this rank's share of `rows × cols` in layout L on
  /// `group` (its balanced block, base/blocks.hpp); throws GroupSizeError (naming the shapes)
  /// otherwise, ShapeError for a negative dimension and EmptyTensorError for an empty Group.
  Sharded(local_type local, Index rows, Index cols, Group group)
      : local_(std::move(local)), rows_(rows), cols_(cols), group_(std::move(group)) {
    if (!group_.valid())
      throw EmptyTensorError(detail::cat("Sharded<", L::name, ">: constructed on an empty Group (default-constructed, "
                                         "no communicator)"));
    const int p = group_.size();
    detail::check_shape(rows_, cols_, "Sharded<", L::name, ">");
    const auto [lr, lc] = local_shape(L::kind, rows_, cols_, p, group_.rank());
    if (local_.rows() != lr || local_.cols() != lc) [[unlikely]]
      throw GroupSizeError(detail::cat("Sharded<", L::name, ">: local block ", local_.rows(), "x",
                                       local_.cols(), " is not rank ", group_.rank(), "'s share of ", rows_, "x",
                                       cols_, " on a group of size ", p, " (expected ", lr, "x", lc, ")"));
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
  [[nodiscard]] Index row_offset() const {
    return L::kind == LayoutKind::row ? block_offset(rows_, size(), rank()) : 0;
  }
  [[nodiscard]] Index col_offset() const {
    return L::kind == LayoutKind::col ? block_offset(cols_, size(), rank()) : 0;
  }

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
    detail::check_operand(group_, "rebind");
    if (!g.valid())
      throw EmptyTensorError("rebind: the new Group is empty (default-constructed, no communicator)");
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
/// "ThreadComm of 2 ranks": the communicator's kind (Group::name) and size.
inline std::string describe_group(const Group& g) {
  const int p = g.size();
  return cat(g.name(), " of ", p, p == 1 ? " rank" : " ranks");
}

/// The same group, or GroupMismatchError naming the operation and both groups. Two groups of
/// one kind and size (two thread worlds, two MPI sub-communicators) read "… and another …".
SHARDALG_FUNC void check_same_group(const Group& a, const Group& b, std::string_view op);
#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp
SHARDALG_FUNC void check_same_group(const Group& a, const Group& b, std::string_view op) {
  if (same_group(a, b)) return;
  const std::string da = describe_group(a);
  std::string db = describe_group(b);
  if (db == da) db = db.starts_with("a ") ? "another " + db.substr(2) : "another " + db;
  throw GroupMismatchError(cat(op, ": operands belong to different communicator groups (", da, " and ", db, ")"));
}
#endif

/// The handle the result of a binary operation carries. Both operands must be on one group
/// (EmptyTensorError for a default-constructed operand, GroupMismatchError otherwise). Two
/// handles of one group may differ in their ledger (`ledgered(comm, L)` beside plain `comm`):
/// the result carries the ledgered one, whichever operand it came with, so that the collectives
/// that finish the result are recorded in either operand order. Two different ledgers are a
/// GroupMismatchError: the result's collectives would be recorded in one of them only.
inline const Group& result_group(const Group& a, const Group& b, std::string_view op) {
  check_operand(a, op);
  check_operand(b, op);
  check_same_group(a, b, op);
  Recorder* const la = a.recorder();
  Recorder* const lb = b.recorder();
  if (la && lb && la != lb)
    throw GroupMismatchError(
        cat(op, ": the operands' handles carry different ledgers; rebind one operand to the other's group"));
  return la || !lb ? a : b;
}
}  // namespace detail

}  // namespace shardalg
