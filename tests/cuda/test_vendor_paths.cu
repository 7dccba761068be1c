// What the CUDA set takes from the vendor libraries, and its own device plumbing: fused causal
// attention through cuDNN against the dense attention (and the problems it refuses, by name);
// the cuBLASLt epilogues (bias, bias + GeLU, bias gradient) against the dense products; the memory
// pool's reuse and statistics; the dropout mask against the CPU's Philox, bit for bit. The bf16
// tolerance model is layer_testing.hpp (derived in test_layers.cu).
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

#if defined(SHARDALG_WITH_CUDNN)

// Fused attention (cuDNN) against the dense double reference (Kernels<CpuBackend> on the same
// bf16 values), as test_layer_kernels.cu checks the unfused path. Bounds: n·u + 2⁻¹⁶ with n the bf16 roundings
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

