// shardalg/nn/layers/conv2d.hpp — a 2-D convolution on images whose rows are split across ranks: spatial
// parallelism (Dryden et al., IPDPS 2019: the halo "detour" around a split image). Stride 1, odd k × k kernel,
// "same" zero padding, C_in → C_out channels, weights replicated.
//
// The data as the library's matrices (N images of H × W pixels):
//   X[Row]  H × (N·W·C_in)      X(h, (n·W + w)·C_in + c): rows are image rows, split across ranks
//   W[R]    (k·k·C_in) × C_out  W((i·k + j)·C_in + c, o): kernel tap (i, j), channel c → o
//   b[R]    1 × C_out
//   Y[Row]  H × (N·W·C_out)
// The batch is folded into the columns, not stacked in the rows: a row block is then a band of
// every image, so the row split is a spatial split, one halo message carries the boundary rows of
// all N images, and no halo ever reaches from one image into the next.
//
// With r = ⌊k/2⌋ and m = H/P rows per rank:
//   forward   X[Row] →halo_exchange(r)→ X̃[Row+halo]          point to point: 2·r·N·W·C_in per interior rank
//             im2col: X̃[Row+halo] → A[Row], (H·N·W) × (k²·C_in), one row per output pixel   (local)
//             A[Row] · W[R] → Ŷ[Row];  Ŷ[Row] + b[R] → Ŷ[Row]                                (local)
//             Ŷ (H·N·W) × C_out is Y[Row] H × (N·W·C_out): the same elements in the same order
//   backward  dŶ[Row] ≡ dY[Row]
//             dW = Aᵀ[C] · dŶ[Row] → dW[Partial]     each rank summed over its own pixels (local)
//             db = col_sum(dŶ[Row]) → db[Partial]                                         (local)
//             dA = dŶ[Row] · Wᵀ[R] → dA[Row];  col2im (scatter-add) → dX̃[Row+halo]       (local)
//             adjoint::halo_exchange: dX̃[Row+halo] → dX[Row]   the halo reduction, 2·r·N·W·C_in
//   update    reduce_grads: all_reduce dW[Partial] → R (k²·C_in·C_out) and db → R (C_out); then
//             sgd. nn::sgd_update refuses the Partial ones at compile time ([shardalg.E130];
//             tests/conv/E130_conv_partial_grad.cpp).
//
// The layouts of dW and db are not chosen here: they are the core's rule table (C · Row →
// Partial, col_sum of Row → Partial). The local kernels (im2col, col2im) are CPU loops, so the
// layer is CpuBackend only; collective/halo.hpp itself is backend-generic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "shardalg/collective/all_reduce.hpp"
#include "shardalg/collective/halo.hpp"
#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/matmul.hpp"
#include "shardalg/nn/layers/init.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

/// The geometry of a Conv2d: N images of H × W pixels, C_in → C_out channels, a k × k kernel.
struct Conv2dShape {
  Index height = 0, width = 0;
  Index in_channels = 0, out_channels = 0;
  Index kernel = 3;  // k, odd
  Index batch = 1;   // N, folded into the columns
  [[nodiscard]] Index radius() const { return kernel / 2; }
  [[nodiscard]] Index in_cols() const { return batch * width * in_channels; }
  [[nodiscard]] Index out_cols() const { return batch * width * out_channels; }
  [[nodiscard]] Index patch() const { return kernel * kernel * in_channels; }  // rows of W
  [[nodiscard]] Index pixels() const { return height * batch * width; }        // rows of A
};

namespace conv_detail {
using shardalg::detail::cat;

/// The checks that need no data: an odd kernel, positive sizes, and a row split that each rank's
/// halo can come from its neighbours alone (H divisible by P, H/P ≥ r).
inline void check_shape(const std::string& name, const Conv2dShape& s, int p) {
  if (s.kernel < 1 || s.kernel % 2 == 0)
    throw ShapeError(cat(name, ": kernel size ", s.kernel,
                         " is not odd; a stride-1 \"same\" convolution needs an odd kernel (1, 3, 5, ...)"));
  if (s.height < 1 || s.width < 1 || s.in_channels < 1 || s.out_channels < 1 || s.batch < 1)
    throw ShapeError(cat(name, ": image ", s.batch, "x", s.height, "x", s.width, " with ", s.in_channels, " -> ",
                         s.out_channels, " channels has an empty dimension"));
  if (s.height % p != 0)
    throw DivisibilityError(cat(name, ": image height ", s.height, " is not divisible by spatial-parallel size ", p));
  const Index m = s.height / p, r = s.radius();
  if (m < r)
    throw ShapeError(cat(name, ": ", m, m == 1 ? " image row" : " image rows", " per rank (height ", s.height, " on ",
                         p, p == 1 ? " rank" : " ranks", ") ", m == 1 ? "is" : "are", " fewer than the halo of ", r,
                         " rows a ", s.kernel, "x", s.kernel,
                         " kernel needs from each neighbour: use fewer ranks or a smaller kernel"));
}

/// im2col on the padded block: row ((i·N + n)·W + w) of A holds the k·k·C_in inputs that output
/// pixel (own row i, image n, column w) reads, in W's row order; columns beyond the image are 0.
/// (The rows beyond the image are already 0 in X̃: the halo's padding.)
template <class T>
CpuBackend::matrix<T> im2col(const CpuBackend::matrix<T>& xp, const Conv2dShape& s) {
  const Index k = s.kernel, r = s.radius(), c = s.in_channels, W = s.width, N = s.batch;
  const Index m = xp.rows() - 2 * r;
  CpuBackend::matrix<T> a = CpuBackend::matrix<T>::Zero(m * N * W, s.patch());
  for (Index i = 0; i < m; ++i)
    for (Index n = 0; n < N; ++n)
      for (Index w = 0; w < W; ++w) {
        const Index row = (i * N + n) * W + w;
        for (Index di = 0; di < k; ++di)
          for (Index dj = 0; dj < k; ++dj) {
            const Index ww = w + dj - r;
            if (ww < 0 || ww >= W) continue;
            a.row(row).segment((di * k + dj) * c, c) = xp.row(i + di).segment((n * W + ww) * c, c);
          }
      }
  return a;
}

/// col2im, im2col's adjoint: every entry of dA is added back where im2col read it from.
template <class T>
CpuBackend::matrix<T> col2im(const CpuBackend::matrix<T>& da, const Conv2dShape& s, Index m) {
  const Index k = s.kernel, r = s.radius(), c = s.in_channels, W = s.width, N = s.batch;
  CpuBackend::matrix<T> dxp = CpuBackend::matrix<T>::Zero(m + 2 * r, s.in_cols());
  for (Index i = 0; i < m; ++i)
    for (Index n = 0; n < N; ++n)
      for (Index w = 0; w < W; ++w) {
        const Index row = (i * N + n) * W + w;
        for (Index di = 0; di < k; ++di)
          for (Index dj = 0; dj < k; ++dj) {
            const Index ww = w + dj - r;
            if (ww < 0 || ww >= W) continue;
            dxp.row(i + di).segment((n * W + ww) * c, c) += da.row(row).segment((di * k + dj) * c, c);
          }
      }
  return dxp;
}

/// The same Row tensor with its rows regrouped: (rows × cols) ↔ (rows·f × cols/f). Row-major
/// blocks of whole rows keep their elements and order, so each rank reshapes its own block.
template <class T>
Sharded<T, RowSharded> regroup(const Sharded<T, RowSharded>& x, Index rows, Index cols) {
  const Index lr = rows / x.size();
  using Mat = CpuBackend::matrix<T>;
  Mat local = Eigen::Map<const Mat>(x.local().data(), lr, cols);
  return Sharded<T, RowSharded>(std::move(local), rows, cols, x.group());
}
}  // namespace conv_detail

template <Element T>
class Conv2d {
 public:
  using Mat = CpuBackend::matrix<T>;
  using Input = Sharded<T, RowSharded>;     // H × (N·W·C_in)
  using Output = Sharded<T, RowSharded>;    // H × (N·W·C_out)
  using Weight = Sharded<T, Replicated>;    // (k·k·C_in) × C_out
  using Bias = Sharded<T, Replicated>;      // 1 × C_out
  using PartialGrad = Sharded<T, Partial>;  // a weight gradient before its all-reduce

  struct Cache {
    HaloBlock<T> x;  // X̃[Row+halo]: the input with its halo, what backward reads
  };
  struct Forward {
    Output y;
    Cache cache;
  };
  /// As backward returns them: each rank's sum over its own pixels.
  struct ParamGrads {
    PartialGrad dw;
    std::optional<PartialGrad> db;
  };
  /// After reduce_grads: the whole gradient on every rank, ready for the update.
  struct ReducedGrads {
    Weight dw;
    std::optional<Bias> db;
  };
  struct Grads {
    Input dx;  // dX[Row]
    ParamGrads params;
  };

  /// Checks the geometry against the weights' group (ShapeError, DivisibilityError naming the
  /// values): odd kernel, H divisible by P, H/P ≥ ⌊k/2⌋, W (k²·C_in) × C_out, b 1 × C_out.
  Conv2d(Conv2dShape shape, Weight w, std::optional<Bias> b, std::string name = "Conv2d")
      : s_(shape), w_(std::move(w)), b_(std::move(b)), name_(std::move(name)) {
    shardalg::detail::check_operand(w_.group(), name_);
    conv_detail::check_shape(name_, s_, w_.size());
    if (w_.rows() != s_.patch() || w_.cols() != s_.out_channels)
      throw ShapeError(conv_detail::cat(name_, ": weight is ", w_.rows(), "x", w_.cols(), ", expected ", s_.patch(),
                                        "x", s_.out_channels, " (k*k*C_in x C_out)"));
    if (b_ && (b_->rows() != 1 || b_->cols() != s_.out_channels))
      throw ShapeError(conv_detail::cat(name_, ": bias is ", b_->rows(), "x", b_->cols(), ", expected 1x",
                                        s_.out_channels));
  }

  /// Weight element (i, j) := wf(i, j), bias element j := bf(j) (no bias when `bias` is false).
  template <class WF, class BF>
  static Conv2d make(const Conv2dShape& s, bool bias, const Group& g, WF wf, BF bf, std::string name = "Conv2d") {
    conv_detail::check_shape(name, s, g.size());  // before anything is built
    auto w = from_global<T, Replicated>(s.patch(), s.out_channels, g, wf);
    std::optional<Bias> b;
    if (bias) b = from_global<T, Replicated>(1, s.out_channels, g, [&](Index, Index j) { return bf(j); });
    return Conv2d(s, std::move(w), std::move(b), std::move(name));
  }
  /// Dense masters W (k²·C_in) × C_out and b 1 × C_out (b may be null: no bias).
  template <class M>
  static Conv2d from_dense(const Conv2dShape& s, const M& w, const M* b, const Group& g) {
    if (w.rows() != s.patch() || w.cols() != s.out_channels)
      throw ShapeError(conv_detail::cat("Conv2d::from_dense: weight is ", w.rows(), "x", w.cols(), ", expected ",
                                        s.patch(), "x", s.out_channels));
    if (b && (b->rows() != 1 || b->cols() != s.out_channels))
      throw ShapeError(conv_detail::cat("Conv2d::from_dense: bias is ", b->rows(), "x", b->cols(), ", expected 1x",
                                        s.out_channels));
    return make(s, b != nullptr, g, [&](Index i, Index j) { return w(i, j); }, [&](Index j) { return (*b)(0, j); });
  }
  /// normal(0, std) weights keyed by (seed, tensor, row, col) — the same at every P; zero bias.
  static Conv2d init(const Conv2dShape& s, bool bias, const Group& g, NormalInit init, std::uint64_t tensor) {
    return make(s, bias, g, [&](Index i, Index j) { return init(tensor, i, j); }, [](Index) { return 0.0; });
  }

  [[nodiscard]] const Conv2dShape& shape() const { return s_; }
  [[nodiscard]] const Weight& weight() const { return w_; }
  [[nodiscard]] const std::optional<Bias>& bias() const { return b_; }
  Weight& weight() { return w_; }
  std::optional<Bias>& bias() { return b_; }

  /// X[Row] → Y[Row]: the halo exchange, then a local im2col and GEMM.
  Forward forward(const Input& x) const {
    shardalg::detail::result_group(x.group(), w_.group(), name_);  // one group, before any message
    if (x.rows() != s_.height || x.cols() != s_.in_cols())
      throw ShapeError(conv_detail::cat(name_, ": input is ", x.rows(), "x", x.cols(), ", expected ", s_.height, "x",
                                        s_.in_cols(), " (H x N*W*C_in = ", s_.height, " x ", s_.batch, "*", s_.width,
                                        "*", s_.in_channels, ")"));
    HaloBlock<T> xp = halo_exchange(x, s_.radius());  // X[Row] → X̃[Row+halo]
    const Sharded<T, RowSharded> a = patches(xp);      // A[Row]
    Sharded<T, RowSharded> yp = matmul(a, w_);         // A[Row] · W[R] → Ŷ[Row]
    if (b_) yp = add_bias(yp, *b_);                    // Ŷ[Row] + b[R]
    return {conv_detail::regroup(yp, s_.height, s_.out_cols()), Cache{std::move(xp)}};
  }

  /// dY[Row] → dX[Row] and dW, db still Partial (no all-reduce here: see reduce_grads).
  Grads backward(const Cache& c, const Output& dy) const {
    if (dy.rows() != s_.height || dy.cols() != s_.out_cols())
      throw ShapeError(conv_detail::cat(name_, ": output gradient is ", dy.rows(), "x", dy.cols(), ", expected ",
                                        s_.height, "x", s_.out_cols()));
    const auto dyp = conv_detail::regroup(dy, s_.pixels(), s_.out_channels);  // dŶ[Row]
    const Sharded<T, RowSharded> a = patches(c.x);                             // A[Row] again
    PartialGrad dw = matmul(transpose(a), dyp);                                // Aᵀ[C] · dŶ[Row] → Partial
    std::optional<PartialGrad> db;
    if (b_) db = col_sum(dyp);                                                 // Row → Partial
    const Sharded<T, RowSharded> da = matmul(dyp, transpose(w_));              // dŶ[Row] · Wᵀ[R] → Row
    HaloBlock<T> dxp(conv_detail::col2im<T>(da.local(), s_, c.x.own_rows()), s_.radius(), s_.height, s_.in_cols(),
                     da.group());                                              // dX̃[Row+halo]
    return {adjoint::halo_exchange(dxp), {std::move(dw), std::move(db)}};     // the halo reduction
  }

  /// dW[Partial] → dW[R], db[Partial] → db[R]: one all_reduce each (k²·C_in·C_out and C_out).
  static ReducedGrads reduce_grads(ParamGrads g) {
    Weight dw = all_reduce(std::move(g.dw));
    std::optional<Bias> db;
    if (g.db) db = all_reduce(std::move(*g.db));
    return {std::move(dw), std::move(db)};
  }

  /// W := W − lr·dW, b := b − lr·db with the reduced gradients. (Passing the Partial ones to
  /// nn::sgd_update does not compile: [shardalg.E130].)
  void sgd(const ReducedGrads& g, T lr) {
    if (b_.has_value() != g.db.has_value())
      throw ShapeError(conv_detail::cat(name_, ": the layer ", b_ ? "has" : "has no", " bias but the gradients ",
                                        g.db ? "carry" : "carry no", " bias gradient"));
    sgd_update(w_, g.dw, lr);
    if (b_) sgd_update(*b_, *g.db, lr);
  }

 private:
  /// X̃[Row+halo] → A[Row], this rank's (m·N·W) × (k²·C_in) block of the patch matrix.
  Sharded<T, RowSharded> patches(const HaloBlock<T>& xp) const {
    return Sharded<T, RowSharded>(conv_detail::im2col<T>(xp.local(), s_), s_.pixels(), s_.patch(), xp.group());
  }

  Conv2dShape s_;
  Weight w_;
  std::optional<Bias> b_;
  std::string name_;
};

}  // namespace shardalg::nn
