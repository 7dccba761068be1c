// shardalg/collective/halo.hpp — the halo exchange X[Row] → X[Row+halo], and its adjoint, the
// halo reduction dX[Row+halo] → dX[Row].
//
// A stencil of radius r along the rows (a k×k convolution: r = ⌊k/2⌋) needs on each rank the r
// rows just above and just below its own block. "Row+halo" is Row with those rows attached: with
// m = H/P rows per rank, rank q holds the global rows [q·m − r, (q+1)·m + r), and the rows outside
// [0, H) are zeros (the convolution's "same" padding). A Row+halo block is not the share of any
// global shape, so it is not a layout of the type system but a struct of its own, HaloBlock, which
// only a stencil kernel (nn/layers/conv2d.hpp's im2col) reads.
//
//   halo_exchange(X[Row], r)           X[Row] → X[Row+halo]: rank q sends its first r rows to q−1
//                                      and its last r rows to q+1, point to point
//   adjoint::halo_exchange(dX̃)        dX[Row+halo] → dX[Row], the halo reduction: rank q sends the
//                                      gradient of its top halo to q−1 and of its bottom halo to
//                                      q+1; each owner adds what it receives into its boundary rows.
//                                      The padding rows' gradient is dropped (the adjoint of padding
//                                      with zeros is cropping).
//
// Traffic per rank and pass: r·cols elements to each neighbour — 2·r·cols for an interior rank,
// r·cols for ranks 0 and P−1, nothing at P = 1 or r = 0. It does not shrink with P (not a ring
// collective): the halo is a fixed band at each cut, while the rank's own block is H/P rows.
//
// The ledger records the halo as its messages, with a kind of its own: every send is an entry of
// kind `halo` (CallInfo::halo), every receive a `recv`, elements r·cols, with layouts "Row" →
// "Row+halo" (exchange) or "Row+halo" → "Row" (reduction); observe/tally.hpp's halo_bytes(ledger, scope) sums the
// halo entries: what this rank sent.
//
// Ordering, so that no rank waits forever on any backend (MPI_Send of a large message waits for
// its receive; ThreadComm's sends are buffered): neighbours talk in pairs (a, a+1), first the
// pairs with a even, then those with a odd; in a pair the lower rank sends, then receives, and the
// upper receives, then sends. The pairs of one phase are disjoint and each is a matched
// send/recv, recv/send, so every phase completes even when a send returns only once it has been
// received; tests/conv checks this on a communicator whose sends are synchronous.
//
// The adjoint law, tested exactly on integer operands (tests/conv):
//   Σ_q ⟨halo_exchange(x)_q, ỹ_q⟩ = Σ_q ⟨x_q, adjoint::halo_exchange(ỹ)_q⟩.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <utility>

#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// The layout notation of a halo-extended row block, as the ledger and the explain log write it.
inline constexpr std::string_view row_halo_notation = "Row+halo";

/// Rank q's rows [q·m − r, (q+1)·m + r) of a rows × cols matrix split by rows on `group`
/// (m = rows/P): r halo rows, the m own rows, r halo rows; rows outside the matrix are zeros.
template <Element T, class B = CpuBackend>
class HaloBlock {
 public:
  using local_type = typename B::template matrix<T>;

  HaloBlock() = default;
  /// Adopt a padded block; checks that it is (rows/P + 2·radius) × cols on `group` (ShapeError).
  HaloBlock(local_type local, Index radius, Index rows, Index cols, Group group)
      : local_(std::move(local)), radius_(radius), rows_(rows), cols_(cols), group_(std::move(group)) {
    detail::check_operand(group_, "HaloBlock");
    const int p = group_.size();
    detail::check_divisible(LayoutKind::row, rows_, cols_, p, "HaloBlock");
    if (radius_ < 0) throw ShapeError(detail::cat("HaloBlock: halo radius ", radius_, " is negative"));
    const Index want = rows_ / p + 2 * radius_;
    if (local_.rows() != want || local_.cols() != cols_)
      throw ShapeError(detail::cat("HaloBlock: local block ", local_.rows(), "x", local_.cols(), " is not ", want,
                                   "x", cols_, " (", rows_ / p, " own rows + 2 × halo ", radius_, " on ", p,
                                   p == 1 ? " rank)" : " ranks)"));
  }

  [[nodiscard]] const local_type& local() const& { return local_; }
  [[nodiscard]] local_type& local() & { return local_; }
  [[nodiscard]] local_type local() && { return std::move(local_); }
  [[nodiscard]] Index radius() const { return radius_; }
  /// The global shape of the Row tensor it extends.
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  /// m = rows/P: the rank's own rows (local rows radius … radius + m − 1).
  [[nodiscard]] Index own_rows() const { return local_.rows() - 2 * radius_; }
  /// Global row of local row `radius` (the first own row).
  [[nodiscard]] Index row_offset() const { return rank() * own_rows(); }
  [[nodiscard]] const Group& group() const { return group_; }
  [[nodiscard]] int rank() const { return group_.rank(); }
  [[nodiscard]] int size() const { return group_.size(); }

 private:
  local_type local_;
  Index radius_ = 0, rows_ = 0, cols_ = 0;
  Group group_;
};

namespace detail {
/// A halo must come from the adjacent ranks alone: radius ≤ rows/P (ShapeError naming the values).
inline void check_halo_radius(std::string_view op, Index radius, Index rows, int p) {
  if (radius < 0) throw ShapeError(cat(op, ": halo radius ", radius, " is negative"));
  const Index m = rows / p;
  if (radius > m)
    throw ShapeError(cat(op, ": ", m, m == 1 ? " row" : " rows", " per rank (", rows, " rows on ", p,
                         p == 1 ? " rank" : " ranks", ") ", m == 1 ? "is" : "are", " fewer than the halo radius ",
                         radius, ": a halo must come from the adjacent ranks alone"));
}

/// The deadlock-free schedule: pairs (a, a+1) with a even, then with a odd. `as_lower(peer)` runs
/// when this rank is a (peer = a+1: send, then receive), `as_upper(peer)` when it is a+1 (peer = a:
/// receive, then send).
template <class Lower, class Upper>
void halo_pairs(int rank, int p, Lower&& as_lower, Upper&& as_upper) {
  for (int phase = 0; phase < 2; ++phase) {
    if (rank % 2 == phase) {
      if (rank + 1 < p) as_lower(rank + 1);
    } else if (rank >= 1) {
      as_upper(rank - 1);
    }
  }
}
}  // namespace detail

/// X[Row] → X[Row+halo]: this rank's block with `radius` rows of each neighbour attached (zeros
/// beyond the matrix). Sends radius·cols elements to each neighbour. ShapeError when a rank holds
/// fewer than `radius` rows.
template <class T, class B>
HaloBlock<T, B> halo_exchange(const Sharded<T, RowSharded, B>& x, Index radius) {
  detail::check_operand(x.group(), "halo_exchange");
  const int p = x.size();
  detail::check_halo_radius("halo_exchange", radius, x.rows(), p);
  auto e = explain_op(x.group(), "halo_exchange", dtype_of<T>,
                      {note(x), " → ", Note::number(x.rows()), "x", Note::number(x.cols()), "[", row_halo_notation,
                       "] (halo ", Note::number(radius), ")"});
  const Index m = x.local_rows(), c = x.cols(), r = radius;
  auto padded = B::template zeros<T>(m + 2 * r, c);
  B::paste_block(padded, r, 0, x.local());
  Group g = x.group();
  if (r > 0 && c > 0 && p > 1) {
    const auto n = static_cast<std::size_t>(r * c);
    const CallInfo info{"Row", row_halo_notation, false, {}, true};  // sends ledgered as kind halo
    const T* own = x.local().data();
    T* out = padded.data();
    detail::halo_pairs(
        g.rank(), p,
        [&](int peer) {                                      // peer = rank + 1
          g.send(own + (m - r) * c, n, dtype_of<T>, peer, info);  // my last r rows: its top halo
          g.recv(out + (m + r) * c, n, dtype_of<T>, peer, info);  // its first r rows: my bottom halo
        },
        [&](int peer) {                                      // peer = rank − 1
          g.recv(out, n, dtype_of<T>, peer, info);           // its last r rows: my top halo
          g.send(own, n, dtype_of<T>, peer, info);           // my first r rows: its bottom halo
        });
  }
  return HaloBlock<T, B>(std::move(padded), r, x.rows(), x.cols(), std::move(g));
}

namespace adjoint {
/// Backward of halo_exchange, the halo reduction: dX[Row+halo] → dX[Row]. Each halo's gradient
/// goes back to the rank that owns those rows and is added to its boundary rows; the gradient of
/// the zero padding is dropped. Sends radius·cols elements to each neighbour.
template <class T, class B>
Sharded<T, RowSharded, B> halo_exchange(const HaloBlock<T, B>& dx) {
  detail::check_operand(dx.group(), "adjoint::halo_exchange");
  auto e = explain_op(dx.group(), "adjoint::halo_exchange", dtype_of<T>,
                      {Note::number(dx.rows()), "x", Note::number(dx.cols()), "[", row_halo_notation, "] (halo ",
                       Note::number(dx.radius()), ") → ", note(dx.rows(), dx.cols(), LayoutKind::row)});
  const int p = dx.size();
  const Index m = dx.own_rows(), c = dx.cols(), r = dx.radius();
  auto own = B::copy_block(dx.local(), r, 0, m, c);
  Group g = dx.group();
  if (r > 0 && c > 0 && p > 1) {
    const auto n = static_cast<std::size_t>(r * c);
    const CallInfo info{row_halo_notation, "Row", false, {}, true};
    const T* pad = dx.local().data();
    auto got = B::template empty<T>(r, c);
    // own[r0 : r0 + r) += what the neighbour sent back
    const auto add_into = [&](Index r0) {
      B::paste_block(own, r0, 0, B::zip(B::copy_block(own, r0, 0, r, c), got, std::plus<T>{}));
    };
    detail::halo_pairs(
        g.rank(), p,
        [&](int peer) {                                       // peer = rank + 1
          g.send(pad + (m + r) * c, n, dtype_of<T>, peer, info);  // my bottom halo's gradient: its first rows
          g.recv(got.data(), n, dtype_of<T>, peer, info);     // its top halo's gradient: my last rows
          add_into(m - r);
        },
        [&](int peer) {                                       // peer = rank − 1
          g.recv(got.data(), n, dtype_of<T>, peer, info);     // its bottom halo's gradient: my first rows
          add_into(0);
          g.send(pad, n, dtype_of<T>, peer, info);            // my top halo's gradient: its last rows
        });
  }
  return Sharded<T, RowSharded, B>(std::move(own), dx.rows(), dx.cols(), std::move(g));
}
}  // namespace adjoint

}  // namespace shardalg
