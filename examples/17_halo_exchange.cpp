// 17 — Halo exchange: why a spatially sharded convolution is "efficient and low-volume" (seed 004's
// detour, after Dryden et al., IPDPS 2019), against a Megatron MLP of the same FLOPs.
//
//   conv, rows split   X[Row] →halo→ X[Row+halo];  im2col · W[R] → Y[Row]      2·⌊k/2⌋·W·C per interior rank
//   MLP, Megatron TP   X[R] · W1[C] → GeLU → · W2[Row] → Z[Partial] →all_reduce→ Z[R]   2(P−1)/P · T·h per rank
//
//   17_halo_exchange [--tp 4] [--height 16] [--width 16] [--channels 8] [--kernel 3]   Part 1, measured
//                    [--image 56] [--image-channels 256]                                Part 2, computed
#include <cstdio>
#include <string>
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

int main(int argc, char** argv) {
  int P = 4;
  Index H = 16, W = 16, C = 8, k = 3;
  double image = 56, image_channels = 256;
  const example::Flags flags("17_halo_exchange", argc, argv,
                             {{"tp", &P}, {"height", &H}, {"width", &W}, {"channels", &C}, {"kernel", &k}, {"image", &image},
                              {"image-channels", &image_channels}});
  flags.require(k % 2 == 1, "--kernel must be odd");
  flags.require(P >= 3 && H % P == 0 && H / P >= k / 2,
                "--height must be divisible by --tp (≥ 3: an interior rank), with at least ⌊k/2⌋ rows per rank");
  flags.require((H * W * k * k) % 8 == 0 && (4 * C) % P == 0, "H·W·k² must be a multiple of 8 and 4·channels divisible by --tp");
  flags.require(image >= 8 && image_channels >= 1, "--image must be at least 8 (rows for 8 ranks) and --image-channels positive");
  // ---- Part 1: measured, on P thread ranks ------------------------------------------------------
  const Index r = k / 2;
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
  std::string fwd_list, bwd_list;
  for (int q = 0; q < P; ++q) fwd_list += " " + std::to_string(halo_fwd[q]), bwd_list += " " + std::to_string(halo_bwd[q]);
  std::printf("  halo bytes sent per rank (ledger), forward:%s; backward (halo reduction):%s\n", fwd_list.c_str(),
              bwd_list.c_str());
  const std::size_t halo_formula = static_cast<std::size_t>(2 * r * W * C * 8);  // 2·⌊k/2⌋·W·C elements
  std::printf("  interior rank, formula 2·⌊k/2⌋·W·C·8 B = 2·%lld·%lld·%lld·8 = %zu; edge ranks half of it\n", (long long)r,
              (long long)W, (long long)C, halo_formula);
  bool halos_ok = halo_bwd == halo_fwd && conv_other == 0;
  for (int q = 0; q < P; ++q) halos_ok = halos_ok && halo_fwd[q] == (q == 0 || q == P - 1 ? halo_formula / 2 : halo_formula);
  example::check(halos_ok, "the ledger's halo bytes are the formula's, forward and backward; no collective in either pass");
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
  const double ring_formula = 2.0 * (P - 1) / P * static_cast<double>(T * h * 8);
  example::check(example::close(ring, ring_formula, 1e-12) &&
                     example::close(ring / static_cast<double>(halo_fwd[1]), ring_formula / static_cast<double>(halo_formula), 1e-12),
                 example::fmt("%s B against %s B: %.4gx", example::grouped(std::llround(ring_formula)).c_str(),
                              example::grouped(static_cast<long long>(halo_formula)).c_str(), ring_formula / halo_formula));

  // ---- Part 2: computed, a realistic layer ---------------------------------------------------------
  const double BH = image, BW = image, BC = image_channels, Bk = 3, bytes = 2;  // fp16
  const double Bh = BC, BT = BH * BW * Bk * Bk / 8;              // 3528 tokens
  const double Bcf = conv_flops(1, BH, BW, Bk, BC, BC), Bmf = mlp_flops(BT, Bh);
  std::printf("\nPart 2, computed: a 3x3 convolution, %.0f -> %.0f channels, one %.0fx%.0f image, fp16 (2 B);\n"
              "the MLP of the same FLOPs: h = %.0f, ffn %.0f, T = %.0f·%.0f·9/8 = %.0f tokens\n",
              BC, BC, BH, BW, Bh, 4 * Bh, BH, BW, BT);
  example::check(example::close(Bcf, Bmf, 1e-12) && Bcf == 2 * BH * BW * 9 * BC * BC,
                 "forward FLOPs " + example::grouped(std::llround(2 * BH * BW * 9 * BC * BC)) + " each");
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
  // The formulas written out: halo 2·1·W·C·2 B; ring all-reduce 2(P−1)/P of T·h·2 B at P = 4.
  const double Bhalo_f = 2 * 1 * BW * BC * 2, ar4_f = 2.0 * 3 / 4 * BT * Bh * 2;
  example::check(Bhalo == Bhalo_f && example::close(ar4, ar4_f, 1e-12) && example::close(ratio4, ar4_f / Bhalo_f, 1e-12),
                 example::fmt("P = 4: halo %s B against %s B per pass and rank (%.4gx)", example::grouped(std::llround(Bhalo_f)).c_str(),
                              example::grouped(std::llround(ar4_f)).c_str(), ar4_f / Bhalo_f));

  // Per training step at P = 4: both passes, plus the conv's weight-gradient all-reduce.
  const double wgrad = cost::all_reduce_bytes_per_rank((Bk * Bk * BC * BC + BC) * bytes, 4);
  const double wgrad_f = 2.0 * 3 / 4 * (9 * BC * BC + BC) * 2;  // dW and db, fp16, ring at P = 4
  std::printf("\nper training step at P = 4 (forward + backward + gradient reduction), per rank:\n");
  for (const double n : {1.0, 8.0}) {
    const double conv_step = n * 2 * Bhalo + wgrad, mlp_step = n * 2 * ar4;
    std::printf("  N = %.0f image(s): conv %.0f B (halos %.0f + dW, db all-reduce %.0f);  MLP %.0f B;  %.1fx\n", n,
                conv_step, n * 2 * Bhalo, wgrad, mlp_step, mlp_step / conv_step);
    if (n == 1) {
      const double conv_f = 2 * Bhalo_f + wgrad_f, mlp_f = 2 * ar4_f;
      example::check(example::close(wgrad, wgrad_f, 1e-12) && example::close(conv_step, conv_f, 1e-12) &&
                         example::close(mlp_step, mlp_f, 1e-12),
                     example::fmt("one image: %s B against %s B (%.2gx)%s", example::grouped(std::llround(conv_f)).c_str(),
                                  example::grouped(std::llround(mlp_f)).c_str(), mlp_f / conv_f,
                                  wgrad_f > 2 * Bhalo_f ? ": the replicated weights' all-reduce dominates" : ""));
    }
  }
  return example::finish("17_halo_exchange");
}
