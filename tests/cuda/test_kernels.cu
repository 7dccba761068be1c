// The device side of the layers' local arithmetic, each against a reference computed in double on
// the host: GeLU (tanh, erf) and its derivative through CudaBackend::map with the layers' functors
// (backend/activation.hpp, the path nn::Mlp takes), SwiGLU forward/backward (Kernels<CudaBackend>),
// the row softmax (CudaBackend::softmax_rows), LayerNorm and RMSNorm forward/backward (dx, dγ, dβ)
// through Fused<CudaBackend>, the composition the layers call. Kernels<CudaBackend> against
// Kernels<CpuBackend>, the attention kernels and the dropout mask are in test_layers.cu.
//
// Tolerances: fp32 normwise relative ≤ 1e-5. bf16 storage (8 significand bits, u = 2⁻⁸): inputs
// are rounded to bf16 first and the double reference uses those rounded inputs; the kernel
// computes in fp32 and rounds each output once, so each output is within u·|y| (+ fp32 error
// ≤ 2⁻²⁰ relative), i.e. ≤ 2u = 2⁻⁷ normwise. Backward kernels in bf16 read bf16 forward values;
// same bound.
#include <doctest/doctest.h>

#include <cmath>

#include "cuda_testing.hpp"
#include "shardalg/backend/fused.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;
using MD = Mat<double>;
using K = nn::Kernels<CudaBackend>;
using F = nn::Fused<CudaBackend>;

namespace {
constexpr double kF32 = 1e-5;
constexpr double kBf16 = 1.0 / 128;  // 2u, u = 2^-8

template <class T>
double tol() {
  return std::is_same_v<T, float> ? kF32 : kBf16;
}
/// Host inputs as the device sees them (rounded through T) and in double.
template <class T>
MD input(Index r, Index c, std::uint64_t seed, double lo = -3, double hi = 3) {
  return DeviceMatrix<T>(ctest::random_real<float>(r, c, seed, lo, hi)).host().template cast<double>();
}
template <class T>
DeviceMatrix<T> dev(const MD& m) {
  return DeviceMatrix<T>(m.cast<float>());
}
template <class T>
MD back(const DeviceMatrix<T>& m) {
  return m.host().template cast<double>();
}
template <class F>
MD apply(const MD& x, F f) {
  MD y = x;
  for (Index i = 0; i < y.size(); ++i) y.data()[i] = f(x.data()[i]);
  return y;
}
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid(double a) { return 1 / (1 + std::exp(-a)); }
/// Central difference of f at x (the derivative reference for the GeLU backward).
template <class F>
double deriv(F f, double x) {
  const double h = 1e-5;
  return (f(x + h) - f(x - h)) / (2 * h);
}
MD softmax_ref(const MD& x) {
  MD y = MD::Zero(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    double m = -INFINITY, s = 0;
    for (Index j = 0; j < x.cols(); ++j) m = std::max(m, x(i, j));
    for (Index j = 0; j < x.cols(); ++j) s += std::exp(x(i, j) - m);
    for (Index j = 0; j < x.cols(); ++j) y(i, j) = std::exp(x(i, j) - m) / s;
  }
  return y;
}
}  // namespace

TEST_CASE_TEMPLATE("kernels: GeLU (tanh, erf) forward and backward through map", T, float, bf16) {
  const MD x = input<T>(37, 129, 1), dy = input<T>(37, 129, 2, -1, 1);
  CHECK(compare(back(CudaBackend::map(dev<T>(x), nn::GeluTanh{})), apply(x, gelu_tanh)).within(tol<T>()));
  CHECK(compare(back(CudaBackend::map(dev<T>(x), nn::GeluErf{})), apply(x, gelu_erf)).within(tol<T>()));
  MD dref_t = x, dref_e = x;
  for (Index i = 0; i < x.size(); ++i) {
    dref_t.data()[i] = dy.data()[i] * deriv(gelu_tanh, x.data()[i]);
    dref_e.data()[i] = dy.data()[i] * deriv(gelu_erf, x.data()[i]);
  }
  // dA ⊙ act'(H), as Fused<B>::act_grad composes it. The finite difference is accurate to
  // ~1e-10; the analytic derivative in fp32 to ~1e-6.
  const auto dyv = dev<T>(dy);
  CHECK(compare(back(CudaBackend::zip(dyv, CudaBackend::map(dev<T>(x), nn::GeluTanhGrad{}), fn::times{})), dref_t)
            .within(tol<T>()));
  CHECK(compare(back(CudaBackend::zip(dyv, CudaBackend::map(dev<T>(x), nn::GeluErfGrad{}), fn::times{})), dref_e)
            .within(tol<T>()));
}

TEST_CASE_TEMPLATE("kernels: SwiGLU forward and backward on the fused [gate | up] block", T, float, bf16) {
  const Index R = 16, W = 96;
  const MD a = input<T>(R, W, 3), b = input<T>(R, W, 4), dy = input<T>(R, W, 5, -1, 1);
  MD h(R, 2 * W);
  h << a, b;
  MD y = a, dh(R, 2 * W);
  for (Index i = 0; i < R; ++i)
    for (Index j = 0; j < W; ++j) {
      const double av = a(i, j), bv = b(i, j), g = dy(i, j), s = sigmoid(av);
      y(i, j) = av * s * bv;
      dh(i, j) = g * bv * s * (1 + av * (1 - s));
      dh(i, W + j) = g * av * s;
    }
  CHECK(compare(back(K::swiglu(dev<T>(h))), y).within(tol<T>()));
  CHECK(compare(back(K::swiglu_grad(dev<T>(h), dev<T>(dy))), dh).within(tol<T>()));
}

TEST_CASE_TEMPLATE("kernels: softmax over rows", T, float, bf16) {
  const MD x = input<T>(16, 24, 6);
  CHECK(compare(back(CudaBackend::softmax_rows(dev<T>(x))), softmax_ref(x)).within(tol<T>()));
}

TEST_CASE_TEMPLATE("kernels: LayerNorm and RMSNorm, forward and backward (Fused<CudaBackend>)", T, float, bf16) {
  const Index R = 12, C = 200;
  const MD x = input<T>(R, C, 8), g = input<T>(1, C, 9, 0.5, 1.5), be = input<T>(1, C, 10, -0.5, 0.5),
           dy = input<T>(R, C, 11, -1, 1);
  const double eps = 1e-5;
  for (bool ln : {true, false}) {
    CAPTURE(ln);
    MD y(R, C), dx(R, C), dg = MD::Zero(1, C), db = MD::Zero(1, C);
    for (Index i = 0; i < R; ++i) {
      const double mu = ln ? x.row(i).mean() : 0.0;
      const double var = ln ? (x.row(i).array() - mu).square().mean() : x.row(i).array().square().mean();
      const double r = 1 / std::sqrt(var + eps);
      const Eigen::RowVectorXd xh = (x.row(i).array() - mu) * r;
      y.row(i) = ln ? Eigen::RowVectorXd(xh.array() * g.row(0).array() + be.row(0).array())
                    : Eigen::RowVectorXd(xh.array() * g.row(0).array());
      const Eigen::RowVectorXd gg = dy.row(i).array() * g.row(0).array();
      const double mg = ln ? gg.mean() : 0.0, mgx = gg.cwiseProduct(xh).mean();
      dx.row(i) = r * (gg.array() - mg - xh.array() * mgx);
      dg.row(0) += dy.row(i).cwiseProduct(xh);
      db.row(0) += dy.row(i);
    }
    const auto xv = dev<T>(x), gam = dev<T>(g), bet = dev<T>(be);
    const auto o = F::norm_forward(xv, gam, ln ? &bet : nullptr, static_cast<T>(eps), ln);
    CHECK(compare(back(o.y), y).within(tol<T>()));
    const auto grad = F::norm_backward(dev<T>(dy), o.xhat, gam, o.rstd, ln, ln);
    CHECK(compare(back(grad.dx), dx).within(tol<T>()));
    CHECK(compare(back(grad.dgamma), dg).within(tol<T>()));
    if (ln) CHECK(compare(back(grad.dbeta), db).within(tol<T>()));
    else CHECK_EQ(grad.dbeta.size(), 0);
  }
}
