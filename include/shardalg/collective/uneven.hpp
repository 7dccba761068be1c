// shardalg/collective/uneven.hpp — the collectives' local work when the split dimension does not
// divide by P (the balanced blocks of base/blocks.hpp): block s has n_s rows (or columns), the
// n_s differ by at most one and may be zero. Every exchange is one all_to_allv with the real
// counts; the CallInfo names the collective it carries, so a ledger records an all_gather (or a
// reduce_scatter) of the whole matrix's elements, as it does for equal blocks.
//
//   gather     X[Row] → X[R]:   rank r sends its n_r·cols block to every rank; the blocks arrive
//                               in rank order, which for row blocks is the dense matrix.
//              X[C]  → X[R]:    the same with rows·n_s blocks, unpacked to columns side by side.
//   reduce     Z[Partial] → Z[Row] / Z[C]: rank r sends block s of its summand to rank s; rank s
//              adds the P pieces in rank order ((Z_0 + Z_1) + Z_2) + … — the same bits on every
//              transport (threads, MPI, the simulated world).
//   exchange   X[Row] ↔ X[C]:  rank r sends the tile (its rows) × (s's columns) to rank s.
//
// The divisible case never comes here: it keeps the equal-count collectives and their bits.
#pragma once

#include <cstddef>
#include <vector>

#include "shardalg/base/blocks.hpp"
#include "shardalg/base/functors.hpp"
#include "shardalg/comm/communicator.hpp"
#if defined(SHARDALG_EXTERN_TEMPLATES)
#include "shardalg/backend/cpu/backend.hpp"  // CpuBackend, for the instantiations declared below
#endif

namespace shardalg::detail {

/// count[s] = block_size(n, p, s) · other: the elements of each rank's block.
inline std::vector<std::size_t> block_counts(Index n, int p, Index other) {
  std::vector<std::size_t> c(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) c[static_cast<std::size_t>(s)] = static_cast<std::size_t>(block_size(n, p, s) * other);
  return c;
}

/// The CallInfo of an all_to_allv carrying collective k of a matrix of `elements` (for the ledger).
inline CallInfo carrying(CallInfo info, CollectiveKind k, Index elements) {
  info.uneven_as = k;
  info.uneven_elements = static_cast<std::size_t>(elements);
  return info;
}

/// X[Row] (row_split) or X[C] → the whole rows × cols matrix, on every rank.
template <class T, class B>
typename B::template matrix<T> gather_uneven(const typename B::template matrix<T>& local, Index rows, Index cols,
                                             bool row_split, Group& g, const CallInfo& info) {
  const int p = g.size();
  // Each destination gets the same block: P copies, the size of the gathered matrix.
  auto send = B::template empty<T>(p * local.rows(), local.cols());
  for (int s = 0; s < p; ++s) B::paste_block(send, s * local.rows(), 0, local);
  const std::vector<std::size_t> sc(static_cast<std::size_t>(p), static_cast<std::size_t>(local.size()));
  const auto rc = row_split ? block_counts(rows, p, cols) : block_counts(cols, p, rows);
  const CallInfo ci = carrying(info, CollectiveKind::all_gather, rows * cols);
  if (row_split) {
    auto out = B::template empty<T>(rows, cols);  // row blocks arrive contiguously, in rank order
    g.all_to_allv(send.data(), sc.data(), out.data(), rc.data(), ci);
    return out;
  }
  auto flat = B::template empty<T>(1, rows * cols);
  g.all_to_allv(send.data(), sc.data(), flat.data(), rc.data(), ci);
  return B::unpack_col_blocks(flat, rows, block_sizes(cols, p));
}

/// Z[Partial] (rows × cols on every rank) → this rank's block of Σ_s Z_s, rows (row_split) or columns.
template <class T, class B>
typename B::template matrix<T> reduce_scatter_uneven(const typename B::template matrix<T>& summand, bool row_split,
                                                     Group& g, const CallInfo& info) {
  const int p = g.size(), r = g.rank();
  const Index rows = summand.rows(), cols = summand.cols();
  const Index lr = row_split ? block_size(rows, p, r) : rows;
  const Index lc = row_split ? cols : block_size(cols, p, r);
  const auto sc = row_split ? block_counts(rows, p, cols) : block_counts(cols, p, rows);
  const std::vector<std::size_t> rc(static_cast<std::size_t>(p), static_cast<std::size_t>(lr * lc));
  auto pieces = B::template empty<T>(p * lr, lc);  // piece s: rank s's summand of this block
  const CallInfo ci = carrying(info, CollectiveKind::reduce_scatter, rows * cols);
  if (row_split) {
    g.all_to_allv(summand.data(), sc.data(), pieces.data(), rc.data(), ci);  // row blocks are contiguous
  } else {
    const auto packed = B::pack_col_blocks(summand, block_sizes(cols, p));
    g.all_to_allv(packed.data(), sc.data(), pieces.data(), rc.data(), ci);
  }
  auto out = B::copy_block(pieces, 0, 0, lr, lc);
  for (int s = 1; s < p; ++s) out = B::zip(out, B::copy_block(pieces, s * lr, 0, lr, lc), fn::plus{});
  return out;
}

/// X[Row] → X[C] (to_col) or X[C] → X[Row], rows × cols, on uneven blocks.
template <class T, class B>
typename B::template matrix<T> exchange_uneven(const typename B::template matrix<T>& local, Index rows, Index cols,
                                               bool to_col, Group& g, const CallInfo& info) {
  const int p = g.size(), r = g.rank();
  const std::vector<Index> row_blocks = block_sizes(rows, p), col_blocks = block_sizes(cols, p);
  std::vector<std::size_t> sc(static_cast<std::size_t>(p)), rc(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    const auto us = static_cast<std::size_t>(s);
    // Row → C: my rows × s's columns go, s's rows × my columns come; C → Row the mirror.
    sc[us] = static_cast<std::size_t>(to_col ? row_blocks[static_cast<std::size_t>(r)] * col_blocks[us]
                                             : row_blocks[us] * col_blocks[static_cast<std::size_t>(r)]);
    rc[us] = static_cast<std::size_t>(to_col ? row_blocks[us] * col_blocks[static_cast<std::size_t>(r)]
                                             : row_blocks[static_cast<std::size_t>(r)] * col_blocks[us]);
  }
  const CallInfo ci = carrying(info, CollectiveKind::all_to_all, rows * cols);
  if (to_col) {
    const auto send = B::pack_col_blocks(local, col_blocks);
    auto out = B::template empty<T>(rows, col_blocks[static_cast<std::size_t>(r)]);  // tiles stack by rows
    g.all_to_allv(send.data(), sc.data(), out.data(), rc.data(), ci);
    return out;
  }
  // [rows, my cols] is already tiles by destination row block; the received tiles are column blocks.
  const Index my_rows = row_blocks[static_cast<std::size_t>(r)];
  auto flat = B::template empty<T>(1, my_rows * cols);
  g.all_to_allv(local.data(), sc.data(), flat.data(), rc.data(), ci);
  return B::unpack_col_blocks(flat, my_rows, col_blocks);
}


// The three for float and double on the CPU: `extern template` here under
// SHARDALG_EXTERN_TEMPLATES, defined in src/algebra.cpp (KW: the keywords).
#define SHARDALG_UNEVEN_INSTANCES(KW, T)                                                                      \
  KW CpuBackend::matrix<T> gather_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, Index, Index, bool, Group&, \
                                                        const CallInfo&);                                     \
  KW CpuBackend::matrix<T> reduce_scatter_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, bool, Group&,    \
                                                                const CallInfo&);                             \
  KW CpuBackend::matrix<T> exchange_uneven<T, CpuBackend>(const CpuBackend::matrix<T>&, Index, Index, bool, Group&, \
                                                          const CallInfo&);
#if defined(SHARDALG_EXTERN_TEMPLATES)
SHARDALG_UNEVEN_INSTANCES(extern template, float)
SHARDALG_UNEVEN_INSTANCES(extern template, double)
#endif

}  // namespace shardalg::detail
