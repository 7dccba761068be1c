// The layers issue's verification on the GPU backend: the *same* case functions as the CPU tests
// (tests/layers/cases.hpp — linear layers, MLP with GeLU tanh/erf and SwiGLU, LayerNorm/RMSNorm
// on R, Row and C, dropout on every layout, causal attention MHA and GQA, the pre-LN block),
// instantiated with cuda::CudaBackend on SimDeviceComm (one host thread, stream and cuBLAS handle
// per rank, one GPU) at TP 1, 2, 4, each output and gradient against the dense double
// reference. And, below the layers, nn::Kernels<CudaBackend> function by function against
// nn::Kernels<CpuBackend> in double.
//
// Tolerances (normwise relative error, max |a − e| / max |e|):
//
//   fp32  1e-5, the issue's bound, as on the CPU. cuBLAS runs strict fp32 (no TF32).
//   fp64  1e-12 (the kernel-level checks).
//   bf16  n·u + 2⁻¹⁶, u = 2⁻⁸ (bf16 keeps 8 significand bits), where n counts the roundings to
//         bf16 on the longest dependency chain of the case's checked values, forward and
//         backward. The model: inputs and weights are bf16 values (cases.hpp rounds them, and the
//         double reference starts from the same values); every kernel and GEMM computes in fp32
//         and rounds its stored output once, which adds at most u·|v| to a value v; the fp32
//         arithmetic in between adds < 2⁻¹⁸ relative for the sizes here (sums of ≤ 72 terms),
//         covered by the 2⁻¹⁶ term. To first order an output's error is the sum of the rounding
//         errors it depends on, carried by the layer's derivatives; the cases' inputs are O(1)
//         and their weights scaled so every intermediate stays O(1) (no large gain, no deep
//         cancellation), so each rounding on the chain is counted as u·max|output|. The counts,
//         with R = one rounding:
//
//   linear     3   row-parallel z: local GEMM R, all-reduce R (fp32 sum, rounded once), + b R
//   mlp        6   z: fc1 R, + b1 R, act R, fc2 R, all-reduce R, + b2 R; dX likewise: H's 2,
//                  act′(H) R, ⊙ dA R, · W1ᵀ R, all-reduce R (SwiGLU: one fewer)
//   norm       7   C: dx — Σ(x, x²) R, all-reduce R, (mean, var) R, x̂ R, Σ(g, g·x̂) R,
//                  all-reduce R, dx R
//   dropout    1   x·mask·scale rounded once (a Partial input: zeros added exactly)
//   attention  7   z: QKV R, + b R, softmax R, P·V R, proj R, all-reduce R, + bo R; dX likewise 7
//   block     31   dX: the forward chain to the cached values (LN1 2, QKV 4, P 5, MLP's H 15)
//                  then dropout, fc2ᵀ, GeLU' ⊙, fc1ᵀ, all-reduce, LN2 sums and dx, residual,
//                  dropout, projᵀ, dS, dQKV, Wqkvᵀ, all-reduce, LN1 sums and dx, residual
//
// Nothing here has been run on a GPU yet (see docs/cuda.md); without one the binary exits 77.
#include <thread>
#include <array>
#include <algorithm>
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cases.hpp"
#include "shardalg/cuda.hpp"

namespace {
using namespace lt;
using cuda::bf16;
using cuda::CudaBackend;
using cuda::SimDeviceComm;

const std::vector<int> kWorlds = {1, 2, 4};

// nn's activation functors take CudaBackend's kernel path (no host round trip), in fp32 for bf16
// storage; the core's scale functor stays in its own type.
static_assert(cuda::is_device_callable_v<nn::GeluTanh> && cuda::is_device_callable_v<nn::GeluErfGrad>);
static_assert(cuda::kernels::GenericFloatFunctor<nn::GeluTanh> && cuda::kernels::GenericFloatFunctor<nn::GeluErf>);
static_assert(!cuda::kernels::GenericFloatFunctor<fn::scale<bf16>>);

constexpr double kU = 1.0 / 256;  // bf16 unit roundoff 2⁻⁸
constexpr double kFp32Slack = 1.0 / 65536;
/// The bf16 bound of a case whose longest chain has n roundings (see the header).
constexpr double bf16_tol(int n) { return n * kU + kFp32Slack; }

template <class T>
double tol_for(int bf16_roundings) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_tol(bf16_roundings);
  else return tol<T>;
}
template <class T>
const char* type_name() {
  return std::is_same_v<T, bf16> ? "bf16" : std::is_same_v<T, float> ? "fp32" : "fp64";
}

/// Run fn(group) on p simulated GPU ranks and check every rank's checks against `bound`.
template <class T, class Fn>
void expect_all(int p, double bound, Fn fn) {
  std::vector<Checks> results(p);
  cuda::run_device_ranks(p, [&](SimDeviceComm& c) { results[c.rank()] = fn(Group(c)); });
  for (int r = 0; r < p; ++r)
    for (const auto& c : results[r])
      CHECK_MESSAGE(c.err.within(bound), type_name<T>() << " " << c.name << " p=" << p << " rank=" << r << ": " << c.err
                                                        << " (bound " << bound << ")");
  CHECK(!results[0].empty());
}

}  // namespace

TEST_CASE_TEMPLATE("cuda layers: ColumnParallelLinear and RowParallelLinear equal the dense layer", T, float, bf16) {
  for (int p : kWorlds) expect_all<T>(p, tol_for<T>(3), [](const Group& g) { return case_linear<T, CudaBackend>(g); });
}

TEST_CASE_TEMPLATE("cuda layers: MLP (GeLU tanh, GeLU erf, SwiGLU) equals the dense MLP", T, float, bf16) {
  for (int p : kWorlds)
    for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_erf, nn::Activation::swiglu})
      expect_all<T>(p, tol_for<T>(6), [&](const Group& g) { return case_mlp<T, CudaBackend>(g, act); });
}

TEST_CASE_TEMPLATE("cuda layers: LayerNorm and RMSNorm on R, Row and C equal the dense norm", T, float, bf16) {
  for (int p : kWorlds)
    for (auto kind : {nn::NormKind::layer, nn::NormKind::rms})
      expect_all<T>(p, tol_for<T>(7), [&](const Group& g) { return case_norm<T, CudaBackend>(g, kind); });
}

TEST_CASE_TEMPLATE("cuda layers: dropout, the sharded mask is the dense mask on every layout", T, float, bf16) {
  for (int p : kWorlds) expect_all<T>(p, tol_for<T>(1), [](const Group& g) { return case_dropout<T, CudaBackend>(g); });
}

TEST_CASE_TEMPLATE("cuda layers: causal self-attention (MHA and GQA) equals the dense attention", T, float, bf16) {
  for (int p : kWorlds)
    for (Index groups : valid_groups(p)) {
      CAPTURE(groups);
      expect_all<T>(p, tol_for<T>(7), [&](const Group& g) { return case_attention<T, CudaBackend>(g, groups); });
    }
}

TEST_CASE_TEMPLATE("cuda layers: pre-LN transformer block equals the dense block", T, float, bf16) {
  for (int p : kWorlds)
    for (const auto& bc : block_cases(p))
      expect_all<T>(p, tol_for<T>(31), [&](const Group& g) { return case_block<T, CudaBackend>(g, bc); });
}

// ---- nn::Kernels<CudaBackend> against nn::Kernels<CpuBackend> in double -----------------------------

namespace {
using KG = nn::Kernels<CudaBackend>;
using KC = nn::Kernels<CpuBackend>;
using MD = testing::Mat<double>;

template <class T>
cuda::DeviceMatrix<T> dev(const MD& m) {
  return cuda::DeviceMatrix<T>(m);
}
template <class T>
MD back(const cuda::DeviceMatrix<T>& m) {
  return m.host().template cast<double>();
}
/// Uniform in [lo, hi), rounded to T (the values both sides compute from).
template <class T>
MD input(Index r, Index c, std::uint64_t seed, double lo = -1, double hi = 1) {
  const MD u = testing::random_real<double>(r, c, seed);  // [-1, 1)
  return u.unaryExpr([&](double v) { return static_cast<double>(static_cast<T>(lo + (v + 1) / 2 * (hi - lo))); });
}

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

#if defined(SHARDALG_WITH_CUDNN)
// Fused attention (cuDNN) against the dense double reference (Kernels<CpuBackend> on the same
// bf16 values), as the unfused path is checked above. Bounds: n·u + 2⁻¹⁶ with n the bf16 roundings
// on the longest chain: forward P (fed to P·V in bf16) and O: 2; backward O (in D = rowsum(dO ⊙ O)),
// P, dS (fed to the GEMMs in bf16) and dQKV: 4.
TEST_CASE("cuda: fused causal attention (cuDNN) equals the dense attention, forward and backward") {
  for (const Index d : {Index{64}, Index{128}})
    for (const nn::AttnShape s : {nn::AttnShape{2, 128, 2, 1, d}, nn::AttnShape{1, 200, 3, 1, d}}) {
      CAPTURE(d);
      CAPTURE(s.seq);
      const Index tokens = s.batch * s.seq, w = s.units * s.unit_width();
      const MD qkv = input<bf16>(tokens, w, 21, -2, 2), dout = input<bf16>(tokens, s.out_width(), 22);
      const auto q = dev<bf16>(qkv);
      std::string why;
      REQUIRE_MESSAGE(KG::flash_supported(q, s, &why), why);  // sm_90, MHA, d 64/128: cuDNN must take it
      const auto f = KG::flash_attention(q, s);
      const auto ref = KC::causal_attention(qkv, s);
      const auto e_out = compare(back(f.out), ref.out);
      CHECK_MESSAGE(e_out.within(bf16_tol(2)), "fused out: " << e_out);
      // L = log Σ_{j ≤ i} exp(S_ij): the reference from the dense scores, in double.
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      MD lse_ref(s.batch * s.units * s.seq, 1);
      for (Index b = 0; b < s.batch; ++b)
        for (Index u = 0; u < s.units; ++u)
          for (Index i = 0; i < s.seq; ++i) {
            std::vector<double> sc;
            for (Index j = 0; j <= i; ++j)
              sc.push_back(scale * qkv.row(b * s.seq + i).segment(u * 3 * d, d).dot(qkv.row(b * s.seq + j).segment(u * 3 * d + d, d)));
            const double mx = *std::max_element(sc.begin(), sc.end());
            double z = 0;
            for (const double v : sc) z += std::exp(v - mx);
            lse_ref((b * s.units + u) * s.seq + i, 0) = mx + std::log(z);
          }
      const auto e_lse = compare(back(f.lse), lse_ref);
      CHECK_MESSAGE(e_lse.within(1e-5 + bf16_tol(0)), "fused log-sum-exp: " << e_lse);  // fp32 from bf16 inputs
      const auto g = KG::flash_attention_grad(q, f.out, f.lse, dev<bf16>(dout), s);
      const auto e_g = compare(back(g), KC::causal_attention_grad(qkv, ref.probs, dout, s));
      CHECK_MESSAGE(e_g.within(bf16_tol(4)), "fused dQKV: " << e_g);
    }
}

TEST_CASE("cuda: the fused attention path says which problems it refuses, and why") {
  std::string why;
  const nn::AttnShape gqa{1, 64, 2, 2, 64};
  CHECK_FALSE(KG::flash_supported(cuda::DeviceMatrix<bf16>(64, 2 * gqa.unit_width()), gqa, &why));
  CHECK_EQ(why, "fused attention takes one query head per K/V head, got 2");
  const nn::AttnShape mha{1, 64, 2, 1, 64};
  CHECK_FALSE(KG::flash_supported(cuda::DeviceMatrix<float>(64, 2 * mha.unit_width()), mha, &why));
  CHECK_EQ(why, "fused attention needs bf16 or fp16 storage");
}
#endif

// The linear layers' GEMMs with a cuBLASLt epilogue (Fused<CudaBackend>: gemm_bias, gemm_bias_act,
// gemm_wgrad_bgrad) against the dense double reference on the same bf16 values. Bounds n·u + 2⁻¹⁶:
// Y = X·W + b rounds once (1); dW and db once each (1); A = GeLU(H): 2. The pre-activation H that
// GELU_AUX_BIAS stores rounds twice (2): on an H200 its error reached 0.00437 of max|H| (m 37,
// n 24), above u = 2⁻⁸ = 0.00391, which one rounding cannot give: consistent with the aux output
// rounding the product to bf16 before the bias is added. cuBLASLt's GeLU is the tanh form, as
// nn::GeluTanh. Shapes: a multiple of 8 and a ragged one.
TEST_CASE("cuda: GEMMs with a bias, bias + GeLU and bias-gradient epilogue equal the dense products") {
  using FGl = nn::Fused<CudaBackend>;
  for (const auto& shape : {std::array<Index, 3>{64, 96, 128}, std::array<Index, 3>{37, 50, 24}}) {
    const Index m = shape[0], k = shape[1], n = shape[2];
    CAPTURE(m);
    CAPTURE(n);
    const MD x = input<bf16>(m, k, 31), w = input<bf16>(k, n, 32, -0.3, 0.3), b = input<bf16>(1, n, 33),
             dy = input<bf16>(m, n, 34);
    const MD h = (x * w).rowwise() + b.row(0);
    auto y = FGl::gemm_bias(dev<bf16>(x), dev<bf16>(w), dev<bf16>(b));
    REQUIRE_MESSAGE(y.has_value(), "cuBLASLt took no BIAS epilogue");
    const auto ey = compare(back(*y), h);
    CHECK_MESSAGE(ey.within(bf16_tol(1)), "X·W + b: " << ey);
    auto ha = FGl::gemm_bias_act(dev<bf16>(x), dev<bf16>(w), dev<bf16>(b), nn::Activation::gelu_tanh);
    if (n % 8 == 0) {
      REQUIRE_MESSAGE(ha.has_value(), "cuBLASLt took no GELU_AUX_BIAS epilogue");
      const auto eh = compare(back(ha->h), h);
      CHECK_MESSAGE(eh.within(bf16_tol(2)), "H: " << eh);
      const auto ea = compare(back(ha->a), h.unaryExpr([](double v) { return nn::GeluTanh{}(v); }));
      CHECK_MESSAGE(ea.within(bf16_tol(2)), "GeLU(H): " << ea);
    } else {
      CHECK_FALSE(ha.has_value());  // the pre-activation's leading dimension must be a multiple of 8
    }
    auto g = FGl::gemm_wgrad_bgrad(dev<bf16>(x), dev<bf16>(dy));
    REQUIRE_MESSAGE(g.has_value(), "cuBLASLt took no BGRADA epilogue");
    const auto ew = compare(back(g->dw), x.transpose() * dy);
    CHECK_MESSAGE(ew.within(bf16_tol(1)), "Xᵀ·dY: " << ew);
    const auto eb = compare(back(g->db), dy.colwise().sum());
    CHECK_MESSAGE(eb.within(bf16_tol(1)), "Σ_rows dY: " << eb);
  }
  // fp32 storage is not taken (the layers then run the GEMM and the bias pass)
  const MD x = input<float>(8, 8, 35);
  CHECK_FALSE(FGl::gemm_bias(dev<float>(x), dev<float>(x), dev<float>(x.topRows(1))).has_value());
  CHECK_FALSE(FGl::gemm_wgrad_bgrad(dev<float>(x), dev<float>(x)).has_value());
}

TEST_CASE("cuda: the memory pool reuses freed blocks and reports bytes in use and the peak") {
  cuda::current().synchronize();
  const auto before = cuda::memory_stats();
  cuda::reset_memory_peak();
  constexpr Index n = 1 << 20;  // 4 MiB of float
  {
    cuda::DeviceMatrix<float> a(n, 1), b(n, 1);
    const auto live = cuda::memory_stats();
    CHECK_GE(live.in_use, before.in_use + 2 * n * sizeof(float));
    CHECK_GE(live.peak, live.in_use);
  }
  cuda::current().synchronize();
  const auto after = cuda::memory_stats();
  CHECK_EQ(after.in_use, before.in_use);                       // both blocks back in the pool
  CHECK_GE(after.peak, before.in_use + 2 * n * sizeof(float));  // the high-water mark saw them
  CHECK_GE(after.reserved, 2 * n * sizeof(float));              // kept, not returned to the device
  // A block made on one thread's context and destroyed on another's (the device is synchronised
  // first, allocator.hpp): no error, and the pool is back where it was.
  cuda::DeviceMatrix<float> moved(n, 1);
  moved.set_zero();
  std::thread([m = std::move(moved)]() mutable { cuda::DeviceMatrix<float> gone = std::move(m); }).join();
  cuda::current().synchronize();
  CHECK_EQ(cuda::memory_stats().in_use, before.in_use);
}

TEST_CASE_TEMPLATE("cuda: nn::Kernels<CudaBackend> equals nn::Kernels<CpuBackend> (double reference)", T, float, double) {
  kernels_match_cpu<T>();  // on this thread's default context
}

TEST_CASE("cuda: the dropout mask is the CPU's Philox mask bit for bit (offsets, fp32 and bf16)") {
  const Index R = 97, C = 131, r0 = 1000, c0 = 77;
  const double p = 0.37;
  const std::uint64_t seed = 0xFEEDULL << 32 | 5, tensor = nn::tensor_id(9, nn::TensorKind::dropout_mlp);
  const MD ones = MD::Ones(R, C);
  const MD yf = back(KG::dropout(dev<float>(ones), p, seed, tensor, r0, c0));
  const MD yb = back(KG::dropout(dev<bf16>(ones), p, seed, tensor, r0, c0));
  const float keep_f = static_cast<float>(1.0 / (1.0 - p));
  const double keep_b = static_cast<double>(static_cast<bf16>(keep_f));  // the kernel's fp32 scale, rounded
  Index mismatches = 0, kept = 0;
  for (Index i = 0; i < R; ++i)
    for (Index j = 0; j < C; ++j) {
      const bool keep = nn::dropout_uniform(seed, tensor, r0 + i, c0 + j) >= p;
      kept += keep;
      mismatches += yf(i, j) != (keep ? static_cast<double>(keep_f) : 0.0);
      mismatches += yb(i, j) != (keep ? keep_b : 0.0);
    }
  CHECK_EQ(mismatches, 0);
  CHECK(std::abs(static_cast<double>(kept) / static_cast<double>(R * C) - (1 - p)) < 0.02);
}
