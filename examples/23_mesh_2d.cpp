// 23 — Two-dimensional meshes: one layout per mesh axis (mesh/mesh.hpp, mesh/sharded.hpp).
//
// A Megatron MLP, Z = GeLU(X · W1) · W2, on a dp × tp mesh of ThreadComm ranks: the batch split over
// dp, the weights over tp. Every tensor carries one layout per axis; matmul applies the one-axis rule
// on each axis, and each collective runs on one axis's group only:
//
//   forward   X[dp:Row, tp:R] · W1[dp:R, tp:C] → Y[dp:Row, tp:C] → GeLU → H · W2[dp:R, tp:Row]
//             → Z[dp:Row, tp:Partial] → all_reduce<tp> → Z[dp:Row, tp:R]
//   backward  dW2 = Hᵀ[dp:C, tp:Row] · dZ[dp:Row, tp:R] → [dp:Partial, tp:Row] → all_reduce<dp>
//             dW1 = Xᵀ[dp:C, tp:R] · dY[dp:Row, tp:C]  → [dp:Partial, tp:C]   → all_reduce<dp>
//             dX  = dY · W1ᵀ[dp:R, tp:Row]              → [dp:Row, tp:Partial] → all_reduce<tp>
//
// Part 1 places every rank's block and checks the result against dense Eigen. Part 2 reads rank 0's
// ledger axis by axis beside the formula. Part 3 runs the same P = dp·tp ranks as every dp × tp and
// checks the bytes a rank holds and sends against closed forms.
//
//   23_mesh_2d [--dp 4] [--tp 2] [--d 16] [--b 16]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/core.hpp"
#include "shardalg/mesh/collectives.hpp"
#include "shardalg/mesh/ops.hpp"

using namespace shardalg;
using Mat = CpuBackend::matrix<double>;

namespace {

struct Args {
  int dp = 4, tp = 2;
  Index d = 16, b = 16;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (!std::strcmp(argv[i], "--dp")) a.dp = std::atoi(v);
    else if (!std::strcmp(argv[i], "--tp")) a.tp = std::atoi(v);
    else if (!std::strcmp(argv[i], "--d")) a.d = std::atol(v);
    else if (!std::strcmp(argv[i], "--b")) a.b = std::atol(v);
    else {
      std::fprintf(stderr, "23_mesh_2d: unknown flag %s (--dp --tp --d --b)\n", argv[i]);
      std::exit(2);
    }
  }
  if (a.dp < 1 || a.tp < 1 || a.d < 1 || a.b < 1 || a.b % (a.dp * a.tp) != 0 || (4 * a.d) % (a.dp * a.tp) != 0) {
    std::fprintf(stderr, "23_mesh_2d: need --dp, --tp, --d, --b ≥ 1 with dp·tp dividing b and 4·d (part 3 tries every dp × tp)\n");
    std::exit(2);
  }
  return a;
}

// Xᵀ of a two-axis tensor: rows and columns swap, and so do Row and C on every axis. Each rank
// transposes its own block; nothing moves between ranks.
template <class L>
struct flip {
  using type = L;
};
template <>
struct flip<RowSharded> {
  using type = ColSharded;
};
template <>
struct flip<ColSharded> {
  using type = RowSharded;
};
template <class A1, class L1, class A2, class L2>
auto transposed(const MeshSharded<double, Axes<On<A1, L1>, On<A2, L2>>>& x) {
  using Out = MeshSharded<double, Axes<On<A1, typename flip<L1>::type>, On<A2, typename flip<L2>::type>>>;
  Mat t = x.local().transpose();
  return Out(std::move(t), x.cols(), x.rows(), x.groups());
}

// f applied to every value (R, Row, C: each rank's block is its share of f(x)).
template <class Ax, class F>
MeshSharded<double, Ax> apply(const MeshSharded<double, Ax>& x, F f) {
  Mat out = x.local().unaryExpr(f);
  return {std::move(out), x.rows(), x.cols(), x.groups()};
}

// x ⊙ y of one type (both hold the same block on every rank).
template <class Ax>
MeshSharded<double, Ax> times(const MeshSharded<double, Ax>& x, const MeshSharded<double, Ax>& y) {
  Mat out = x.local().cwiseProduct(y.local());
  return {std::move(out), x.rows(), x.cols(), x.groups()};
}

struct Block {  // where a rank's blocks sit
  int rank = 0, c_dp = 0, c_tp = 0;
  Index x_row = 0, x_rows = 0, w1_col = 0, w1_cols = 0;
};

struct Result {
  std::vector<Block> blocks;        // every rank's, by rank
  std::vector<LedgerEntry> ledger;  // rank 0's
  double err = 0;                   // max |sharded − dense| over Z, dX, dW1, dW2, every rank
  double held = 0;                  // rank 0's bytes of X, W1, W2, Y, H (what the backward reads)
};

Result run(const Args& a, int n_dp, int n_tp) {
  const Index b = a.b, d = a.d, f = 4 * a.d;
  const Mat X = example::matrix(b, d, 1), W1 = example::matrix(d, f, 2), W2 = example::matrix(f, d, 3);
  const Mat G = example::matrix(b, d, 4);  // dL/dZ
  // Dense reference, written out.
  const Mat Y = X * W1, H = Y.unaryExpr(&example::gelu), Z = H * W2;
  const Mat dH = G * W2.transpose();
  const Mat dY = dH.cwiseProduct(Y.unaryExpr(&example::gelu_grad));
  const Mat dW2 = H.transpose() * G, dW1 = X.transpose() * dY, dX = dY * W1.transpose();

  Result out;
  out.blocks.resize(static_cast<std::size_t>(n_dp * n_tp));
  std::mutex m;
  run_ranks(n_dp * n_tp, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(comm, ledger), {{"dp", n_dp}, {"tp", n_tp}});
    using XL = Axes<On<dp, RowSharded>, On<tp, Replicated>>;  // the batch over dp, whole on tp
    auto x = shard<XL>(X, mesh);
    auto w1 = shard<Axes<On<dp, Replicated>, On<tp, ColSharded>>>(W1, mesh);
    auto w2 = shard<Axes<On<dp, Replicated>, On<tp, RowSharded>>>(W2, mesh);
    auto g = shard<XL>(G, mesh);

    std::optional<Ledger::Scope> scope;
    scope.emplace(ledger.scope("fwd"));
    auto y = matmul(x, w1);                  // [dp:Row, tp:C]
    auto h = apply(y, &example::gelu);       // GeLU on each rank's columns
    auto z = all_reduce<tp>(matmul(h, w2));  // [dp:Row, tp:Partial] → g over tp only
    scope.reset();
    scope.emplace(ledger.scope("bwd"));
    auto dw2 = all_reduce<dp>(matmul(transposed(h), g));   // [dp:Partial, tp:Row] → sum over dp
    auto dy = times(matmul(g, transposed(w2)), apply(y, &example::gelu_grad));  // [dp:Row, tp:C]
    auto dw1 = all_reduce<dp>(matmul(transposed(x), dy));  // [dp:Partial, tp:C] → sum over dp
    auto dx = all_reduce<tp>(matmul(dy, transposed(w1)));  // [dp:Row, tp:Partial] → f's adjoint over tp

    const double err = std::max({(to_dense(z) - Z).cwiseAbs().maxCoeff(), (to_dense(dx) - dX).cwiseAbs().maxCoeff(),
                                 (to_dense(dw1) - dW1).cwiseAbs().maxCoeff(), (to_dense(dw2) - dW2).cwiseAbs().maxCoeff()});
    std::lock_guard lk(m);
    out.err = std::max(out.err, err);
    out.blocks[static_cast<std::size_t>(comm.rank())] = {comm.rank(), mesh.coord("dp"), mesh.coord("tp"), x.row_offset(),
                                                         x.local_rows(), w1.col_offset(), w1.local_cols()};
    if (comm.rank() == 0) {
      out.ledger = ledger.entries();
      for (const Mat* l : {&x.local(), &w1.local(), &w2.local(), &y.local(), &h.local()})
        out.held += static_cast<double>(l->size()) * sizeof(double);
    }
  });
  return out;
}

std::string fmt(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.0f", v);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int P = a.dp * a.tp;
  const double b = static_cast<double>(a.b), d = static_cast<double>(a.d);
  std::printf("MLP Z = GeLU(X·W1)·W2: batch b = %ld, d = %ld, ffn 4d = %ld, double; mesh dp=%d × tp=%d (%d ranks)\n\n",
              static_cast<long>(a.b), static_cast<long>(a.d), static_cast<long>(4 * a.d), a.dp, a.tp, P);

  // Part 1: where every rank's block sits; forward and backward against dense Eigen.
  const Result r = run(a, a.dp, a.tp);
  std::printf("Part 1: each rank's block (world rank = c_dp · tp + c_tp)\n\n");
  std::printf("  rank  c_dp  c_tp   X[dp:Row, tp:R] rows   W1[dp:R, tp:C] cols\n");
  bool placed = true;
  for (const Block& k : r.blocks) {
    std::printf("  %4d  %4d  %4d   [%3ld, %3ld)             [%3ld, %3ld)\n", k.rank, k.c_dp, k.c_tp, static_cast<long>(k.x_row),
                static_cast<long>(k.x_row + k.x_rows), static_cast<long>(k.w1_col), static_cast<long>(k.w1_col + k.w1_cols));
    placed = placed && k.rank == k.c_dp * a.tp + k.c_tp && k.x_row == k.c_dp * (a.b / a.dp) && k.x_rows == a.b / a.dp &&
             k.w1_col == k.c_tp * (4 * a.d / a.tp) && k.w1_cols == 4 * a.d / a.tp;
  }
  example::check(placed, "rank (c_dp, c_tp) holds X rows c_dp·b/dp + [0, b/dp) and W1 columns c_tp·4d/tp + [0, 4d/tp)");
  std::printf("\n  max |sharded − dense| over Z, dX, dW1, dW2 on every rank: %.1e\n", r.err);
  example::check(r.err <= 1e-12, "forward and backward equal dense Eigen within 1e-12");

  // Part 2: rank 0's ledger, axis by axis.
  std::printf("\nPart 2: rank 0's ledger, one collective per line (elements: the ledger's n; bytes: 8·n)\n\n");
  std::printf("  scope  collective  axis  group  elements  formula\n");
  const double tp_n = b / a.dp * d, dp_n = 4 * d * d / a.tp;
  const std::vector<std::pair<std::string, double>> want = {{"tp", tp_n}, {"dp", dp_n}, {"dp", dp_n}, {"tp", tp_n}};
  const char* what[] = {"b/dp · d      (Z)", "4d/tp · d     (dW2)", "d · 4d/tp     (dW1)", "b/dp · d      (dX)"};
  bool ledger_ok = r.ledger.size() == want.size();
  for (std::size_t i = 0; i < r.ledger.size(); ++i) {
    const auto& e = r.ledger[i];
    const std::string formula = i < want.size() ? fmt(want[i].second) + " = " + what[i] : "";
    std::printf("  %-5s  %-10s  %-4s  %5d  %8zu  %s\n", e.scope.c_str(), std::string(to_string(e.kind)).c_str(), e.axis.c_str(),
                e.group_size, e.elements, formula.c_str());
    ledger_ok = ledger_ok && i < want.size() && e.kind == CollectiveKind::all_reduce && e.axis == want[i].first &&
                static_cast<double>(e.elements) == want[i].second && e.group_size == (e.axis == "tp" ? a.tp : a.dp);
  }
  example::check(ledger_ok, "4 all_reduces: over tp b·d/dp values (Z, dX), over dp 4d²/tp values (dW2, dW1)");

  // Part 3: the same P ranks as every dp × tp.
  std::printf("\nPart 3: the same %d ranks as every dp × tp; bytes per rank (held: X, W1, W2, Y, H; sent: ring all-reduce,\n"
              "        2(g − 1)/g of each ledger buffer)\n\n",
              P);
  std::printf("  dp × tp   held     formula   tp ledger  dp ledger  sent     formula   max error\n");
  double min_held = 0, min_sent = 0;
  std::string least_held, least_sent;
  for (int dp = P; dp >= 1; --dp) {  // dp, tp: the sizes here
    if (P % dp != 0) continue;
    const int tp = P / dp;
    const Result s = run(a, dp, tp);
    double tp_bytes = 0, dp_bytes = 0, sent = 0;
    for (const auto& e : s.ledger) {
      (e.axis == "tp" ? tp_bytes : dp_bytes) += static_cast<double>(e.bytes);
      sent += 2.0 * (e.group_size - 1) / e.group_size * static_cast<double>(e.bytes);
    }
    // Closed forms: X b/dp·d, Y and H b/dp·4d/tp each, W1 and W2 4d²/tp each; 8 bytes a value.
    const double held = 8 * (b / dp * d + 2 * b / dp * 4 * d / tp + 2 * 4 * d * d / tp);
    const double tp_f = 2 * 8 * b * d / dp, dp_f = 2 * 8 * 4 * d * d / tp;
    const double sent_f = 2.0 * (tp - 1) / tp * tp_f + 2.0 * (dp - 1) / dp * dp_f;
    std::printf("  %2d × %-2d  %-7s  %-7s   %-9s  %-9s  %-7s  %-7s   %.1e\n", dp, tp, fmt(s.held).c_str(), fmt(held).c_str(),
                fmt(tp_bytes).c_str(), fmt(dp_bytes).c_str(), fmt(sent).c_str(), fmt(sent_f).c_str(), s.err);
    example::check(s.held == held && tp_bytes == tp_f && dp_bytes == dp_f && example::close(sent, sent_f) && s.err <= 1e-12,
                   std::to_string(dp) + " × " + std::to_string(tp) + ": held, ledger and sent bytes equal the closed forms; dense within 1e-12");
    const std::string name = std::to_string(dp) + " × " + std::to_string(tp);
    if (least_held.empty() || held < min_held) min_held = held, least_held = name;
    else if (held == min_held) least_held += " and " + name;
    if (least_sent.empty() || sent_f < min_sent) min_sent = sent_f, least_sent = name;
    else if (sent_f == min_sent) least_sent += " and " + name;
  }
  std::printf("\n  tp divides the weights and their dp all-reduces (4d²/tp values each); dp divides the activations\n"
              "  and their tp all-reduces (b·d/dp values each). Least held: %s; least sent: %s.\n",
              least_held.c_str(), least_sent.c_str());
  return example::finish("23_mesh_2d");
}
