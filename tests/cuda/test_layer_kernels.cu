// Below the layers, on the GPU: nn::Kernels<CudaBackend> function by function against
// nn::Kernels<CpuBackend> in double; nn::Fused<CudaBackend> against nn::Fused<CpuBackend>, and its
// bf16 passes against the unfused composition on the device. The layers are test_layers.cu; what
// the CUDA set takes from cuDNN and cuBLASLt, the memory pool and the dropout mask are
// test_vendor_paths.cu; the bf16 tolerance model is layer_testing.hpp (derived in test_layers.cu).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "layer_testing.hpp"

using namespace shardalg;
using namespace cudatol;
using namespace cudatol::devio;
using cuda::bf16;
using cuda::CudaBackend;

// ---- nn::Kernels<CudaBackend> against nn::Kernels<CpuBackend> in double -----------------------------

namespace {

template <class T>
void kernels_match_cpu() {
  const double bound = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  auto check = [&](const char* what, const auto& got, const MD& want) {
    const auto e = compare(back(got), want);
    CHECK_MESSAGE(e.within(bound), type_name<T>() << " " << what << ": " << e);
  };
  const Index R = 13, C = 40;
  const MD x = input<T>(R, C, 1, -0.5, 1.5), dy = input<T>(R, C, 2), gamma = input<T>(1, C, 3, 0.75, 1.25),
           beta = input<T>(1, C, 4);
  {  // generate and place
    auto f = [](Index i, Index j) { return static_cast<T>(0.25 * static_cast<double>(i) - 0.5 * static_cast<double>(j)); };
    check("generate", KG::generate<T>(5, 7, f), KC::generate<double>(5, 7, [&](Index i, Index j) { return static_cast<double>(f(i, j)); }));
    auto dst = dev<T>(x);
    KG::place(dst, 3, 11, dev<T>(dy.block(0, 0, 4, 9)));
    MD want = x;
    want.block(3, 11, 4, 9) = dy.block(0, 0, 4, 9);
    check("place", dst, want);
  }
  for (bool center : {true, false}) {
    CAPTURE(center);
    check("row_mean_var", KG::row_mean_var(dev<T>(x), center), KC::row_mean_var(x, center));
    check("row_power_sums", KG::row_power_sums(dev<T>(x)), KC::row_power_sums(x));
    const MD sums = KC::row_power_sums(x);
    check("mean_var_from_sums", KG::mean_var_from_sums(dev<T>(sums), C, center), KC::mean_var_from_sums(sums, C, center));
    const MD mv = KC::row_mean_var(x, center);
    const auto bg = dev<T>(beta);
    const auto o = KG::norm_apply(dev<T>(x), dev<T>(mv), dev<T>(gamma), center ? &bg : nullptr, static_cast<T>(1e-5));
    const auto oc = KC::norm_apply(x, mv, gamma, center ? &beta : nullptr, static_cast<double>(static_cast<T>(1e-5)));
    check("norm_apply y", o.y, oc.y);
    check("norm_apply xhat", o.xhat, oc.xhat);
    check("norm_apply rstd", o.rstd, oc.rstd);
    const MD xhat = oc.xhat, rstd = oc.rstd;
    check("norm_grad_sums", KG::norm_grad_sums(dev<T>(dy), dev<T>(xhat), dev<T>(gamma)), KC::norm_grad_sums(dy, xhat, gamma));
    const MD gs = KC::norm_grad_sums(dy, xhat, gamma);
    check("norm_grad_apply", KG::norm_grad_apply(dev<T>(dy), dev<T>(xhat), dev<T>(gamma), dev<T>(rstd), dev<T>(gs), C, center),
          KC::norm_grad_apply(dy, xhat, gamma, rstd, gs, C, center));
  }
  {  // SwiGLU on [gate | up]
    const MD h = input<T>(R, C, 5, -3, 3), da = input<T>(R, C / 2, 6);
    check("swiglu", KG::swiglu(dev<T>(h)), KC::swiglu(h));
    check("swiglu_grad", KG::swiglu_grad(dev<T>(h), dev<T>(da)), KC::swiglu_grad(h, da));
  }
  check("dropout", KG::dropout(dev<T>(x), 0.3, 77, 5, 9, 120), KC::dropout(x, 0.3, 77, 5, 9, 120));
  // Attention: batch 2, 3 units of 2 query heads (GQA-like), seq 7, head_dim 4; and one MHA-like unit.
  for (const nn::AttnShape s : {nn::AttnShape{2, 7, 3, 2, 4}, nn::AttnShape{3, 5, 1, 1, 8}}) {
    CAPTURE(s.units);
    const Index tokens = s.batch * s.seq, w = s.units * s.unit_width();
    const MD qkv = input<T>(tokens, w, 7, -2, 2), dout = input<T>(tokens, s.out_width(), 8);
    const auto a = KG::causal_attention(dev<T>(qkv), s);
    const auto ac = KC::causal_attention(qkv, s);
    check("causal_attention out", a.out, ac.out);
    check("causal_attention probs", a.probs, ac.probs);
    check("causal_attention_grad", KG::causal_attention_grad(dev<T>(qkv), dev<T>(ac.probs), dev<T>(dout), s),
          KC::causal_attention_grad(qkv, ac.probs, dout, s));
  }
}
}  // namespace

namespace {
using FG = nn::Fused<CudaBackend>;
using FC = nn::Fused<CpuBackend>;

/// nn::Fused<CudaBackend> (one kernel per pass) against nn::Fused<CpuBackend> in double, on shapes
/// with a ragged last column tile and row chunk (the two-pass column sums: 32-column tiles,
/// row chunks of 8 lanes), and an empty one.
template <class T>
void fused_match_cpu() {
  const double bound = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  auto check = [&](const char* what, const auto& got, const MD& want) {
    const auto e = compare(back(got), want);
    CHECK_MESSAGE(e.within(bound), type_name<T>() << " " << what << ": " << e);
  };
  for (const auto& shape : {std::pair<Index, Index>{13, 40}, {1031, 97}, {3000, 33}, {0, 5}}) {
    const Index R = shape.first, C = shape.second;
    CAPTURE(R);
    CAPTURE(C);
    const MD y = input<T>(R, C, 11, -3, 3), b = input<T>(1, C, 12), da = input<T>(R, C, 13), x = input<T>(R, C, 14);
    for (const auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf}) {
      auto yg = dev<T>(y);
      MD yc = y;
      const auto bg = dev<T>(b);
      check("bias_act A", FG::bias_act(yg, &bg, act), FC::bias_act(yc, &b, act));
      check("bias_act H (in place)", yg, yc);
      cuda::DeviceMatrix<T> dbg;
      MD dbc;
      check("act_grad dH", FG::act_grad(yg, dev<T>(da), act, &dbg), FC::act_grad(yc, MD(da), act, &dbc));
      check("act_grad db", dbg, dbc);
    }
    check("col_sum", CudaBackend::col_sum(dev<T>(y)), CpuBackend::col_sum(y));
    const MD xhat = input<T>(R, C, 15), gamma = input<T>(1, C, 16, 0.75, 1.25), rstd = input<T>(R, 1, 17, 0.5, 2);
    const auto rg = dev<T>(x);
    const auto g = FG::norm_backward(dev<T>(da), dev<T>(xhat), dev<T>(gamma), dev<T>(rstd), true, true, &rg);
    const auto gc = FC::norm_backward(da, xhat, gamma, rstd, true, true, &x);
    check("norm_backward dX", g.dx, gc.dx);
    check("norm_backward dgamma", g.dgamma, gc.dgamma);
    check("norm_backward dbeta", g.dbeta, gc.dbeta);
    for (const bool center : {true, false}) {
      const auto bg = dev<T>(b);
      const auto f = FG::norm_forward(dev<T>(x), dev<T>(gamma), center ? &bg : nullptr, static_cast<T>(1e-5), center);
      const auto fc = FC::norm_forward(x, gamma, center ? &b : nullptr, 1e-5, center);
      check(center ? "norm_forward y (LayerNorm)" : "norm_forward y (RMSNorm)", f.y, fc.y);
      check("norm_forward xhat", f.xhat, fc.xhat);
      check("norm_forward rstd", f.rstd, fc.rstd);
    }
    check("dropout_add", FG::dropout_add(dev<T>(x), dev<T>(y), 0.3, 77, 5, 9, 120),
          FC::dropout_add(x, y, 0.3, 77, 5, 9, 120));
    const MD yb = y.rowwise() + b.row(0);  // z + b, then the dropout and the residual
    for (const double p : {0.3, 0.0})
      check(p > 0 ? "bias_dropout_add" : "bias_dropout_add, p = 0",
            FG::bias_dropout_add(dev<T>(x), dev<T>(y), dev<T>(b), p, 77, 5, 9, 121), FC::dropout_add(x, yb, p, 77, 5, 9, 121));
  }
}

/// Largest |a − b| in units of the bf16 spacing at max(|a|, |b|) (2⁻⁷ of its binade).
double bf16_ulps(const MD& a, const MD& b) {
  double worst = 0;
  for (Index i = 0; i < a.rows(); ++i)
    for (Index j = 0; j < a.cols(); ++j) {
      const double m = std::max(std::abs(a(i, j)), std::abs(b(i, j)));
      if (m == 0) continue;
      const double spacing = std::ldexp(1.0, std::ilogb(m) - 7);
      worst = std::max(worst, std::abs(a(i, j) - b(i, j)) / spacing);
    }
  return worst;
}
}  // namespace

// The bf16 passes of Fused<CudaBackend> (one kernel per row for the norms; 16-byte accesses in
// act_grad) against the unfused composition on the same device (FusedComposed<CudaBackend>:
// Kernels<CudaBackend>'s row_mean_var + norm_apply, norm_grad_sums + norm_grad_apply + zip, map +
// zip). The norms do the same arithmetic in the same order, so they agree to the last bit unless the
// compiler contracts a multiply-add differently (1 ulp); the composed act_grad rounds GeLU′(H) to
// bf16 before the product, one rounding more (2 ulps).
TEST_CASE("cuda: the fused bf16 norm and activation passes equal the unfused composition on the device") {
  using FK = nn::FusedComposed<CudaBackend>;
  for (const auto& shape : {std::pair<Index, Index>{13, 40}, {1031, 96}, {7, 13}, {64, 4096}}) {
    const Index R = shape.first, C = shape.second;
    CAPTURE(R);
    CAPTURE(C);
    const MD x = input<bf16>(R, C, 21, -0.5, 1.5), dy = input<bf16>(R, C, 22), gamma = input<bf16>(1, C, 23, 0.75, 1.25),
             beta = input<bf16>(1, C, 24), res = input<bf16>(R, C, 25), h = input<bf16>(R, C, 26, -3, 3);
    const auto xd = dev<bf16>(x), gd = dev<bf16>(gamma), bd = dev<bf16>(beta), dyd = dev<bf16>(dy), rd = dev<bf16>(res);
    for (const bool center : {true, false}) {
      CAPTURE(center);
      const bf16 eps = static_cast<bf16>(1e-5f);
      const auto f = FG::norm_forward(xd, gd, center ? &bd : nullptr, eps, center);
      const auto u = FK::norm_forward(xd, gd, center ? &bd : nullptr, eps, center);
      CHECK(bf16_ulps(back(f.y), back(u.y)) <= 1);
      CHECK(bf16_ulps(back(f.xhat), back(u.xhat)) <= 1);
      CHECK(bf16_ulps(back(f.rstd), back(u.rstd)) == 0);
      for (const bool with_residual : {true, false}) {
        const auto g = FG::norm_backward(dyd, u.xhat, gd, u.rstd, center, true, with_residual ? &rd : nullptr);
        const auto gu = FK::norm_backward(dyd, u.xhat, gd, u.rstd, center, true, with_residual ? &rd : nullptr);
        CHECK(bf16_ulps(back(g.dx), back(gu.dx)) <= 1);
        CHECK(bf16_ulps(back(g.dbeta), back(gu.dbeta)) == 0);
      }
    }
    for (const auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf}) {
      const auto hd = dev<bf16>(h);
      cuda::DeviceMatrix<bf16>* no_db = nullptr;
      const auto a = FG::act_grad(hd, dev<bf16>(dy), act, no_db);
      const auto au = FK::act_grad(hd, dev<bf16>(dy), act, no_db);
      CHECK(bf16_ulps(back(a), back(au)) <= 2);
    }
  }
}

TEST_CASE_TEMPLATE("cuda: nn::Fused<CudaBackend> equals nn::Fused<CpuBackend> (double reference)", T, float, double) {
  fused_match_cpu<T>();
}

TEST_CASE_TEMPLATE("cuda: nn::Kernels<CudaBackend> equals nn::Kernels<CpuBackend> (double reference)", T, float, double) {
  kernels_match_cpu<T>();  // on this thread's default context
}
