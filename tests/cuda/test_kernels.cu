// The layer kernels (include/shardalg/backend/cuda/ops.hpp), each against a CPU reference computed in
// double: GeLU (tanh, erf) and its derivative, SwiGLU forward/backward, softmax with scale and
// causal mask (with global offsets) forward/backward, LayerNorm and RMSNorm forward/backward
// (dx, dγ, dβ), dropout keyed by the global index (the mask is layout-independent), and the
// vocab-parallel cross-entropy (loss and dlogits) at TP 1, 2, 4.
//
// Tolerances: fp32 normwise relative ≤ 1e-5. bf16 storage (8 significand bits, u = 2⁻⁸): inputs
// are rounded to bf16 first and the double reference uses those rounded inputs; the kernel
// computes in fp32 and rounds each output once, so each output is within u·|y| (+ fp32 error
// ≤ 2⁻²⁰ relative), i.e. ≤ 2u = 2⁻⁷ normwise. Backward kernels in bf16 read bf16 forward values;
// same bound.
#include <doctest/doctest.h>

#include <cmath>

#include "cuda_testing.hpp"
#include "shardalg/cuda.hpp"

using namespace shardalg;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::DeviceMatrix;
using ctest::Mat;
using MD = Mat<double>;

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
MD softmax_ref(const MD& x, double scale, bool causal, Index r0, Index c0) {
  MD y = MD::Zero(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    double m = -INFINITY, s = 0;
    auto masked = [&](Index j) { return causal && c0 + j > r0 + i; };
    for (Index j = 0; j < x.cols(); ++j)
      if (!masked(j)) m = std::max(m, scale * x(i, j));
    for (Index j = 0; j < x.cols(); ++j)
      if (!masked(j)) s += std::exp(scale * x(i, j) - m);
    for (Index j = 0; j < x.cols(); ++j) y(i, j) = masked(j) ? 0 : std::exp(scale * x(i, j) - m) / s;
  }
  return y;
}
}  // namespace

TEST_CASE_TEMPLATE("kernels: GeLU (tanh, erf) forward and backward", T, float, bf16) {
  const MD x = input<T>(37, 129, 1), dy = input<T>(37, 129, 2, -1, 1);
  CHECK(compare(back(cuda::gelu<cuda::Gelu::tanh>(dev<T>(x))), apply(x, gelu_tanh)).within(tol<T>()));
  CHECK(compare(back(cuda::gelu<cuda::Gelu::erf>(dev<T>(x))), apply(x, gelu_erf)).within(tol<T>()));
  MD dref_t = x, dref_e = x;
  for (Index i = 0; i < x.size(); ++i) {
    dref_t.data()[i] = dy.data()[i] * deriv(gelu_tanh, x.data()[i]);
    dref_e.data()[i] = dy.data()[i] * deriv(gelu_erf, x.data()[i]);
  }
  // The finite difference is accurate to ~1e-10; the analytic derivative in fp32 to ~1e-6.
  CHECK(compare(back(cuda::gelu_backward<cuda::Gelu::tanh>(dev<T>(x), dev<T>(dy))), dref_t).within(tol<T>()));
  CHECK(compare(back(cuda::gelu_backward<cuda::Gelu::erf>(dev<T>(x), dev<T>(dy))), dref_e).within(tol<T>()));
}

TEST_CASE_TEMPLATE("kernels: SwiGLU forward and backward", T, float, bf16) {
  const MD a = input<T>(16, 96, 3), b = input<T>(16, 96, 4), dy = input<T>(16, 96, 5, -1, 1);
  MD y = a, da = a, db = a;
  for (Index i = 0; i < a.size(); ++i) {
    const double av = a.data()[i], bv = b.data()[i], g = dy.data()[i], s = sigmoid(av);
    y.data()[i] = av * s * bv;
    da.data()[i] = g * bv * s * (1 + av * (1 - s));
    db.data()[i] = g * av * s;
  }
  CHECK(compare(back(cuda::swiglu(dev<T>(a), dev<T>(b))), y).within(tol<T>()));
  auto g = cuda::swiglu_backward(dev<T>(a), dev<T>(b), dev<T>(dy));
  CHECK(compare(back(g.da), da).within(tol<T>()));
  CHECK(compare(back(g.db), db).within(tol<T>()));
}

TEST_CASE_TEMPLATE("kernels: softmax with scale and causal mask, forward and backward", T, float, bf16) {
  for (auto [r0, c0] : {std::pair<Index, Index>{0, 0}, {8, 0}, {0, 4}}) {  // a Row block at row 8; a key block at 4
    CAPTURE(r0);
    CAPTURE(c0);
    const MD x = input<T>(16, 24, 6), dy = input<T>(16, 24, 7, -1, 1);
    const double scale = 0.125;
    const MD y = softmax_ref(x, scale, true, r0, c0);
    const auto dyv = cuda::softmax(dev<T>(x), cuda::SoftmaxOptions{float(scale), true, r0, c0});
    CHECK(compare(back(dyv), y).within(tol<T>()));
    // backward from the device forward output (what a layer stores)
    const MD yd = back(dyv);
    MD dx(x.rows(), x.cols());
    for (Index i = 0; i < x.rows(); ++i) {
      const double s = yd.row(i).dot(dy.row(i));
      for (Index j = 0; j < x.cols(); ++j) dx(i, j) = scale * yd(i, j) * (dy(i, j) - s);
    }
    CHECK(compare(back(cuda::softmax_backward(dyv, dev<T>(dy), float(scale))), dx).within(tol<T>()));
  }
}

TEST_CASE_TEMPLATE("kernels: LayerNorm and RMSNorm, forward and backward", T, float, bf16) {
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
    const auto dxv = dev<T>(x), dgam = dev<T>(g), dbet = dev<T>(be);
    cuda::NormStats st;
    const auto yv = ln ? cuda::layernorm(dxv, &dgam, &dbet, st, float(eps)) : cuda::rmsnorm(dxv, &dgam, st, float(eps));
    CHECK(compare(back(yv), y).within(tol<T>()));
    const auto grad = cuda::norm_backward(dxv, &dgam, dev<T>(dy), st);
    CHECK(compare(back(grad.dx), dx).within(tol<T>()));
    CHECK(compare(back(grad.dgamma), dg).within(tol<T>()));
    if (ln) CHECK(compare(back(grad.dbeta), db).within(tol<T>()));
    else CHECK_EQ(grad.dbeta.size(), 0);
  }
}

TEST_CASE("kernels: dropout is keyed by the global index — the same mask in every layout") {
  const Index R = 8, C = 12;
  const float p = 0.3f;
  const std::uint64_t seed = 1234;
  const auto X = ctest::random_real<float>(R, C, 12);
  Mat<float> ref(R, C);
  Index kept = 0;
  for (Index i = 0; i < R; ++i)
    for (Index j = 0; j < C; ++j) {
      const bool keep = cuda::dropout_keep(seed, static_cast<std::uint64_t>(i * C + j), p);
      kept += keep;
      ref(i, j) = keep ? X(i, j) * (1.0f / (1.0f - p)) : 0.0f;
    }
  CHECK(kept > 0);
  CHECK(kept < R * C);
  CHECK(compare(cuda::dropout(DeviceMatrix<float>(X), p, seed).host(), ref).within(kF32));
  for (int P : {1, 2, 4}) {
    std::vector<int> ok(P);
    cuda::run_device_ranks(P, [&](cuda::SimDeviceComm& c) {
      Group g = c;
      const Mat<float> row = ctest::host_of(to_dense(cuda::dropout(shard<RowSharded, Mat<float>, CudaBackend>(X, g), p, seed)));
      const Mat<float> col = ctest::host_of(to_dense(cuda::dropout(shard<ColSharded, Mat<float>, CudaBackend>(X, g), p, seed)));
      ok[c.rank()] = compare(row, ref).within(kF32) && compare(col, ref).within(kF32);
    });
    for (int r = 0; r < P; ++r) CHECK_EQ(ok[r], 1);
  }
}

TEST_CASE("kernels: vocab-parallel cross-entropy at TP 1, 2, 4 against the dense loss") {
  const Index R = 6, V = 32;
  const auto L = ctest::random_real<float>(R, V, 13, -4, 4);
  Mat<std::int32_t> t(R, 1);
  for (Index i = 0; i < R; ++i) t(i, 0) = static_cast<std::int32_t>((i * 7 + 3) % V);
  MD loss(R, 1), dl(R, V);
  for (Index i = 0; i < R; ++i) {
    const double m = L.row(i).cast<double>().maxCoeff();
    const double s = (L.row(i).cast<double>().array() - m).exp().sum();
    loss(i, 0) = std::log(s) + m - L(i, t(i, 0));
    for (Index j = 0; j < V; ++j) dl(i, j) = (std::exp(L(i, j) - m) / s - (j == t(i, 0) ? 1.0 : 0.0)) / R;
  }
  for (int P : {1, 2, 4}) {
    std::vector<ErrorReport> el(P), ed(P);
    cuda::run_device_ranks(P, [&](cuda::SimDeviceComm& c) {
      Group g = c;
      const auto logits = shard<ColSharded, Mat<float>, CudaBackend>(L, g);
      const DeviceMatrix<std::int32_t> targets = t;
      auto ce = cuda::vocab_parallel_cross_entropy(logits, targets);
      el[c.rank()] = compare(ce.loss.local().host().cast<double>().eval(), loss);
      ed[c.rank()] = compare(ctest::host_of(to_dense(ce.dlogits)).cast<double>().eval(), dl);
    });
    for (int r = 0; r < P; ++r) {
      INFO("P=", P, " rank ", r, " loss ", el[r], " dlogits ", ed[r]);
      CHECK(el[r].within(kF32));
      CHECK(ed[r].within(kF32));
    }
  }
}
