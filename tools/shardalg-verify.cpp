// shardalg-verify — build a small GPT from flags, run one forward and one backward pass sharded
// (ThreadComm ranks in this process, or MpiComm ranks under mpirun) and dense (the independent
// plain-Eigen reference, shardalg/reference/dense.hpp), and report per layer:
//
//   * the normwise relative error of the output and of every gradient against the dense reference
//     (pass: ≤ 1e-12 in double, ≤ 1e-5 in float);
//   * the collectives the ledger recorded (count and bytes, forward and backward) beside the
//     analytic ones (cost/transformer.hpp and the layers' documented counts) — they must be equal;
//   * the communication time the α-β model predicts (α, β fitted at start-up on the same group)
//     beside the measured time of those collectives (reported, not asserted);
//   * the memory each rank holds (parameters, gradients, activations kept for backward), summed
//     from the tensors themselves.
//
// Exit status: 0 when every check passes, 1 when one fails, 2 for a bad configuration (one line
// on stderr naming the values), 3 for an internal error.
//
//   shardalg-verify                          TP=2 on threads, a 2-layer GPT, double
//   shardalg-verify --tp 4 --dtype float --json
//   shardalg-verify --explain                block 0's derivation as executed
//   shardalg-verify --trace trace.json       Chrome trace (Perfetto / chrome://tracing)
//   mpirun -np 2 shardalg-verify --backend mpi
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "shardalg/cost/cost.hpp"
#include "shardalg/nn/cross_entropy.hpp"
#include "shardalg/nn/embedding.hpp"
#include "shardalg/nn/gpt.hpp"
#include "shardalg/nn/sp_block.hpp"
#include "shardalg/nn/nn.hpp"
#include "shardalg/reference/dense.hpp"
#include "shardalg/version.hpp"

#if defined(SHARDALG_VERIFY_MPI)
#include "shardalg/comm/mpi.hpp"
#endif

namespace {

using namespace shardalg;
using json = nlohmann::json;
using ref::M;
using shardalg::Index;
using Ids = std::vector<std::int64_t>;

// =================================================================================================
// Options
// =================================================================================================
struct Options {
  int tp = 2;
  bool sp = false;
  int layers = 2;
  Index hidden = 64, heads = 8, groups = 0, ffn = 0, seq = 32, batch = 2, vocab = 1000, vocab_divisor = 128;
  std::string dtype = "double";
  std::uint64_t seed = 1234;
  std::string backend = "thread";
  double dropout = 0.1;
  std::string act = "gelu";
  std::string norm = "layernorm";
  bool no_bias = false;
  bool json = false, explain = false, verbose = false;
  std::string trace;
  std::string progress = "auto";

  [[nodiscard]] Index tokens() const { return batch * seq; }
  [[nodiscard]] Index ffn_size() const { return ffn == 0 ? 4 * hidden : ffn; }
  [[nodiscard]] Index num_groups() const { return groups == 0 ? heads : groups; }
  [[nodiscard]] nn::Activation activation() const {
    return act == "swiglu" ? nn::Activation::swiglu : act == "gelu-erf" ? nn::Activation::gelu_erf : nn::Activation::gelu_tanh;
  }
  [[nodiscard]] nn::NormKind norm_kind() const { return norm == "rmsnorm" ? nn::NormKind::rms : nn::NormKind::layer; }
  [[nodiscard]] bool is_double() const { return dtype == "double"; }
  [[nodiscard]] double tolerance() const { return is_double() ? 1e-12 : 1e-5; }
};

/// A configuration error: printed as one line, exit status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr double kEps = 1.0 / 131072;

const std::string kVersion = std::to_string(SHARDALG_VERSION_MAJOR) + "." + std::to_string(SHARDALG_VERSION_MINOR) + "." +
                             std::to_string(SHARDALG_VERSION_PATCH);  // the norms' ε, exactly representable in float and double

/// The dropout seed of the first step, as nn::Gpt::dropout_seed() computes it (the Gpt row checks
/// that they agree), so that the layer-by-layer run, nn::Gpt and the dense reference share masks.
std::uint64_t drop_seed(const Options& o) { return o.seed ^ 0x9E3779B97F4A7C15ULL; }

nn::BlockConfig block_config(const Options& o, int layer) {
  nn::BlockConfig c;
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.groups = o.num_groups();
  c.seq = o.seq;
  c.ffn = o.ffn_size();
  c.act = o.activation();
  c.norm = o.norm_kind();
  c.bias = !o.no_bias;
  c.eps = kEps;
  c.dropout = o.dropout;
  c.dropout_seed = drop_seed(o);
  c.layer = static_cast<std::uint32_t>(layer);
  return c;
}

/// Everything that can be checked before any rank starts; throws with one line naming the values.
void validate(const Options& o, int p) {
  using shardalg::detail::cat;
  auto positive = [](const char* what, Index v) {
    if (v < 1) throw ConfigError(cat(what, " ", v, " must be at least 1"));
  };
  positive("--tp", p);
  positive("--layers", o.layers);
  positive("--hidden", o.hidden);
  positive("--heads", o.heads);
  positive("--seq", o.seq);
  positive("--batch", o.batch);
  positive("--vocab", o.vocab);
  positive("--vocab-divisor", o.vocab_divisor);
  if (o.groups < 0) throw ConfigError(cat("--groups ", o.groups, " must be 0 (= heads) or positive"));
  if (o.ffn < 0) throw ConfigError(cat("--ffn ", o.ffn, " must be 0 (= 4·hidden) or positive"));
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) throw ConfigError(cat("--dropout ", o.dropout, " is outside [0, 1)"));
  // The layers' own checks, with their own messages (e.g. "Attention: 32 heads are not divisible by
  // tensor-parallel size 6").
  nn::TransformerBlock<double>::check(block_config(o, 0), p);
  const Index padded = nn::padded_vocab(o.vocab, o.vocab_divisor, p);
  nn::VocabParallelEmbedding<double>::check_padding("VocabParallelEmbedding", o.vocab, padded, p);
  if (o.sp) nn::SequenceParallelBlock<double>::check_tokens(o.tokens(), p);
}

// =================================================================================================
// The dense model: masters every rank builds from the seed, and the reference pass (plain Eigen)
// =================================================================================================
struct DenseModel {
  ref::Gpt g;  // reference/dense.hpp's GPT: E, blocks, final norm, embedding dropout
  Ids ids, targets;
};

DenseModel make_model(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  const bool fl = !o.is_double();
  auto round = [&](double v) { return fl ? static_cast<double>(static_cast<float>(v)) : v; };
  auto gen = [&](Index r, Index c, double stdev, double mean = 0.0) {
    M m(r, c);
    for (Index j = 0; j < c; ++j)
      for (Index i = 0; i < r; ++i) m(i, j) = round(mean + stdev * nd(rng));
    return m;
  };
  const Index h = o.hidden, f = o.ffn_size(), d = o.hidden / o.heads, g = o.num_groups();
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu;
  const double is_h = 1.0 / std::sqrt(static_cast<double>(h)), is_f = 1.0 / std::sqrt(static_cast<double>(f));
  auto bias = [&](Index c) { return o.no_bias ? M(M::Zero(1, c)) : gen(1, c, 0.1); };
  auto norm = [&] {
    M gm = gen(1, h, 0.1, 1.0);
    return ref::Norm{gm, center ? gen(1, h, 0.1) : M(M::Zero(1, h)), center, kEps};
  };
  DenseModel m;
  m.g.emb = gen(o.vocab, h, is_h);
  for (int l = 0; l < o.layers; ++l) {
    ref::Block b;
    b.ln1 = norm();
    b.attn = ref::Attn{gen(h, o.heads * d, is_h), bias(o.heads * d), gen(h, g * d, is_h), bias(g * d),
                       gen(h, g * d, is_h),       bias(g * d),        gen(h, h, is_h),     bias(h),
                       o.heads,                   g,                  o.seq};
    b.ln2 = norm();
    b.mlp.w1 = gen(h, f, is_h);
    b.mlp.b1 = bias(f);
    if (glu) {
      b.mlp.wu = gen(h, f, is_h);
      b.mlp.bu = bias(f);
    }
    b.mlp.w2 = gen(f, h, is_f);
    b.mlp.b2 = bias(h);
    b.mlp.act = glu ? ref::Act::swiglu : o.activation() == nn::Activation::gelu_erf ? ref::Act::gelu_erf : ref::Act::gelu_tanh;
    const auto c = block_config(o, l);
    b.p = c.dropout;
    b.seed = c.dropout_seed;
    b.drop_attn = nn::tensor_id(c.layer, nn::TensorKind::dropout_attn);
    b.drop_mlp = nn::tensor_id(c.layer, nn::TensorKind::dropout_mlp);
    m.g.blocks.push_back(std::move(b));
  }
  m.g.final_norm = norm();
  m.g.p_emb = o.dropout;
  m.g.seed = drop_seed(o);
  m.g.drop_emb = nn::tensor_id(0, nn::embedding_dropout_kind);
  std::uniform_int_distribution<std::int64_t> tok(0, o.vocab - 1);
  m.ids.resize(static_cast<std::size_t>(o.tokens()));
  for (auto& t : m.ids) t = tok(rng);
  m.targets.resize(m.ids.size());
  for (std::size_t t = 0; t < m.ids.size(); ++t)  // the next token within a sequence, a random one at its end
    m.targets[t] = (t + 1) % static_cast<std::size_t>(o.seq) != 0 ? m.ids[t + 1] : tok(rng);
  return m;
}

/// The dense pass: reference/dense.hpp's gpt_forward and gpt_backward (plain Eigen, double).
struct DenseRun {
  ref::GptOut out;
  ref::GptGrads grads;
  M dyf;  // the gradient leaving the head into the final norm: dlogits · E
};

DenseRun dense_run(const DenseModel& m) {
  DenseRun r;
  r.out = ref::gpt_forward(m.g, m.ids, m.targets);
  r.grads = ref::gpt_backward(m.g, m.ids, r.out);
  r.dyf = r.out.dlogits * m.g.emb;
  return r;
}

/// The dense model as nn::Gpt's logical masters (names as Gpt::visit_params enumerates them).
nn::Masters to_masters(const Options& o, const ref::Gpt& g) {
  nn::Masters m;
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu,
             bias = !o.no_bias;
  auto norm = [&](const std::string& n, const ref::Norm& x) {
    m[n + ".gamma"] = x.gamma;
    if (center) m[n + ".beta"] = x.beta;
  };
  m["embedding"] = g.emb;
  for (std::size_t l = 0; l < g.blocks.size(); ++l) {
    const auto& b = g.blocks[l];
    const std::string pre = "layers." + std::to_string(l) + ".";
    norm(pre + "ln1", b.ln1);
    norm(pre + "ln2", b.ln2);
    m[pre + "attn.wq"] = b.attn.wq, m[pre + "attn.wk"] = b.attn.wk, m[pre + "attn.wv"] = b.attn.wv, m[pre + "attn.wo"] = b.attn.wo;
    m[pre + "mlp.w1"] = b.mlp.w1, m[pre + "mlp.w2"] = b.mlp.w2;
    if (glu) m[pre + "mlp.w_up"] = b.mlp.wu;
    if (bias) {
      m[pre + "attn.bq"] = b.attn.bq, m[pre + "attn.bk"] = b.attn.bk, m[pre + "attn.bv"] = b.attn.bv, m[pre + "attn.bo"] = b.attn.bo;
      m[pre + "mlp.b1"] = b.mlp.b1, m[pre + "mlp.b2"] = b.mlp.b2;
      if (glu) m[pre + "mlp.b_up"] = b.mlp.bu;
    }
  }
  norm("final_norm", g.final_norm);
  return m;
}
/// Logical tensors that one physical parameter holds, side by side under the parameter's name:
/// attn.{wq,wk,wv} → attn.qkv.weight, attn.{bq,bk,bv} → attn.qkv.bias, mlp.{w1,w_up} → mlp.fc1.weight,
/// mlp.{b1,b_up} → mlp.fc1.bias; the rest keep their names.
nn::Masters fuse_parts(const nn::Masters& in) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> groups{
      {{"attn.wq", "attn.wk", "attn.wv"}, "attn.qkv.weight"},
      {{"attn.bq", "attn.bk", "attn.bv"}, "attn.qkv.bias"},
      {{"mlp.w1", "mlp.w_up"}, "mlp.fc1.weight"},
      {{"mlp.b1", "mlp.b_up"}, "mlp.fc1.bias"}};
  nn::Masters out = in;
  for (const auto& [name, m] : in) {
    const auto dot = name.rfind('.', name.rfind('.') - 1);  // "layers.3." | "attn.wq"
    if (dot == std::string::npos) continue;
    const std::string pre = name.substr(0, dot + 1), leaf = name.substr(dot + 1);
    for (const auto& [parts, fused] : groups) {
      if (parts[0] != leaf) continue;
      std::vector<M> blocks;
      for (const auto& part : parts) {
        auto it = in.find(pre + part);
        if (it == in.end()) continue;
        blocks.push_back(it->second);
        out.erase(pre + part);
      }
      Index cols = 0;
      for (const auto& b : blocks) cols += b.cols();
      M f(blocks[0].rows(), cols);
      Index c = 0;
      for (const auto& b : blocks) f.middleCols(c, b.cols()) = b, c += b.cols();
      out[pre + fused] = f;
    }
  }
  return out;
}

/// The dense gradients under the same names.
nn::Masters grad_masters(const Options& o, const ref::GptGrads& g) {
  nn::Masters m;
  const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu,
             bias = !o.no_bias;
  auto norm = [&](const std::string& n, const ref::NormGrads& x) {
    m[n + ".gamma"] = x.dgamma;
    if (center) m[n + ".beta"] = x.dbeta;
  };
  m["embedding"] = g.demb;
  for (std::size_t l = 0; l < g.blocks.size(); ++l) {
    const auto& b = g.blocks[l];
    const std::string pre = "layers." + std::to_string(l) + ".";
    norm(pre + "ln1", b.ln1);
    norm(pre + "ln2", b.ln2);
    m[pre + "attn.wq"] = b.attn.dwq, m[pre + "attn.wk"] = b.attn.dwk, m[pre + "attn.wv"] = b.attn.dwv, m[pre + "attn.wo"] = b.attn.dwo;
    m[pre + "mlp.w1"] = b.mlp.dw1, m[pre + "mlp.w2"] = b.mlp.dw2;
    if (glu) m[pre + "mlp.w_up"] = b.mlp.dwu;
    if (bias) {
      m[pre + "attn.bq"] = b.attn.dbq, m[pre + "attn.bk"] = b.attn.dbk, m[pre + "attn.bv"] = b.attn.dbv, m[pre + "attn.bo"] = b.attn.dbo;
      m[pre + "mlp.b1"] = b.mlp.db1, m[pre + "mlp.b2"] = b.mlp.db2;
      if (glu) m[pre + "mlp.b_up"] = b.mlp.dbu;
    }
  }
  norm("final_norm", g.fn);
  return m;
}

// Physical layouts of the fused weights: the reference's own construction (shardalg/reference).
using ref::hcat;
using ref::qkv_physical;
using ref::swiglu_physical;

// =================================================================================================
// Timing: a Communicator decorator that times every collective, and phase timers
// =================================================================================================
using Clock = std::chrono::steady_clock;

struct TraceEvent {
  std::string name, cat;
  double ts_us = 0, dur_us = 0;
  json args;
};

/// One rank's timeline. `coll` holds the durations of the ledgered (non-verification) collectives
/// in call order — entry i is the ledger's entry i.
struct EventLog {
  Clock::time_point t0 = Clock::now();
  std::vector<TraceEvent> events;
  std::vector<double> coll_seconds;
  Ledger* ledger = nullptr;
  std::map<std::string, double> phase_seconds;  // row key → summed phase time

  [[nodiscard]] double us(Clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - t0).count(); }

  class Phase {
   public:
    Phase(EventLog& log, std::string name, std::string cat, std::string key = {})
        : log_(&log), name_(std::move(name)), cat_(std::move(cat)), key_(std::move(key)), start_(Clock::now()) {}
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;
    ~Phase() {
      const auto end = Clock::now();
      log_->events.push_back({name_, cat_, log_->us(start_), std::chrono::duration<double, std::micro>(end - start_).count(), {}});
      if (!key_.empty()) log_->phase_seconds[key_] += std::chrono::duration<double>(end - start_).count();
    }

   private:
    EventLog* log_;
    std::string name_, cat_, key_;
    Clock::time_point start_;
  };
};

/// The timing decorator (the same pattern as Ledgered<C> in comm/ledger.hpp).
template <Communicator C>
class Timed {
 public:
  Timed(C inner, EventLog& log) : inner_(std::move(inner)), log_(&log) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::uintptr_t key() const { return inner_.key(); }

  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    timed(CollectiveKind::all_reduce, n, t, i, [&] { inner_.all_reduce(b, n, t, op, i); });
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    timed(CollectiveKind::all_gather, n * size(), t, i, [&] { inner_.all_gather(s, r, n, t, i); });
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op, const CallInfo& i = {}) {
    timed(CollectiveKind::reduce_scatter, n * size(), t, i, [&] { inner_.reduce_scatter(s, r, n, t, op, i); });
  }
  void all_to_all(const void* s, void* r, std::size_t n, DType t, const CallInfo& i = {}) {
    timed(CollectiveKind::all_to_all, n * size() * size(), t, i, [&] { inner_.all_to_all(s, r, n, t, i); });
  }
  void broadcast(void* b, std::size_t n, DType t, int root, const CallInfo& i = {}) {
    timed(CollectiveKind::broadcast, n, t, i, [&] { inner_.broadcast(b, n, t, root, i); });
  }
  void send(const void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    timed(CollectiveKind::send, n, t, i, [&] { inner_.send(b, n, t, peer, i); });
  }
  void recv(void* b, std::size_t n, DType t, int peer, const CallInfo& i = {}) {
    timed(CollectiveKind::recv, n, t, i, [&] { inner_.recv(b, n, t, peer, i); });
  }
  void barrier() { inner_.barrier(); }

 private:
  template <class F>
  void timed(CollectiveKind k, std::size_t elements, DType t, const CallInfo& i, F&& f) {
    const auto start = Clock::now();
    f();
    const auto end = Clock::now();
    const double us = std::chrono::duration<double, std::micro>(end - start).count();
    json args{{"elements", elements},
              {"bytes", elements * size_of(t)},
              {"layouts", std::string(i.layout_in) + " -> " + std::string(i.layout_out)},
              {"dtype", std::string(to_string(t))}};
    if (log_->ledger) args["scope"] = log_->ledger->current_scope();
    log_->events.push_back({std::string(to_string(k)), i.verification ? "verification" : "collective", log_->us(start), us,
                            std::move(args)});
    if (!i.verification) log_->coll_seconds.push_back(us * 1e-6);
  }

  C inner_;
  EventLog* log_;
};

// Gathering per-rank data on the raw group (verification traffic: no ledger sees it).
constexpr CallInfo kVerify{"-", "-", true};

std::vector<double> gather_doubles(Group g, std::vector<double> v) {
  std::vector<double> out(v.size() * static_cast<std::size_t>(g.size()));
  if (!v.empty()) g.all_gather(v.data(), out.data(), v.size(), kVerify);
  return out;
}
std::vector<std::string> gather_strings(Group g, const std::string& s) {
  std::int64_t len = static_cast<std::int64_t>(s.size());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(g.size()));
  g.all_gather(&len, lens.data(), 1, kVerify);
  const std::int64_t mx = *std::max_element(lens.begin(), lens.end());
  const std::size_t words = static_cast<std::size_t>((mx + 3) / 4);
  std::vector<std::int32_t> mine(std::max<std::size_t>(words, 1), 0), all(mine.size() * lens.size());
  std::memcpy(mine.data(), s.data(), s.size());
  g.all_gather(mine.data(), all.data(), mine.size(), kVerify);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lens.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * mine.size()), static_cast<std::size_t>(lens[r]));
  return out;
}

// =================================================================================================
// Memory: bytes of what a rank holds, summed from the tensors
// =================================================================================================
template <class T, class L, class B>
std::size_t nbytes(const Sharded<T, L, B>& x) {
  return static_cast<std::size_t>(x.local().size()) * sizeof(T);
}
template <class D>
std::size_t nbytes(const Eigen::DenseBase<D>& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(typename D::Scalar);
}
template <class X>
std::size_t nbytes(const std::optional<X>& x) {
  return x ? nbytes(*x) : 0;
}
template <class X>
std::size_t nbytes(const std::vector<X>& v) {
  return v.size() * sizeof(X);
}
template <class... X>
std::size_t sum_bytes(const X&... x) {
  return (std::size_t{0} + ... + nbytes(x));
}

struct Memory {
  std::size_t params = 0, grads = 0, activations = 0;
};

// =================================================================================================
// Rows of the report
// =================================================================================================
struct Check {
  std::string name;
  ErrorReport err;
  bool pass = false;
};

/// Collectives of one row and pass, by kind: count and dense bytes V (the ledger's convention).
using CommTally = std::map<std::string, std::pair<std::size_t, std::size_t>>;

struct Row {
  std::string name;   // "embedding", "block 0", …
  std::string key;    // scope label: "embed", "block0", …
  std::vector<std::string> scopes;  // ledger scopes (under fwd/ and bwd/) that belong to the row
  std::vector<Check> checks;
  CommTally ledger_fwd, ledger_bwd, analytic_fwd, analytic_bwd;
  double predicted_s = 0, measured_s = 0, measured_max_s = 0, compute_s = 0;
  double flops = 0;  // forward + backward, per rank (cost model), blocks only
  Memory mem;        // max over ranks
  [[nodiscard]] bool comm_ok() const { return ledger_fwd == analytic_fwd && ledger_bwd == analytic_bwd; }
  [[nodiscard]] bool pass() const {
    return comm_ok() && std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.pass; });
  }
  [[nodiscard]] double max_error() const {
    double e = 0;
    for (const auto& c : checks) e = std::max(e, c.err.max_rel);
    return e;
  }
};

Row make_row(std::string name, std::string key, std::vector<std::string> scopes) {
  Row r;
  r.name = std::move(name);
  r.key = std::move(key);
  r.scopes = std::move(scopes);
  return r;
}

void tally_add(CommTally& t, CollectiveKind k, std::size_t bytes, std::size_t n = 1) {
  auto& e = t[std::string(to_string(k))];
  e.first += n;
  e.second += bytes * n;
}

// =================================================================================================
// --explain: block 0 re-executed operation by operation, each operation's layouts read from the
// C++ types of its operands and result, each collective from the ledger entries it caused; the
// traced results are then checked bit for bit against TransformerBlock::forward/backward and its
// ledger, so the listing is what the block executes.
// =================================================================================================
template <class X>
struct LayoutOf;
template <class T, class L, class B>
struct LayoutOf<Sharded<T, L, B>> {
  static constexpr std::string_view value = L::notation;
  static constexpr bool transposed = false;
};
template <class T, class L, class B>
struct LayoutOf<Transposed<T, L, B>> {
  static constexpr std::string_view value = notation(transpose(L::kind));
  static constexpr bool transposed = true;
};
template <class X>
std::string nm(const std::string& name, const X&) {
  using LO = LayoutOf<std::remove_cvref_t<X>>;
  return name + (LO::transposed ? "ᵀ" : "") + "[" + std::string(LO::value) + "]";
}

std::string fmt_bytes(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (b < 1024) os << std::setprecision(0) << b << " B";
  else if (b < 1024.0 * 1024) os << b / 1024 << " KiB";
  else if (b < 1024.0 * 1024 * 1024) os << b / (1024.0 * 1024) << " MiB";
  else os << b / (1024.0 * 1024 * 1024) << " GiB";
  return os.str();
}
std::string fmt_time(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (s == 0) os << "0";
  else if (s < 1e-3) os << s * 1e6 << " µs";
  else if (s < 1.0) os << std::setprecision(2) << s * 1e3 << " ms";
  else os << std::setprecision(2) << s << " s";
  return os.str();
}
std::string fmt_err(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", e);
  return buf;
}

struct Dims {
  Index T, h, heads, groups, d, ffn, vocab, padded;
  int p;
  bool bias;
  /// The element count written in the model's symbols when it is one of the usual ones.
  [[nodiscard]] std::string sym(std::size_t n) const {
    const auto N = static_cast<Index>(n);
    // the block's collectives only (what --explain lists): activations, norm weights, K/V sync
    if (N == T * h) return "T·h";
    if (N == 2 * h) return "2·h";
    if (N == h) return "h";
    if (N == (h + (bias ? 1 : 0)) * 2 * groups * d) return bias ? "(h+1)·2·g·d" : "h·2·g·d";
    return std::to_string(n);
  }
};

struct Explainer {
  Ledger* ledger;
  Dims dims;
  json forward = json::array(), backward = json::array();
  json* cur = &forward;

  [[nodiscard]] std::size_t mark() const { return ledger->entries().size(); }

  json comm_since(std::size_t k0) const {
    json c = json::array();
    const auto& es = ledger->entries();
    for (std::size_t i = k0; i < es.size(); ++i)
      c.push_back(entry_json(es[i]));
    return c;
  }
  json entry_json(const LedgerEntry& e) const {
    return {{"collective", std::string(to_string(e.kind))},
            {"layout_in", e.layout_in},
            {"layout_out", e.layout_out},
            {"elements", e.elements},
            {"elements_symbolic", dims.sym(e.elements)},
            {"bytes", e.bytes},
            {"scope", e.scope}};
  }
  /// A local operation (or one whose collectives the ledger names).
  void op(std::size_t k0, std::string text, std::string note = {}) {
    cur->push_back({{"op", std::move(text)}, {"note", std::move(note)}, {"comm", comm_since(k0)}});
  }
  /// Beside the last step: the plan matmul<To> would insert for the product a · b just traced
  /// (plan/matmul.hpp), and whether its collectives are the ones the block ran after the product.
  template <class To, class A, class Bop>
  void plan(const A& a, const Bop& b, const std::string& na, const std::string& nb, const std::string& nz) {
    const plan::MatmulPlan pl = matmul_plan<To>(a, b);
    std::vector<std::string> planned;
    for (const plan::Chain* c : {&pl.pre_a, &pl.pre_b, &pl.post})
      for (int i = 0; i < c->steps; ++i)
        if (plan::communicates(c->step(i))) planned.emplace_back(plan::to_string(c->step(i)));
    std::vector<std::string> ran;
    for (const auto& e : cur->back()["comm"]) ran.push_back(e["collective"].get<std::string>());
    cur->back()["plan"] = "matmul<" + std::string(To::notation) + ">(" + na + ", " + nb + ") plans " +
                          plan::describe(pl, na, nb, nz);
    cur->back()["plan_agrees"] = planned == ran;
  }
  /// A redistribution: the collective's name is the ledger's ("identity" when it recorded none).
  void redist(std::size_t k0, const std::string& in, const std::string& label, const std::string& out,
              std::string note = {}) {
    json c = comm_since(k0);
    std::string mid;
    for (const auto& e : c) mid += (mid.empty() ? "" : " + ") + e["collective"].get<std::string>();
    if (mid.empty()) mid = "identity";
    cur->push_back({{"op", in + " → " + label + ": " + mid + " → " + out}, {"note", std::move(note)}, {"comm", c}});
  }
};

template <class S>
double max_diff_any(const S& a, const S& b) {
  return static_cast<double>((a.local() - b.local()).cwiseAbs().maxCoeff());
}

/// Block 0 re-executed operation by operation. SP: the sequence-parallel block (RowSharded between
/// blocks; all_gather enters and reduce_scatter leaves each tensor-parallel region; the norms'
/// Partial weight gradients all-reduced at the end, as SequenceParallelBlock::reduce_grads does).
template <class T, bool SP, class Blk, class X, class Fwd, class Grads>
json explain_block(const Blk& blk, const X& x, const X& dy, const Fwd& real_f, const X& real_dx, const Grads& rp,
                   Ledger& ledger, const Dims& dims, const std::string& real_scope) {
  using B = CpuBackend;
  using RT = Sharded<T, Replicated>;
  using CT = Sharded<T, ColSharded>;
  Explainer ex{&ledger, dims};
  const auto& cfg = blk.config();
  const auto& attn = blk.attention();
  const auto& lay = attn.layout();
  const auto& mlp = blk.mlp();
  const std::string norm = std::string(nn::norm_name(cfg.norm));
  const nn::Dropout da(cfg.dropout, cfg.dropout_seed, nn::tensor_id(cfg.layer, nn::TensorKind::dropout_attn));
  const nn::Dropout dm(cfg.dropout, cfg.dropout_seed, nn::tensor_id(cfg.layer, nn::TensorKind::dropout_mlp));
  const nn::AttnShape shape{x.rows() / cfg.seq, cfg.seq, lay.units(), lay.q_per_unit(), lay.head_dim};
  const bool glu = cfg.act == nn::Activation::swiglu;
  const std::string drop_note = cfg.dropout > 0 ? "mask keyed by global index: the dense mask, no comm" : "p = 0: identity";
  const std::string in_lbl = SP ? "enter" : "f", out_lbl = SP ? "leave" : "g";
  // the redistributions at the boundaries of a tensor-parallel region
  auto enter = [&](const X& v) -> RT {
    if constexpr (SP) return all_gather(v);
    else return copy_to(v);
  };
  auto leave = [&](Sharded<T, Partial> v) -> X {
    if constexpr (SP) return reduce_scatter<RowSharded>(v);
    else return reduce_from(std::move(v));
  };
  auto enter_adj = [&](const X& v) -> RT {
    if constexpr (SP) return adjoint::reduce_scatter(v);
    else return adjoint::reduce_from(v);
  };
  auto leave_adj = [&](Sharded<T, Partial> v) -> X {
    if constexpr (SP) return adjoint::all_gather<RowSharded>(v);
    else return adjoint::copy_to(std::move(v));
  };
  std::size_t k;
  auto sc = ledger.scope("explain");

  // ---- forward ----
  ex.cur = &ex.forward;
  k = ex.mark();
  auto l1 = blk.ln1().forward(x);
  ex.op(k, nm("X", x) + " → " + norm + "₁ → " + nm("A", l1.y),
        SP ? "this rank's tokens, whole rows: local" : "statistics over whole rows: every rank has them");
  k = ex.mark();
  RT a = enter(l1.y);
  ex.redist(k, nm("A", l1.y), in_lbl, nm("A", a), SP ? "gather the tokens for the column-parallel QKV" : "f = copy_to: identity forward; its adjoint is an all_reduce");
  const auto& wqkv = attn.qkv().weight();
  k = ex.mark();
  CT qkv = matmul(a, wqkv);
  ex.op(k, nm("A", a) + " · " + nm("Wqkv", wqkv) + " → " + nm("QKV", qkv),
        "fused Q|K|V, " + std::to_string(lay.units() * lay.q_per_unit()) + " query heads per rank");
  if (attn.qkv().bias()) {
    k = ex.mark();
    qkv = add_bias(qkv, *attn.qkv().bias());
    ex.op(k, nm("QKV", qkv) + " + " + nm("bqkv", *attn.qkv().bias()) + " → " + nm("QKV", qkv));
  }
  k = ex.mark();
  auto ao = nn::Kernels<B>::causal_attention(qkv.local(), shape);
  CT o(std::move(ao.out), x.rows(), cfg.hidden, x.group());
  ex.op(k, "softmax(causal(Q·Kᵀ/√d))·V per head: " + nm("QKV", qkv) + " → " + nm("O", o), "each rank owns whole heads: local");
  const auto& wo = attn.proj().weight();
  k = ex.mark();
  auto zp = matmul(o, wo);
  ex.op(k, nm("O", o) + " · " + nm("Wo", wo) + " → " + nm("Z", zp), "contracting dimension split: a Partial sum");
  const std::string zp_txt = nm("Z", zp);
  k = ex.mark();
  X z = leave(std::move(zp));
  ex.redist(k, zp_txt, out_lbl, nm("Z", z), SP ? "sum and split the tokens" : "g = reduce_from");
  ex.plan<typename X::layout>(o, wo, "O", "Wo", "Z");
  if (attn.proj().bias()) {
    k = ex.mark();
    z = add_bias(z, *attn.proj().bias());
    ex.op(k, nm("Z", z) + " + " + nm("bo", *attn.proj().bias()) + " → " + nm("Z", z), "bias added once, after the reduction");
  }
  k = ex.mark();
  X zd = da.forward(z);
  ex.op(k, "dropout(" + nm("Z", z) + ") → " + nm("Z", zd), drop_note);
  k = ex.mark();
  X y1 = x + zd;
  ex.op(k, nm("X", x) + " + " + nm("Z", zd) + " → " + nm("Y1", y1), "residual");
  k = ex.mark();
  auto l2 = blk.ln2().forward(y1);
  ex.op(k, nm("Y1", y1) + " → " + norm + "₂ → " + nm("M", l2.y));
  k = ex.mark();
  RT mi = enter(l2.y);
  ex.redist(k, nm("M", l2.y), in_lbl, nm("M", mi));
  const auto& w1 = mlp.fc1().weight();
  k = ex.mark();
  CT hh = matmul(mi, w1);
  ex.op(k, nm("M", mi) + " · " + nm("W1", w1) + " → " + nm("H", hh), glu ? "[gate_r | up_r] per rank" : "");
  if (mlp.fc1().bias()) {
    k = ex.mark();
    hh = add_bias(hh, *mlp.fc1().bias());
    ex.op(k, nm("H", hh) + " + " + nm("b1", *mlp.fc1().bias()) + " → " + nm("H", hh));
  }
  k = ex.mark();
  CT act = [&]() -> CT {
    switch (cfg.act) {
      case nn::Activation::gelu_tanh: return map(hh, nn::GeluTanh{});
      case nn::Activation::gelu_erf: return map(hh, nn::GeluErf{});
      case nn::Activation::swiglu: break;
    }
    return CT(nn::Kernels<B>::swiglu(hh.local()), hh.rows(), cfg.ffn, hh.group());
  }();
  ex.op(k, std::string(glu ? "silu(gate)⊙up" : "GeLU") + "(" + nm("H", hh) + ") → " + nm("G", act),
        "element-wise on column blocks: commutes with the split");
  const auto& w2 = mlp.fc2().weight();
  k = ex.mark();
  auto z2p = matmul(act, w2);
  ex.op(k, nm("G", act) + " · " + nm("W2", w2) + " → " + nm("Z", z2p));
  const std::string z2p_txt = nm("Z", z2p);
  k = ex.mark();
  X z2 = leave(std::move(z2p));
  ex.redist(k, z2p_txt, out_lbl, nm("Z", z2));
  ex.plan<typename X::layout>(act, w2, "G", "W2", "Z");
  if (mlp.fc2().bias()) {
    k = ex.mark();
    z2 = add_bias(z2, *mlp.fc2().bias());
    ex.op(k, nm("Z", z2) + " + " + nm("b2", *mlp.fc2().bias()) + " → " + nm("Z", z2));
  }
  k = ex.mark();
  X z2d = dm.forward(z2);
  ex.op(k, "dropout(" + nm("Z", z2) + ") → " + nm("Z", z2d), drop_note);
  k = ex.mark();
  X y = y1 + z2d;
  ex.op(k, nm("Y1", y1) + " + " + nm("Z", z2d) + " → " + nm("Y", y), "residual");

  // ---- backward ----
  ex.cur = &ex.backward;
  k = ex.mark();
  X dz2 = dm.backward(dy);
  ex.op(k, "dropout′(" + nm("dY", dy) + ") → " + nm("dZ", dz2));
  k = ex.mark();
  RT dz2r = enter_adj(dz2);
  ex.redist(k, nm("dZ", dz2), out_lbl + "′", nm("dZ", dz2r), SP ? "reduce_scatter's adjoint" : "g's adjoint is the identity");
  k = ex.mark();
  CT dg = matmul(dz2r, transpose(w2));
  ex.op(k, nm("dZ", dz2r) + " · " + nm("W2", transpose(w2)) + " → " + nm("dG", dg));
  k = ex.mark();
  auto dw2 = matmul(transpose(act), dz2r);
  ex.op(k, nm("G", transpose(act)) + " · " + nm("dZ", dz2r) + " → " + nm("dW2", dw2));
  std::optional<RT> db2;
  if (mlp.fc2().bias()) {
    k = ex.mark();
    db2 = col_sum(dz2r);
    ex.op(k, "Σ_rows " + nm("dZ", dz2r) + " → " + nm("db2", *db2), "every rank holds the whole bias gradient");
  }
  k = ex.mark();
  CT dh = [&]() -> CT {
    switch (cfg.act) {
      case nn::Activation::gelu_tanh: return hadamard(dg, map(hh, nn::GeluTanhGrad{}));
      case nn::Activation::gelu_erf: return hadamard(dg, map(hh, nn::GeluErfGrad{}));
      case nn::Activation::swiglu: break;
    }
    return CT(nn::Kernels<B>::swiglu_grad(hh.local(), dg.local()), hh.rows(), hh.cols(), hh.group());
  }();
  ex.op(k, nm("dG", dg) + " ⊙ act′(" + nm("H", hh) + ") → " + nm("dH", dh));
  k = ex.mark();
  auto dmp = matmul(dh, transpose(w1));
  ex.op(k, nm("dH", dh) + " · " + nm("W1", transpose(w1)) + " → " + nm("dM", dmp));
  k = ex.mark();
  CT dw1 = matmul(transpose(mi), dh);
  ex.op(k, nm("M", transpose(mi)) + " · " + nm("dH", dh) + " → " + nm("dW1", dw1));
  std::optional<CT> db1;
  if (mlp.fc1().bias()) {
    k = ex.mark();
    db1 = col_sum(dh);
    ex.op(k, "Σ_rows " + nm("dH", dh) + " → " + nm("db1", *db1));
  }
  const std::string dmp_txt = nm("dM", dmp);
  k = ex.mark();
  X dmr = leave_adj(std::move(dmp));
  ex.redist(k, dmp_txt, in_lbl + "′", nm("dM", dmr), SP ? "all_gather's adjoint on a Partial cotangent" : "f's adjoint sums the ranks' contributions");
  k = ex.mark();
  auto g2 = blk.ln2().backward(l2.cache, dmr);
  ex.op(k, norm + "₂′: " + nm("dM", dmr) + " → " + nm("dY1", g2.dx) + ", " + nm("dγ2", g2.params.dgamma),
        SP ? "each rank summed only its tokens: the weight gradient is Partial" : "replicated rows: the weight gradient is whole on every rank");
  k = ex.mark();
  X dy1 = dy + g2.dx;
  ex.op(k, nm("dY", dy) + " + " + nm("dY1", g2.dx) + " → " + nm("dY1", dy1), "residual");
  k = ex.mark();
  X dz1 = da.backward(dy1);
  ex.op(k, "dropout′(" + nm("dY1", dy1) + ") → " + nm("dZ", dz1));
  k = ex.mark();
  RT dz1r = enter_adj(dz1);
  ex.redist(k, nm("dZ", dz1), out_lbl + "′", nm("dZ", dz1r));
  k = ex.mark();
  CT dO = matmul(dz1r, transpose(wo));
  ex.op(k, nm("dZ", dz1r) + " · " + nm("Wo", transpose(wo)) + " → " + nm("dO", dO));
  k = ex.mark();
  auto dwo = matmul(transpose(o), dz1r);
  ex.op(k, nm("O", transpose(o)) + " · " + nm("dZ", dz1r) + " → " + nm("dWo", dwo));
  std::optional<RT> dbo;
  if (attn.proj().bias()) {
    k = ex.mark();
    dbo = col_sum(dz1r);
    ex.op(k, "Σ_rows " + nm("dZ", dz1r) + " → " + nm("dbo", *dbo));
  }
  k = ex.mark();
  CT dqkv(nn::Kernels<B>::causal_attention_grad(qkv.local(), ao.probs, dO.local(), shape), qkv.rows(), qkv.cols(),
          qkv.group());
  ex.op(k, "attention′ per head: " + nm("dO", dO) + " → " + nm("dQKV", dqkv), "local: whole heads");
  k = ex.mark();
  auto dap = matmul(dqkv, transpose(wqkv));
  ex.op(k, nm("dQKV", dqkv) + " · " + nm("Wqkv", transpose(wqkv)) + " → " + nm("dA", dap));
  k = ex.mark();
  CT dwqkv = matmul(transpose(a), dqkv);
  ex.op(k, nm("A", transpose(a)) + " · " + nm("dQKV", dqkv) + " → " + nm("dWqkv", dwqkv));
  std::optional<CT> dbqkv;
  if (attn.qkv().bias()) {
    k = ex.mark();
    dbqkv = col_sum(dqkv);
    ex.op(k, "Σ_rows " + nm("dQKV", dqkv) + " → " + nm("dbqkv", *dbqkv));
  }
  if (lay.replicated_kv()) {  // Attention's K/V replica sync is private: list what the block's own run recorded
    json c = json::array();
    for (const auto& e : ledger.entries())
      if (Ledger::in_scope(e.scope, "bwd/" + real_scope + "/attn/kv_replica_sync")) c.push_back(ex.entry_json(e));
    ex.cur->push_back({{"op", "dWqkv[C] K/V columns → sum over the ranks sharing a query group → dWqkv[C]"},
                       {"note", "from the block's own run (inside Attention's backward, not re-executed here)"},
                       {"comm", c}});
  }
  const std::string dap_txt = nm("dA", dap);
  k = ex.mark();
  X dar = leave_adj(std::move(dap));
  ex.redist(k, dap_txt, in_lbl + "′", nm("dA", dar));
  k = ex.mark();
  auto g1 = blk.ln1().backward(l1.cache, dar);
  ex.op(k, norm + "₁′: " + nm("dA", dar) + " → " + nm("dX", g1.dx) + ", " + nm("dγ1", g1.params.dgamma));
  k = ex.mark();
  X dx = dy1 + g1.dx;
  ex.op(k, nm("dY1", dy1) + " + " + nm("dX", g1.dx) + " → " + nm("dX", dx), "residual");
  // the norms' weight gradients in their parameters' layout
  std::optional<RT> dgam1, dgam2;
  if constexpr (SP) {
    const std::string t1 = nm("dγ1", g1.params.dgamma), t2 = nm("dγ2", g2.params.dgamma);
    const std::string pk = cfg.norm == nn::NormKind::layer ? " ‖ dβ" : "";
    k = ex.mark();
    auto r1 = nn::SequenceParallelBlock<T>::reduce_norm(std::move(g1.params));
    ex.redist(k, t1 + pk + "1", "reduce", nm("dγ1", r1.dgamma), "SequenceParallelBlock::reduce_grads, once per step");
    k = ex.mark();
    auto r2 = nn::SequenceParallelBlock<T>::reduce_norm(std::move(g2.params));
    ex.redist(k, t2 + pk + "2", "reduce", nm("dγ2", r2.dgamma));
    dgam1 = r1.dgamma;
    dgam2 = r2.dgamma;
  } else {
    dgam1 = g1.params.dgamma;
    dgam2 = g2.params.dgamma;
  }

  // ---- the trace is what ran: results bit for bit, collectives entry for entry ----
  double diff = std::max({max_diff_any(y, real_f.y), max_diff_any(dx, real_dx), max_diff_any(dw2, rp.mlp.fc2.dw),
                          max_diff_any(dw1, rp.mlp.fc1.dw), max_diff_any(dwo, rp.attn.proj.dw),
                          max_diff_any(*dgam2, rp.ln2.dgamma), max_diff_any(*dgam1, rp.ln1.dgamma)});
  if (!lay.replicated_kv()) diff = std::max(diff, max_diff_any(dwqkv, rp.attn.qkv.dw));
  if (db2) diff = std::max(diff, max_diff_any(*db2, *rp.mlp.fc2.db));
  if (db1) diff = std::max(diff, max_diff_any(*db1, *rp.mlp.fc1.db));
  if (dbo) diff = std::max(diff, max_diff_any(*dbo, *rp.attn.proj.db));
  if (dbqkv && !lay.replicated_kv()) diff = std::max(diff, max_diff_any(*dbqkv, *rp.attn.qkv.db));
  Group g = x.group();
  g.all_reduce(&diff, 1, ReduceOp::max, kVerify);

  auto sig = [](const LedgerEntry& e) {
    return std::string(to_string(e.kind)) + " " + e.layout_in + "->" + e.layout_out + " " + std::to_string(e.elements);
  };
  std::vector<std::string> traced, real;
  for (const auto& e : ledger.entries()) {
    if (Ledger::in_scope(e.scope, "explain")) traced.push_back(sig(e));
    const bool blockscope = Ledger::in_scope(e.scope, "fwd/" + real_scope) || Ledger::in_scope(e.scope, "bwd/" + real_scope);
    if (blockscope && e.scope.find("kv_replica_sync") == std::string::npos) real.push_back(sig(e));
  }
  return {{"block", 0},
          {"sequence_parallel", SP},
          {"forward", ex.forward},
          {"backward", ex.backward},
          {"check",
           {{"max_abs_difference", diff},
            {"bit_identical", diff == 0.0},
            {"traced_collectives", traced.size()},
            {"block_collectives", real.size()},
            {"collectives_identical", traced == real}}}};
}

// =================================================================================================
// One rank's run
// =================================================================================================
struct RankResult {  // filled on rank 0
  std::vector<Row> rows;
  std::vector<LedgerEntry> ledger;
  cost::Calibration cal;
  json explain;
  json trace_events = json::array();
  double loss = 0, loss_ref = 0;
  double step_seconds = 0, dense_seconds = 0;
  std::string backend_name;
};

template <class T, bool SP>
void run_rank(Group raw, const Options& o, const DenseModel& dm, RankResult* out,
              const std::function<void(const std::string&, bool)>& progress) {
  using L = std::conditional_t<SP, RowSharded, Replicated>;
  using X = Sharded<T, L>;
  using Blk = std::conditional_t<SP, nn::SequenceParallelBlock<T>, nn::TransformerBlock<T>>;
  using Emb = nn::VocabParallelEmbedding<T>;
  using Norm = nn::LayerNorm<T>;
  using RGrads = typename nn::TransformerBlock<T>::ParamGrads;  // = SequenceParallelBlock::ReducedGrads
  const int p = raw.size(), rank = raw.rank();
  const bool root = rank == 0;
  // a progress line; `phase`: a new phase (printed even within a second of the last line)
  auto say = [&](const std::string& s, bool phase = false) {
    if (root) progress(s, phase);
  };
  const Index Tk = o.tokens(), h = o.hidden;
  const double e = sizeof(T);
  const std::size_t nlayers = static_cast<std::size_t>(o.layers);

  raw.barrier();
  EventLog log;  // t0 taken right after the barrier: the ranks' clocks are aligned to it
  Ledger ledger;
  log.ledger = &ledger;
  Group g = ledgered(Timed<Group>(raw, log), ledger);

  // ---- α, β of this group -------------------------------------------------------------------
  say("calibrating α, β");
  cost::Calibration cal;
  {
    EventLog::Phase ph(log, "calibrate α, β (all_reduce 4 KiB … 1 MiB)", "setup");
    cal = cost::calibrate_all_reduce(raw, {1u << 10, 1u << 13, 1u << 16, 1u << 18}, 9);
  }

  // ---- shard the masters ----------------------------------------------------------------------
  say("sharding the weights");
  std::vector<Blk> blocks;
  std::optional<Emb> emb;
  std::optional<Norm> lnf;
  const nn::VocabParallelCrossEntropy<T> ce(o.vocab);
  const nn::Dropout drop_emb(o.dropout, drop_seed(o), nn::tensor_id(0, nn::embedding_dropout_kind));
  {
    EventLog::Phase ph(log, "shard weights", "setup");
    const bool center = o.norm_kind() == nn::NormKind::layer, glu = o.activation() == nn::Activation::swiglu;
    emb.emplace(Emb::from_dense(dm.g.emb, g, o.vocab_divisor));
    for (int l = 0; l < o.layers; ++l) {
      const auto& rb = dm.g.blocks[static_cast<std::size_t>(l)];
      const auto nb = [&](const M& m) -> const M* { return o.no_bias ? nullptr : &m; };
      nn::BlockMasters<M> m{&rb.ln1.gamma, center ? &rb.ln1.beta : nullptr, {&rb.attn.wq, nb(rb.attn.bq), &rb.attn.wk,
                            nb(rb.attn.bk), &rb.attn.wv, nb(rb.attn.bv), &rb.attn.wo, nb(rb.attn.bo)},
                            &rb.ln2.gamma, center ? &rb.ln2.beta : nullptr,
                            {&rb.mlp.w1, nb(rb.mlp.b1), glu ? &rb.mlp.wu : nullptr, glu ? nb(rb.mlp.bu) : nullptr,
                             &rb.mlp.w2, nb(rb.mlp.b2)}};
      blocks.push_back(Blk::from_dense(block_config(o, l), m, g));
    }
    lnf.emplace(Norm::from_dense(dm.g.final_norm.gamma, center ? &dm.g.final_norm.beta : nullptr, o.norm_kind(), g, T(kEps)));
  }

  // ---- one forward and backward pass, layer by layer, ledgered and timed ----------------------
  std::optional<std::conditional_t<SP, typename Emb::ForwardSP, typename Emb::Forward>> ef;
  std::optional<X> x0;
  std::vector<typename Blk::Forward> bf;
  std::optional<typename Norm::template Forward<L>> ff;
  std::optional<typename Emb::HeadForward> hf;
  std::optional<typename nn::VocabParallelCrossEntropy<T>::Forward> lf;
  std::optional<Sharded<T, ColSharded>> dlogits;
  std::optional<std::conditional_t<SP, typename Emb::HeadGradsSP, typename Emb::HeadGrads>> hg;
  std::optional<X> fdx;
  std::optional<typename Norm::template ParamGrads<Replicated>> fgp;
  std::vector<std::optional<X>> bdx(nlayers), dys(nlayers);
  std::vector<std::optional<RGrads>> bgp(nlayers);
  std::optional<typename Emb::ParamGrads> eg;
  std::optional<Sharded<T, RowSharded>> dE;

  raw.barrier();
  const auto step0 = Clock::now();
  {
    auto s0 = ledger.scope("fwd");
    {
      auto s = ledger.scope("embed");
      EventLog::Phase ph(log, "forward embedding", "forward", "fwd/embed");
      if constexpr (SP) ef.emplace(emb->forward_sp(dm.ids));
      else ef.emplace(emb->forward(dm.ids));
      x0.emplace(drop_emb.forward(ef->y));
    }
    const X* x = &*x0;
    for (std::size_t l = 0; l < nlayers; ++l) {
      say("forward block " + std::to_string(l) + "/" + std::to_string(nlayers));
      const std::string key = "block" + std::to_string(l);
      auto s = ledger.scope(key);
      EventLog::Phase ph(log, "forward block " + std::to_string(l), "forward", "fwd/" + key);
      bf.push_back(blocks[l].forward(*x));
      x = &bf.back().y;
    }
    {
      auto s = ledger.scope("final_norm");
      EventLog::Phase ph(log, "forward final norm", "forward", "fwd/final_norm");
      ff.emplace(lnf->forward(*x));
    }
    {
      auto s = ledger.scope("head");
      EventLog::Phase ph(log, "forward LM head (tied)", "forward", "fwd/head");
      if constexpr (SP) hf.emplace(emb->logits_sp(ff->y));
      else hf.emplace(emb->logits(ff->y));
    }
    {
      auto s = ledger.scope("loss");
      EventLog::Phase ph(log, "forward cross-entropy", "forward", "fwd/loss");
      lf.emplace(ce.forward(hf->logits, dm.targets));
    }
  }
  {
    auto s0 = ledger.scope("bwd");
    {
      auto s = ledger.scope("loss");
      EventLog::Phase ph(log, "backward cross-entropy", "backward", "bwd/loss");
      dlogits.emplace(ce.backward_mean(lf->cache));
    }
    {
      auto s = ledger.scope("head");
      EventLog::Phase ph(log, "backward LM head", "backward", "bwd/head");
      if constexpr (SP) hg.emplace(emb->logits_backward_sp(hf->cache, *dlogits));
      else hg.emplace(emb->logits_backward(hf->cache, *dlogits));
    }
    {
      auto s = ledger.scope("final_norm");
      EventLog::Phase ph(log, "backward final norm", "backward", "bwd/final_norm");
      auto gr = lnf->backward(ff->cache, hg->dx);
      fdx.emplace(std::move(gr.dx));
      if constexpr (SP) fgp.emplace(nn::SequenceParallelBlock<T>::reduce_norm(std::move(gr.params)));  // Partial → R
      else fgp.emplace(std::move(gr.params));
    }
    const X* dy = &*fdx;
    for (std::size_t l = nlayers; l-- > 0;) {
      say("backward block " + std::to_string(l) + "/" + std::to_string(nlayers));
      const std::string key = "block" + std::to_string(l);
      auto s = ledger.scope(key);
      EventLog::Phase ph(log, "backward block " + std::to_string(l), "backward", "bwd/" + key);
      dys[l].emplace(*dy);
      auto gr = blocks[l].backward(bf[l].cache, *dy);
      bdx[l].emplace(std::move(gr.dx));
      if constexpr (SP) bgp[l].emplace(blocks[l].reduce_grads(std::move(gr.params)));  // the norms: Partial → R
      else bgp[l].emplace(std::move(gr.params));
      dy = &*bdx[l];
    }
    {
      auto s = ledger.scope("embed");
      EventLog::Phase ph(log, "backward embedding (+ tied head gradient)", "backward", "bwd/embed");
      const X dx0 = drop_emb.backward(*dy);
      if constexpr (SP) eg.emplace(emb->backward_sp(ef->cache, dx0));
      else eg.emplace(emb->backward(ef->cache, dx0));
      dE.emplace(eg->de + hg->params.de);
    }
  }
  raw.barrier();
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step0).count();

  // ---- the dense reference (rank 0) ------------------------------------------------------------
  std::optional<DenseRun> dr;
  double dense_seconds = 0;
  if (root) {
    say("dense reference (reference/dense.hpp)", true);
    EventLog::Phase ph(log, "dense reference (reference/dense.hpp gpt_forward/gpt_backward)", "reference");
    const auto t0 = Clock::now();
    dr.emplace(dense_run(dm));
    dense_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // ---- rows ------------------------------------------------------------------------------------
  std::vector<Row> rows;
  rows.push_back(make_row("embedding", "embed", {"embed"}));
  for (std::size_t l = 0; l < nlayers; ++l)
    rows.push_back(make_row("block " + std::to_string(l), "block" + std::to_string(l), {"block" + std::to_string(l)}));
  rows.push_back(make_row("final norm", "final_norm", {"final_norm"}));
  rows.push_back(make_row("LM head + loss", "head", {"head", "loss"}));

  // ---- checks (every rank gathers, rank 0 compares) ----------------------------------------------
  say("comparing with the dense reference", true);
  const double tol = o.tolerance();
  const int pp = p;
  auto add = [&](Row& row, const std::string& name, const auto& x, auto expected) {
    auto d = to_dense(x);
    if (!root) return;
    const M exp = expected();
    const auto dd = d.template cast<double>();
    ErrorReport r = compare(dd.topLeftCorner(std::min(dd.rows(), exp.rows()), std::min(dd.cols(), exp.cols())), exp);
    row.checks.push_back({name, r, r.within(tol)});
    if (dd.rows() > exp.rows() || dd.cols() > exp.cols()) {  // padded: the padding must be exactly zero
      Check pad{name + " padding = 0", {}, false};
      double mx = 0;
      for (Index i = 0; i < dd.rows(); ++i)
        for (Index j = 0; j < dd.cols(); ++j)
          if (i >= exp.rows() || j >= exp.cols()) mx = std::max(mx, std::abs(dd(i, j)));
      pad.err.max_abs = mx;
      pad.err.max_rel = mx == 0 ? 0.0 : std::numeric_limits<double>::infinity();
      pad.pass = mx == 0;
      row.checks.push_back(pad);
    }
  };
  auto bit_check = [&](Row& row, const std::string& name, bool agree) {
    if (!root) return;
    Check c{name, {}, agree};
    c.err.max_rel = agree ? 0.0 : std::numeric_limits<double>::infinity();
    row.checks.push_back(c);
  };
  {
    EventLog::Phase ph(log, "gather + compare", "verification");
    const DenseRun* R = dr ? &*dr : nullptr;
    Row& er = rows.front();
    add(er, "y (after dropout)", *x0, [&] { return R->out.x0; });
    add(er, "dE (lookup + tied head)", *dE, [&] { return R->grads.demb; });
    const Index d = o.hidden / o.heads, G = o.num_groups();
    const bool glu = o.activation() == nn::Activation::swiglu, center = o.norm_kind() == nn::NormKind::layer;
    for (std::size_t l = 0; l < nlayers; ++l) {
      Row& row = rows[l + 1];
      const auto& gp = *bgp[l];
      const auto& rg = R ? R->grads.blocks[l] : ref::BlockGrads{};
      add(row, "y", bf[l].y, [&] { return R->out.blocks[l].y; });
      add(row, "dx", *bdx[l], [&] { return rg.dx; });
      add(row, "ln1.dgamma", gp.ln1.dgamma, [&] { return rg.ln1.dgamma; });
      if (center) add(row, "ln1.dbeta", *gp.ln1.dbeta, [&] { return rg.ln1.dbeta; });
      add(row, "attn.dWqkv", gp.attn.qkv.dw, [&] { return qkv_physical(rg.attn.dwq, rg.attn.dwk, rg.attn.dwv, o.heads, G, d, pp); });
      if (!o.no_bias)
        add(row, "attn.dbqkv", *gp.attn.qkv.db, [&] { return qkv_physical(rg.attn.dbq, rg.attn.dbk, rg.attn.dbv, o.heads, G, d, pp); });
      add(row, "attn.dWo", gp.attn.proj.dw, [&] { return rg.attn.dwo; });
      if (!o.no_bias) add(row, "attn.dbo", *gp.attn.proj.db, [&] { return rg.attn.dbo; });
      add(row, "ln2.dgamma", gp.ln2.dgamma, [&] { return rg.ln2.dgamma; });
      if (center) add(row, "ln2.dbeta", *gp.ln2.dbeta, [&] { return rg.ln2.dbeta; });
      add(row, "mlp.dW1", gp.mlp.fc1.dw, [&] { return glu ? swiglu_physical(rg.mlp.dw1, rg.mlp.dwu, pp) : rg.mlp.dw1; });
      if (!o.no_bias)
        add(row, "mlp.db1", *gp.mlp.fc1.db, [&] { return glu ? swiglu_physical(rg.mlp.db1, rg.mlp.dbu, pp) : rg.mlp.db1; });
      add(row, "mlp.dW2", gp.mlp.fc2.dw, [&] { return rg.mlp.dw2; });
      if (!o.no_bias) add(row, "mlp.db2", *gp.mlp.fc2.db, [&] { return rg.mlp.db2; });
      if constexpr (!SP) bit_check(row, "y, dx replicas bit-identical", replicas_agree(bf[l].y) && replicas_agree(*bdx[l]));
      else bit_check(row, "dγ replicas bit-identical (after reduce_grads)", replicas_agree(gp.ln1.dgamma) && replicas_agree(gp.ln2.dgamma));
    }
    Row& fr = rows[nlayers + 1];
    add(fr, "y", ff->y, [&] { return R->out.fn.y; });
    add(fr, "dx", *fdx, [&] { return R->grads.fn.dx; });
    add(fr, "dgamma", fgp->dgamma, [&] { return R->grads.fn.dgamma; });
    if (center) add(fr, "dbeta", *fgp->dbeta, [&] { return R->grads.fn.dbeta; });
    Row& hr = rows.back();
    add(hr, "logits", hf->logits, [&] { return R->out.logits; });
    add(hr, "per-token loss", lf->losses, [&] { return M(R->out.loss); });
    if (root) {
      const double a = static_cast<double>(lf->mean), ex = R->out.mean;
      Check c{"mean loss", {}, false};
      c.err.max_abs = std::abs(a - ex);
      c.err.max_rel = c.err.max_abs / std::abs(ex);
      c.pass = c.err.max_rel <= tol;
      hr.checks.push_back(c);
    }
    add(hr, "dlogits", *dlogits, [&] { return R->out.dlogits; });
    add(hr, "dx (into the final norm)", hg->dx, [&] { return R->dyf; });
  }

  // ---- nn::Gpt, the model class, on the same masters: loss and every gradient ------------------
  Row gr = make_row("nn::Gpt (whole)", "gpt", {});
  {
    say("nn::Gpt: forward_backward", true);
    nn::GptConfig gc;
    gc.vocab = o.vocab, gc.hidden = o.hidden, gc.heads = o.heads, gc.groups = o.groups, gc.ffn = o.ffn;
    gc.layers = o.layers, gc.seq = o.seq, gc.batch = o.batch, gc.activation = o.activation(), gc.norm = o.norm_kind();
    gc.bias = !o.no_bias, gc.eps = kEps, gc.dropout = o.dropout, gc.sp = SP, gc.seed = o.seed;
    gc.vocab_divisor = o.vocab_divisor;
    const auto masters = to_masters(o, dm.g);
    auto model = nn::Gpt<T>::from_masters(gc, masters, g);
    T loss{};
    {
      auto s = ledger.scope("gpt");
      EventLog::Phase ph(log, "nn::Gpt forward_backward", "gpt");
      loss = model.forward_backward(dm.ids, dm.targets);
    }
    const auto grads = model.grad_masters();
    if (root) {
      Check c{"mean loss", {}, false};
      c.err.max_abs = std::abs(static_cast<double>(loss) - dr->out.mean);
      c.err.max_rel = c.err.max_abs / std::abs(dr->out.mean);
      c.pass = c.err.max_rel <= tol;
      gr.checks.push_back(c);
      // One check per parameter tensor as the model stores it: the fused Q|K|V weight and bias and
      // SwiGLU's gate|up are one tensor each (normwise over the whole tensor, as in the layer rows).
      // Taken part by part, the K bias would be compared alone — and its exact gradient is 0 (a
      // shift of every key by bk adds q·bk to a whole row of scores, which softmax ignores), so
      // its relative error would be rounding noise over rounding noise.
      const auto expect = fuse_parts(grad_masters(o, dr->grads));
      const auto got = fuse_parts(grads);
      for (const auto& [name, m] : expect) {
        auto it = got.find(name);
        Check ck{"d " + name, {}, false};
        if (it == got.end()) ck.err.max_rel = ck.err.max_abs = std::numeric_limits<double>::infinity();
        else ck.err = compare(it->second, m);
        ck.pass = ck.err.within(tol);
        gr.checks.push_back(ck);
      }
      bit_check(gr, "dropout seed = Gpt::dropout_seed()", model.dropout_seed() == drop_seed(o));
    }
  }

  // ---- --explain: block 0, traced ----------------------------------------------------------------
  json explain;
  if (o.explain) {
    say("explain: tracing block 0", true);
    EventLog::Phase ph(log, "explain: block 0 re-executed", "explain");
    const Dims dims{Tk, h, o.heads, o.num_groups(), o.hidden / o.heads, o.ffn_size(), o.vocab, emb->padded_vocab_size(), p, !o.no_bias};
    explain = explain_block<T, SP>(blocks[0], *x0, *dys[0], bf[0], *bdx[0], *bgp[0], ledger, dims, "block0");
  }

  // ---- memory (each rank, measured from its tensors) -----------------------------------------------
  std::vector<double> mem;
  {
    mem.insert(mem.end(), {double(nbytes(emb->weight())), double(nbytes(*dE)), double(nbytes(ef->cache.ids))});
    for (std::size_t l = 0; l < nlayers; ++l) {
      const auto& b = blocks[l];
      const auto& gp = *bgp[l];
      const auto& c = bf[l].cache;
      const double par = double(sum_bytes(b.ln1().gamma(), b.ln1().beta(), b.attention().qkv().weight(),
                                          b.attention().qkv().bias(), b.attention().proj().weight(),
                                          b.attention().proj().bias(), b.ln2().gamma(), b.ln2().beta(),
                                          b.mlp().fc1().weight(), b.mlp().fc1().bias(), b.mlp().fc2().weight(),
                                          b.mlp().fc2().bias()));
      const double grd = double(sum_bytes(gp.ln1.dgamma, gp.ln1.dbeta, gp.attn.qkv.dw, gp.attn.qkv.db, gp.attn.proj.dw,
                                          gp.attn.proj.db, gp.ln2.dgamma, gp.ln2.dbeta, gp.mlp.fc1.dw, gp.mlp.fc1.db,
                                          gp.mlp.fc2.dw, gp.mlp.fc2.db));
      const double act = double(sum_bytes(c.ln1.xhat, c.ln1.rstd, c.attn.qkv_in.x, c.attn.qkv, c.attn.probs,
                                          c.attn.proj.h, c.ln2.xhat, c.ln2.rstd, c.mlp.fc1.x, c.mlp.h, c.mlp.fc2.h));
      mem.insert(mem.end(), {par, grd, act});
    }
    mem.insert(mem.end(), {double(sum_bytes(lnf->gamma(), lnf->beta())), double(sum_bytes(fgp->dgamma, fgp->dbeta)),
                           double(sum_bytes(ff->cache.xhat, ff->cache.rstd))});
    const auto& lc = lf->cache;
    mem.insert(mem.end(), {0.0, 0.0, double(sum_bytes(hf->cache.x, lc.probs, lc.targets, lc.active))});
  }

  // ---- per-row phase times and collective times, from every rank ---------------------------------
  const auto& entries = ledger.entries();
  std::vector<double> phases;
  for (const auto& row : rows) {
    double f = 0, b = 0;
    for (const auto& sc : row.scopes) f += log.phase_seconds["fwd/" + sc], b += log.phase_seconds["bwd/" + sc];
    phases.push_back(f);
    phases.push_back(b);
  }
  const auto all_mem = gather_doubles(raw, mem);
  const auto all_coll = gather_doubles(raw, log.coll_seconds);
  const auto all_phase = gather_doubles(raw, phases);

  // ---- the trace: every rank's events ----------------------------------------------------------------
  std::vector<std::string> all_events;
  if (!o.trace.empty()) {
    json ev = json::array();
    const std::string nmr = "rank " + std::to_string(rank);
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
    for (const auto& x : log.events) {
      json j{{"name", x.name}, {"cat", x.cat}, {"ph", "X"}, {"ts", x.ts_us}, {"dur", x.dur_us}, {"pid", rank}, {"tid", rank}};
      if (!x.args.is_null()) j["args"] = x.args;
      ev.push_back(std::move(j));
    }
    all_events = gather_strings(raw, ev.dump());
  }

  if (!root) return;

  // ---- assemble the rows (rank 0) -------------------------------------------------------------------
  const std::size_t nc = log.coll_seconds.size(), nmem = mem.size(), nph = phases.size();
  auto coll_at = [&](int r, std::size_t i) { return all_coll[static_cast<std::size_t>(r) * nc + i]; };
  const cost::TransformerShape shape{o.batch, o.seq, o.hidden, o.heads, o.ffn_size(), o.layers};
  // The counts of cost::layer_comm; at P = 1 the same calls run on a group of one (no traffic).
  const auto lc = cost::layer_comm(shape, std::max(p, 2), e, SP);
  const std::size_t Th = static_cast<std::size_t>(Tk * h) * sizeof(T);
  const std::size_t norm_grad = static_cast<std::size_t>((o.norm_kind() == nn::NormKind::layer ? 2 : 1) * h) * sizeof(T);
  for (std::size_t ri = 0; ri < rows.size(); ++ri) {
    Row& row = rows[ri];
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < entries.size(); ++i)
      for (const auto& sc : row.scopes) {
        const bool f = Ledger::in_scope(entries[i].scope, "fwd/" + sc), b = Ledger::in_scope(entries[i].scope, "bwd/" + sc);
        if (!f && !b) continue;
        mine.push_back(i);
        tally_add(f ? row.ledger_fwd : row.ledger_bwd, entries[i].kind, entries[i].bytes);
        row.predicted_s += cost::collective_seconds(cal.link, entries[i].kind, static_cast<double>(entries[i].bytes), p);
      }
    double comp = 0;
    for (const std::size_t i : mine) {
      double mn = coll_at(0, i), mx = coll_at(0, i);
      for (int r = 1; r < p; ++r) mn = std::min(mn, coll_at(r, i)), mx = std::max(mx, coll_at(r, i));
      row.measured_s += mn;
      row.measured_max_s += mx;
    }
    for (int r = 0; r < p; ++r) {  // the slowest rank's layer time minus its own collectives
      double cs = 0;
      for (const std::size_t i : mine) cs += coll_at(r, i);
      const std::size_t base = static_cast<std::size_t>(r) * nph + 2 * ri;
      comp = std::max(comp, all_phase[base] + all_phase[base + 1] - cs);
      const std::size_t mb = static_cast<std::size_t>(r) * nmem + 3 * ri;
      row.mem.params = std::max(row.mem.params, static_cast<std::size_t>(all_mem[mb]));
      row.mem.grads = std::max(row.mem.grads, static_cast<std::size_t>(all_mem[mb + 1]));
      row.mem.activations = std::max(row.mem.activations, static_cast<std::size_t>(all_mem[mb + 2]));
    }
    row.compute_s = comp;
  }
  // the analytic collectives (cost/transformer.hpp for the blocks; the layers' documented counts)
  const auto RS = CollectiveKind::reduce_scatter, AG = CollectiveKind::all_gather, AR = CollectiveKind::all_reduce;
  Row& er = rows.front();
  tally_add(er.analytic_fwd, SP ? RS : AR, Th);  // lookup: Y[Partial] → Row (SP) or R
  if (SP) tally_add(er.analytic_bwd, AG, Th);   // reduce_scatter's adjoint
  for (std::size_t l = 0; l < nlayers; ++l) {
    Row& row = rows[l + 1];
    const auto each = static_cast<std::size_t>(lc.dense_bytes_each);
    for (CommTally* t : {&row.analytic_fwd, &row.analytic_bwd}) {
      tally_add(*t, AR, each, static_cast<std::size_t>(lc.all_reduces));
      tally_add(*t, AG, each, static_cast<std::size_t>(lc.all_gathers));
      tally_add(*t, RS, each, static_cast<std::size_t>(lc.reduce_scatters));
      for (auto it = t->begin(); it != t->end();) it = it->second.first == 0 ? t->erase(it) : std::next(it);
    }
    if (SP) tally_add(row.analytic_bwd, AR, norm_grad, 2);  // reduce_grads: γ ‖ β of both norms
    if (o.num_groups() < p)  // GQA with K/V copies on several ranks: the replica sync (nn/attention.hpp)
      tally_add(row.analytic_bwd, AR,
                static_cast<std::size_t>((h + (o.no_bias ? 0 : 1)) * 2 * o.num_groups() * (h / o.heads)) * sizeof(T));
    row.flops = 3.0 * cost::layer_forward_flops(shape) / p;
  }
  if (SP) tally_add(rows[nlayers + 1].analytic_bwd, AR, norm_grad);  // the final norm's γ ‖ β
  Row& hr = rows.back();
  if (SP) tally_add(hr.analytic_fwd, AG, Th);                          // X[Row] → R before the head
  tally_add(hr.analytic_fwd, AR, static_cast<std::size_t>(Tk) * sizeof(T));      // loss: max
  tally_add(hr.analytic_fwd, AR, 2 * static_cast<std::size_t>(Tk) * sizeof(T));  // loss: Σe and the target logit
  tally_add(hr.analytic_bwd, SP ? RS : AR, Th);                        // head: dX[Partial] → Row or R

  // nn::Gpt: its collectives must be the layer-by-layer run's, kind by kind (it puts the SP norm
  // reductions in scope "grads", after the backward; so compare the whole step)
  for (const auto& en : entries) {
    if (Ledger::in_scope(en.scope, "gpt/fwd")) tally_add(gr.ledger_fwd, en.kind, en.bytes);
    else if (Ledger::in_scope(en.scope, "gpt")) tally_add(gr.ledger_bwd, en.kind, en.bytes);
  }
  for (const auto& row : rows) {
    for (const auto& [k, v] : row.ledger_fwd) gr.analytic_fwd[k].first += v.first, gr.analytic_fwd[k].second += v.second;
    for (const auto& [k, v] : row.ledger_bwd) gr.analytic_bwd[k].first += v.first, gr.analytic_bwd[k].second += v.second;
  }
  rows.push_back(std::move(gr));

  out->rows = std::move(rows);
  out->ledger.assign(entries.begin(), entries.end());
  out->cal = cal;
  out->explain = std::move(explain);
  out->loss = static_cast<double>(lf->mean);
  out->loss_ref = dr->out.mean;
  out->step_seconds = step_seconds;
  out->dense_seconds = dense_seconds;
  for (const auto& s : all_events)
    for (auto& ev : json::parse(s)) out->trace_events.push_back(std::move(ev));
}

// =================================================================================================
// Output
// =================================================================================================
std::string tally_text(const CommTally& t) {
  if (t.empty()) return "0";
  std::string s;
  std::size_t bytes = 0;
  for (const auto& [k, v] : t) {
    const std::string ab = k == "all_reduce" ? "AR" : k == "all_gather" ? "AG" : k == "reduce_scatter" ? "RS" : k == "all_to_all" ? "A2A" : k;
    s += (s.empty() ? "" : "+") + std::to_string(v.first) + " " + ab;
    bytes += v.second;
  }
  return s + " " + fmt_bytes(static_cast<double>(bytes));
}
json tally_json(const CommTally& t) {
  json j = json::object();
  std::size_t n = 0, b = 0;
  for (const auto& [k, v] : t) {
    j[k] = {{"count", v.first}, {"bytes", v.second}};
    n += v.first;
    b += v.second;
  }
  return {{"count", n}, {"bytes", b}, {"by_kind", j}};
}

std::string pad(std::string s, std::size_t w) {
  // display width: count UTF-8 code points
  std::size_t cps = 0;
  for (unsigned char c : s) cps += (c & 0xC0) != 0x80;
  if (cps < w) s.append(w - cps, ' ');
  return s;
}
std::string rpad(const std::string& s, std::size_t w) {
  std::size_t cps = 0;
  for (unsigned char c : s) cps += (c & 0xC0) != 0x80;
  return (cps < w ? std::string(w - cps, ' ') : std::string()) + s;
}

json report_json(const Options& o, int p, const RankResult& r, bool pass, Index padded) {
  json j;
  j["tool"] = "shardalg-verify";
  j["version"] = kVersion;
  j["config"] = {{"tp", p},
                 {"sp", o.sp},
                 {"layers", o.layers},
                 {"hidden", o.hidden},
                 {"heads", o.heads},
                 {"groups", o.num_groups()},
                 {"ffn", o.ffn_size()},
                 {"seq", o.seq},
                 {"batch", o.batch},
                 {"tokens", o.tokens()},
                 {"vocab", o.vocab},
                 {"vocab_padded", padded},
                 {"dtype", o.dtype},
                 {"seed", o.seed},
                 {"backend", r.backend_name},
                 {"dropout", o.dropout},
                 {"activation", o.act},
                 {"norm", o.norm},
                 {"bias", !o.no_bias}};
  j["tolerance"] = o.tolerance();
  json samples = json::array();
  for (const auto& s : r.cal.samples)
    samples.push_back({{"bytes", s.dense_bytes}, {"seconds", s.seconds}, {"median_seconds", s.median_seconds}});
  j["calibration"] = {{"alpha_seconds", r.cal.link.alpha_seconds},
                      {"beta_bytes_per_second", std::isfinite(r.cal.link.beta_bytes_per_second) ? json(r.cal.link.beta_bytes_per_second) : json(nullptr)},
                      {"group_size", r.cal.group_size},
                      {"samples", samples}};
  json rows = json::array();
  std::size_t nchecks = 0, nfail = 0;
  double maxerr = 0, pred = 0, meas = 0;
  Memory mem;
  CommTally fwd, bwd;
  for (const auto& row : r.rows) {
    json checks = json::array();
    for (const auto& c : row.checks) {
      checks.push_back({{"name", c.name},
                        {"max_rel", std::isfinite(c.err.max_rel) ? json(c.err.max_rel) : json("inf")},
                        {"max_abs", c.err.max_abs},
                        {"pass", c.pass}});
      ++nchecks;
      nfail += !c.pass;
    }
    maxerr = std::max(maxerr, row.max_error());
    if (row.key == "gpt") {
      rows.push_back({{"name", row.name},
                      {"checks", checks},
                      {"max_error", row.max_error()},
                      {"pass", row.pass()},
                      {"comm",
                       {{"forward", {{"ledger", tally_json(row.ledger_fwd)}, {"layer_by_layer", tally_json(row.analytic_fwd)}}},
                        {"backward", {{"ledger", tally_json(row.ledger_bwd)}, {"layer_by_layer", tally_json(row.analytic_bwd)}}},
                        {"match", row.comm_ok()}}}});
      continue;
    }
    pred += row.predicted_s;
    meas += row.measured_s;
    mem.params += row.mem.params;
    mem.grads += row.mem.grads;
    mem.activations += row.mem.activations;
    for (const auto& [k, v] : row.ledger_fwd) fwd[k].first += v.first, fwd[k].second += v.second;
    for (const auto& [k, v] : row.ledger_bwd) bwd[k].first += v.first, bwd[k].second += v.second;
    rows.push_back({{"name", row.name},
                    {"checks", checks},
                    {"max_error", row.max_error()},
                    {"pass", row.pass()},
                    {"comm",
                     {{"forward", {{"ledger", tally_json(row.ledger_fwd)}, {"analytic", tally_json(row.analytic_fwd)}}},
                      {"backward", {{"ledger", tally_json(row.ledger_bwd)}, {"analytic", tally_json(row.analytic_bwd)}}},
                      {"match", row.comm_ok()}}},
                    {"time",
                     {{"predicted_comm_seconds", row.predicted_s},
                      {"measured_comm_seconds", row.measured_s},
                      {"measured_comm_seconds_max_rank", row.measured_max_s},
                      {"compute_seconds", row.compute_s},
                      {"flops_per_rank", row.flops}}},
                    {"memory_per_rank",
                     {{"parameters_bytes", row.mem.params},
                      {"gradients_bytes", row.mem.grads},
                      {"activations_bytes", row.mem.activations}}}});
  }
  j["layers"] = rows;
  json led = json::array();
  for (const auto& e : r.ledger)
    led.push_back({{"scope", e.scope},
                   {"collective", std::string(to_string(e.kind))},
                   {"layout_in", e.layout_in},
                   {"layout_out", e.layout_out},
                   {"elements", e.elements},
                   {"bytes", e.bytes},
                   {"dtype", std::string(to_string(e.dtype))}});
  j["ledger"] = led;
  j["summary"] = {{"pass", pass},
                  {"checks", nchecks},
                  {"failed", nfail},
                  {"max_error", maxerr},
                  {"loss", r.loss},
                  {"loss_reference", r.loss_ref},
                  {"collectives", {{"forward", tally_json(fwd)}, {"backward", tally_json(bwd)}}},
                  {"predicted_comm_seconds", pred},
                  {"measured_comm_seconds", meas},
                  {"step_seconds", r.step_seconds},
                  {"dense_reference_seconds", r.dense_seconds},
                  {"memory_per_rank",
                   {{"parameters_bytes", mem.params}, {"gradients_bytes", mem.grads}, {"activations_bytes", mem.activations}}}};
  if (!r.explain.is_null()) j["explain"] = r.explain;
  return j;
}

void print_explain(std::ostream& os, const json& ex, int p) {
  os << "\nexplain: block 0 as executed (rank 0 of " << p << "; T = tokens, h = hidden)\n";
  for (const char* phase : {"forward", "backward"}) {
    os << "  " << phase << "\n";
    for (const auto& s : ex[phase]) {
      std::string comm;
      if (s["comm"].empty()) comm = "(no comm)";
      else {
        for (const auto& c : s["comm"]) {
          if (!comm.empty()) comm += "; ";
          comm += "(1 " + c["collective"].get<std::string>() + " " + c["layout_in"].get<std::string>() + "→" +
                  c["layout_out"].get<std::string>() + " of " + c["elements_symbolic"].get<std::string>() + " = " +
                  std::to_string(c["elements"].get<std::size_t>()) + " el, " +
                  fmt_bytes(c["bytes"].get<double>()) + ")";
        }
      }
      os << "    " << pad(s["op"].get<std::string>(), 58) << " " << comm;
      const auto note = s["note"].get<std::string>();
      if (!note.empty()) os << "  — " << note;
      os << "\n";
      if (s.contains("plan"))
        os << "      " << s["plan"].get<std::string>()
           << (s["plan_agrees"].get<bool>() ? "  — the same collectives" : "  — DIFFERENT collectives") << "\n";
    }
  }
  const auto& c = ex["check"];
  os << "  trace check: re-executed results vs "
     << (ex["sequence_parallel"].get<bool>() ? "SequenceParallelBlock" : "TransformerBlock") << "::forward/backward: "
     << (c["bit_identical"].get<bool>() ? "bit-identical" : "max |Δ| = " + fmt_err(c["max_abs_difference"].get<double>()))
     << "; collectives " << c["traced_collectives"].get<std::size_t>() << " traced vs " << c["block_collectives"].get<std::size_t>()
     << " in the block's ledger: " << (c["collectives_identical"].get<bool>() ? "identical" : "DIFFERENT") << "\n";
}

void print_text(std::ostream& os, const Options& o, int p, const RankResult& r, bool pass, Index padded) {
  const Index d = o.hidden / o.heads;
  os << "shardalg-verify " << kVersion << " — one forward + backward pass, sharded vs dense (reference/dense.hpp)\n";
  os << "model    GPT: " << o.layers << " layers, hidden " << o.hidden << ", " << o.heads << " heads of " << d << " ("
     << o.num_groups() << " query groups), ffn " << o.ffn_size() << ", " << o.batch << "×" << o.seq << " = " << o.tokens()
     << " tokens,\n         vocab " << o.vocab << " (padded " << padded << "), " << o.norm << ", " << o.act << ", dropout "
     << o.dropout << ", " << o.dtype << "\n";
  os << "sharded  TP=" << p << " on " << r.backend_name << ", " << (o.sp ? "sequence parallel" : "no sequence parallelism")
     << "\n";
  os << "link     α = " << fmt_time(r.cal.link.alpha_seconds) << ", β = ";
  if (std::isfinite(r.cal.link.beta_bytes_per_second)) os << std::setprecision(3) << r.cal.link.beta_bytes_per_second / 1e9 << " GB/s";
  else os << "∞";
  os << "  (fitted on this group: all-reduce of 4 KiB … 1 MiB, fastest of 9)\n";
  os << "pass     normwise relative error ≤ " << fmt_err(o.tolerance()) << " (" << o.dtype
     << ") for every output and gradient; ledger = analytic collectives, exactly\n\n";

  // 1. errors
  os << pad("layer", 17) << rpad("checks", 6) << "  " << pad("max rel error", 15) << "worst\n";
  for (const auto& row : r.rows) {
    const Check* worst = nullptr;
    std::size_t fails = 0;
    for (const auto& c : row.checks) {
      if (!worst || (!c.pass && worst->pass) || (c.pass == worst->pass && c.err.max_rel > worst->err.max_rel)) worst = &c;
      fails += !c.pass;
    }
    os << pad(row.name, 17) << rpad(std::to_string(row.checks.size()), 6) << "  "
       << pad(worst ? fmt_err(worst->err.max_rel) : "-", 15) << (worst ? worst->name : "")
       << (fails ? "   FAIL ×" + std::to_string(fails) : "") << "\n";
    if (o.verbose)
      for (const auto& c : row.checks)
        os << "    " << pad(c.name, 46) << fmt_err(c.err.max_rel) << "  (abs " << fmt_err(c.err.max_abs) << ")"
           << (c.pass ? "" : "  FAIL") << "\n";
  }

  // 2. collectives
  os << "\n" << pad("collectives", 17) << pad("forward: ledger", 26) << pad("analytic", 26) << pad("backward: ledger", 26)
     << pad("analytic", 26) << "\n";
  for (const auto& row : r.rows)
    os << pad(row.name, 17) << pad(tally_text(row.ledger_fwd), 26) << pad(tally_text(row.analytic_fwd), 26)
       << pad(tally_text(row.ledger_bwd), 26) << pad(tally_text(row.analytic_bwd), 26) << (row.comm_ok() ? "=" : "MISMATCH")
       << "\n";
  os << "  (AR all_reduce, AG all_gather, RS reduce_scatter; bytes: the dense V of each, as the ledger counts;\n"
        "   nn::Gpt's analytic column is the layer-by-layer run's ledger: the model class must communicate the same)\n";

  // 3. time and memory (the layer-by-layer run; nn::Gpt is a second run of the same model)
  os << "\n" << pad("per rank", 17) << rpad("comm predicted", 14) << rpad("measured", 11) << rpad("(max rank)", 12)
     << rpad("compute", 11) << rpad("params", 12) << rpad("grads", 12) << rpad("activations", 13) << "\n";
  double pred = 0, meas = 0, measmax = 0, comp = 0;
  Memory mem;
  CommTally fwd, bwd;
  std::size_t nchecks = 0, nfail = 0;
  double maxerr = 0;
  for (const auto& row : r.rows) {
    for (const auto& c : row.checks) ++nchecks, nfail += !c.pass;
    maxerr = std::max(maxerr, row.max_error());
    if (row.key == "gpt") continue;
    os << pad(row.name, 17) << rpad(fmt_time(row.predicted_s), 14) << rpad(fmt_time(row.measured_s), 11)
       << rpad(fmt_time(row.measured_max_s), 12) << rpad(fmt_time(row.compute_s), 11)
       << rpad(fmt_bytes(double(row.mem.params)), 12) << rpad(fmt_bytes(double(row.mem.grads)), 12)
       << rpad(fmt_bytes(double(row.mem.activations)), 13) << "\n";
    pred += row.predicted_s;
    meas += row.measured_s;
    measmax += row.measured_max_s;
    comp += row.compute_s;
    mem.params += row.mem.params;
    mem.grads += row.mem.grads;
    mem.activations += row.mem.activations;
    for (const auto& [k, v] : row.ledger_fwd) fwd[k].first += v.first, fwd[k].second += v.second;
    for (const auto& [k, v] : row.ledger_bwd) bwd[k].first += v.first, bwd[k].second += v.second;
  }
  os << pad("total", 17) << rpad(fmt_time(pred), 14) << rpad(fmt_time(meas), 11) << rpad(fmt_time(measmax), 12)
     << rpad(fmt_time(comp), 11) << rpad(fmt_bytes(double(mem.params)), 12) << rpad(fmt_bytes(double(mem.grads)), 12)
     << rpad(fmt_bytes(double(mem.activations)), 13) << "\n";
  os << "  predicted: α-β ring model of each ledgered collective; measured: per collective the fastest rank's time\n"
        "  (the last to arrive, no waiting), summed; (max rank): the slowest rank's, waiting included;\n"
        "  compute: the slowest rank's layer time minus its collectives; memory: bytes of this rank's tensors\n";

  if (!r.explain.is_null()) print_explain(os, r.explain, p);

  std::size_t nfwd = 0, nbwd = 0;
  for (const auto& [k, v] : fwd) nfwd += v.first;
  for (const auto& [k, v] : bwd) nbwd += v.first;
  os << "\nsummary  " << (nchecks - nfail) << "/" << nchecks << " checks passed, max error " << fmt_err(maxerr)
     << " (threshold " << fmt_err(o.tolerance()) << "); loss " << std::setprecision(10) << r.loss << " (dense "
     << r.loss_ref << ")\n";
  os << "         collectives per step: forward " << nfwd << " (" << tally_text(fwd) << "), backward " << nbwd << " ("
     << tally_text(bwd) << ")\n";
  os << "         comm time: predicted " << fmt_time(pred) << ", measured " << fmt_time(meas) << " (×"
     << std::setprecision(2) << (pred > 0 ? meas / pred : 0.0) << "); step " << fmt_time(r.step_seconds)
     << ", dense reference " << fmt_time(r.dense_seconds) << "\n";
  os << "         memory per rank: parameters " << fmt_bytes(double(mem.params)) << ", gradients "
     << fmt_bytes(double(mem.grads)) << ", activations held " << fmt_bytes(double(mem.activations)) << "\n";
  os << (pass ? "PASS" : "FAIL") << "\n";
}

/// A progress line on stderr (rank 0), once the run has taken more than a second: rewritten in
/// place on a terminal; on a pipe, a line per new phase and otherwise one per second at most.
struct Progress {
  bool enabled = true, tty = false;
  Clock::time_point start = Clock::now(), last{};
  bool printed = false;
  void operator()(const std::string& what, bool phase) {
    if (!enabled) return;
    const auto now = Clock::now();
    const double el = std::chrono::duration<double>(now - start).count();
    if (el < 1.0) return;
    if (!tty && !phase && std::chrono::duration<double>(now - last).count() < 1.0) return;
    last = now;
    std::ostringstream os;
    os << "[shardalg-verify " << std::fixed << std::setprecision(1) << el << " s] " << what;
    if (tty) std::cerr << "\r\033[K" << os.str() << std::flush;
    else std::cerr << os.str() << "\n";
    printed = true;
  }
  void done() {
    if (tty && printed) std::cerr << "\r\033[K" << std::flush;
  }
};

template <class T>
int run_all(const Options& o, int p, Group* mpi_world, int mpi_rank) {
  const bool root = mpi_world == nullptr || mpi_rank == 0;
  Progress progress;
  progress.tty = isatty(2) != 0;
  progress.enabled = root && o.progress != "never";
  if (o.progress == "always") progress.start = Clock::now() - std::chrono::seconds(2);
  const std::function<void(const std::string&, bool)> prog = [&](const std::string& s, bool phase) { progress(s, phase); };
  const DenseModel dm = make_model(o);
  RankResult res;
  if (mpi_world) {
    res.backend_name = "MpiComm (" + std::to_string(p) + " processes)";
    if (o.sp) run_rank<T, true>(*mpi_world, o, dm, root ? &res : nullptr, prog);
    else run_rank<T, false>(*mpi_world, o, dm, root ? &res : nullptr, prog);
  } else {
    res.backend_name = "ThreadComm (" + std::to_string(p) + " ranks as threads in this process)";
    run_ranks(p, [&](ThreadComm& c) {
      if (o.sp) run_rank<T, true>(Group(c), o, dm, c.rank() == 0 ? &res : nullptr, prog);
      else run_rank<T, false>(Group(c), o, dm, c.rank() == 0 ? &res : nullptr, prog);
    });
  }
  progress.done();
  if (!root) return 0;
  bool pass = true;
  for (const auto& row : res.rows) pass = pass && row.pass();
  if (!res.explain.is_null()) {
    const auto& c = res.explain["check"];
    pass = pass && c["collectives_identical"].get<bool>() && c["bit_identical"].get<bool>();
    for (const auto& s : res.explain["forward"])  // matmul<To> plans the block's own collectives
      if (s.contains("plan_agrees")) pass = pass && s["plan_agrees"].get<bool>();
  }
  const Index padded = nn::padded_vocab(o.vocab, o.vocab_divisor, p);
  if (o.json) std::cout << report_json(o, p, res, pass, padded).dump(2) << "\n";
  else print_text(std::cout, o, p, res, pass, padded);
  if (!o.trace.empty()) {
    json tr{{"traceEvents", res.trace_events},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"tool", "shardalg-verify"}, {"tp", p}, {"backend", res.backend_name}}}};
    std::ofstream f(o.trace);
    if (!f) throw std::runtime_error("--trace: cannot write " + o.trace);
    f << tr.dump() << "\n";
    if (!o.json) std::cout << "trace    " << res.trace_events.size() << " events written to " << o.trace << " (open in https://ui.perfetto.dev)\n";
  }
  return pass ? 0 : 1;
}

bool under_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"shardalg-verify: one forward + backward pass of a small GPT, tensor-parallel vs dense reference"};
  app.add_option("--tp", o.tp, "tensor-parallel size (threads); under mpirun the process count")->check(CLI::PositiveNumber);
  app.add_flag("--sp", o.sp, "sequence parallelism (RowSharded activations between blocks)");
  app.add_option("--layers", o.layers, "transformer blocks")->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size h")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads")->capture_default_str();
  app.add_option("--groups", o.groups, "query groups for GQA (0: = heads, MHA)")->capture_default_str();
  app.add_option("--ffn", o.ffn, "MLP hidden size (0: 4·hidden)")->capture_default_str();
  app.add_option("--seq", o.seq, "sequence length s")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per batch b")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size (padded to a multiple of divisor·TP)")->capture_default_str();
  app.add_option("--vocab-divisor", o.vocab_divisor, "Megatron's make-vocab-size-divisible-by")->capture_default_str();
  app.add_option("--dtype", o.dtype, "element type")->check(CLI::IsMember({"float", "double"}))->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the weights, tokens and dropout masks")->capture_default_str();
  app.add_option("--backend", o.backend, "thread: ThreadComm ranks in this process; mpi: MpiComm (under mpirun)")
      ->check(CLI::IsMember({"thread", "mpi"}))
      ->capture_default_str();
  app.add_option("--dropout", o.dropout, "hidden dropout probability")->capture_default_str();
  app.add_option("--act", o.act, "MLP activation")->check(CLI::IsMember({"gelu", "gelu-erf", "swiglu"}))->capture_default_str();
  app.add_option("--norm", o.norm, "norm")->check(CLI::IsMember({"layernorm", "rmsnorm"}))->capture_default_str();
  app.add_flag("--no-bias", o.no_bias, "linear layers without biases");
  app.add_flag("--json", o.json, "machine-readable output (JSON on stdout)");
  app.add_flag("--explain", o.explain, "print block 0's derivation as executed");
  app.add_option("--trace", o.trace, "write a Chrome-trace JSON of every rank's compute and collectives to FILE");
  app.add_flag("-v,--verbose", o.verbose, "print every check");
  app.add_option("--progress", o.progress, "progress line on stderr")->check(CLI::IsMember({"auto", "always", "never"}))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const bool tp_given = app.count("--tp") > 0;

  int rank = 0, size = 1;
  std::optional<Group> world;
#if defined(SHARDALG_VERIFY_MPI)
  bool mpi = false;
#endif
  if (o.backend == "mpi") {
#if defined(SHARDALG_VERIFY_MPI)
    MPI_Init(&argc, &argv);
    mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    world.emplace(MpiComm(MPI_COMM_WORLD));
#else
    std::cerr << "shardalg-verify: error: --backend mpi: this build has no MPI (configure with MPI found to get shardalg::mpi)\n";
    return 2;
#endif
  }
  auto finish = [&](int code) {
#if defined(SHARDALG_VERIFY_MPI)
    if (mpi) MPI_Finalize();
#endif
    return code;
  };

  int p = o.tp;
  try {
    if (world) {
      if (tp_given && o.tp != size)
        throw ConfigError(shardalg::detail::cat("--tp ", o.tp, " differs from the MPI process count ", size,
                                                " (under mpirun the TP size is the process count)"));
      p = size;
    } else if (under_mpirun()) {
      throw ConfigError("running under mpirun with --backend thread; pass --backend mpi");
    }
    validate(o, p);
  } catch (const std::exception& e) {
    if (rank == 0) std::cerr << "shardalg-verify: error: " << e.what() << "\n";
    return finish(2);
  }

  try {
    Group* w = world ? &*world : nullptr;
    const int code = o.is_double() ? run_all<double>(o, p, w, rank) : run_all<float>(o, p, w, rank);
    return finish(code);
  } catch (const std::exception& e) {
    std::cerr << "shardalg-verify: internal error on rank " << rank << ": " << e.what() << "\n";
#if defined(SHARDALG_VERIFY_MPI)
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 3);
#endif
    return 3;
  }
}
