// shardalg/reference/conv2d.hpp — the dense twin of nn/layers/conv2d.hpp: a stride-1 "same" 2-D
// convolution (a cross-correlation, as deep-learning frameworks define it), written as direct
// loops over image, row, column, output channel, kernel row, kernel column and input channel, in
// plain Eigen (double). No shardalg code: no im2col, no halo, no GEMM. The backward is the same
// loop nest with each product's roles exchanged; tests/conv checks it against central finite
// differences and a hand-computed case.
//
// Data layout (the one nn/layers/conv2d.hpp uses, so that results compare element for element):
//   image  x  H × (N·W·C):         x(h, (n·W + w)·C + c) is image n, pixel (h, w), channel c
//   weight wt (k·k·C_in) × C_out:  wt((i·k + j)·C_in + ci, co) is kernel tap (i, j), ci → co
//   bias   b  1 × C_out, or empty (no bias)
//
//   y(n, h, w, co) = b(co) + Σ_{i,j < k} Σ_ci x(n, h + i − r, w + j − r, ci) · wt((i·k + j)·C_in + ci, co)
//
// with r = ⌊k/2⌋ and x = 0 outside the image.
#pragma once

#include <Eigen/Dense>

namespace ref {

using M = Eigen::MatrixXd;
using Index = Eigen::Index;

/// N images of H × W pixels, C_in → C_out channels, a k × k kernel (k odd).
struct ConvDims {
  Index n = 1, h = 0, w = 0, cin = 0, cout = 0, k = 1;
};

namespace conv_detail {
/// Column of (image n, pixel column w, channel c) in an H × (N·W·C) matrix.
inline Index col(const ConvDims& d, Index n, Index w, Index c, Index channels) { return (n * d.w + w) * channels + c; }
inline bool inside(Index v, Index size) { return v >= 0 && v < size; }
}  // namespace conv_detail

inline M conv2d(const M& x, const M& wt, const M& b, const ConvDims& d) {
  using conv_detail::col, conv_detail::inside;
  const Index r = d.k / 2;
  M y = M::Zero(d.h, d.n * d.w * d.cout);
  for (Index n = 0; n < d.n; ++n)
    for (Index h = 0; h < d.h; ++h)
      for (Index w = 0; w < d.w; ++w)
        for (Index co = 0; co < d.cout; ++co) {
          double s = b.size() != 0 ? b(0, co) : 0.0;
          for (Index i = 0; i < d.k; ++i)
            for (Index j = 0; j < d.k; ++j) {
              const Index hh = h + i - r, ww = w + j - r;
              if (!inside(hh, d.h) || !inside(ww, d.w)) continue;
              for (Index ci = 0; ci < d.cin; ++ci) s += x(hh, col(d, n, ww, ci, d.cin)) * wt((i * d.k + j) * d.cin + ci, co);
            }
          y(h, col(d, n, w, co, d.cout)) = s;
        }
  return y;
}

struct ConvGrads {
  M dx, dw, db;
};

/// Gradients of Σ dy ⊙ conv2d(x, wt, b) with respect to x, wt and b (db: 1 × C_out).
inline ConvGrads conv2d_backward(const M& x, const M& wt, const M& dy, const ConvDims& d) {
  using conv_detail::col, conv_detail::inside;
  const Index r = d.k / 2;
  ConvGrads g{M::Zero(x.rows(), x.cols()), M::Zero(wt.rows(), wt.cols()), M::Zero(1, d.cout)};
  for (Index n = 0; n < d.n; ++n)
    for (Index h = 0; h < d.h; ++h)
      for (Index w = 0; w < d.w; ++w)
        for (Index co = 0; co < d.cout; ++co) {
          const double gy = dy(h, col(d, n, w, co, d.cout));
          g.db(0, co) += gy;
          for (Index i = 0; i < d.k; ++i)
            for (Index j = 0; j < d.k; ++j) {
              const Index hh = h + i - r, ww = w + j - r;
              if (!inside(hh, d.h) || !inside(ww, d.w)) continue;
              for (Index ci = 0; ci < d.cin; ++ci) {
                const Index xc = col(d, n, ww, ci, d.cin), wr = (i * d.k + j) * d.cin + ci;
                g.dx(hh, xc) += gy * wt(wr, co);
                g.dw(wr, co) += gy * x(hh, xc);
              }
            }
        }
  return g;
}

}  // namespace ref
