// 03 — The Megatron MLP with its conjugate pair f and g, forward and backward, with the ledger.
//
//   forward   X[R] →f→ X[R] · W1[C] + b1[C] → A[C] → GeLU → H[C] · W2[Row] → Z[Partial] →g→ Z[R] + b2
//   backward  dZ[R] →g*(identity)→ dH[C] = dZ · W2ᵀ[C] (local); dA = dH ⊙ GeLU'(A)
//             dX = dA · W1ᵀ[Row] → Partial →f*(all_reduce)→ dX[R];  dW1 = Xᵀ·dA [C], dW2 = Hᵀ·dZ [Row]
// One all-reduce forward (g), one backward (f's adjoint), of T·h values each.
//
//   03_mlp_f_g [--tp 4] [--tokens 8] [--hidden 8]        (ffn = 4 · hidden)
#include <cstdio>

#include "check.hpp"
#include "shardalg/core.hpp"  // the algebra, the thread world, the ledger and compare: all it uses

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

int main(int argc, char** argv) {
  int P = 4;
  Index T = 8, h = 8;
  const example::Flags flags("03_mlp_f_g", argc, argv, {{"tp", &P}, {"tokens", &T}, {"hidden", &h}});
  const Index f = 4 * h;
  flags.require(f % P == 0, "ffn 4·hidden = " + std::to_string(f) + " must be divisible by --tp " + std::to_string(P));
  const Mat X = example::matrix(T, h, 10), W1 = example::matrix(h, f, 11), b1 = example::matrix(1, f, 12);
  const Mat W2 = example::matrix(f, h, 13), b2 = example::matrix(1, h, 14), G = example::matrix(T, h, 15);
  const auto gelu = [](double v) { return example::gelu(v); };
  const auto gelu_grad = [](double v) { return example::gelu_grad(v); };

  // Dense reference, forward and backward.
  const Mat A = (X * W1).rowwise() + b1.row(0);
  const Mat H = A.unaryExpr(gelu);
  const Mat Z = (H * W2).rowwise() + b2.row(0);
  const Mat dH = G * W2.transpose();
  const Mat dA = dH.cwiseProduct(A.unaryExpr(gelu_grad));
  const Mat dX = dA * W1.transpose(), dW1 = X.transpose() * dA, dW2 = H.transpose() * G;

  std::printf("MLP h=%lld → 4h=%lld → h, T=%lld tokens, P=%d\n\n", (long long)h, (long long)f, (long long)T, P);
  ErrorReport eZ, edX, edW1, edW2;
  std::size_t fwd_ar = 0, bwd_ar = 0, fwd_bytes = 0, bwd_bytes = 0, total = 0;
  std::string table;
  run_ranks(P, [&](ThreadComm& comm) {
    Ledger ledger;
    Group g = ledgered(comm, ledger);
    auto W1c = shard<ColSharded>(W1, g);
    auto b1c = shard<ColSharded>(b1, g);
    auto W2r = shard<RowSharded>(W2, g);
    auto b2r = shard<Replicated>(b2, g);
    auto Xr = shard<Replicated>(X, g);
    Sharded<double, ColSharded> Ac, Hc;
    Sharded<double, Replicated> Zr, Xf;
    {
      auto s = ledger.scope("mlp.fwd");
      Xf = copy_to(Xr);                                 // f: identity forward
      Ac = add_bias(matmul(Xf, W1c), b1c);              // R · C → C
      Hc = map(Ac, gelu);                               // local
      Zr = add_bias(reduce_from(matmul(Hc, W2r)), b2r); // C · Row → Partial; g: all_reduce → R
    }
    Sharded<double, Replicated> dXr;
    Sharded<double, ColSharded> dW1c;
    Sharded<double, RowSharded> dW2r;
    {
      auto s = ledger.scope("mlp.bwd");
      auto dZ = adjoint::reduce_from(shard<Replicated>(G, g));    // g*: identity
      auto dHc = matmul(dZ, transpose(W2r));                      // R · Rowᵀ(=C) → C, local
      auto dAc = hadamard(dHc, map(Ac, gelu_grad));               // local
      dXr = adjoint::copy_to(matmul(dAc, transpose(W1c)));        // C · Cᵀ(=Row) → Partial; f*: all_reduce
      dW1c = matmul(transpose(Xf), dAc);                          // Rᵀ · C → C, local
      dW2r = matmul(transpose(Hc), dZ);                           // Cᵀ(=Row) · R → Row, local
    }
    auto e1 = compare(Zr, Z);
    auto e2 = compare(dXr, dX);
    auto e3 = compare(dW1c, dW1);
    auto e4 = compare(dW2r, dW2);
    if (comm.rank() == 0) {
      eZ = e1, edX = e2, edW1 = e3, edW2 = e4;
      fwd_ar = ledger.count(CollectiveKind::all_reduce, "mlp.fwd");
      bwd_ar = ledger.count(CollectiveKind::all_reduce, "mlp.bwd");
      fwd_bytes = ledger.bytes(CollectiveKind::all_reduce, "mlp.fwd");
      bwd_bytes = ledger.bytes(CollectiveKind::all_reduce, "mlp.bwd");
      total = ledger.count();
      table = ledger.table();
    }
  });

  std::printf("forward output Z[R]:  max error %.3g against dense\n", eZ.max_abs);
  std::printf("dX[R]:                max error %.3g\n", edX.max_abs);
  std::printf("dW1[C]:               max error %.3g\n", edW1.max_abs);
  std::printf("dW2[Row]:             max error %.3g\n", edW2.max_abs);
  example::check(eZ.max_abs < 1e-12 && edX.max_abs < 1e-12 && edW1.max_abs < 1e-12 && edW2.max_abs < 1e-12,
                 "forward and every gradient match the dense MLP");
  std::printf("\nledger (rank 0):\n%s\n", table.c_str());
  example::check(fwd_ar == 1 && bwd_ar == 1 && total == 2, "one all-reduce forward (g), one backward (f*), nothing else");
  example::check(fwd_bytes == T * h * sizeof(double) && bwd_bytes == T * h * sizeof(double),
                 example::fmt("each all-reduces T·h values: %lld·%lld doubles = %lld bytes", (long long)T, (long long)h,
                              (long long)(T * h * 8)));
  return example::finish("03_mlp_f_g");
}
