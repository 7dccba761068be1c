// 21 — The pipeline: a model's layers cut into stages on pp ranks, a batch cut into micro-batches,
// and the order each rank runs them in (the schedule). Part 1 simulates AFAB, 1F1B, interleaved
// 1F1B and ZB-H1 (pipeline/simulate.hpp) and checks each bubble and each rank's activations in
// flight against the closed forms written out below. Part 2 draws one schedule's timeline. Part 3
// runs nn::PipelineGpt under pipeline::Executor on ThreadComm ranks: the loss and every gradient
// against the one-rank nn::Gpt on the whole batch, the pp messages in the ledger against a count
// from the layout, and the peak bytes each stage holds, AFAB against 1F1B. With --measure it also
// times the executor (the measured bubble; printed only then: it depends on the machine).
//
//   21_pipeline [--pp 4] [--m 8] [--v 2] [--schedule 1f1b] [--layers 8] [--measure]
//   --schedule: afab, 1f1b, interleaved or zb-h1 (the timeline drawn; Part 3 runs all four)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/models/pipeline_gpt.hpp"
#include "shardalg/pipeline/executor.hpp"
#include "shardalg/pipeline/simulate.hpp"

using namespace shardalg;
namespace pl = shardalg::pipeline;

namespace {

struct Args {
  int pp = 4, m = 8, v = 2, layers = 8;
  std::string schedule = "1f1b";
  bool measure = false;
};

[[noreturn]] void usage(const char* flag) {
  std::fprintf(stderr, "21_pipeline: unknown flag %s (--pp --m --v --schedule --layers --measure)\n", flag);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--measure")) {
      a.measure = true;
      continue;
    }
    if (i + 1 >= argc) usage(argv[i]);
    const char* v = argv[++i];
    if (!std::strcmp(argv[i - 1], "--pp")) a.pp = std::atoi(v);
    else if (!std::strcmp(argv[i - 1], "--m")) a.m = std::atoi(v);
    else if (!std::strcmp(argv[i - 1], "--v")) a.v = std::atoi(v);
    else if (!std::strcmp(argv[i - 1], "--layers")) a.layers = std::atoi(v);
    else if (!std::strcmp(argv[i - 1], "--schedule")) a.schedule = v;
    else usage(argv[i - 1]);
  }
  const bool known = a.schedule == "afab" || a.schedule == "1f1b" || a.schedule == "interleaved" || a.schedule == "zb-h1";
  if (!known || a.pp < 1 || a.m < 1 || a.v < 1 || a.layers < 1) {
    std::fprintf(stderr, "21_pipeline: need --pp, --m, --v, --layers >= 1 and --schedule afab|1f1b|interleaved|zb-h1\n");
    std::exit(2);
  }
  return a;
}

/// `s` padded with spaces to `w` characters (UTF-8: "−" and "·" are one character each).
std::string pad(const std::string& s, std::size_t w) {
  std::size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return s + std::string(n < w ? w - n : 0, ' ');
}

const std::vector<std::string> kSchedules = {"afab", "1f1b", "interleaved", "zb-h1"};

/// The schedule by name; the interleaved one only where Megatron-LM's constraint holds (m % p == 0).
bool has(const std::string& s, int p, int m, int v) { return s != "interleaved" || (v > 1 && m % p == 0); }
pl::Schedule make(const std::string& s, int p, int m, int v) {
  if (s == "afab") return pl::afab(p, m);
  if (s == "1f1b") return pl::one_f_one_b(p, m);
  if (s == "interleaved") return pl::interleaved_1f1b(p, m, v);
  return pl::zb_h1(p, m);
}
int chunks(const std::string& s, int v) { return s == "interleaved" ? v : 1; }

/// The closed forms (docs/pipeline.md §3), unit costs: bubble / ideal as num/den, and the chunk
/// activations rank r holds at most.
std::pair<long, long> bubble_formula(const std::string& s, int p, int m, int v) {
  if (s == "interleaved") return {p - 1, static_cast<long>(v) * m};  // (p − 1)/(v·m)
  if (s == "zb-h1") return {p - 1, 3L * m};                          // (p − 1)/(3m), m ≥ p
  return {p - 1, m};                                                 // (p − 1)/m
}
int in_flight_formula(const std::string& s, int p, int m, int v, int r) {
  if (s == "afab") return m;                                         // every forward before any backward
  if (s == "1f1b") return std::min(p - r, m);                        // warm-up p − r − 1, then one more
  if (s == "zb-h1") return std::min(p, m);                           // p − r, plus r delayed Ws
  return std::min(2 * (p - r - 1) + (v - 1) * p + 1, v * m);         // interleaved (v·m when m = p)
}

/// One character per 1/v time unit: F, B, W (a fused BW reads "BW"), '.' idle; the micro-batch below.
void draw(const pl::Schedule& s, const pl::Simulation& sim) {
  const int v = s.v, width = static_cast<int>(std::lround(sim.makespan * v));
  std::string ruler(static_cast<std::size_t>(width) + 1, ' ');
  for (int u = 0; u * v <= width; u += 5) {
    const std::string l = std::to_string(u);
    for (std::size_t k = 0; k < l.size() && u * v + k < ruler.size(); ++k) ruler[static_cast<std::size_t>(u * v) + k] = l[k];
  }
  while (!ruler.empty() && ruler.back() == ' ') ruler.pop_back();
  std::printf("  time    %s\n", ruler.c_str());
  for (int r = 0; r < s.p; ++r) {
    std::string kind(static_cast<std::size_t>(width), '.'), mb(static_cast<std::size_t>(width), ' '), ch = mb;
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const pl::Op& op = s.ranks[r][i];
      const auto a = static_cast<std::size_t>(std::lround(sim.times[r][i].start * v));
      const auto b = static_cast<std::size_t>(std::lround(sim.times[r][i].end * v));
      for (std::size_t k = a; k < b; ++k) {
        kind[k] = op.kind == pl::OpKind::BW ? (k - a < (b - a) / 2 ? 'B' : 'W') : pl::kind_name(op.kind)[0];
        mb[k] = "0123456789abcdefghijklmnopqrstuvwxyz"[op.microbatch % 36];
        ch[k] = static_cast<char>('0' + op.chunk % 10);
      }
    }
    while (!mb.empty() && mb.back() == ' ') mb.pop_back();
    while (!ch.empty() && ch.back() == ' ') ch.pop_back();
    std::printf("  rank %d  %s\n    mb    %s\n", r, kind.c_str(), mb.c_str());
    if (v > 1) std::printf("    chunk %s\n", ch.c_str());
  }
}

nn::GptConfig config(const Args& a) {
  nn::GptConfig c;
  c.vocab = 61, c.hidden = 16, c.heads = 4, c.ffn = 32, c.layers = a.layers, c.seq = 8;
  c.batch = a.m;  // one sequence per micro-batch
  c.vocab_divisor = 4;
  c.init_std = 0.2;  // large enough that every gradient is well above rounding
  return c;
}

/// "E", then S stages of layers/S decoder layers each, "|" between stages, "L".
std::string layout(int stages, int layers) {
  std::string out = "E";
  for (int s = 0; s < stages; ++s) {
    out += std::string(static_cast<std::size_t>(layers / stages), 't');
    out += s + 1 < stages ? "|" : "L";
  }
  return out;
}

struct Run {
  double loss = 0;
  nn::Masters grads;               // every stage's tensors (the tied embedding from pp rank 0)
  std::vector<std::size_t> peak;   // per pp rank
  std::vector<std::size_t> sends;  // per pp rank: block messages on the pp axis
  std::vector<std::size_t> bytes;  // their bytes
  double makespan = 0, busy = 0;   // measured seconds
};

Run run_pipeline(const nn::GptConfig& c, const std::string& name, int p, int v, const std::vector<std::int64_t>& x,
                 const std::vector<std::int64_t>& y) {
  Run out;
  out.peak.assign(static_cast<std::size_t>(p), 0);
  out.sends = out.bytes = out.peak;
  std::vector<nn::Masters> grads(static_cast<std::size_t>(p));
  std::vector<double> loss(static_cast<std::size_t>(p)), end(loss.size()), busy(loss.size());
  run_ranks(p, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(comm, ledger), {{"pp", p}, {"tp", 1}});
    auto model = nn::PipelineGpt<double>::init(c, pl::parse_layout(layout(p * v, static_cast<int>(c.layers)), p, c.layers), mesh);
    const int m = static_cast<int>(c.batch);
    model.set_microbatches(nn::split_microbatches(x, y, c.seq, m), nn::LossScaling::tokens, static_cast<Index>(y.size()));
    pl::Executor<nn::PipelineGpt<double>> ex(mesh.group("pp"), make(name, p, m, v), {});
    const pl::RunStats st = ex.run(model);
    const auto r = static_cast<std::size_t>(comm.rank());
    loss[r] = model.finish();
    grads[r] = model.grad_masters();
    out.peak[r] = st.peak_bytes;
    end[r] = st.end_seconds, busy[r] = st.compute_seconds;
    for (const auto& e : ledger.entries())
      if (e.axis == "pp" && e.kind == CollectiveKind::send) ++out.sends[r], out.bytes[r] += e.bytes;
  });
  out.loss = loss[0];
  for (int r = p - 1; r >= 0; --r)
    for (const auto& [k, g] : grads[static_cast<std::size_t>(r)]) out.grads[k] = g;
  out.makespan = *std::max_element(end.begin(), end.end());
  out.busy = *std::max_element(busy.begin(), busy.end());
  return out;
}

/// max over tensors of max|a − e| / max|e| (a tensor whose gradient vanishes analytically, below
/// 1e-9 of the model's largest, against the model's largest); a missing tensor is infinite.
double worst(const nn::Masters& got, const nn::Masters& want) {
  double model = 0, w = 0;
  for (const auto& [k, e] : want) model = std::max(model, e.cwiseAbs().maxCoeff());
  for (const auto& [k, e] : want) {
    const auto it = got.find(k);
    if (it == got.end() || it->second.rows() != e.rows() || it->second.cols() != e.cols()) return INFINITY;
    const double s = e.cwiseAbs().maxCoeff();
    w = std::max(w, (it->second - e).cwiseAbs().maxCoeff() / (s > 1e-9 * model ? s : model));
  }
  return got.size() == want.size() ? w : INFINITY;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int p = a.pp, m = a.m, v = a.v;

  // ---- Part 1: the four schedules, simulated, against the closed forms -------------------------
  std::printf("Part 1: the schedules simulated at p = %d, m = %d (interleaved: v = %d), t_F = t_B = t_W = 1\n\n", p, m, v);
  std::printf("  schedule           makespan   bubble / ideal   closed form          in flight per rank (formula)\n");
  for (const auto& name : kSchedules) {
    if (!has(name, p, m, v)) {
      std::printf("  %-17s  (needs v > 1 and m a multiple of p)\n", name.c_str());
      continue;
    }
    const pl::Schedule s = make(name, p, m, v);
    const pl::Simulation sim = pl::simulate(s);
    auto [num, den] = bubble_formula(name, p, m, v);
    const long g = std::gcd(num, den);
    const bool zb_short = name == "zb-h1" && m < p;  // the forwards cannot cover the first gradient's wait
    const double want = zb_short ? (2.0 * p + 2.0 * m - 1 - 3.0 * m) / (3.0 * m) : double(num) / double(den);
    std::string flight, formula;
    bool flight_ok = true;
    for (int r = 0; r < p; ++r) {
      const int f = in_flight_formula(name, p, m, s.v, r);
      flight += (r ? " " : "") + std::to_string(sim.peak_in_flight[static_cast<std::size_t>(r)]);
      formula += (r ? " " : "") + std::to_string(f);
      flight_ok = flight_ok && sim.peak_in_flight[static_cast<std::size_t>(r)] == f;
    }
    char frac[48];
    if (zb_short) std::snprintf(frac, sizeof frac, "(2p − m − 1)/(3m)");
    else std::snprintf(frac, sizeof frac, "%s = %ld/%ld", name == "interleaved" ? "(p−1)/(v·m)" : name == "zb-h1" ? "(p−1)/(3m)" : "(p−1)/m", num / g, den / g);
    std::printf("  %-17s  %8g   %14.6f   %s  %s (%s)\n", s.name.c_str(), sim.makespan, sim.bubble_fraction, pad(frac, 19).c_str(),
                flight.c_str(), formula.c_str());
    example::check(std::abs(sim.bubble_fraction - want) <= 1e-12, s.name + ": simulated bubble = closed form");
    example::check(flight_ok, s.name + ": activations in flight per rank = the formula");
  }
  std::printf("\n  bubble / ideal = (makespan − m·(t_F + t_B + t_W)) / (m·(t_F + t_B + t_W)); in flight: chunk\n"
              "  activations (interleaved: 1/v of a stage each) taken by F and freed by BW or W.\n\n");

  // ---- Part 2: one timeline ----------------------------------------------------------------------
  const int tv = chunks(a.schedule, v);
  if (!has(a.schedule, p, m, v)) {
    std::fprintf(stderr, "21_pipeline: the interleaved schedule needs v > 1 and m a multiple of p\n");
    return 2;
  }
  const pl::Schedule shown = make(a.schedule, p, m, tv);
  const pl::Simulation sim = pl::simulate(shown);
  std::printf("Part 2: %s, p = %d, m = %d, v = %d: makespan %g; one character = %s\n\n", shown.name.c_str(), p, m, tv,
              sim.makespan, tv == 1 ? "1 time unit" : ("1/" + std::to_string(tv) + " time unit").c_str());
  draw(shown, sim);
  std::printf("\n");

  // ---- Part 3: the executor on threads against the one-rank GPT ----------------------------------
  const nn::GptConfig c = config(a);
  if (a.layers % (p * v) != 0 || a.layers % p != 0) {
    std::fprintf(stderr, "21_pipeline: --layers %d must be a multiple of pp·v = %d\n", a.layers, p * v);
    return 2;
  }
  std::vector<std::int64_t> x(static_cast<std::size_t>(c.tokens())), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int64_t>(example::splitmix64(2 * i) % static_cast<std::uint64_t>(c.vocab));
    y[i] = static_cast<std::int64_t>(example::splitmix64(2 * i + 1) % static_cast<std::uint64_t>(c.vocab));
  }
  auto gpt = nn::Gpt<double>::init(c, Group(SelfComm{}));
  const double loss = gpt.forward_backward(x, y);
  const nn::Masters want = gpt.grad_masters();
  const std::size_t msg = static_cast<std::size_t>(c.seq * c.hidden) * sizeof(double);  // X[R] of one micro-batch
  std::printf("Part 3: nn::PipelineGpt on %d ThreadComm ranks (%d layers, hidden %ld, %d micro-batches of one sequence of %ld), double\n\n",
              p, a.layers, static_cast<long>(c.hidden), m, static_cast<long>(c.seq));
  std::printf("  one-rank nn::Gpt on the whole batch: loss %.15f\n\n", loss);
  std::printf("  schedule           loss − Gpt's   worst gradient   sends per rank (formula)   peak bytes held per rank\n");
  std::map<std::string, Run> runs;
  for (const auto& name : kSchedules) {
    if (!has(name, p, m, v)) continue;
    const int cv = chunks(name, v);
    const Run r = run_pipeline(c, name, p, cv, x, y);
    runs[name] = r;
    // Sends: every F not on the last stage sends X_j forward, every backward not on stage 0 sends
    // dX_j back; rank r holds stages c·p + r: 2·v·m ops that send, less m on rank 0 and on rank p − 1.
    std::string sends, formula, peaks;
    bool sends_ok = true;
    for (int q = 0; q < p; ++q) {
      const std::size_t f = static_cast<std::size_t>(2 * cv * m - (q == 0 ? m : 0) - (q == p - 1 ? m : 0));
      sends += (q ? " " : "") + std::to_string(r.sends[static_cast<std::size_t>(q)]);
      formula += (q ? " " : "") + std::to_string(f);
      peaks += (q ? " " : "") + std::to_string(r.peak[static_cast<std::size_t>(q)]);
      sends_ok = sends_ok && r.sends[static_cast<std::size_t>(q)] == f && r.bytes[static_cast<std::size_t>(q)] == f * msg;
    }
    const double err = worst(r.grads, want);
    std::printf("  %-17s  %12.1e   %14.1e   %s   %s\n", make(name, p, m, cv).name.c_str(), r.loss - loss, err,
                pad(sends + " (" + formula + ")", 24).c_str(), peaks.c_str());
    example::check(std::abs(r.loss - loss) <= 1e-12 * std::abs(loss) && err <= 1e-12,
                   make(name, p, m, cv).name + ": loss and every gradient = the one-rank Gpt's (≤ 1e-12)");
    example::check(sends_ok, make(name, p, m, cv).name + ": each send is one micro-batch's X[R] (seq·h·8 = " + std::to_string(msg) + " B)");
  }
  // Peak bytes: AFAB holds m micro-batches' state on every rank, 1F1B min(p − r, m). Each stage's
  // bytes per micro-batch: AFAB's peak ÷ m; 1F1B's peak over that is the count in flight.
  std::printf("\n  peak bytes, 1F1B ÷ (AFAB ÷ m): the micro-batches 1F1B holds, beside min(p − r, m)\n  ");
  bool ratio_ok = true;
  for (int q = 0; q < p; ++q) {
    const std::size_t afab = runs["afab"].peak[static_cast<std::size_t>(q)], one = runs["1f1b"].peak[static_cast<std::size_t>(q)];
    const int n = std::min(p - q, m);
    std::printf("  rank %d: %.2f (%d)", q, double(one) * m / double(afab), n);
    ratio_ok = ratio_ok && one * static_cast<std::size_t>(m) == afab * static_cast<std::size_t>(n);  // exact, in bytes
  }
  std::printf("\n");
  example::check(ratio_ok, "1F1B's peak bytes × m = AFAB's × min(p − r, m) on every rank (exact)");

  if (a.measure) {
    // Timing wants ops long enough to dwarf the executor's own costs: hidden 128, sequences of 128.
    nn::GptConfig big = c;
    big.hidden = 128, big.heads = 8, big.ffn = 512, big.seq = 128;
    std::vector<std::int64_t> bx(static_cast<std::size_t>(big.tokens())), by(bx.size());
    for (std::size_t i = 0; i < bx.size(); ++i) bx[i] = x[i % x.size()], by[i] = y[i % y.size()];
    std::printf("\n  measured (ThreadComm, wall clock; hidden 128, %d sequences of 128): bubble = (makespan − busiest\n"
                "  rank's compute) / that compute, beside the simulator's with unit costs\n", m);
    for (const auto& name : kSchedules) {
      if (!has(name, p, m, v)) continue;
      const int cv = chunks(name, v);
      const Run r = run_pipeline(big, name, p, cv, bx, by);
      std::printf("  %-17s  measured %.3f   simulated %.4f   (makespan %.3f s)\n", make(name, p, m, cv).name.c_str(),
                  (r.makespan - r.busy) / r.busy, pl::simulate(make(name, p, m, cv)).bubble_fraction, r.makespan);
    }
  }
  return example::finish("21_pipeline");
}
