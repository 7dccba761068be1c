// 14 — One Megatron MLP written three ways: explicit collectives, requested layouts
// (matmul<To>, which inserts the planned collective), and the nn::Mlp layer. Equal results, equal
// ledgers, forward and backward.
//
//   explicit    H = matmul(X[R], W1[C]) → H[C];  Y = all_reduce(matmul(A[C], W2[Row]))   Partial → R
//   requested   H = matmul<ColSharded>(X, W1);   Y = matmul<Replicated>(A, W2)          plan: all_reduce
//   backward    adjoint::matmul(A, W2, dY) → {dA[C], dW2[Row]};  adjoint::matmul(X, W1, dH) → {dX[R], dW1[C]}
//               dX = dH[C] · W1ᵀ[Row] → Partial, planned into R: the one all_reduce (f's adjoint)
//
//   14_requested_layouts [--tp 4] [--tokens 16] [--hidden 8]      (ffn 4h)
#include <cstdio>
#include <string>

#include "check.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/shardalg.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

namespace {

struct Way {
  Mat y, dx, dw1, dw2;
  std::size_t fwd = 0, bwd = 0, fwd_bytes = 0, bwd_bytes = 0;
  std::string plans;
};

void tally(Way& w, const Ledger& l) {
  w.fwd = l.count("fwd");
  w.bwd = l.count("bwd");
  w.fwd_bytes = l.bytes(CollectiveKind::all_reduce, "fwd");
  w.bwd_bytes = l.bytes(CollectiveKind::all_reduce, "bwd");
}

}  // namespace

int main(int argc, char** argv) {
  int P = 4;
  Index T = 16, h = 8;
  const example::Flags flags("14_requested_layouts", argc, argv, {{"tp", &P}, {"tokens", &T}, {"hidden", &h}});
  const Index f = 4 * h;
  flags.require(f % P == 0, "ffn 4·hidden = " + std::to_string(f) + " must be divisible by --tp " + std::to_string(P));
  const Mat X = example::matrix(T, h, 20), W1 = example::matrix(h, f, 21), W2 = example::matrix(f, h, 22);
  const Mat G = example::matrix(T, h, 23);  // the cotangent dY
  const nn::GeluTanh act;
  const nn::GeluTanhGrad act_grad;

  // The dense twin.
  const Mat Hd = X * W1, Ad = Hd.unaryExpr([&](double v) { return act(v); });
  const Mat Yd = Ad * W2;
  const Mat dAd = G * W2.transpose(), dHd = dAd.cwiseProduct(Hd.unaryExpr([&](double v) { return act_grad(v); }));
  const Mat dXd = dHd * W1.transpose(), dW1d = X.transpose() * dHd, dW2d = Ad.transpose() * G;

  Way ex, rq, layer;
  run_ranks(P, [&](ThreadComm& comm) {
    const bool root = comm.rank() == 0;
    // 1. Explicit collectives: every one is a call you can grep.
    {
      Ledger l;
      Group g = ledgered(comm, l);
      auto x = shard<Replicated>(X, g);
      auto w1 = shard<ColSharded>(W1, g);
      auto w2 = shard<RowSharded>(W2, g);
      Sharded<double, ColSharded> hh, a;
      Sharded<double, Replicated> y;
      {
        auto s = l.scope("fwd");
        hh = matmul(copy_to(x), w1);       // f; X[R] · W1[C] → H[C]
        a = map(hh, act);                  // A[C]
        y = all_reduce(matmul(a, w2));     // A[C] · W2[Row] → Partial → R (g)
      }
      auto dy = shard<Replicated>(G, g);
      auto s = l.scope("bwd");
      auto da = matmul(dy, transpose(w2));                              // dY[R] · W2ᵀ[C] → C
      auto dw2 = matmul(transpose(a), dy);                              // Aᵀ[Row] · dY[R] → Row
      auto dh = hadamard(da, map(hh, act_grad));                        // C
      auto dx = adjoint::copy_to(matmul(dh, transpose(w1)));            // C · Row → Partial → R
      auto dw1 = matmul(transpose(x), dh);                              // Xᵀ[R] · dH[C] → C
      auto Y = to_dense(y), dX = to_dense(dx), dW1 = to_dense(dw1), dW2 = to_dense(dw2);
      if (root) ex = {Y, dX, dW1, dW2}, tally(ex, l);
    }
    // 2. Requested layouts: the planner inserts the collective the result layout needs.
    {
      Ledger l;
      Group g = ledgered(comm, l);
      auto x = shard<Replicated>(X, g);
      auto w1 = shard<ColSharded>(W1, g);
      auto w2 = shard<RowSharded>(W2, g);
      Sharded<double, ColSharded> hh, a;
      Sharded<double, Replicated> y;
      std::string plans;
      {
        auto s = l.scope("fwd");
        plans += "  H  = matmul<C>(X, W1):   " + plan::describe(matmul_plan<ColSharded>(x, w1), "X", "W1", "H") + "\n";
        hh = matmul<ColSharded>(x, w1);
        a = map(hh, act);
        plans += "  Y  = matmul<R>(A, W2):   " + plan::describe(matmul_plan<Replicated>(a, w2), "A", "W2", "Y") + "\n";
        y = matmul<Replicated>(a, w2);
      }
      auto dy = shard<Replicated>(G, g);
      auto s = l.scope("bwd");
      auto g2 = adjoint::matmul(a, w2, dy);                  // {dA[C], dW2[Row]}
      auto dh = hadamard(g2.da, map(hh, act_grad));
      plans += "  dX = matmul<R>(dH, W1ᵀ): " +
               plan::describe(matmul_plan<Replicated>(dh, transpose(w1)), "dH", "W1ᵀ", "dX") + "\n";
      auto g1 = adjoint::matmul(x, w1, dh);                  // {dX[R], dW1[C]}
      auto Y = to_dense(y), dX = to_dense(g1.da), dW1 = to_dense(g1.db), dW2 = to_dense(g2.db);
      if (root) rq = {Y, dX, dW1, dW2}, rq.plans = plans, tally(rq, l);
    }
    // 3. The layer.
    {
      Ledger l;
      Group g = ledgered(comm, l);
      const auto mlp = nn::Mlp<double>::from_dense(nn::MlpConfig{h, f, nn::Activation::gelu_tanh, false},
                                                   nn::MlpMasters<Mat>{&W1, nullptr, nullptr, nullptr, &W2, nullptr}, g);
      auto x = shard<Replicated>(X, g);
      auto fw = [&] {
        auto s = l.scope("fwd");
        return mlp.forward(x);
      }();
      auto dy = shard<Replicated>(G, g);
      auto gr = [&] {
        auto s = l.scope("bwd");
        return mlp.backward(fw.cache, dy);
      }();
      auto Y = to_dense(fw.z), dX = to_dense(gr.dx), dW1 = to_dense(gr.params.fc1.dw),
           dW2 = to_dense(gr.params.fc2.dw);
      if (root) layer = {Y, dX, dW1, dW2}, tally(layer, l);
    }
  });

  std::printf("MLP h=%lld → %lld → h, %lld tokens, TP=%d, GeLU (tanh), no bias\n\n", (long long)h, (long long)f,
              (long long)T, P);
  std::printf("plans chosen by matmul<To> (α-β model of cost/ plus the local GEMM's FLOPs):\n%s\n", rq.plans.c_str());
  std::printf("%-22s %10s %10s %14s %14s\n", "way", "fwd coll.", "bwd coll.", "fwd AR bytes", "bwd AR bytes");
  for (const auto& [name, w] : {std::pair<const char*, const Way*>{"explicit collectives", &ex},
                                {"matmul<To>", &rq}, {"nn::Mlp", &layer}})
    std::printf("%-22s %10zu %10zu %14zu %14zu\n", name, w->fwd, w->bwd, w->fwd_bytes, w->bwd_bytes);
  std::printf("\n");

  const auto rel = [](const Mat& a, const Mat& b) { return (a - b).norm() / b.norm(); };
  example::check(ex.fwd == 1 && ex.bwd == 1, "explicit: one all_reduce forward (g), one backward (f's adjoint)");
  example::check(rq.fwd == ex.fwd && rq.bwd == ex.bwd && rq.fwd_bytes == ex.fwd_bytes && rq.bwd_bytes == ex.bwd_bytes,
                 "matmul<To>: the same collectives and bytes as the explicit form");
  example::check(layer.fwd == ex.fwd && layer.bwd == ex.bwd && layer.fwd_bytes == ex.fwd_bytes &&
                     layer.bwd_bytes == ex.bwd_bytes,
                 "nn::Mlp: the same collectives and bytes");
  example::check(ex.fwd_bytes == std::size_t(T * h * 8), "all_reduce of T·h doubles = " + std::to_string(T * h * 8) + " bytes");
  example::check(rq.y == ex.y && rq.dx == ex.dx && rq.dw1 == ex.dw1 && rq.dw2 == ex.dw2,
                 "matmul<To> and explicit: Y, dX, dW1, dW2 bit-identical (the same local GEMMs and sums)");
  example::check(layer.y == ex.y && layer.dx == ex.dx && layer.dw1 == ex.dw1 && layer.dw2 == ex.dw2,
                 "nn::Mlp and explicit: bit-identical");
  const double e = std::max({rel(ex.y, Yd), rel(ex.dx, dXd), rel(ex.dw1, dW1d), rel(ex.dw2, dW2d)});
  std::printf("  max normwise error against the dense twin: %.2g\n", e);
  example::check(e < 1e-14, "all three equal the dense twin (double, < 1e-14)");
  return example::finish("14_requested_layouts");
}
