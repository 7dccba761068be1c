// 20 — Data parallelism and ZeRO-1 in the layouts: the batch split X[dp:Row], the weights
// replicated W[dp:R], each replica's gradient a summand G[dp:Partial] → all_reduce<dp>. ZeRO-1
// splits the optimizer state over dp, m[dp:C] and v[dp:C]: reduce_scatter<dp> the gradient, update
// a slice, all_gather<dp> the parameters — the two halves of the same ring all-reduce.
//
// Part 1 trains a tiny GPT on a dp × tp ThreadComm mesh (nn::DataParallelGpt) with Adam and with
// the sharded Adam, and checks both loss curves against one rank on the whole batch. Part 2 counts
// one step's dp collectives in the ledger beside the formula. Part 3 measures the bytes a rank
// holds (parameters, gradients, optimizer state, summed from the stored matrices) beside Ψ·(…) and
// prints the ZeRO-2 and ZeRO-3 columns from the formulas alone: the library implements ZeRO-1.
//
//   20_data_parallel_zero [--dp 2] [--tp 2] [--h 32] [--layers 2] [--steps 6]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/nn/models/data_parallel.hpp"
#include "shardalg/observe/ledger.hpp"

using namespace shardalg;
namespace nn = shardalg::nn;

namespace {

struct Args {
  int dp = 2, tp = 2;
  long h = 32, layers = 2, steps = 6;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const char* f = argv[i];
    const bool known = !std::strcmp(f, "--dp") || !std::strcmp(f, "--tp") || !std::strcmp(f, "--h") ||
                       !std::strcmp(f, "--layers") || !std::strcmp(f, "--steps");
    if (!known || i + 1 >= argc) {
      std::fprintf(stderr, "20_data_parallel_zero: %s %s (--dp --tp --h --layers --steps)\n", known ? "no value after" : "unknown flag", f);
      std::exit(2);
    }
    const long v = std::atol(argv[i + 1]);
    if (!std::strcmp(f, "--dp")) a.dp = static_cast<int>(v);
    else if (!std::strcmp(f, "--tp")) a.tp = static_cast<int>(v);
    else if (!std::strcmp(f, "--h")) a.h = v;
    else if (!std::strcmp(f, "--layers")) a.layers = v;
    else a.steps = v;
  }
  // 4 heads and a vocabulary of 256 padded to a multiple of 64·tp: tp must divide 4.
  if (a.dp < 1 || a.tp < 1 || 4 % a.tp != 0 || a.h < 4 || a.h % 4 != 0 || a.layers < 1 || a.steps < 2) {
    std::fprintf(stderr, "20_data_parallel_zero: needs dp ≥ 1, tp in 1, 2, 4, h a multiple of 4, layers ≥ 1, steps ≥ 2\n");
    std::exit(2);
  }
  return a;
}

constexpr std::string_view kText =
    "Each replica takes its share of the batch and computes a gradient that is only a summand of the "
    "whole one. One all-reduce over the data-parallel ranks makes it a value again, and every replica "
    "applies the same update to the same weights. ZeRO keeps that update but splits its state: each "
    "rank owns a slice of the moments, reduces only its slice of the gradient and gathers the rest. ";

nn::GptConfig config(const Args& a) {
  nn::GptConfig c;
  c.vocab = 256;
  c.hidden = a.h;
  c.heads = 4;
  c.layers = a.layers;
  c.seq = 16;
  c.batch = 4 % a.dp == 0 ? 4 : 2 * a.dp;  // the global batch: sequences split over dp
  c.dropout = 0.1;                          // masks keyed by global token: the same on any mesh
  c.seed = 2024;
  c.vocab_divisor = 64;
  return c;
}

using Ids = std::vector<std::int64_t>;
std::pair<Ids, Ids> batch_at(const nn::GptConfig& c, long step) {
  Ids x, y;
  const long span = static_cast<long>(kText.size()) - c.seq - 1;
  for (Index b = 0; b < c.batch; ++b) {
    const long off = ((step * c.batch + b) * 37) % span;
    for (Index t = 0; t < c.seq; ++t) {
      x.push_back(static_cast<unsigned char>(kText[static_cast<std::size_t>(off + t)]));
      y.push_back(static_cast<unsigned char>(kText[static_cast<std::size_t>(off + t + 1)]));
    }
  }
  return {x, y};
}

const nn::Adam<double>::Options kAdam{3e-3, 0.9, 0.95, 1e-8, 0.01};

/// The one-rank curve: the plain Gpt on the whole batch, no mesh.
std::vector<double> one_rank(const nn::GptConfig& c, long steps) {
  auto model = nn::Gpt<double>::init(c, SelfComm{});
  nn::Adam<double> adam(kAdam);
  std::vector<double> out;
  for (long s = 0; s < steps; ++s) {
    const auto [x, y] = batch_at(c, s);
    out.push_back(model.forward_backward(x, y));
    model.step(adam, 1.0);
  }
  return out;
}

/// What rank 0 saw on the mesh: its loss curve, one step's dp collectives, the bytes it holds.
struct Run {
  std::vector<double> curve;
  std::map<std::string, std::size_t> calls, elements;  // by kind, axis dp, in the last step
  double params = 0, grads = 0, optimizer = 0;          // bytes
  double sent = 0;  // bytes a rank sends in the gradient and parameter collectives (ring factors)
  long psi = 0;                                         // parameter values on this rank
};

Run on_mesh(const nn::GptConfig& c, const Args& a, bool zero) {
  Run out;
  std::mutex m;
  run_ranks(a.dp * a.tp, [&](ThreadComm& comm) {
    double params = 0, grads = 0;
    long psi = 0;
    const auto held = [&](auto& dpgpt) {  // the bytes of parameters and gradients this rank stores
      dpgpt.replica().visit([&](const nn::ParamInfo&, const auto& w, const auto& g) {
        psi += static_cast<long>(w.local().size());
        params += static_cast<double>(w.local().size()) * sizeof(double);
        grads += static_cast<double>(g.local().size()) * sizeof(double);
      });
    };
    Ledger ledger;
    std::vector<double> curve;
    Mesh mesh(ledgered(comm, ledger), {{"dp", a.dp}, {"tp", a.tp}});
    nn::DataParallelGpt<double>::Options o;
    o.bucket_elements = std::size_t{1} << 30;  // one bucket, so one step has one gradient collective
    auto model = nn::DataParallelGpt<double>::init(c, mesh, o);
    nn::Adam<double> adam(kAdam);
    nn::ShardedAdam<double> sharded(kAdam);  // ZeRO-1
    for (long s = 0; s < a.steps; ++s) {
      const auto [x, y] = batch_at(c, s);
      ledger.clear();
      curve.push_back(model.forward_backward(x, y));  // replica d: sequences [d·b/D, (d + 1)·b/D)
      if (s + 1 == a.steps) held(model);              // the gradients live from the backward to the step
      if (zero) model.step(sharded, 1.0);  // reduce_scatter<dp>, Adam on my slice, all_gather<dp>
      else model.step(adam, 1.0);          // all_reduce<dp> of the bucket, Adam on every replica
    }
    if (comm.rank() != 0) return;
    std::lock_guard lk(m);
    out.curve = curve;
    const double D = a.dp;
    for (const auto& e : ledger.entries())
      if (e.axis == "dp") {
        ++out.calls[std::string(to_string(e.kind))];
        out.elements[std::string(to_string(e.kind))] += e.elements;
        if (!Ledger::in_scope(e.scope, "dp.grads") && !Ledger::in_scope(e.scope, "dp.params")) continue;
        const double b = static_cast<double>(e.bytes);  // the ledger's V; a ring rank sends:
        out.sent += e.kind == CollectiveKind::all_reduce ? 2 * (D - 1) / D * b : (D - 1) / D * b;
      }
    out.psi = psi;
    out.params = params;
    out.grads = grads;
    if (zero) out.optimizer = static_cast<double>(sharded.state_bytes());
    else
      for (const auto& [name, mo] : adam.state()) out.optimizer += static_cast<double>(mo.m.size() + mo.v.size()) * sizeof(double);
  });
  return out;
}

double diff(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return a.size() == b.size() ? w : 1e300;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const nn::GptConfig c = config(a);
  const int D = a.dp, t = a.tp;

  // ---- Part 1: the loss curves ----------------------------------------------------------------
  std::printf("Part 1: a GPT (%ld layers, h = %ld, 4 heads, %ld × %ld tokens, dropout 0.1, double), %ld steps of Adam\n"
              "        on dp %d × tp %d ThreadComm ranks, against one rank on the whole batch\n\n",
              static_cast<long>(c.layers), static_cast<long>(c.hidden), static_cast<long>(c.batch), static_cast<long>(c.seq), a.steps, D, t);
  const auto ref = one_rank(c, a.steps);
  const Run plain = on_mesh(c, a, false), zero = on_mesh(c, a, true);
  std::printf("  step   one rank            dp × tp, Adam       dp × tp, ZeRO-1\n");
  for (std::size_t s = 0; s < ref.size(); ++s)
    std::printf("  %-4zu   %.15f   %.15f   %.15f\n", s, ref[s], plain.curve[s], zero.curve[s]);
  std::printf("  largest relative difference: Adam %.1e, ZeRO-1 %.1e\n", diff(plain.curve, ref), diff(zero.curve, ref));
  example::check(diff(plain.curve, ref) <= 1e-12 && diff(zero.curve, ref) <= 1e-12, "both curves are the one-rank curve (≤ 1e-12 relative)");
  example::check(ref.back() < ref.front(), "it trains (the last loss is below the first)");

  // ---- Part 2: one step's dp collectives --------------------------------------------------------
  // Ψ: this tp rank's parameter values — the vocabulary, QKV and MLP split over tp, the norms and
  // the row-parallel biases whole: v·h/t + L·(12h²/t + 7h/t + 6h) + 2h.
  const long h = a.h, L = a.layers, v = 256;
  const long psi = v * h / t + L * (12 * h * h / t + 7 * h / t + 6 * h) + 2 * h;
  const long psi_pad = (psi + D - 1) / D * D;  // the bucket, padded to a multiple of dp for the slices
  const double ring = D > 1 ? 2.0 * (D - 1) / D : 0.0;
  std::printf("\nPart 2: one step's collectives on dp, rank 0's ledger (one bucket; Ψ = %ld values on this tp rank)\n\n", psi);
  std::printf("                    all_reduce          reduce_scatter      all_gather          gradient traffic sent per rank\n");
  std::printf("                    calls  values       calls  values       calls  values       ledger (ring)   formula\n");
  const auto n = [](const std::map<std::string, std::size_t>& mm, const char* k) { auto it = mm.find(k); return it == mm.end() ? std::size_t{0} : it->second; };
  const auto row = [&](const char* name, const Run& r, const char* formula, double f) {
    std::printf("  %-16s  %5zu  %-10zu   %5zu  %-10zu   %5zu  %-10zu   %-13.0f   %s = %.0f\n", name, n(r.calls, "all_reduce"),
                n(r.elements, "all_reduce"), n(r.calls, "reduce_scatter"), n(r.elements, "reduce_scatter"), n(r.calls, "all_gather"),
                n(r.elements, "all_gather"), r.sent, formula, f);
  };
  const double g0 = ring * 8.0 * static_cast<double>(psi), g1 = ring * 8.0 * static_cast<double>(psi_pad);
  row("Adam (ZeRO-0)", plain, "2(D-1)/D·Ψ·8  ", g0);
  row("ZeRO-1", zero, "2(D-1)/D·Ψ'·8 ", g1);
  const std::size_t P = static_cast<std::size_t>(psi), Pp = static_cast<std::size_t>(psi_pad);
  example::check(n(plain.calls, "all_reduce") == 2 && n(plain.elements, "all_reduce") == 1 + P && n(plain.calls, "reduce_scatter") == 0,
                 "ZeRO-0: all_reduce of the loss (1 value) and of the gradient bucket (Ψ values)");
  example::check(n(zero.calls, "reduce_scatter") == 1 && n(zero.elements, "reduce_scatter") == Pp && n(zero.calls, "all_gather") == 1 &&
                     n(zero.elements, "all_gather") == Pp && n(zero.calls, "all_reduce") == (D > 1 ? 2u : 1u) &&
                     n(zero.elements, "all_reduce") == (D > 1 ? 3u : 1u),
                 "ZeRO-1: reduce_scatter and all_gather of Ψ rounded up to a multiple of dp (" + std::to_string(psi_pad) +
                     "), all_reduce of the loss and (dp > 1) the norm's 2 values");
  example::check(example::close(plain.sent, g0, 1e-12) && example::close(zero.sent, g1, 1e-12), "the ring moves 2(D − 1)/D of the bucket either way: reduce-scatter + all-gather = all-reduce");
  std::printf("  The all_reduce columns include the loss (1 value) and, under ZeRO-1, the gradient norm's 2:\n"
              "  a rank holds only a slice of the reduced gradient. Ψ' is Ψ rounded up to a multiple of dp.\n");

  // ---- Part 3: memory per rank ------------------------------------------------------------------
  // double here: weight 8 + gradient 8 + Adam m 8 + v 8 bytes per value (no master copy).
  std::printf("\nPart 3: bytes per rank, measured (the stored matrices) beside the formula, double: 8 + 8 + 16\n\n");
  std::printf("                  parameters   gradients    optimizer    total        formula\n");
  const double f0 = psi * (8.0 + 8.0 + 16.0), f1 = psi * (8.0 + 8.0) + 16.0 * psi_pad / D;
  std::printf("  Adam (ZeRO-0)   %-10.0f   %-10.0f   %-10.0f   %-10.0f   Ψ·(8 + 8 + 16)        = %.0f\n", plain.params, plain.grads,
              plain.optimizer, plain.params + plain.grads + plain.optimizer, f0);
  std::printf("  ZeRO-1          %-10.0f   %-10.0f   %-10.0f   %-10.0f   Ψ·(8 + 8) + 16·Ψ'/%d  = %.0f   (Ψ' = %ld, padded)\n", zero.params,
              zero.grads, zero.optimizer, zero.params + zero.grads + zero.optimizer, D, f1, psi_pad);
  example::check(plain.psi == psi && zero.psi == psi, "Ψ counted from the stored parameters = v·h/t + L·(12h²/t + 7h/t + 6h) + 2h");
  example::check(plain.params + plain.grads + plain.optimizer == f0 && zero.params + zero.grads + zero.optimizer == f1,
                 "measured = formula: the optimizer state shrinks by dp, nothing else does");

  // Mixed precision (the ZeRO paper's accounting): bf16 weight 2 + bf16 gradient 2 + fp32 master,
  // m and v 12, with N data-parallel ranks.
  const auto zero_gb = [](double Psi, double N) {
    struct Cols {
      double z0, z1, z2, z3;
    };
    return Cols{Psi * (2 + 2 + 12) / 1e9, Psi * (2 + 2 + 12 / N) / 1e9, Psi * (2 + (2 + 12) / N) / 1e9, Psi * (2 + 2 + 12) / N / 1e9};
  };
  std::printf("\n  Mixed precision, Ψ parameters on N data-parallel ranks (formulas only; the library implements\n"
              "  ZeRO-0 and ZeRO-1):\n");
  std::printf("                        ZeRO-0 Ψ(2+2+12)   ZeRO-1 Ψ(2+2+12/N)   ZeRO-2 Ψ(2+14/N)   ZeRO-3 16Ψ/N\n");
  const auto k = zero_gb(7.5e9, 64);
  std::printf("  Ψ = 7.5e9, N = 64     %8.2f GB        %8.2f GB          %8.2f GB        %8.3f GB\n", k.z0, k.z1, k.z2, k.z3);
  example::check(std::round(k.z0) == 120 && std::round(k.z1 * 10) == 314 && std::round(k.z2 * 10) == 166 && std::round(k.z3 * 10) == 19,
                 "7.5B on 64 ranks: 120, 31.4, 16.6, 1.9 GB (the ZeRO paper's Figure 1)");
  return example::finish("20_data_parallel_zero");
}
