// tests/pipeline/pipeline_cases.hpp — the DP × PP × TP runs of issue 16, shared by
// test_pipeline_exec.cpp (threads) and test_pipeline_exec_mpi.cpp (mpirun -np 8): a tiny GPT
// from random logical masters, a global batch cut into data-parallel replicas and micro-batches,
// nn::PipelineGpt run by pipeline::Executor under one schedule on one rank of a dp × pp × tp mesh,
// and the dense reference (reference/dense_layers.hpp: plain Eigen, an independent code path) of the
// whole batch — one pass for fixed lengths, one pass per micro-batch for variable lengths.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "shardalg/nn/models/pipeline_gpt.hpp"
#include "shardalg/pipeline/executor.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "../gpt/gpt_cases.hpp"

namespace pcases {

using namespace shardalg;
using M = Eigen::MatrixXd;
using Ids = std::vector<std::int64_t>;

/// What one run varies.
struct Setup {
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;        // context parallelism: a cp axis between pp and tp
  bool a2a = false;  // attention over cp by all-to-all (else the ring)
  nn::Recompute recompute = nn::Recompute::none;
  std::string schedule = "1F1B";  // AFAB, 1F1B, interleaved (v = 2), ZB-H1
  int m = 4;                      // micro-batches per replica
  bool dealloc = false, varlen = false, overlap = false, sp = false;
  nn::LossScaling scaling = nn::LossScaling::tokens;
  double dropout = 0.1;  // variable lengths run without (the dense reference's masks start at row 0)
  int ignored = -1;      // a global token index whose target is ignore_index (−1: none)
  int heads = 4;         // and hidden = 4·heads: 6 heads for tp 3
  Index vocab_divisor = 4;
  [[nodiscard]] int v() const { return schedule == "interleaved" ? 2 : 1; }
  [[nodiscard]] std::string name() const {
    return shardalg::detail::cat("dp ", dp, " pp ", pp, cp > 1 ? shardalg::detail::cat(" cp ", cp, a2a ? " a2a" : " ring") : "", " tp ", tp, " ", schedule, " m ", m, dealloc ? " dealloc" : "",
                                 varlen ? " varlen" : "", overlap ? " overlap" : "", sp ? " sp" : "");
  }
};

inline constexpr int kLayers = 8;
inline constexpr Index kSeq = 8;

inline nn::GptConfig config(const Setup& s) {
  nn::GptConfig c;
  c.vocab = 37, c.hidden = 4 * s.heads, c.heads = s.heads, c.layers = kLayers, c.seq = kSeq, c.ffn = 32;
  c.batch = s.dp * s.m;  // one sequence per micro-batch
  c.dropout = s.varlen ? 0.0 : s.dropout;
  c.sp = s.sp;
  c.recompute = s.recompute;
  c.eps = 1.0 / 131072;
  c.seed = 91;
  c.vocab_divisor = s.vocab_divisor;
  return c;
}

/// "E" + the layers in S = pp·v stages of kLayers/S each + "L", written with repeats.
inline std::string layout(const Setup& s) {
  const int S = s.pp * s.v(), k = kLayers / S;
  std::string out = "Et*" + std::to_string(k);
  if (S > 1) out += "|(t*" + std::to_string(k) + "|)*" + std::to_string(S - 2) + ",t*" + std::to_string(k);
  return out + "L";
}

inline pipeline::Schedule schedule(const Setup& s) {
  if (s.schedule == "AFAB") return pipeline::afab(s.pp, s.m);
  if (s.schedule == "1F1B") return pipeline::one_f_one_b(s.pp, s.m);
  if (s.schedule == "interleaved") return pipeline::interleaved_1f1b(s.pp, s.m, 2);
  return pipeline::zb_h1(s.pp, s.m);
}

/// Sequence length of micro-batch j of replica d: kSeq, or cycling 8, 4, 6, 2 (variable).
inline Index seq_of(const Setup& s, int d, int j) {
  static constexpr Index cycle[4] = {8, 4, 6, 2};
  return s.varlen ? cycle[(d * s.m + j + d) % 4] : kSeq;
}

/// Logical masters by nn::Gpt's names (random, O(1) values).
inline nn::Masters masters(const nn::GptConfig& c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto rnd = [&](Index r, Index k, double scale, double shift = 0.0) {
    M m(r, k);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < k; ++j) m(i, j) = shift + scale * u(gen);
    return m;
  };
  const Index h = c.hidden, f = c.ffn_size();
  nn::Masters m;
  m["embedding"] = rnd(c.vocab, h, 0.5);
  auto norm = [&](const std::string& n) {
    m[n + ".gamma"] = rnd(1, h, 0.2, 1.0);
    m[n + ".beta"] = rnd(1, h, 0.2);
  };
  for (Index l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    norm(p + "ln1");
    m[p + "attn.wq"] = rnd(h, h, 0.4), m[p + "attn.wk"] = rnd(h, h, 0.4), m[p + "attn.wv"] = rnd(h, h, 0.4);
    m[p + "attn.wo"] = rnd(h, h, 0.3);
    m[p + "attn.bq"] = rnd(1, h, 0.2), m[p + "attn.bk"] = rnd(1, h, 0.2), m[p + "attn.bv"] = rnd(1, h, 0.2);
    m[p + "attn.bo"] = rnd(1, h, 0.2);
    norm(p + "ln2");
    m[p + "mlp.w1"] = rnd(h, f, 0.4), m[p + "mlp.b1"] = rnd(1, f, 0.2);
    m[p + "mlp.w2"] = rnd(f, h, 0.3), m[p + "mlp.b2"] = rnd(1, h, 0.2);
  }
  norm("final_norm");
  return m;
}

/// The global batch: replica d's micro-batch j has seq_of(s, d, j) tokens (one sequence); its
/// tokens come after those of every (d', j') before it in (d, j) order.
struct Batch {
  std::vector<std::vector<nn::MicroBatch>> replicas;  // [d][j]
  Index counted = 0;                                   // targets not ignored, whole batch
  Ids tokens, targets;                                 // all of it, concatenated (fixed lengths: the dense batch)
};
inline Batch batch(const Setup& s, const nn::GptConfig& c, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> tok(0, c.vocab - 1);
  Batch b;
  Index row = 0;
  for (int d = 0; d < s.dp; ++d) {
    b.replicas.emplace_back();
    for (int j = 0; j < s.m; ++j) {
      nn::MicroBatch mb;
      mb.seq = seq_of(s, d, j), mb.sequences = 1, mb.row_base = row;
      for (Index k = 0; k < mb.seq; ++k) {
        mb.tokens.push_back(tok(gen));
        mb.targets.push_back(row + k == s.ignored ? c.ignore_index : tok(gen));
        b.counted += mb.targets.back() != c.ignore_index;
      }
      b.tokens.insert(b.tokens.end(), mb.tokens.begin(), mb.tokens.end());
      b.targets.insert(b.targets.end(), mb.targets.begin(), mb.targets.end());
      row += mb.rows();
      b.replicas.back().push_back(std::move(mb));
    }
  }
  return b;
}

/// The dense loss and gradients of the whole batch (the global mean over counted targets).
struct Dense {
  double loss = 0;
  nn::Masters grads;
};
inline Dense dense(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, const Batch& b, std::uint64_t seed0) {
  Dense out;
  if (!s.varlen) {
    const auto g = gt::dense_gpt(c, m, seed0, kSeq);
    const auto o = ref::gpt_forward(g, b.tokens, b.targets, 0.0, c.ignore_index);
    out.loss = o.mean;
    out.grads = gt::dense_grads(c, ref::gpt_backward(g, b.tokens, o));
    return out;
  }
  // Variable lengths: one pass per micro-batch (its own attention length), weighted by its share
  // of the counted targets; no dropout.
  for (const auto& rep : b.replicas)
    for (const auto& mb : rep) {
      const auto g = gt::dense_gpt(c, m, seed0, mb.seq);
      const auto o = ref::gpt_forward(g, mb.tokens, mb.targets, 0.0, c.ignore_index);
      const double w = static_cast<double>(o.count) / static_cast<double>(b.counted);
      out.loss += w * o.mean;
      const auto gr = gt::dense_grads(c, ref::gpt_backward(g, mb.tokens, o), w);
      for (const auto& [name, x] : gr) {
        auto it = out.grads.find(name);
        if (it == out.grads.end()) out.grads.emplace(name, x);
        else it->second += x;
      }
    }
  return out;
}

/// LossScaling::microbatches' reference: the dense model on each micro-batch alone (no dropout),
/// each micro-batch's mean and gradients weighted 1/(m·dp): the mean of the means.
inline Dense dense_per_microbatch(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, const Batch& b) {
  Dense out;
  const auto g = gt::dense_gpt(c, m, 0, kSeq);
  for (const auto& rep : b.replicas)
    for (const auto& mb : rep) {
      const auto o = ref::gpt_forward(g, mb.tokens, mb.targets, 0.0, c.ignore_index);
      const double w = 1.0 / (s.m * s.dp);
      out.loss += w * o.mean;
      for (const auto& [name, x] : gt::dense_grads(c, ref::gpt_backward(g, mb.tokens, o), w)) {
        auto it = out.grads.find(name);
        if (it == out.grads.end()) out.grads.emplace(name, x);
        else it->second += x;
      }
    }
  return out;
}

/// One rank's run: the loss after finish() and the rank's gradients (gathered over tp).
struct RankOut {
  double loss = 0;
  nn::Masters grads;
  pipeline::RunStats stats;
};
template <bool SP>
RankOut run_rank(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, const Batch& b, const Mesh& mesh) {
  const auto lay = pipeline::parse_layout(layout(s), s.pp, c.layers);
  auto model = nn::PipelineGpt<double, SP>::init(c, lay, mesh, &m, s.a2a ? nn::CpAlgo::all_to_all : nn::CpAlgo::ring);
  const int d = mesh.has("dp") ? mesh.coord("dp") : 0;
  model.set_microbatches(b.replicas[static_cast<std::size_t>(d)], s.scaling, b.counted);
  pipeline::ExecOptions o;
  o.p2p.variable_seq_lengths = s.varlen;
  o.deallocate_outputs = s.dealloc;
  o.overlap_p2p = s.overlap;
  pipeline::Executor<nn::PipelineGpt<double, SP>> ex(mesh.group("pp"), schedule(s), o);
  RankOut out;
  out.stats = ex.run(model);
  out.loss = model.finish();
  out.grads = model.grad_masters();
  return out;
}
inline RankOut run_rank(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, const Batch& b, const Mesh& mesh) {
  return s.sp ? run_rank<true>(s, c, m, b, mesh) : run_rank<false>(s, c, m, b, mesh);
}

/// `steps` optimizer steps of the pipeline on this rank (a fresh batch per step from seed 1000 +
/// step, the dropout masks of nn::Gpt's step), with Adam (`zero` 0), ZeRO-1 (1: the ShardedAdam over
/// the data group, buckets of `bucket` values) or ZeRO-3 (3: the parameters sharded too), clipping
/// at 1; the global loss of every step and, in `state_bytes`, the optimizer's bytes on this rank.
template <bool SP>
std::vector<double> train_rank(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, const Mesh& mesh, int steps,
                               int zero, std::size_t bucket = 4096, std::size_t* state_bytes = nullptr,
                               std::optional<nn::PipelineGpt<double, SP>>* keep = nullptr) {
  const auto lay = pipeline::parse_layout(layout(s), s.pp, c.layers);
  auto model = nn::PipelineGpt<double, SP>::init(c, lay, mesh, &m);
  if (zero == 1) model.shard_optimizer_state(bucket);
  if (zero == 3) model.shard_parameters(bucket);
  nn::Adam<double> adam(gt::adam_options());
  nn::ShardedAdam<double> sharded(gt::adam_options());
  const int d = mesh.has("dp") ? mesh.coord("dp") : 0;
  pipeline::Executor<nn::PipelineGpt<double, SP>> ex(mesh.group("pp"), schedule(s), {});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto b = batch(s, c, 1000 + static_cast<std::uint64_t>(step));
    model.set_step(step);
    model.set_microbatches(b.replicas[static_cast<std::size_t>(d)], s.scaling, b.counted);
    ex.run(model);
    losses.push_back(model.finish());
    if (zero) model.step(sharded, 1.0);
    else model.step(adam, 1.0);
  }
  if (state_bytes) {
    *state_bytes = sharded.state_bytes();
    if (!zero)
      for (const auto& [name, mo] : adam.state()) *state_bytes += static_cast<std::size_t>(mo.m.size() + mo.v.size()) * sizeof(double);
  }
  if (keep) keep->emplace(std::move(model));
  return losses;
}

/// The one-rank reference of train_rank: nn::Gpt from the same masters on each step's whole batch,
/// Adam, clipping at 1 (an independent path: no stages, no buckets, no mesh).
inline std::vector<double> train_reference(const Setup& s, const nn::GptConfig& c, const nn::Masters& m, int steps) {
  nn::GptConfig plain = c;
  plain.sp = false;
  auto g = nn::Gpt<double>::from_masters(plain, m, Group(SelfComm{}));
  nn::Adam<double> adam(gt::adam_options());
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto b = batch(s, c, 1000 + static_cast<std::uint64_t>(step));
    losses.push_back(g.forward_backward(b.tokens, b.targets));
    g.step(adam, 1.0);
  }
  return losses;
}

/// Normwise relative error of every dense gradient against the merged pipeline gradients,
/// max|a − e| / max|e| per tensor; a missing tensor is infinity. A gradient that vanishes
/// analytically (the key bias: softmax ignores a shift of a row, so dense and pipeline both hold
/// rounding noise) is compared against the largest gradient of the model instead of its own.
/// Returns the worst and its name.
inline std::pair<double, std::string> worst_error(const nn::Masters& got, const nn::Masters& want) {
  double model_scale = 0;
  for (const auto& [name, e] : want) model_scale = std::max(model_scale, e.cwiseAbs().maxCoeff());
  double worst = 0;
  std::string at = "-";
  for (const auto& [name, e] : want) {
    auto it = got.find(name);
    double err = INFINITY;
    if (it != got.end() && it->second.rows() == e.rows() && it->second.cols() == e.cols()) {
      const double scale = e.cwiseAbs().maxCoeff();
      err = (it->second - e).cwiseAbs().maxCoeff() / (scale > 1e-9 * model_scale ? scale : model_scale);
    }
    if (!(err <= worst)) worst = err, at = name;
  }
  return {worst, at};
}

}  // namespace pcases
