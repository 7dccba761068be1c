// 24 — The calculator: memory and communication per rank of one training setting,
// DP × TP × PP × ZeRO (0–3) × recomputation (none, selective, full) × SP, for GPT-3 175B or
// Megatron-LM's 8.3B or 1.2B (cost/training_per_rank.hpp).
//
// Part 1 prints the setting's figures, each beside its closed form written out here (not through
// the cost header) and checked. Part 2 prints total memory per rank for every ZeRO stage and
// recomputation, and checks the laws: each ZeRO stage holds no more than the one before, full ≤
// selective ≤ none, SP ≤ no SP.
//
//   24_calculator [--model gpt3-175b|megatron-8.3b|megatron-1.2b] [--dp 8] [--tp 8] [--pp 16] [--zero 1]
//                 [--recompute none|selective|full] [--sp 1] [--micro-batch 1] [--micro-batches 16]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

namespace {

/// Megatron-LM's 1.2B (arXiv:1909.08053, Table 1): h 1536, 40 layers, 16 heads, the 8.3B's
/// vocabulary (51,200 padded) and sequence (1,024).
constexpr cost::NamedModel megatron_1_2b{"megatron-1.2b", 1536, 40, 16, 51200, 1024};

struct Args {
  cost::NamedModel model = cost::gpt3_175b;
  cost::TrainingSetting s{.dp = 8, .tp = 8, .pp = 16, .zero = 1, .recompute = cost::Recompute::selective,
                          .sequence_parallel = true, .micro_batch = 1, .micro_batches = 16};
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "24_calculator: %s (--model gpt3-175b|megatron-8.3b|megatron-1.2b --dp --tp --pp --zero 0-3 "
               "--recompute none|selective|full --sp 0|1 --micro-batch --micro-batches)\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (f == "--model") {
      if (v == "gpt3-175b") a.model = cost::gpt3_175b;
      else if (v == "megatron-8.3b") a.model = cost::megatron_8_3b;
      else if (v == "megatron-1.2b") a.model = megatron_1_2b;
      else usage(("unknown model " + v).c_str());
    } else if (f == "--recompute") {
      if (v == "none") a.s.recompute = cost::Recompute::none;
      else if (v == "selective") a.s.recompute = cost::Recompute::selective;
      else if (v == "full") a.s.recompute = cost::Recompute::full;
      else usage(("unknown recomputation " + v).c_str());
    } else if (f == "--dp") a.s.dp = std::atoi(v.c_str());
    else if (f == "--tp") a.s.tp = std::atoi(v.c_str());
    else if (f == "--pp") a.s.pp = std::atoi(v.c_str());
    else if (f == "--zero") a.s.zero = std::atoi(v.c_str());
    else if (f == "--sp") a.s.sequence_parallel = std::atoi(v.c_str()) != 0;
    else if (f == "--micro-batch") a.s.micro_batch = std::atol(v.c_str());
    else if (f == "--micro-batches") a.s.micro_batches = std::atol(v.c_str());
    else usage(("unknown flag " + f).c_str());
  }
  try {
    cost::check_training_setting(a.model, a.s);
  } catch (const shardalg::DivisibilityError& e) {
    usage(e.what());
  }
  return a;
}

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

/// The closed forms, written out: activation bytes per layer and rank (Korthikanti et al. Table 2).
double activations_closed_form(const cost::NamedModel& m, const cost::TrainingSetting& s, cost::Recompute r) {
  const double sbh = static_cast<double>(m.seq) * s.micro_batch * m.hidden, t = s.tp;
  const double as_h = 5.0 * m.heads * m.seq / m.hidden;  // 5as/h
  const bool sp = s.sequence_parallel && s.tp > 1;
  if (r == cost::Recompute::full) return sp ? 2 * sbh / t : 2 * sbh;
  if (r == cost::Recompute::selective) return s.tp == 1 ? 34 * sbh : sp ? 34 * sbh / t : sbh * (10 + 24 / t);
  return s.tp == 1 ? sbh * (34 + as_h) : sp ? sbh * (34 + as_h) / t : sbh * (10 + 24 / t + as_h / t);
}

void row(const char* what, double bytes, const std::string& formula) {
  std::printf("  %-34s %22.0f  %10.2f GiB   %s\n", what, bytes, bytes / GiB, formula.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const cost::NamedModel& m = a.model;
  const cost::TrainingSetting& s = a.s;
  const auto r = cost::training_per_rank(m, s);

  // Independent path: N from its terms, Ψ, and each figure's closed form.
  const double h = static_cast<double>(m.hidden), L = static_cast<double>(m.layers);
  const double N = h * m.vocab + L * (12 * h * h + 13 * h) + 2 * h;
  const double psi = N / (s.tp * s.pp), nd = s.dp, t = s.tp, p = s.pp, mb = static_cast<double>(s.micro_batches);
  const double sbh = static_cast<double>(m.seq) * s.micro_batch * h;
  const double weights = s.zero >= 3 ? 2 * psi / nd : 2 * psi;
  const double grads = s.zero >= 2 ? 2 * psi / nd : 2 * psi;
  const double optim = s.zero >= 1 ? 12 * psi / nd : 12 * psi;
  const double in_flight = std::fmin(p, mb);
  const double acts = L / p * in_flight * activations_closed_form(m, s, s.recompute);
  const double passes = s.recompute == cost::Recompute::full ? 3 : 2;
  // a tp layer: 2 all-reduces (2(t−1)/t each) or, under SP, 2 all-gathers + 2 reduce-scatters ((t−1)/t each) of sbh·2 B
  const double tp_sent = mb * (L / p) * passes * 4 * (t - 1) / t * sbh * 2;
  const double dp_sent = (s.zero >= 3 ? 3 : 2) * (nd - 1) / nd * 2 * psi;
  const double pp_sent = s.pp > 1 ? 2 * mb * sbh * 2 / t : 0;

  std::printf("%s: hidden %lld, %lld layers, %lld heads, vocabulary %lld, sequence %lld; N = %.4e parameters\n",
              std::string(m.name).c_str(), static_cast<long long>(m.hidden), static_cast<long long>(m.layers),
              static_cast<long long>(m.heads), static_cast<long long>(m.vocab), static_cast<long long>(m.seq), N);
  std::printf("setting: dp %d × tp %d × pp %d = %d ranks, ZeRO-%d, recomputation %s, SP %s, micro-batch %lld, "
              "%lld micro-batches per step (global batch %lld)\n\n",
              s.dp, s.tp, s.pp, s.dp * s.tp * s.pp, s.zero, std::string(cost::to_string(s.recompute)).c_str(),
              s.sequence_parallel ? "on" : "off", static_cast<long long>(s.micro_batch), static_cast<long long>(s.micro_batches),
              static_cast<long long>(s.dp * s.micro_batch * s.micro_batches));

  std::printf("Part 1: per rank (bf16 weights and gradients, fp32 master and Adam m, v; 16-bit activations)\n\n");
  std::printf("  %-34s %22s  %14s   %s\n", "", "bytes", "", "closed form");
  std::printf("  %-34s %22.0f  %14s   N/(t·p)\n", "parameters Ψ (a count)", r.parameters, "");
  row("weights", r.states.weights, s.zero >= 3 ? "2Ψ/N_d" : "2Ψ");
  row("gradients", r.states.gradients, s.zero >= 2 ? "2Ψ/N_d" : "2Ψ");
  row("optimizer (master, m, v)", r.states.optimizer, s.zero >= 1 ? "12Ψ/N_d" : "12Ψ");
  const bool tp_only = s.tp > 1 && !s.sequence_parallel, sp = s.tp > 1 && s.sequence_parallel;
  const char* act = s.recompute == cost::Recompute::full        ? (sp ? "2sbh/t" : "2sbh")
                    : s.recompute == cost::Recompute::selective ? (sp ? "34sbh/t" : tp_only ? "sbh(10 + 24/t)" : "34sbh")
                    : sp                                        ? "sbh(34 + 5as/h)/t"
                    : tp_only                                   ? "sbh(10 + 24/t + 5as/(ht))"
                                                                : "sbh(34 + 5as/h)";
  row("activations (first stage)", r.activations, std::string("L/p · min(p, m) · ") + act);
  row("memory", r.memory(), "");
  std::printf("\n  sent per step\n");
  row("tp (layers' collectives)", r.tp_bytes, std::string("m · L/p · ") + (passes == 3 ? "3" : "2") + " passes · 4(t−1)/t · 2sbh");
  row("dp (gradients, ZeRO)", r.dp_bytes, std::string(s.zero >= 3 ? "3" : "2") + "(N_d−1)/N_d · 2Ψ");
  row("pp (an interior stage)", r.pp_bytes, "2m · 2sbh/t");
  row("sent", r.sent(), "");
  std::printf("\n");
  const bool states_ok = example::close(r.parameters, psi, 1e-14) && example::close(r.states.weights, weights, 1e-14) &&
                         example::close(r.states.gradients, grads, 1e-14) && example::close(r.states.optimizer, optim, 1e-14);
  example::check(states_ok, "Ψ and the model states equal their closed forms (ZeRO-" + std::to_string(s.zero) + ")");
  example::check(example::close(r.activations, acts, 1e-14), "activations equal L/p · min(p, m) · Table 2's per-layer form");
  example::check(example::close(r.tp_bytes, tp_sent, 1e-14) && example::close(r.dp_bytes, dp_sent, 1e-14) &&
                     (r.pp_bytes == pp_sent || example::close(r.pp_bytes, pp_sent, 1e-14)),
                 "tp, dp and pp bytes sent equal their closed forms");
  cost::TrainingSetting z0 = s, z3 = s;
  z0.zero = 0, z3.zero = 3;
  example::check(example::close(cost::training_per_rank(m, z0).states.total(), 16 * psi, 1e-14),
                 "at ZeRO-0 the model states are 16Ψ bytes per rank (replicated over dp)");
  example::check(example::close(cost::training_per_rank(m, z3).states.total(), 16 * psi / nd, 1e-14),
                 "at ZeRO-3 they are 16Ψ/N_d (every state partitioned over dp)");

  // Part 2: every ZeRO stage × recomputation, and the laws.
  std::printf("\nPart 2: memory per rank in GiB, the same setting at every ZeRO stage and recomputation\n\n");
  std::printf("  ZeRO   none        selective   full        | dp sent (GiB)\n");
  double grid[4][3];
  const cost::Recompute rs[] = {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full};
  for (int z = 0; z < 4; ++z) {
    std::printf("  %-4d", z);
    cost::TrainingSetting v = s;
    v.zero = z;
    for (int k = 0; k < 3; ++k) {
      v.recompute = rs[k];
      grid[z][k] = cost::training_per_rank(m, v).memory();
      std::printf("   %-9.2f", grid[z][k] / GiB);
    }
    std::printf(" | %.2f\n", cost::training_per_rank(m, v).dp_bytes / GiB);
  }
  bool zero_law = true, recompute_law = true;
  for (int k = 0; k < 3; ++k)
    for (int z = 1; z < 4; ++z) zero_law = zero_law && grid[z][k] <= grid[z - 1][k];
  for (int z = 0; z < 4; ++z) recompute_law = recompute_law && grid[z][2] <= grid[z][1] && grid[z][1] <= grid[z][0];
  std::printf("\n");
  example::check(zero_law, "ZeRO-3 ≤ ZeRO-2 ≤ ZeRO-1 ≤ ZeRO-0 per rank, at every recomputation");
  example::check(recompute_law, "full ≤ selective ≤ none, at every ZeRO stage");
  cost::TrainingSetting on = s, off = s;
  on.sequence_parallel = true, off.sequence_parallel = false;
  bool sp_law = true;
  for (const auto k : rs) {
    on.recompute = off.recompute = k;
    sp_law = sp_law && cost::training_per_rank(m, on).activations <= cost::training_per_rank(m, off).activations;
  }
  example::check(sp_law, "SP holds no more activations than no SP, at every recomputation");
  return example::finish("24_calculator");
}
