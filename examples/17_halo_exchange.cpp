// 17 — Halo exchange: why a spatially sharded convolution is "efficient and low-volume" (seed 004's
// detour, after Dryden et al., IPDPS 2019), against an MLP of the same FLOPs split the same way.
//
// The conv splits the data (image rows) and replicates the weights; its like for like is the MLP
// with its tokens split and its weights replicated (data parallelism inside one layer). The
// Megatron MLP, which splits the weights instead, is the third column.
//
//   conv, rows split    X[Row] →halo→ X̃[Row+halo]; im2col · W[R] → Y[Row]   2·⌊k/2⌋·W·C per pass, interior rank
//                       dW, db [Partial] →all_reduce→ R                      k²·C_in·C_out + C_out once per step
//   MLP, tokens split   X[Row] · W1[R] → GeLU → · W2[R] → Z[Row]             nothing per pass
//                       dW1, db1, dW2, db2 [Partial] →all_reduce→ R          8h² + 5h once per step
//   MLP, Megatron TP    X[R] · W1[C] → GeLU → · W2[Row] → Z[Partial] →all_reduce→ Z[R]   T·h per pass
//   (a ring all-reduce of V values sends 2(P−1)/P·V per rank)
//
//   17_halo_exchange [--tp 4] [--height 16] [--width 16] [--channels 8] [--kernel 3]   Part 1, measured
//                    [--image 56] [--image-channels 256]                                Part 2, computed
#include <cstdio>
#include <string>
#include <type_traits>
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
/// Forward FLOPs of a k×k convolution on N images of H×W (C_in → C_out) and of an MLP
/// (fc1 h → 4h, fc2 4h → h) on T tokens: 2 per multiply-add, bias and activation left out.
double conv_flops(double n, double h, double w, double k, double cin, double cout) { return 2 * n * h * w * k * k * cin * cout; }
double mlp_flops(double t, double h) { return 2 * t * h * (4 * h) + 2 * t * (4 * h) * h; }

/// The MLP on all T tokens in plain Eigen: Z, and the gradients of ⟨Z, dZ⟩.
struct DenseMlp {
  Mat z, dx, dw1, db1, dw2, db2;
};
DenseMlp dense_mlp(const Mat& x, const Mat& w1, const Mat& b1, const Mat& w2, const Mat& b2, const Mat& dz) {
  const Mat hh = (x * w1).rowwise() + b1.row(0);
  const Mat a = hh.unaryExpr([](double v) { return example::gelu(v); });
  DenseMlp r;
  r.z = (a * w2).rowwise() + b2.row(0);
  const Mat dh = (dz * w2.transpose()).cwiseProduct(hh.unaryExpr([](double v) { return example::gelu_grad(v); }));
  r.dw2 = a.transpose() * dz;
  r.db2 = dz.colwise().sum();
  r.dw1 = x.transpose() * dh;
  r.db1 = dh.colwise().sum();
  r.dx = dh * w1.transpose();
  return r;
}
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
  flags.require((H * W * k * k) % (8 * P) == 0 && (4 * C) % P == 0,
                "H·W·k² must be a multiple of 8·tp (the MLP's tokens, split over the ranks) and 4·channels divisible by --tp");
  flags.require(image >= 8 && image_channels >= 1, "--image must be at least 8 (rows for 8 ranks) and --image-channels positive");
  // ---- Part 1: measured, on P thread ranks ------------------------------------------------------
  const Index r = k / 2;
  const Index h = C, T = H * W * k * k * C * C / (8 * h * h);  // the MLP of the same FLOPs: 288 tokens
  const nn::Conv2dShape shape{.height = H, .width = W, .in_channels = C, .out_channels = C, .kernel = k};
  const Mat X = example::matrix(H, W * C, 170), Wt = 0.2 * example::matrix(k * k * C, C, 171),
            b = example::matrix(1, C, 172), dY = example::matrix(H, W * C, 173);
  const Mat Xm = example::matrix(T, h, 174), dZ = example::matrix(T, h, 175);
  const Mat W1 = 0.3 * example::matrix(h, 4 * h, 176), b1 = 0.1 * example::matrix(1, 4 * h, 177),
            W2 = 0.3 * example::matrix(4 * h, h, 178), b2 = 0.1 * example::matrix(1, h, 179);
  const ref::ConvDims dims{1, H, W, C, C, k};
  const ref::M Yref = ref::conv2d(X, Wt, b, dims);
  const auto Gref = ref::conv2d_backward(X, Wt, dY, dims);
  const DenseMlp Mref = dense_mlp(Xm, W1, b1, W2, b2, dZ);

  std::vector<std::size_t> halo_fwd(P), halo_bwd(P);
  std::size_t grad_ar = 0, grad_ar_elements = 0, mlp_fwd_ar = 0, mlp_bwd_ar = 0, mlp_fwd_el = 0, mlp_bwd_el = 0;
  std::size_t conv_other = 0, split_pass = 0, split_pass_bytes = 0, split_ar = 0, split_ar_elements = 0;
  ErrorReport ey, edx, edw, sz, sdx, sdw1, sdb1, sdw2, sdb2;
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
    // The MLP with its tokens split: X[Row], every weight replicated; no layer class, the core ops.
    const auto x = shard<RowSharded>(Xm, g);
    const auto dz = shard<RowSharded>(dZ, g);
    const auto w1 = shard<Replicated>(W1, g), c1 = shard<Replicated>(b1, g);
    const auto w2 = shard<Replicated>(W2, g), c2 = shard<Replicated>(b2, g);
    Sharded<double, RowSharded> hm, am, zm, dh, dxm;
    Sharded<double, Partial> dw1p, db1p, dw2p, db2p;
    Sharded<double, Replicated> dw1, db1, dw2, db2;
    {
      auto s = ledger.scope("split.fwd");
      hm = add_bias(matmul(x, w1), c1);   // X[Row] · W1[R] → H[Row]
      am = map(hm, nn::GeluTanh{});       // A[Row]
      zm = add_bias(matmul(am, w2), c2);  // A[Row] · W2[R] → Z[Row]: no collective
    }
    {
      auto s = ledger.scope("split.bwd");
      dw2p = matmul(transpose(am), dz);  // Aᵀ[C] · dZ[Row] → dW2[Partial]: my tokens' share
      db2p = col_sum(dz);                // → db2[Partial]
      dh = hadamard(matmul(dz, transpose(w2)), map(hm, nn::GeluTanhGrad{}));  // dZ[Row] · W2ᵀ[R] → dA[Row] ⊙ GeLU′(H)
      dw1p = matmul(transpose(x), dh);  // Xᵀ[C] · dH[Row] → dW1[Partial]
      db1p = col_sum(dh);
      dxm = matmul(dh, transpose(w1));  // dX[Row]: no collective
    }
    {
      auto s = ledger.scope("split.grads");  // once per step, as the conv's: data parallelism's all-reduce
      dw1 = all_reduce(std::move(dw1p)), db1 = all_reduce(std::move(db1p));
      dw2 = all_reduce(std::move(dw2p)), db2 = all_reduce(std::move(db2p));
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
    const auto m1 = compare(zm, Mref.z), m2 = compare(dxm, Mref.dx), m3 = compare(dw1, Mref.dw1), m4 = compare(db1, Mref.db1),
               m5 = compare(dw2, Mref.dw2), m6 = compare(db2, Mref.db2);
    halo_fwd[comm.rank()] = halo_bytes(ledger, "conv.fwd");
    halo_bwd[comm.rank()] = halo_bytes(ledger, "conv.bwd");
    if (comm.rank() == 0) {
      ey = e1, edx = e2, edw = e3;
      sz = m1, sdx = m2, sdw1 = m3, sdb1 = m4, sdw2 = m5, sdb2 = m6;
      for (const char* sc : {"conv.fwd", "conv.bwd"})
        for (const auto& e : ledger.select(sc)) conv_other += e.kind != CollectiveKind::halo && e.kind != CollectiveKind::recv;
      grad_ar = ledger.count(CollectiveKind::all_reduce, "conv.grads");
      for (const auto& e : ledger.select("conv.grads")) grad_ar_elements += e.elements;
      split_pass = ledger.count("split.fwd") + ledger.count("split.bwd");
      split_pass_bytes = ledger.bytes("split.fwd") + ledger.bytes("split.bwd");
      split_ar = ledger.count(CollectiveKind::all_reduce, "split.grads");
      for (const auto& e : ledger.select("split.grads")) split_ar_elements += e.elements;
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

  std::printf("\nMLP of the same FLOPs: h = C = %lld, ffn 4h = %lld, T = H·W·k²/8 = %lld tokens\n", (long long)h,
              (long long)(4 * h), (long long)T);
  std::printf("  forward FLOPs 16·T·h² = %.0f\n", mf);
  example::check(cf == mf, "the same forward FLOPs");

  std::printf("\nMLP, tokens split %d ways (%lld per rank), W1, b1, W2, b2 replicated: the conv's split, on tokens\n", P,
              (long long)(T / P));
  std::printf("  against plain Eigen on all %lld tokens: Z %.2g, dX %.2g, dW1 %.2g, db1 %.2g, dW2 %.2g, db2 %.2g\n", (long long)T,
              sz.max_rel, sdx.max_rel, sdw1.max_rel, sdb1.max_rel, sdw2.max_rel, sdb2.max_rel);
  example::check(sz.within(1e-12) && sdx.within(1e-12) && sdw1.within(1e-12) && sdb1.within(1e-12) && sdw2.within(1e-12) &&
                     sdb2.within(1e-12),
                 "forward and gradients equal the dense MLP");
  std::printf("  ledger: %zu collectives forward and backward; once per step %zu all_reduce of dW1, db1, dW2, db2\n"
              "  (8h² + 5h = %zu values)\n",
              split_pass, split_ar, split_ar_elements);
  example::check(split_pass == 0 && split_ar == 4 && split_ar_elements == static_cast<std::size_t>(8 * h * h + 5 * h),
                 "no communication in either pass; the weights' gradient is one all-reduce of 8h² + 5h values");

  // Megatron's weight gradients come out in the weights' own layouts, dW1[C] and dW2[Row], not Partial:
  // there is nothing to all-reduce (the static_assert fails if either becomes Partial).
  using TpGrads = nn::Mlp<double>::ParamGrads;
  static_assert(std::is_same_v<decltype(TpGrads{}.fc1.dw), Sharded<double, ColSharded>> &&
                std::is_same_v<decltype(TpGrads{}.fc2.dw), Sharded<double, RowSharded>>);
  std::printf("\nMLP, Megatron TP over %d ranks (X[R], W1[C], W2[Row]): the weights split, the tokens not\n", P);
  const double V = static_cast<double>(T * h * 8);
  const double ring = cost::all_reduce_bytes_per_rank(V, P);
  std::printf("  ledger: %zu all_reduce of %zu values forward (g), %zu of %zu backward (f's adjoint); V = T·h·8 = %.0f B\n",
              mlp_fwd_ar, mlp_fwd_el, mlp_bwd_ar, mlp_bwd_el, V);
  std::printf("  ring traffic per rank 2(P−1)/P·V = %.0f B per pass; no weight gradient to reduce (each rank's is its shard's)\n",
              ring);
  example::check(mlp_fwd_ar == 1 && mlp_bwd_ar == 1 && mlp_fwd_el == static_cast<std::size_t>(T * h) &&
                     mlp_bwd_el == static_cast<std::size_t>(T * h),
                 "one all-reduce of T·h per pass");

  // Per training step, bytes a rank sends: the ledger's counts (the halo as sent by an interior
  // rank; an all-reduce's V through the ring factor) beside the closed forms written out.
  const double f8 = 2.0 * (P - 1) / P * 8;  // ring factor × 8 B
  const double conv_act = static_cast<double>(halo_fwd[1] + halo_bwd[1]),
               conv_grad = cost::all_reduce_bytes_per_rank(static_cast<double>(grad_ar_elements * 8), P);
  const double split_grad = cost::all_reduce_bytes_per_rank(static_cast<double>(split_ar_elements * 8), P);
  const double tp_act = cost::all_reduce_bytes_per_rank(static_cast<double>(mlp_fwd_el * 8), P) +
                        cost::all_reduce_bytes_per_rank(static_cast<double>(mlp_bwd_el * 8), P);
  const double conv_act_f = 2.0 * 2 * r * W * C * 8, conv_grad_f = f8 * static_cast<double>(k * k * C * C + C);
  const double split_grad_f = f8 * static_cast<double>(8 * h * h + 5 * h), tp_act_f = 2 * f8 * static_cast<double>(T * h);
  std::printf("\nper training step and rank (forward, backward, the gradient all-reduce), ledger:\n");
  std::printf("                     activations   weight gradients       total\n");
  std::printf("  conv, rows split    %9.0f B        %9.0f B   %9.0f B\n", conv_act, conv_grad, conv_act + conv_grad);
  std::printf("  MLP, tokens split   %9.0f B        %9.0f B   %9.0f B\n", static_cast<double>(split_pass_bytes), split_grad,
              static_cast<double>(split_pass_bytes) + split_grad);
  std::printf("  MLP, Megatron TP    %9.0f B        %9.0f B   %9.0f B\n", tp_act, 0.0, tp_act);
  example::check(conv_act == conv_act_f && example::close(conv_grad, conv_grad_f, 1e-12) &&
                     example::close(split_grad, split_grad_f, 1e-12) && example::close(tp_act, tp_act_f, 1e-12),
                 example::fmt("the closed forms: conv 2·2·%lld·%lld·%lld·8 + 2(P−1)/P·%lld·8, split 2(P−1)/P·%lld·8, TP 2·2(P−1)/P·%lld·8",
                              (long long)r, (long long)W, (long long)C, (long long)(k * k * C * C + C),
                              (long long)(8 * h * h + 5 * h), (long long)(T * h)));

  // ---- Part 2: computed, a realistic layer ---------------------------------------------------------
  const double BH = image, BW = image, BC = image_channels, Bk = 3, bytes = 2;  // fp16
  const double Bh = BC, BT = BH * BW * Bk * Bk / 8;              // 3528 tokens
  const double Bcf = conv_flops(1, BH, BW, Bk, BC, BC), Bmf = mlp_flops(BT, Bh);
  std::printf("\nPart 2, computed: a 3x3 convolution, %.0f -> %.0f channels, one %.0fx%.0f image, fp16 (2 B);\n"
              "the MLP of the same FLOPs: h = %.0f, ffn %.0f, T = %.0f·%.0f·9/8 = %.0f tokens\n",
              BC, BC, BH, BW, Bh, 4 * Bh, BH, BW, BT);
  example::check(example::close(Bcf, Bmf, 1e-12) && Bcf == 2 * BH * BW * 9 * BC * BC,
                 "forward FLOPs " + example::grouped(std::llround(2 * BH * BW * 9 * BC * BC)) + " each");
  const double Bhalo = 2 * (Bk - 1) / 2 * BW * BC * bytes;  // 2·⌊k/2⌋·W·C·2 B per pass, the same at every P
  const double Bconv_w = (Bk * Bk * BC * BC + BC) * bytes, Bsplit_w = (8 * Bh * Bh + 5 * Bh) * bytes, Bact = BT * Bh * bytes;
  std::printf("\nper training step and rank, one image (halos: interior rank, both passes):\n");
  std::printf("   P  rows/rank   conv: halos  + dW, db all-reduce  =      total   MLP tokens split   MLP Megatron TP\n");
  double c4 = 0, s4 = 0, t4 = 0;
  for (const int p : {2, 4, 8}) {
    const double cw = cost::all_reduce_bytes_per_rank(Bconv_w, p), sw = cost::all_reduce_bytes_per_rank(Bsplit_w, p),
                 ta = 2 * cost::all_reduce_bytes_per_rank(Bact, p);
    std::printf("  %2d  %9.0f  %11.0f B  %17.0f B  %11.0f B  %15.0f B  %14.0f B\n", p, BH / p, 2 * Bhalo, cw, 2 * Bhalo + cw, sw, ta);
    if (p == 4) c4 = 2 * Bhalo + cw, s4 = sw, t4 = ta;
  }
  // The formulas written out at P = 4 (ring factor 2·3/4), fp16: halo 2·1·W·C·2 B per pass.
  const double c4_f = 2 * (2 * 1 * BW * BC * 2) + 2.0 * 3 / 4 * (9 * BC * BC + BC) * 2,
               s4_f = 2.0 * 3 / 4 * (8 * Bh * Bh + 5 * Bh) * 2, t4_f = 2 * (2.0 * 3 / 4 * BT * Bh * 2);
  example::check(example::close(c4, c4_f, 1e-12) && example::close(s4, s4_f, 1e-12) && example::close(t4, t4_f, 1e-12),
                 example::fmt("P = 4: conv %s B, %.3gx the token split's %s B; Megatron TP %s B",
                              example::grouped(std::llround(c4_f)).c_str(), c4_f / s4_f,
                              example::grouped(std::llround(s4_f)).c_str(), example::grouped(std::llround(t4_f)).c_str()));

  std::printf("\nwith N images per step at P = 4 (the MLPs on N·T tokens): the halos and TP's all-reduces grow N-fold,\n"
              "the weight gradients do not\n");
  for (const double n : {1.0, 8.0}) {
    const double cw = cost::all_reduce_bytes_per_rank(Bconv_w, 4), sw = cost::all_reduce_bytes_per_rank(Bsplit_w, 4),
                 ta = 2 * cost::all_reduce_bytes_per_rank(n * Bact, 4);
    std::printf("  N = %.0f: conv %.0f B (halos %.0f), tokens split %.0f B, Megatron TP %.0f B\n", n, n * 2 * Bhalo + cw,
                n * 2 * Bhalo, sw, ta);
  }
  // Token split against Megatron TP: 2(P−1)/P·(8h² + 5h) against 2·2(P−1)/P·T·h, equal at T = 4h + 5/2.
  const double crossover = 4 * Bh + 2.5;
  std::printf("  tokens split against Megatron TP: 8h² + 5h values once per step against 2·T·h; the split sends less\n"
              "  above T = 4h + 5/2 = %.1f tokens (here %.0f per image)\n",
              crossover, BT);
  example::check((s4 < t4) == (BT > crossover),
                 BT > crossover ? "above the crossover: the token split sends less than Megatron TP"
                                : "below the crossover: Megatron TP sends less than the token split");
  return example::finish("17_halo_exchange");
}
