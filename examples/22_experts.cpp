// 22 — Experts: a mixture-of-experts layer (nn/layers/moe.hpp) on an expert axis of ThreadComm
// ranks. Each rank holds T/EP tokens and E/EP experts; a router picks each token's top-k experts;
// the tokens travel to their experts' ranks by an all-to-all (dispatch) and the outputs come back
// by the inverse one (combine), weighted and summed per token. Part 1 prints the routing (computed
// here in plain Eigen) and the capacity drops; Part 2 checks the layer's output against the dense
// computation written out below — every token through its top-k experts — dropless and with a
// capacity factor; Part 3 counts the all-to-all elements in the ledger beside the formula from
// the routing; Part 4 checks the backward (the combine's and the dispatch's adjoints, the experts,
// the router) against central finite differences of the dense forward.
//
//   22_experts [--ep 2] [--experts 4] [--k 2] [--tokens 16] [--h 8] [--cf 1.0]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/shardalg.hpp"
#include "shardalg/nn/layers/moe.hpp"

using namespace shardalg;
using Mat = Eigen::MatrixXd;

namespace {

struct Args {
  int ep = 2;
  Index experts = 4, k = 2, tokens = 16, h = 8;
  double cf = 1.0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const char* f = argv[i];
    const bool known = !std::strcmp(f, "--ep") || !std::strcmp(f, "--experts") || !std::strcmp(f, "--k") ||
                       !std::strcmp(f, "--tokens") || !std::strcmp(f, "--h") || !std::strcmp(f, "--cf");
    if (!known || i + 1 >= argc) {
      std::fprintf(stderr, "22_experts: unknown flag %s (--ep --experts --k --tokens --h --cf)\n", f);
      std::exit(2);
    }
    const char* v = argv[i + 1];
    if (!std::strcmp(f, "--ep")) a.ep = std::atoi(v);
    else if (!std::strcmp(f, "--experts")) a.experts = std::atol(v);
    else if (!std::strcmp(f, "--k")) a.k = std::atol(v);
    else if (!std::strcmp(f, "--tokens")) a.tokens = std::atol(v);
    else if (!std::strcmp(f, "--h")) a.h = std::atol(v);
    else a.cf = std::atof(v);
  }
  if (a.ep < 1 || a.experts % a.ep != 0 || a.tokens % a.ep != 0 || a.k < 1 || a.k > a.experts || a.h < 1 || !(a.cf > 0)) {
    std::fprintf(stderr, "22_experts: need --experts and --tokens multiples of --ep, 1 <= --k <= --experts, --cf > 0\n");
    std::exit(2);
  }
  return a;
}

/// The layer's weights, as dense matrices: the router [h, E] and each expert's fc1, b1, fc2, b2.
struct Weights {
  Mat wr;
  std::vector<Mat> w1, b1, w2, b2;
};

Weights weights(const Args& a, Index ffn) {
  Weights w;
  w.wr = example::matrix(a.h, a.experts, 1);
  for (Index e = 0; e < a.experts; ++e) {
    const auto s = static_cast<std::uint64_t>(10 + 4 * e);
    w.w1.push_back(0.5 * example::matrix(a.h, ffn, s));
    w.b1.push_back(0.1 * example::matrix(1, ffn, s + 1));
    w.w2.push_back(0.5 * example::matrix(ffn, a.h, s + 2));
    w.b2.push_back(0.1 * example::matrix(1, a.h, s + 3));
  }
  return w;
}

/// The routing, in plain Eigen: softmax of x·Wr, the k largest (ties to the lower expert), the
/// weights renormalised over the k; each expert's assignments in token order, the first C kept.
struct Route {
  std::vector<std::vector<Index>> expert;  // [t][s]
  std::vector<std::vector<double>> weight; // [t][s]
  std::vector<std::vector<bool>> kept;     // [t][s]
  std::vector<Index> count;                // assignments per expert (before drops)
  Index dropped = 0;
};

Route route(const Mat& x, const Weights& w, Index k, std::optional<Index> cap) {
  const Index T = x.rows(), E = w.wr.cols();
  Route r;
  r.count.assign(static_cast<std::size_t>(E), 0);
  const Mat logits = x * w.wr;
  for (Index t = 0; t < T; ++t) {
    std::vector<double> p(static_cast<std::size_t>(E));
    const double mx = logits.row(t).maxCoeff();
    double z = 0;
    for (Index e = 0; e < E; ++e) z += p[static_cast<std::size_t>(e)] = std::exp(logits(t, e) - mx);
    for (auto& v : p) v /= z;
    std::vector<Index> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), Index{0});
    std::stable_sort(order.begin(), order.end(), [&](Index i, Index j) { return p[static_cast<std::size_t>(i)] > p[static_cast<std::size_t>(j)]; });
    double sum = 0;
    for (Index s = 0; s < k; ++s) sum += p[static_cast<std::size_t>(order[static_cast<std::size_t>(s)])];
    r.expert.emplace_back(), r.weight.emplace_back(), r.kept.emplace_back();
    for (Index s = 0; s < k; ++s) {
      const Index e = order[static_cast<std::size_t>(s)];
      r.expert.back().push_back(e);
      r.weight.back().push_back(p[static_cast<std::size_t>(e)] / sum);
      const bool keep = !cap || r.count[static_cast<std::size_t>(e)] < *cap;  // tokens come in order
      r.kept.back().push_back(keep);
      r.dropped += !keep;
      ++r.count[static_cast<std::size_t>(e)];
    }
  }
  return r;
}

/// Every token through its kept experts: Y_t = Σ_s w_t,s · (GeLU(x_t·W1 + b1)·W2 + b2).
Mat dense_forward(const Mat& x, const Weights& w, Index k, std::optional<Index> cap) {
  const Route r = route(x, w, k, cap);
  Mat y = Mat::Zero(x.rows(), x.cols());
  for (Index t = 0; t < x.rows(); ++t)
    for (Index s = 0; s < k; ++s) {
      if (!r.kept[static_cast<std::size_t>(t)][static_cast<std::size_t>(s)]) continue;
      const auto e = static_cast<std::size_t>(r.expert[static_cast<std::size_t>(t)][static_cast<std::size_t>(s)]);
      Mat hid = x.row(t) * w.w1[e] + w.b1[e];
      hid = hid.unaryExpr([](double v) { return example::gelu(v); });
      y.row(t) += r.weight[static_cast<std::size_t>(t)][static_cast<std::size_t>(s)] * (hid * w.w2[e] + w.b2[e]);
    }
  return y;
}

/// C = ⌈cf·k·T/E⌉, clamped to [1, T] (docs/layers/moe.md).
Index capacity(double cf, Index k, Index T, Index E) {
  const auto c = static_cast<Index>(std::ceil(cf * static_cast<double>(k * T) / static_cast<double>(E)));
  return std::clamp(c, Index{1}, T);
}

/// One rank's results: its output rows, its dX rows, and the all_to_all elements of its ledger
/// in call order (forward: dispatch, combine; backward: combine's adjoint, dispatch's adjoint).
struct RankOut {
  Mat y, dx;
  std::vector<std::size_t> a2a, a2a_bytes;
  std::vector<std::string> scope;
};

std::vector<RankOut> run_layer(const Args& a, Index ffn, const Weights& w, const Mat& x, const Mat& dy, std::optional<double> cf) {
  std::vector<RankOut> out(static_cast<std::size_t>(a.ep));
  run_ranks(a.ep, [&](ThreadComm& comm) {
    Ledger ledger;
    Group world = ledgered(comm, ledger);
    Mesh mesh(world, {{"ep", a.ep}, {"etp", 1}});
    nn::MoeConfig c{.hidden = a.h, .experts = a.experts, .top_k = a.k, .ffn = ffn};
    c.capacity_factor = cf;
    std::vector<nn::MlpMasters<Mat>> ex;
    for (std::size_t e = 0; e < static_cast<std::size_t>(a.experts); ++e)
      ex.push_back({&w.w1[e], &w.b1[e], nullptr, nullptr, &w.w2[e], &w.b2[e]});
    auto moe = nn::Moe<double>::from_dense(c, nn::MoeMasters<Mat>{&w.wr, ex}, mesh);
    const auto xs = nn::Moe<double>::split_tokens(shard<Replicated>(CpuBackend::matrix<double>(x), world), mesh);
    const auto dys = nn::Moe<double>::split_tokens(shard<Replicated>(CpuBackend::matrix<double>(dy), world), mesh);
    const auto f = moe.forward(xs);                // X[ep:Row] → Y[ep:Row]
    const auto g = moe.backward(f.cache, dys, 0.0);  // dY[ep:Row] → dX[ep:Row] (no aux loss)
    RankOut& o = out[static_cast<std::size_t>(comm.rank())];
    o.y = f.y.local(), o.dx = g.dx.local();
    for (const auto& e : ledger.entries())
      if (e.kind == CollectiveKind::all_to_all) o.a2a.push_back(e.elements), o.a2a_bytes.push_back(e.bytes), o.scope.push_back(e.scope);
  });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const Index T = a.tokens, E = a.experts, k = a.k, h = a.h, ffn = 2 * a.h, tl = T / a.ep, el = E / a.ep;
  const Weights w = weights(a, ffn);
  const Mat x = example::matrix(T, h, 2), dy = example::matrix(T, h, 3);
  const Index C = capacity(a.cf, k, T, E);

  // ---- Part 1: the routing ----------------------------------------------------------------------
  const Route r = route(x, w, k, C);
  std::printf("Part 1: routing %ld tokens (hidden %ld) to the top %ld of %ld experts on ep = %d ranks (%ld tokens, %ld experts each)\n\n",
              static_cast<long>(T), static_cast<long>(h), static_cast<long>(k), static_cast<long>(E), a.ep, static_cast<long>(tl),
              static_cast<long>(el));
  std::printf("  expert   on rank   assignments   kept at C = ⌈%g·k·T/E⌉ = %ld   dropped\n", a.cf, static_cast<long>(C));
  for (Index e = 0; e < E; ++e) {
    const Index c = r.count[static_cast<std::size_t>(e)];
    std::printf("  %6ld   %7ld   %11ld   %26ld   %7ld\n", static_cast<long>(e), static_cast<long>(e / el), static_cast<long>(c),
                static_cast<long>(std::min(c, C)), static_cast<long>(std::max<Index>(c - C, 0)));
  }
  std::printf("\n  %ld of k·T = %ld assignments dropped: a dropped assignment adds 0 to its token's output (the\n"
              "  residual carries the token); the others are the first C of their expert in token order.\n\n",
              static_cast<long>(r.dropped), static_cast<long>(k * T));

  // ---- Part 2: the layer against the dense computation -------------------------------------------
  std::printf("Part 2: the layer's output against every token through its top-k experts (plain Eigen)\n\n");
  std::vector<RankOut> runs[2];
  for (int capped = 0; capped < 2; ++capped) {
    const std::optional<double> cf = capped ? std::optional(a.cf) : std::nullopt;
    runs[capped] = run_layer(a, ffn, w, x, dy, cf);
    const Mat want = dense_forward(x, w, k, capped ? std::optional(C) : std::nullopt);
    double err = 0;
    for (int q = 0; q < a.ep; ++q)
      err = std::max(err, (runs[capped][static_cast<std::size_t>(q)].y - want.middleRows(q * tl, tl)).cwiseAbs().maxCoeff());
    const double scale = want.cwiseAbs().maxCoeff();
    std::printf("  %-24s max |Y − Y_dense| = %.1e   (max |Y_dense| = %.3f)\n", capped ? ("capacity factor " + std::to_string(a.cf).substr(0, 4)).c_str() : "dropless",
                err, scale);
    example::check(err <= 1e-12 * scale, std::string(capped ? "capped" : "dropless") + ": the layer = the dense top-k computation (≤ 1e-12)");
  }
  const Mat full = dense_forward(x, w, k, std::nullopt), capd = dense_forward(x, w, k, C);
  Index changed = 0;
  for (Index t = 0; t < T; ++t) changed += (full.row(t) - capd.row(t)).cwiseAbs().maxCoeff() > 0;
  std::printf("  tokens whose output the capacity changes: %ld\n\n", static_cast<long>(changed));

  // ---- Part 3: the all-to-all in the ledger -----------------------------------------------------
  std::printf("Part 3: all_to_all elements per rank in the ledger (forward, backward) beside the formula\n\n");
  std::printf("         forward dispatch               forward combine                backward            capped:\n");
  std::printf("  rank   ledger  k·T_l·h  off-rank   ledger  N·h      off-rank   combine*  dispatch*  the same\n");
  for (int q = 0; q < a.ep; ++q) {
    // N: the rows rank q's experts receive, every rank's assignments to them (dropped ones too).
    Index n = 0, local = 0;
    for (Index e = q * el; e < (q + 1) * el; ++e) n += r.count[static_cast<std::size_t>(e)];
    for (Index t = q * tl; t < (q + 1) * tl; ++t)
      for (Index s = 0; s < k; ++s) local += r.expert[static_cast<std::size_t>(t)][static_cast<std::size_t>(s)] / el == q;
    const auto& o = runs[0][static_cast<std::size_t>(q)];
    const auto want_d = static_cast<std::size_t>(k * tl * h), want_c = static_cast<std::size_t>(n * h);
    const bool shape = o.a2a.size() == 4;
    const std::size_t d = shape ? o.a2a[0] : 0, c = shape ? o.a2a[1] : 0, bc = shape ? o.a2a[2] : 0, bd = shape ? o.a2a[3] : 0;
    const bool same = runs[1][static_cast<std::size_t>(q)].a2a == o.a2a;
    std::printf("  %4d   %6zu  %7zu  %8zu   %6zu  %-7zu  %8zu   %8zu  %9zu  %s\n", q, d, want_d,
                static_cast<std::size_t>((k * tl - local) * h), c, want_c, static_cast<std::size_t>((n - local) * h), bc, bd,
                same ? "yes" : "no");
    bool bytes = shape;
    for (std::size_t i = 0; shape && i < 4; ++i) bytes = bytes && o.a2a_bytes[i] == o.a2a[i] * sizeof(double);
    example::check(shape && d == want_d && c == want_c && bc == want_d && bd == want_c && bytes,
                   "rank " + std::to_string(q) + ": dispatch k·T_l·h, combine N·h, the adjoints the same with the directions swapped (8 B each)");
    example::check(same, "rank " + std::to_string(q) + ": capacity drops change no all_to_all count (dropped rows still travel)");
  }
  std::printf("\n  The ledger counts what a rank sends, its own run included: the dispatch sends each of its\n"
              "  T_l tokens k times (h values a row), the combine sends back the N rows its experts received.\n"
              "  Only the rows to other ranks cross the wire: the dispatch's (k·T_l − local)·h, the combine's\n"
              "  (N − local)·h. * The backward runs the combine's adjoint (the dispatch's counts) and the\n"
              "  dispatch's adjoint (the combine's counts).\n\n");

  // ---- Part 4: the backward against finite differences ------------------------------------------
  std::printf("Part 4: dX (combine's adjoint, experts, dispatch's adjoint, router) against central differences\n"
              "        of ⟨dY, Y_dense(X)⟩, every element of X, step 1e-6\n\n");
  for (int capped = 0; capped < 2; ++capped) {
    const std::optional<Index> cap = capped ? std::optional(C) : std::nullopt;
    Mat fd(T, h);
    Mat xp = x;
    for (Index t = 0; t < T; ++t)
      for (Index j = 0; j < h; ++j) {
        const double eps = 1e-6, keep = xp(t, j);
        xp(t, j) = keep + eps;
        const double up = dense_forward(xp, w, k, cap).cwiseProduct(dy).sum();
        xp(t, j) = keep - eps;
        const double down = dense_forward(xp, w, k, cap).cwiseProduct(dy).sum();
        xp(t, j) = keep;
        fd(t, j) = (up - down) / (2 * eps);
      }
    double err = 0;
    for (int q = 0; q < a.ep; ++q)
      err = std::max(err, (runs[capped][static_cast<std::size_t>(q)].dx - fd.middleRows(q * tl, tl)).cwiseAbs().maxCoeff());
    const double scale = fd.cwiseAbs().maxCoeff();
    std::printf("  %-10s max |dX − dX_fd| = %.1e   (max |dX_fd| = %.3f)\n", capped ? "capped" : "dropless", err, scale);
    example::check(err <= 1e-7 * scale, std::string(capped ? "capped" : "dropless") + ": dX = the finite differences (≤ 1e-7 relative)");
  }
  return example::finish("22_experts");
}
