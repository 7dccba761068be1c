// 17 — Halo exchange: why a spatially sharded convolution is "efficient and low-volume" (seed 004's
// detour, after Dryden et al., IPDPS 2019), against a Megatron MLP of the same FLOPs.
//
//   conv, rows split   X[Row] →halo→ X[Row+halo];  im2col · W[R] → Y[Row]      2·⌊k/2⌋·W·C per interior rank
//   MLP, Megatron TP   X[R] · W1[C] → GeLU → · W2[Row] → Z[Partial] →all_reduce→ Z[R]   2(P−1)/P · T·h per rank
#include <cstdio>
#include <vector>

#include "check.hpp"
#include "shardalg/collective/halo.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/nn/layers/conv2d.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/reference/conv2d.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
namespace cost = shardalg::cost;
using Mat = CpuBackend::matrix<double>;

namespace {
/// Forward FLOPs of a k×k convolution on N images of H×W (C_in → C_out) and of a Megatron MLP
/// (fc1 h → 4h, fc2 4h → h) on T tokens: 2 per multiply-add, bias and activation left out.
double conv_flops(double n, double h, double w, double k, double cin, double cout) { return 2 * n * h * w * k * k * cin * cout; }
double mlp_flops(double t, double h) { return 2 * t * h * (4 * h) + 2 * t * (4 * h) * h; }
}  // namespace

int main() {
  const int P = 4;
  // ---- Part 1: measured, on 4 thread ranks ------------------------------------------------------
  const Index H = 16, W = 16, C = 8, k = 3, r = k / 2;
  const Index h = C, T = H * W * k * k * C * C / (8 * h * h);  // the MLP of the same FLOPs: 288 tokens
  const nn::Conv2dShape shape{.height = H, .width = W, .in_channels = C, .out_channels = C, .kernel = k};
  const Mat X = example::matrix(H, W * C, 170), Wt = 0.2 * example::matrix(k * k * C, C, 171),
            b = example::matrix(1, C, 172), dY = example::matrix(H, W * C, 173);
  const Mat Xm = example::matrix(T, h, 174), dZ = example::matrix(T, h, 175);
  const ref::ConvDims dims{1, H, W, C, C, k};
  const ref::M Yref = ref::conv2d(X, Wt, b, dims);
  const auto Gref = ref::conv2d_backward(X, Wt, dY, dims);

  std::vector<std::size_t> halo_fwd(P), halo_bwd(P);
  std::size_t grad_ar = 0, grad_ar_elements = 0, mlp_fwd_ar = 0, mlp_bwd_ar = 0, mlp_fwd_el = 0, mlp_bwd_el = 0;
  std::size_t conv_other = 0;
  ErrorReport ey, edx, edw;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger ledger;
    const Group g = ledgered(comm, ledger);
    auto conv = nn::Conv2d<double>::from_dense(shape, Wt, &b, g);
    nn::Conv2d<double>::Forward f;
    nn::Conv2d<double>::Grads gr;
    nn::Conv2d<double>::ReducedGrads red;
    {
      auto s = ledger.scope("conv.fwd");
      f = conv.forward(shard<RowSharded>(X, g));
    }
    {
      auto s = ledger.scope("conv.bwd");
      gr = conv.backward(f.cache, shard<RowSharded>(dY, g));
    }
    {
      auto s = ledger.scope("conv.grads");
      red = nn::Conv2d<double>::reduce_grads(gr.params);
    }
    const auto mlp = nn::Mlp<double>::init({h, 4 * h, nn::Activation::gelu_tanh, true}, g, {});
    nn::Mlp<double>::Forward fm;
    {
      auto s = ledger.scope("mlp.fwd");
      fm = mlp.forward(shard<Replicated>(Xm, g));
    }
    {
      auto s = ledger.scope("mlp.bwd");
      (void)mlp.backward(fm.cache, shard<Replicated>(dZ, g));
    }
    const auto e1 = compare(f.y, Yref), e2 = compare(gr.dx, Gref.dx), e3 = compare(red.dw, Gref.dw);
    halo_fwd[comm.rank()] = halo_bytes(ledger, "conv.fwd");
    halo_bwd[comm.rank()] = halo_bytes(ledger, "conv.bwd");
    if (comm.rank() == 0) {
      ey = e1, edx = e2, edw = e3;
      for (const char* sc : {"conv.fwd", "conv.bwd"})
        for (const auto& e : ledger.select(sc)) conv_other += e.kind != CollectiveKind::halo && e.kind != CollectiveKind::recv;
      grad_ar = ledger.count(CollectiveKind::all_reduce, "conv.grads");
      for (const auto& e : ledger.select("conv.grads")) grad_ar_elements += e.elements;
      mlp_fwd_ar = ledger.count(CollectiveKind::all_reduce, "mlp.fwd");
      mlp_bwd_ar = ledger.count(CollectiveKind::all_reduce, "mlp.bwd");
      for (const auto& e : ledger.select("mlp.fwd")) mlp_fwd_el += e.elements;
      for (const auto& e : ledger.select("mlp.bwd")) mlp_bwd_el += e.elements;
    }
  });

  std::printf("Part 1, measured on %d thread ranks (double, 8 B per element)\n\n", P);
  std::printf("conv %lldx%lld, %lld -> %lld channels, one %lldx%lld image, rows split %d ways (%lld rows per rank)\n",
              (long long)k, (long long)k, (long long)C, (long long)C, (long long)H, (long long)W, P, (long long)(H / P));
  const double cf = conv_flops(1, H, W, k, C, C), mf = mlp_flops(T, h);
  std::printf("  forward FLOPs 2·H·W·k²·C_in·C_out = %.0f\n", cf);
  std::printf("  against the direct-loop convolution: y %.2g, dX %.2g, dW %.2g (normwise relative)\n", ey.max_rel,
              edx.max_rel, edw.max_rel);
  example::check(ey.max_rel < 1e-12 && edx.max_rel < 1e-12 && edw.max_rel < 1e-12,
                 "forward and gradients equal the dense convolution");
  std::printf("  halo bytes sent per rank (ledger), forward: %zu %zu %zu %zu; backward (halo reduction): %zu %zu %zu %zu\n",
              halo_fwd[0], halo_fwd[1], halo_fwd[2], halo_fwd[3], halo_bwd[0], halo_bwd[1], halo_bwd[2], halo_bwd[3]);
  const std::size_t halo_formula = static_cast<std::size_t>(2 * r * W * C * 8);  // 2·⌊k/2⌋·W·C elements
  std::printf("  interior rank, formula 2·⌊k/2⌋·W·C·8 B = 2·%lld·%lld·%lld·8 = %zu; edge ranks half of it\n", (long long)r,
              (long long)W, (long long)C, halo_formula);
  example::check(halo_fwd[1] == halo_formula && halo_fwd[2] == halo_formula && halo_fwd[0] == halo_formula / 2 &&
                     halo_fwd[3] == halo_formula / 2 && halo_bwd == halo_fwd && conv_other == 0,
                 "the ledger's halo bytes are the formula's, forward and backward; no collective in either pass");
  std::printf("  once per step: %zu all_reduce of dW[Partial], db[Partial] (k²·C_in·C_out + C_out = %zu values)\n",
              grad_ar, grad_ar_elements);
  example::check(grad_ar == 2 && grad_ar_elements == static_cast<std::size_t>(k * k * C * C + C),
                 "the replicated weights' gradient: one all-reduce each for dW and db");

  std::printf("\nMegatron MLP of the same FLOPs: h = C = %lld, ffn 4h = %lld, T = H·W·k²/8 = %lld tokens\n", (long long)h,
              (long long)(4 * h), (long long)T);
  std::printf("  forward FLOPs 16·T·h² = %.0f\n", mf);
  example::check(cf == mf, "the same forward FLOPs");
  const double V = static_cast<double>(T * h * 8);
  const double ring = cost::all_reduce_bytes_per_rank(V, P);
  std::printf("  ledger: %zu all_reduce of %zu values forward (g), %zu of %zu backward (f's adjoint); V = T·h·8 = %.0f B\n",
              mlp_fwd_ar, mlp_fwd_el, mlp_bwd_ar, mlp_bwd_el, V);
  std::printf("  ring traffic per rank 2(P−1)/P·V = %.0f B per pass\n", ring);
  example::check(mlp_fwd_ar == 1 && mlp_bwd_ar == 1 && mlp_fwd_el == static_cast<std::size_t>(T * h) &&
                     mlp_bwd_el == static_cast<std::size_t>(T * h),
                 "one all-reduce of T·h per pass");
  std::printf("per pass and rank: halo %zu B against all-reduce %.0f B: %.1fx fewer bytes\n", halo_formula, ring,
              ring / static_cast<double>(halo_fwd[1]));
  example::check(ring == 27648.0 && ring / static_cast<double>(halo_fwd[1]) == 13.5, "27,648 B against 2,048 B: 13.5x");

  // ---- Part 2: computed, a realistic layer ---------------------------------------------------------
  const double BH = 56, BW = 56, BC = 256, Bk = 3, bytes = 2;  // fp16
  const double Bh = BC, BT = BH * BW * Bk * Bk / 8;              // 3528 tokens
  const double Bcf = conv_flops(1, BH, BW, Bk, BC, BC), Bmf = mlp_flops(BT, Bh);
  std::printf("\nPart 2, computed: a 3x3 convolution, 256 -> 256 channels, one 56x56 image, fp16 (2 B);\n"
              "the MLP of the same FLOPs: h = 256, ffn 1024, T = 56·56·9/8 = %.0f tokens\n",
              BT);
  example::check(Bcf == Bmf && Bcf == 3699376128.0, "forward FLOPs 3,699,376,128 each");
  std::printf("\n");
  const double Bhalo = 2 * (Bk - 1) / 2 * BW * BC * bytes;  // 2·⌊k/2⌋·W·C·2 B, the same at every P
  std::printf("   P  rows/rank  halo/pass (interior)  MLP all-reduce/pass   ratio   FLOP per byte: conv    MLP\n");
  double ratio4 = 0, ar4 = 0;
  for (const int p : {2, 4, 8}) {
    const double ar = cost::all_reduce_bytes_per_rank(BT * Bh * bytes, p);
    std::printf("  %2d  %9.0f  %18.0f B  %17.0f B  %6.2fx  %19.0f  %5.0f\n", p, BH / p, Bhalo, ar, ar / Bhalo,
                Bcf / p / Bhalo, Bmf / p / ar);
    if (p == 4) ratio4 = ar / Bhalo, ar4 = ar;
  }
  example::check(Bhalo == 57344.0 && ar4 == 2709504.0 && ratio4 == 47.25,
                 "P = 4: halo 57,344 B against 2,709,504 B per pass and rank (47.25x)");

  // Per training step at P = 4: both passes, plus the conv's weight-gradient all-reduce.
  const double wgrad = cost::all_reduce_bytes_per_rank((Bk * Bk * BC * BC + BC) * bytes, 4);
  std::printf("\nper training step at P = 4 (forward + backward + gradient reduction), per rank:\n");
  for (const double n : {1.0, 8.0}) {
    const double conv_step = n * 2 * Bhalo + wgrad, mlp_step = n * 2 * ar4;
    std::printf("  N = %.0f image(s): conv %.0f B (halos %.0f + dW, db all-reduce %.0f);  MLP %.0f B;  %.1fx\n", n,
                conv_step, n * 2 * Bhalo, wgrad, mlp_step, mlp_step / conv_step);
    if (n == 1) example::check(wgrad == 1770240.0 && conv_step == 1884928.0 && mlp_step == 5419008.0,
                               "one image: 1,884,928 B against 5,419,008 B (2.9x): the replicated weights' all-reduce dominates");
  }
  return example::finish("17_halo_exchange");
}
