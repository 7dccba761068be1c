// shardalg/backend/cuda/ops.hpp — the layer operations as CUDA kernels, on device blocks (DeviceMatrix):
// GeLU (tanh and erf forms), SwiGLU, softmax with a causal mask, LayerNorm / RMSNorm, dropout
// keyed by the global element index, and the vocab-parallel cross-entropy. Each forward has its
// backward. They work on the *local* block; the layout rules (which layouts may call them) are
// the core's: row-wise ops need whole rows (R or Row), elementwise ops any layout but Partial.
// The Sharded-level helpers at the end apply those rules and pass the global offsets.
//
// Needs nvcc (kernel launches). All launches are on current_stream().
#pragma once

#include <cstdint>
#include <type_traits>

#include "shardalg/core/sharded.hpp"
#include "shardalg/backend/cuda/backend.hpp"
#include "shardalg/backend/cuda/device_kernels.cuh"

namespace shardalg::cuda {

using kernels::Gelu;

namespace detail {
template <class T>
void check_same(const DeviceMatrix<T>& a, const DeviceMatrix<T>& b, const char* op) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    throw ShapeError(shardalg::detail::cat(op, ": shapes differ: ", a.rows(), "x", a.cols(), " and ", b.rows(), "x",
                                           b.cols()));
}
template <class T>
void check_row_param(const DeviceMatrix<T>* p, Index cols, const char* op) {
  if (p && (p->rows() != 1 || p->cols() != cols))
    throw ShapeError(shardalg::detail::cat(op, ": parameter is ", p->rows(), "x", p->cols(), ", expected 1x", cols));
}
inline std::size_t sz(Index n) { return static_cast<std::size_t>(n); }
}  // namespace detail

// ---- activations ------------------------------------------------------------------------------

template <Gelu G = Gelu::tanh, class T>
DeviceMatrix<T> gelu(const DeviceMatrix<T>& x) {
  DeviceMatrix<T> y(x.rows(), x.cols());
  if (const auto n = detail::sz(x.size())) {
    kernels::gelu<T, G><<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(x.data(), y.data(), n);
    detail::check_launch("gelu");
  }
  return y;
}
template <Gelu G = Gelu::tanh, class T>
DeviceMatrix<T> gelu_backward(const DeviceMatrix<T>& x, const DeviceMatrix<T>& dy) {
  detail::check_same(x, dy, "gelu_backward");
  DeviceMatrix<T> dx(x.rows(), x.cols());
  if (const auto n = detail::sz(x.size())) {
    kernels::gelu_backward<T, G><<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(x.data(), dy.data(),
                                                                                                     dx.data(), n);
    detail::check_launch("gelu_backward");
  }
  return dx;
}

/// y = silu(a) ⊙ b.
template <class T>
DeviceMatrix<T> swiglu(const DeviceMatrix<T>& a, const DeviceMatrix<T>& b) {
  detail::check_same(a, b, "swiglu");
  DeviceMatrix<T> y(a.rows(), a.cols());
  if (const auto n = detail::sz(a.size())) {
    kernels::swiglu<<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(a.data(), b.data(), y.data(), n);
    detail::check_launch("swiglu");
  }
  return y;
}
template <class T>
struct SwigluGrad {
  DeviceMatrix<T> da, db;
};
template <class T>
SwigluGrad<T> swiglu_backward(const DeviceMatrix<T>& a, const DeviceMatrix<T>& b, const DeviceMatrix<T>& dy) {
  detail::check_same(a, b, "swiglu_backward");
  detail::check_same(a, dy, "swiglu_backward");
  SwigluGrad<T> g{DeviceMatrix<T>(a.rows(), a.cols()), DeviceMatrix<T>(a.rows(), a.cols())};
  if (const auto n = detail::sz(a.size())) {
    kernels::swiglu_backward<<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(
        a.data(), b.data(), dy.data(), g.da.data(), g.db.data(), n);
    detail::check_launch("swiglu_backward");
  }
  return g;
}

// ---- softmax -----------------------------------------------------------------------------------

struct SoftmaxOptions {
  float scale = 1.0f;   // softmax(scale · x), e.g. 1/√d for attention scores
  bool causal = false;  // mask global column > global row
  Index row_offset = 0; // global index of the block's first row / column
  Index col_offset = 0;
};

template <class T>
DeviceMatrix<T> softmax(const DeviceMatrix<T>& x, SoftmaxOptions o = {}) {
  DeviceMatrix<T> y(x.rows(), x.cols());
  if (x.size()) {
    kernels::softmax_rows<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
        x.data(), y.data(), detail::sz(x.cols()), o.scale, o.causal, o.row_offset, o.col_offset);
    detail::check_launch("softmax");
  }
  return y;
}
/// From the forward output y: dx = scale · y ⊙ (dy − rowsum(dy ⊙ y)).
template <class T>
DeviceMatrix<T> softmax_backward(const DeviceMatrix<T>& y, const DeviceMatrix<T>& dy, float scale = 1.0f) {
  detail::check_same(y, dy, "softmax_backward");
  DeviceMatrix<T> dx(y.rows(), y.cols());
  if (y.size()) {
    kernels::softmax_rows_backward<<<static_cast<unsigned>(y.rows()), kernels::kThreads, 0, current_stream()>>>(
        y.data(), dy.data(), dx.data(), detail::sz(y.cols()), scale);
    detail::check_launch("softmax_backward");
  }
  return dx;
}

// ---- LayerNorm / RMSNorm -----------------------------------------------------------------------

/// Saved per-row statistics (fp32): mean (LayerNorm only) and 1/σ.
struct NormStats {
  DeviceMatrix<float> mean, rstd;  // [rows, 1]
};
/// A [1, cols] row parameter (γ, β); pass nullptr for none. Not deduced (so nullptr works).
template <class T>
using Param = std::type_identity_t<DeviceMatrix<T>>;
template <class T>
struct NormGrad {
  DeviceMatrix<T> dx, dgamma, dbeta;  // dbeta empty for RMSNorm
};

template <class T>
DeviceMatrix<T> layernorm(const DeviceMatrix<T>& x, const Param<T>* gamma, const Param<T>* beta,
                          NormStats& stats, float eps = 1e-5f) {
  detail::check_row_param(gamma, x.cols(), "layernorm gamma");
  detail::check_row_param(beta, x.cols(), "layernorm beta");
  DeviceMatrix<T> y(x.rows(), x.cols());
  stats.mean.resize(x.rows(), 1);
  stats.rstd.resize(x.rows(), 1);
  if (x.size()) {
    kernels::layernorm<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
        x.data(), gamma ? gamma->data() : nullptr, beta ? beta->data() : nullptr, y.data(), stats.mean.data(),
        stats.rstd.data(), detail::sz(x.cols()), eps);
    detail::check_launch("layernorm");
  }
  return y;
}
template <class T>
DeviceMatrix<T> rmsnorm(const DeviceMatrix<T>& x, const Param<T>* gamma, NormStats& stats, float eps = 1e-5f) {
  detail::check_row_param(gamma, x.cols(), "rmsnorm gamma");
  DeviceMatrix<T> y(x.rows(), x.cols());
  stats.mean = DeviceMatrix<float>();
  stats.rstd.resize(x.rows(), 1);
  if (x.size()) {
    kernels::rmsnorm<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
        x.data(), gamma ? gamma->data() : nullptr, y.data(), stats.rstd.data(), detail::sz(x.cols()), eps);
    detail::check_launch("rmsnorm");
  }
  return y;
}
/// The backward of layernorm (stats.mean present) or rmsnorm (stats.mean empty).
template <class T>
NormGrad<T> norm_backward(const DeviceMatrix<T>& x, const Param<T>* gamma, const DeviceMatrix<T>& dy,
                          const NormStats& stats) {
  detail::check_same(x, dy, "norm_backward");
  const bool ln = stats.mean.size() > 0;
  NormGrad<T> g{DeviceMatrix<T>(x.rows(), x.cols()), DeviceMatrix<T>(1, x.cols()),
                ln ? DeviceMatrix<T>(1, x.cols()) : DeviceMatrix<T>()};
  if (!x.size()) return g;
  const float* mean = ln ? stats.mean.data() : nullptr;
  kernels::norm_backward_dx<<<static_cast<unsigned>(x.rows()), kernels::kThreads, 0, current_stream()>>>(
      x.data(), gamma ? gamma->data() : nullptr, dy.data(), mean, stats.rstd.data(), g.dx.data(), detail::sz(x.cols()));
  detail::check_launch("norm_backward_dx");
  kernels::norm_backward_params<<<kernels::blocks_for(detail::sz(x.cols())), kernels::kThreads, 0, current_stream()>>>(
      x.data(), dy.data(), mean, stats.rstd.data(), g.dgamma.data(), ln ? g.dbeta.data() : nullptr,
      detail::sz(x.rows()), detail::sz(x.cols()));
  detail::check_launch("norm_backward_params");
  return g;
}

// ---- dropout ---------------------------------------------------------------------------------

/// Where a local block sits in the global matrix, for index-keyed randomness.
struct GlobalPlace {
  Index row_offset = 0, col_offset = 0, global_cols = 0;  // global_cols 0: the block's own width
};

/// y = x ⊙ keep / (1 − p), keep drawn per *global* element from (seed, index); the backward is
/// the same call on dy with the same seed.
template <class T>
DeviceMatrix<T> dropout(const DeviceMatrix<T>& x, float p, std::uint64_t seed, GlobalPlace at = {}) {
  DeviceMatrix<T> y(x.rows(), x.cols());
  const auto n = detail::sz(x.size());
  if (n) {
    kernels::dropout<<<kernels::blocks_for(n), kernels::kThreads, 0, current_stream()>>>(
        x.data(), y.data(), detail::sz(x.rows()), detail::sz(x.cols()), at.row_offset, at.col_offset,
        at.global_cols ? at.global_cols : x.cols(), seed, p);
    detail::check_launch("dropout");
  }
  return y;
}

// ---- Sharded-level helpers ---------------------------------------------------------------------

/// Dropout on a Sharded tensor of any non-Partial layout: the mask depends on the global index
/// only, so it is the same for every layout and group size.
template <class T, class L>
Sharded<T, L, CudaBackend> dropout(const Sharded<T, L, CudaBackend>& x, float p, std::uint64_t seed) {
  static_assert(!std::is_same_v<L, Partial>,
                "[shardalg.E110] dropout is non-linear: not on Partial; all_reduce (adjoint: identity) first");
  return Sharded<T, L, CudaBackend>(dropout(x.local(), p, seed, GlobalPlace{x.row_offset(), x.col_offset(), x.cols()}),
                                    x.rows(), x.cols(), x.group());
}

/// Causal softmax of attention scores S[R or Row] (rows = queries, cols = keys), scaled.
template <class T, class L>
Sharded<T, L, CudaBackend> causal_softmax(const Sharded<T, L, CudaBackend>& s, float scale) {
  static_assert(std::is_same_v<L, Replicated> || std::is_same_v<L, RowSharded>,
                "[shardalg.E114] softmax is row-wise: each rank must hold whole rows (R or Row)");
  return Sharded<T, L, CudaBackend>(softmax(s.local(), SoftmaxOptions{scale, true, s.row_offset(), 0}), s.rows(),
                                    s.cols(), s.group());
}

/// The vocab-parallel cross-entropy: logits[C] (each rank holds a vocabulary slice), targets the
/// global ids (device int32 [rows, 1], the same on every rank). Two all-reduces of [rows] and
/// [2·rows] floats (max, then Σexp with the target logit); no rank ever holds a full row.
/// Returns per-row losses [rows, 1] (replicated) and, for the backward, dlogits[C] for
/// d loss_mean = 1 (i.e. scaled by 1/rows).
struct VocabParallelCE {
  Sharded<float, Replicated, CudaBackend> loss;
  Sharded<float, ColSharded, CudaBackend> dlogits;
};
inline VocabParallelCE vocab_parallel_cross_entropy(const Sharded<float, ColSharded, CudaBackend>& logits,
                                                    const DeviceMatrix<std::int32_t>& targets) {
  const Index R = logits.rows(), Vl = logits.local_cols(), v0 = logits.col_offset();
  if (targets.rows() != R || targets.cols() != 1)
    throw ShapeError(shardalg::detail::cat("vocab_parallel_cross_entropy: targets are ", targets.rows(), "x",
                                           targets.cols(), ", expected ", R, "x1"));
  Group g = logits.group();
  DeviceMatrix<float> gmax(R, 1), stats(2 * R, 1), loss(R, 1);
  DeviceMatrix<float> dl(R, Vl);
  if (R > 0) {
    const auto s = current_stream();
    kernels::ce_row_max<<<static_cast<unsigned>(R), kernels::kThreads, 0, s>>>(logits.local().data(), gmax.data(),
                                                                                 detail::sz(Vl));
    detail::check_launch("ce_row_max");
    g.all_reduce(gmax.data(), detail::sz(R), ReduceOp::max, CallInfo{"C", "R"});
    kernels::ce_local_stats<<<static_cast<unsigned>(R), kernels::kThreads, 0, s>>>(
        logits.local().data(), gmax.data(), targets.data(), stats.data(), detail::sz(R), detail::sz(Vl), v0);
    detail::check_launch("ce_local_stats");
    g.all_reduce(stats.data(), detail::sz(2 * R), ReduceOp::sum, CallInfo{"Partial", "R"});
    kernels::ce_loss<<<kernels::blocks_for(detail::sz(R)), kernels::kThreads, 0, s>>>(gmax.data(), stats.data(),
                                                                                        loss.data(), detail::sz(R));
    detail::check_launch("ce_loss");
    if (Vl > 0) {
      kernels::ce_backward<<<kernels::blocks_for(detail::sz(R * Vl)), kernels::kThreads, 0, s>>>(
          logits.local().data(), gmax.data(), stats.data(), targets.data(), dl.data(), detail::sz(R), detail::sz(Vl), v0,
          1.0f / static_cast<float>(R));
      detail::check_launch("ce_backward");
    }
  }
  return {Sharded<float, Replicated, CudaBackend>(std::move(loss), R, 1, g),
          Sharded<float, ColSharded, CudaBackend>(std::move(dl), R, logits.cols(), g)};
}

}  // namespace shardalg::cuda
