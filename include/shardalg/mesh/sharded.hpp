// shardalg/mesh/sharded.hpp — MeshSharded<T, Axes<On<A, L>...>>: a matrix with one layout per
// mesh axis. Rank (c_A, …) holds one block; its shape and place follow from the layouts:
//
//   rows split by every Row axis, columns by every C axis, in list order (outermost first): each
//   split takes the balanced block (base/blocks.hpp) of the block before it, so X[dp:Row, tp:Row]
//   on rank (d, t) holds block t of block d (block d · size_tp + t of equal blocks when they divide).
//   R and I axes hold copies; a Partial axis holds a summand (the value is the sum over it).
//
// The one-axis Sharded<T, L> is the single-axis case: lift<A>(x) makes it a MeshSharded on axis A
// (nothing moves), and view<A>(y) turns a MeshSharded that is R or I on every other axis back
// into a Sharded on A's group, which every layer and collective takes. stack<A, L>(g, y) adds an
// outer axis without moving data: R (the same value on every rank of A), Partial (each rank of A
// holds a summand: a data-parallel gradient) or Row (each rank of A holds a row block: the batch).
#pragma once

#include <array>
#include <ostream>
#include <string>
#include <utility>

#include "shardalg/bridge/dense.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/base/diagnostics.hpp"
#include "shardalg/mesh/layouts.hpp"
#include "shardalg/mesh/mesh.hpp"

namespace shardalg {

template <Element T, AxesList Ax, class Backend = CpuBackend>
class MeshSharded {
 public:
  using value_type = T;
  using axes = Ax;
  using backend = Backend;
  using local_type = typename Backend::template matrix<T>;
  static constexpr std::size_t N = Ax::size;
  using Groups = std::array<Group, N>;

  MeshSharded() = default;

  /// Adopt a local block on the axis groups (in list order). Throws EmptyTensorError for an
  /// empty group, MeshError when a group says it is another axis, and GroupSizeError (naming the
  /// shapes) when the block is not this rank's share.
  MeshSharded(local_type local, Index rows, Index cols, Groups groups)
      : local_(std::move(local)), rows_(rows), cols_(cols), groups_(std::move(groups)) {
    check();
  }
  /// The same, taking the groups from a mesh by the axes' names.
  MeshSharded(local_type local, Index rows, Index cols, const Mesh& mesh)
      : MeshSharded(std::move(local), rows, cols, groups_of(mesh)) {}

  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] Index local_rows() const { return local_.rows(); }
  [[nodiscard]] Index local_cols() const { return local_.cols(); }
  [[nodiscard]] const local_type& local() const& { return local_; }
  [[nodiscard]] local_type& local() & { return local_; }
  [[nodiscard]] local_type local() && { return std::move(local_); }
  [[nodiscard]] const Groups& groups() const { return groups_; }

  /// The group of axis A (E165 when the tensor does not live on A).
  template <MeshAxis A>
  [[nodiscard]] const Group& group() const {
    constexpr std::size_t i = axis_index_v<A, Ax>;
    if constexpr (i == mesh_detail::npos) {
      diagnose<Diag::unknown_axis, A>();
      return groups_[0];
    } else {
      return groups_[i];
    }
  }

  /// The nested block index of this rank's rows (dim 0) or columns (dim 1), and the number of blocks.
  [[nodiscard]] std::pair<Index, Index> block(int dim) const {
    Index idx = 0, count = 1;
    for (std::size_t i = 0; i < N; ++i)
      if (mesh_detail::split_dim(Ax::kinds[i]) == dim) {
        idx = idx * groups_[i].size() + groups_[i].rank();
        count *= groups_[i].size();
      }
    return {idx, count};
  }
  /// This rank's rows (dim 0) or columns (dim 1) after the splits of the first `upto` axes: each
  /// split takes its balanced block of the block before it. nested_block(d) is the local block's.
  [[nodiscard]] BlockExtent nested_block(int dim, std::size_t upto = N) const {
    BlockExtent b{0, dim == 0 ? rows_ : cols_};
    for (std::size_t i = 0; i < upto && i < N; ++i)
      if (mesh_detail::split_dim(Ax::kinds[i]) == dim) {
        const BlockExtent c = block_of(b.size, groups_[i].size(), groups_[i].rank());
        b = {b.offset + c.offset, c.size};
      }
    return b;
  }
  /// Global index of the local block's first row / column.
  [[nodiscard]] Index row_offset() const { return nested_block(0).offset; }
  [[nodiscard]] Index col_offset() const { return nested_block(1).offset; }

  /// "8x6[dp:Row, tp:C]".
  friend std::ostream& operator<<(std::ostream& os, const MeshSharded& x) {
    return os << x.rows_ << "x" << x.cols_ << "[" << axes_notation<Ax>() << "]";
  }

  static Groups groups_of(const Mesh& mesh) {
    Groups g;
    for (std::size_t i = 0; i < N; ++i) g[i] = mesh.group(Ax::names[i]);
    return g;
  }

 private:
  void check() const {
    using detail::cat;
    const std::string what = cat("MeshSharded<", axes_notation<Ax>(), ">");
    for (std::size_t i = 0; i < N; ++i) {
      if (!groups_[i].valid())
        throw EmptyTensorError(cat(what, ": the group of axis ", Ax::names[i], " is empty (no communicator)"));
      const std::string a = groups_[i].axis();
      if (!a.empty() && a != Ax::names[i])
        throw MeshError(cat(what, ": the group given for axis ", Ax::names[i], " is the group of axis ", a));
    }
    if (rows_ < 0 || cols_ < 0) throw ShapeError(cat(what, ": shape ", rows_, "x", cols_, " has a negative dimension"));
    const Index lr = nested_block(0).size, lc = nested_block(1).size;
    if (local_.rows() != lr || local_.cols() != lc)
      throw GroupSizeError(cat(what, ": local block ", local_.rows(), "x", local_.cols(), " is not the share of ",
                               rows_, "x", cols_, " (expected ", lr, "x", lc, ")"));
  }

  local_type local_;
  Index rows_ = 0, cols_ = 0;
  Groups groups_;
};

template <class X>
struct is_mesh_sharded : std::false_type {};
template <class T, class Ax, class B>
struct is_mesh_sharded<MeshSharded<T, Ax, B>> : std::true_type {};
template <class X>
concept MeshTensor = is_mesh_sharded<std::remove_cvref_t<X>>::value;

/// A one-axis Sharded as a MeshSharded on axis A (its group is A's group). Nothing moves.
template <MeshAxis A, class T, class L, class B>
MeshSharded<T, Axes<On<A, L>>, B> lift(Sharded<T, L, B> x) {
  const Index r = x.rows(), c = x.cols();
  Group g = x.group();
  return {std::move(x).local(), r, c, {std::move(g)}};
}

/// Add axis A outermost, on group `g`, without moving data: L = Replicated (every rank of A holds
/// this value), Partial (each rank of A holds a summand) or RowSharded / ColSharded (each rank of
/// A holds one block of equal size: the global shape grows by A's size in that dimension; blocks
/// of unequal sizes are GroupSizeError — their whole is not the local shape times A's size).
template <MeshAxis A, Layout L, class T, class... Os, class B>
MeshSharded<T, Axes<On<A, L>, Os...>, B> stack(Group g, MeshSharded<T, Axes<Os...>, B> x) {
  static_assert(axis_index_v<A, Axes<Os...>> == mesh_detail::npos, "stack<A, L>: the tensor already lives on A");
  const int s = g.size();
  const Index r = x.rows() * (L::kind == LayoutKind::row ? s : 1);
  const Index c = x.cols() * (L::kind == LayoutKind::col ? s : 1);
  std::array<Group, sizeof...(Os) + 1> groups;
  groups[0] = std::move(g);
  for (std::size_t i = 0; i < sizeof...(Os); ++i) groups[i + 1] = x.groups()[i];
  return {std::move(x).local(), r, c, std::move(groups)};
}

/// The tensor as a one-axis Sharded on A's group: every other axis must be R or I (E164).
template <MeshAxis A, class T, class Ax, class B>
auto view(MeshSharded<T, Ax, B> x) {
  constexpr std::size_t i = axis_index_v<A, Ax>;
  if constexpr (i == mesh_detail::npos) {
    return diagnose<Diag::unknown_axis, A>();
  } else {
    constexpr bool alone = [] {
      for (std::size_t j = 0; j < Ax::size; ++j)
        if (j != i && !whole(Ax::kinds[j])) return false;
      return true;
    }();
    if constexpr (!alone) {
      return diagnose<Diag::view_not_alone, A>();
    } else {
      using L = layout_t<Ax::kinds[i]>;
      const Index r = x.rows(), c = x.cols();
      Group g = x.groups()[i];
      return Sharded<T, L, B>(std::move(x).local(), r, c, std::move(g));
    }
  }
}

/// Every rank takes its share of `dense`, which every rank holds (no communication); on a
/// Partial axis coordinate 0 holds the value and the others zero.
template <AxesList Ax, class Derived, class B = CpuBackend>
auto shard(const Eigen::MatrixBase<Derived>& dense, const Mesh& mesh) {
  using T = typename Derived::Scalar;
  using M = MeshSharded<T, Ax, B>;
  auto groups = M::groups_of(mesh);
  const Index rows = dense.rows(), cols = dense.cols();
  BlockExtent rb{0, rows}, cb{0, cols};  // nested balanced blocks, outermost axis first
  bool holder = true;
  for (std::size_t i = 0; i < Ax::size; ++i) {
    const int d = mesh_detail::split_dim(Ax::kinds[i]);
    const int s = groups[i].size(), c = groups[i].rank();
    BlockExtent& b = d == 0 ? rb : cb;
    if (d == 0 || d == 1) {
      const BlockExtent k = block_of(b.size, s, c);
      b = {b.offset + k.offset, k.size};
    }
    if (Ax::kinds[i] == LayoutKind::partial && c != 0) holder = false;
  }
  typename B::template matrix<T> local = dense.block(rb.offset, cb.offset, rb.size, cb.size);
  if (!holder) local.setZero();
  return M(std::move(local), rows, cols, std::move(groups));
}

/// The dense value on every rank: the axes are undone innermost first (a gather of a split, a
/// sum of a Partial) with verification traffic, which the ledger does not count.
template <class T, class Ax, class B>
typename B::template matrix<T> to_dense(const MeshSharded<T, Ax, B>& x) {
  typename B::template matrix<T> cur = x.local();
  for (std::size_t i = Ax::size; i-- > 0;) {
    const Group& g = x.groups()[i];
    const Index r = cur.rows(), c = cur.cols();  // before cur is moved from
    switch (Ax::kinds[i]) {  // the block before axis i's split is the whole of what it splits
      case LayoutKind::row:
        cur = to_dense(Sharded<T, RowSharded, B>(std::move(cur), x.nested_block(0, i).size, c, g));
        break;
      case LayoutKind::col:
        cur = to_dense(Sharded<T, ColSharded, B>(std::move(cur), r, x.nested_block(1, i).size, g));
        break;
      case LayoutKind::partial:
        cur = to_dense(Sharded<T, Partial, B>(std::move(cur), r, c, g));
        break;
      default:  // R, I: every rank of the axis holds it already
        break;
    }
  }
  return cur;
}

}  // namespace shardalg
