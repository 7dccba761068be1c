// shardalg/bridge/dense.hpp — the bridge to the dense reference.
//
//   shard<L>(A, g)      every rank takes its share of a dense matrix it holds (no communication);
//                       for Partial, rank 0 holds A and the others zero. For Replicated, A must be
//                       the same on every rank: with the replica check on (base/checks.hpp; the
//                       default in debug builds) a difference is a ReplicaMismatchError.
//   distribute<L>(A, g, src)  rank src's A, broadcast, then every rank's share (PyTorch's
//                       distribute_tensor): the other ranks may pass an empty matrix
//   to_dense(x)         the dense value on every rank (gathers; verification traffic, not ledgered)
//   compare(a, e)       max absolute and normwise relative error, and where
//   replicas_agree(x)   for x[R]: do all ranks hold the same bits?
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string_view>
#include <vector>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/base/checks.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

namespace detail {

/// This rank's share of `dense` in layout L (no communication); `op` names the caller in errors.
template <Layout L, class B, class Derived>
auto take_share(const Eigen::MatrixBase<Derived>& dense, Group g, std::string_view op) {
  using T = typename Derived::Scalar;
  const Index rows = dense.rows(), cols = dense.cols();
  const int p = g.size(), r = g.rank();
  detail::check_shape(rows, cols, op, "<", L::name, ">");
  typename B::template matrix<T> local;
  if constexpr (L::kind == LayoutKind::row) local = dense.middleRows(block_offset(rows, p, r), block_size(rows, p, r));
  else if constexpr (L::kind == LayoutKind::col) local = dense.middleCols(block_offset(cols, p, r), block_size(cols, p, r));
  else if constexpr (L::kind == LayoutKind::partial) local = r == 0 ? typename B::template matrix<T>(dense) : B::template zeros<T>(rows, cols);
  else local = dense;
  return Sharded<T, L, B>(std::move(local), rows, cols, std::move(g));
}

/// A 64-bit hash of n bytes: 8-byte words folded in with a multiply and a shift, then a final
/// mix (the replica check compares these instead of moving the data).
inline std::uint64_t hash_bytes(const void* data, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ULL ^ n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 32;
  }
  for (; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

inline constexpr std::string_view replica_fix =
    "; a Replicated tensor must hold the same value on every rank: build it from the same data on every "
    "rank, or broadcast one rank's with distribute<Replicated>(A, group, src_rank)";

/// The replica check: every rank's shape and the hash of its bytes, in one all-reduce of 3·P
/// integers (verification traffic). Throws ReplicaMismatchError on every rank, naming the first
/// rank whose copy differs from rank 0's.
template <class T>
void check_replicas_agree(const T* data, Index rows, Index cols, Group& g, std::string_view op) {
  const int p = g.size(), r = g.rank();
  std::vector<std::int64_t> all(static_cast<std::size_t>(3 * p), 0);
  const std::uint64_t h = hash_bytes(data, static_cast<std::size_t>(rows * cols) * sizeof(T));
  all[static_cast<std::size_t>(3 * r)] = rows;
  all[static_cast<std::size_t>(3 * r + 1)] = cols;
  std::memcpy(&all[static_cast<std::size_t>(3 * r + 2)], &h, sizeof h);
  g.all_reduce(all.data(), all.size(), ReduceOp::sum, CallInfo{"R", "R", true});
  for (int s = 1; s < p; ++s) {
    const auto* a = &all[static_cast<std::size_t>(3 * s)];
    if (a[0] != all[0] || a[1] != all[1])
      throw ReplicaMismatchError(cat(op, ": rank ", s, " passed a ", a[0], "x", a[1], " matrix and rank 0 a ",
                                     all[0], "x", all[1], " one", replica_fix));
    if (a[2] != all[2])
      throw ReplicaMismatchError(
          cat(op, ": rank ", s, "'s ", rows, "x", cols, " matrix differs from rank 0's", replica_fix));
  }
}


// For float and double: `extern template` under SHARDALG_EXTERN_TEMPLATES, defined in src/algebra.cpp.
#define SHARDALG_REPLICA_CHECK_INSTANCES(KW, T) \
  KW void check_replicas_agree<T>(const T*, Index, Index, Group&, std::string_view);
#if defined(SHARDALG_EXTERN_TEMPLATES)
SHARDALG_REPLICA_CHECK_INSTANCES(extern template, float)
SHARDALG_REPLICA_CHECK_INSTANCES(extern template, double)
#endif

}  // namespace detail

/// Every rank takes its share of `dense`, a matrix every rank holds (no communication; for
/// Partial, rank 0 holds A and the others zero). For Replicated the ranks must pass the same A;
/// with the replica check on (check_replicas(), on by default in debug builds) they are compared,
/// and a difference is a ReplicaMismatchError on every rank. To build a tensor from one rank's
/// data, use distribute<L>.
template <Layout L, class Derived, class B = CpuBackend>
auto shard(const Eigen::MatrixBase<Derived>& dense, Group g) {
  if constexpr (whole(L::kind)) {  // R or I: the ranks must pass the same A
    if (check_replicas() && g.size() > 1) {
      using T = typename Derived::Scalar;
      // Evaluated once (an expression such as Random() would differ on a second evaluation).
      Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> host = dense;
      detail::check_replicas_agree(host.data(), host.rows(), host.cols(), g, detail::cat("shard<", L::name, ">"));
      if constexpr (std::is_same_v<decltype(host), typename B::template matrix<T>>) {
        const Index rows = host.rows(), cols = host.cols();
        return Sharded<T, L, B>(std::move(host), rows, cols, std::move(g));
      } else {
        return detail::take_share<L, B>(host, std::move(g), "shard");
      }
    }
  }
  return detail::take_share<L, B>(dense, std::move(g), "shard");
}

/// PyTorch's distribute_tensor: rank `src_rank`'s `dense` becomes a tensor of layout L on `g`.
/// The shape is broadcast first (two integers, not recorded by the ledger), so the other ranks may
/// pass any matrix, an empty one included: theirs is not read. Then the data: for Replicated, Row
/// and C one broadcast of the whole matrix from src_rank (recorded as a broadcast of rows·cols
/// elements), after which every rank keeps its share; for Partial no data moves (src_rank holds
/// A, the others zeros: the sum is A). Every rank must call it with the same src_rank and L; with
/// the replica check on, a disagreement on src_rank is a RankError instead of a hang. A src_rank
/// outside the group is a RankError naming it and the group size.
template <Layout L, class Derived, class B = CpuBackend>
auto distribute(const Eigen::MatrixBase<Derived>& dense, Group g, int src_rank = 0) {
  using T = typename Derived::Scalar;
  using Host = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int p = g.size(), r = g.rank();
  if (src_rank < 0 || src_rank >= p)
    throw RankError(detail::cat("distribute<", L::name, ">: source rank ", src_rank, " is outside a group of ", p,
                                p == 1 ? " rank" : " ranks"));
  const CallInfo meta{"-", "-", true};
  if (check_replicas() && p > 1) {
    std::int64_t src[2] = {src_rank, -static_cast<std::int64_t>(src_rank)};
    g.all_reduce(src, 2, ReduceOp::max, meta);
    if (src[0] != -src[1])
      throw RankError(detail::cat("distribute<", L::name, ">: the ranks name different source ranks (", -src[1],
                                  " and ", src[0], ")"));
  }
  std::int64_t shape[2] = {r == src_rank ? static_cast<std::int64_t>(dense.rows()) : 0,
                           r == src_rank ? static_cast<std::int64_t>(dense.cols()) : 0};
  g.broadcast(shape, 2, src_rank, meta);
  const Index rows = static_cast<Index>(shape[0]), cols = static_cast<Index>(shape[1]);
  detail::check_shape(rows, cols, "distribute<", L::name, ">");
  if constexpr (L::kind == LayoutKind::partial) {
    typename B::template matrix<T> local =
        r == src_rank ? typename B::template matrix<T>(dense) : B::template zeros<T>(rows, cols);
    return Sharded<T, L, B>(std::move(local), rows, cols, std::move(g));
  } else {
    Host full = r == src_rank ? Host(dense) : Host(rows, cols);
    g.broadcast(full.data(), static_cast<std::size_t>(full.size()), src_rank, CallInfo{"dense", L::notation});
    if constexpr (whole(L::kind) && std::is_same_v<Host, typename B::template matrix<T>>)
      return Sharded<T, L, B>(std::move(full), rows, cols, std::move(g));
    else
      return detail::take_share<L, B>(full, std::move(g), "distribute");
  }
}

/// The dense matrix on every rank. Communicates (all_gather or all_reduce) for Row, C and
/// Partial, marked as verification traffic so the ledger's counts stay the model's.
template <class T, class L, class B>
typename B::template matrix<T> to_dense(const Sharded<T, L, B>& x) {
  detail::check_operand(x.group(), "to_dense");
  const CallInfo info{L::notation, "dense", true};
  Group g = x.group();
  if constexpr (SplitLayout<L>) {
    return detail::gather_local(x, g, info);
  } else if constexpr (std::is_same_v<L, Partial>) {
    auto out = x.local();
    g.all_reduce(out.data(), static_cast<std::size_t>(out.size()), ReduceOp::sum, info);
    return out;
  } else {
    return x.local();
  }
}

/// For x[R] or x[I]: true when every rank's copy equals rank 0's bit for bit.
template <class T, WholeLayout L, class B>
bool replicas_agree(const Sharded<T, L, B>& x) {
  detail::check_operand(x.group(), "replicas_agree");
  Group g = x.group();
  const CallInfo info{"R", "R", true};
  auto root = x.local();
  g.broadcast(root.data(), static_cast<std::size_t>(root.size()), 0, info);
  // The same bits: a NaN equals the same NaN (== would say no), −0 differs from +0. Compared on
  // the host: a device backend's blocks are device memory (B::to_host downloads; on the CPU it
  // is the block itself, no copy).
  const auto bytes = static_cast<std::size_t>(root.size()) * sizeof(T);
  const auto& a = B::to_host(root);
  const auto& b = B::to_host(x.local());
  std::int32_t differ = bytes == 0 || std::memcmp(a.data(), b.data(), bytes) == 0 ? 0 : 1;
  g.all_reduce(&differ, 1, ReduceOp::max, info);
  return differ == 0;
}

/// Max absolute error, normwise relative error (max |a − e| / max |e|) and where the max sits.
struct ErrorReport {
  double max_abs = 0;
  double max_rel = 0;
  Index row = -1, col = -1;
  bool shape_ok = true;

  [[nodiscard]] bool within(double rel_tol) const { return shape_ok && max_rel <= rel_tol; }
  friend std::ostream& operator<<(std::ostream& os, const ErrorReport& r) {
    if (!r.shape_ok) return os << "shape mismatch";
    return os << "max abs " << r.max_abs << ", rel " << r.max_rel << " at (" << r.row << ", " << r.col << ")";
  }
};

template <class DA, class DE>
ErrorReport compare(const Eigen::MatrixBase<DA>& actual, const Eigen::MatrixBase<DE>& expected) {
  ErrorReport rep;
  if (actual.rows() != expected.rows() || actual.cols() != expected.cols()) {
    rep.shape_ok = false;
    rep.max_abs = rep.max_rel = std::numeric_limits<double>::infinity();
    return rep;
  }
  double scale = 0;
  for (Index i = 0; i < actual.rows(); ++i)
    for (Index j = 0; j < actual.cols(); ++j) {
      const double e = static_cast<double>(expected(i, j));
      const double d = std::abs(static_cast<double>(actual(i, j)) - e);
      scale = std::max(scale, std::abs(e));
      if (d > rep.max_abs || std::isnan(d)) {
        rep.max_abs = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
        rep.row = i;
        rep.col = j;
      }
    }
  rep.max_rel = rep.max_abs == 0 ? 0 : rep.max_abs / (scale > 0 ? scale : std::numeric_limits<double>::min());
  return rep;
}

/// Compare a sharded tensor with its dense reference (gathers first).
template <class T, class L, class B, class DE>
ErrorReport compare(const Sharded<T, L, B>& actual, const Eigen::MatrixBase<DE>& expected) {
  return compare(B::to_host(to_dense(actual)), expected);
}

}  // namespace shardalg
