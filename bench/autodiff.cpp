// bench/autodiff.cpp — what a derived backward costs (issue 15): the transformer block's forward +
// backward written with the differentiable ops (autodiff/layers.hpp) against the hand-written
// nn::TransformerBlock on the same weights, paired in one binary. Counters: the activation bytes
// each keeps for its backward, measured from the tensors (the hand-written cache; the values still
// alive on the tape after the forward, inputs and weights excluded).
//
//   build/benchmarks/bench/bench_autodiff --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// One rank (SelfComm): the tape's own cost is the closures, the shared values and the cotangent
// slots; the arithmetic is the same kernels, and at TP > 1 the same collectives
// (tests/autodiff/test_autodiff_layers.cpp compares the ledgers).
#include <benchmark/benchmark.h>

#include <shardalg/autodiff/layers.hpp>
#include <shardalg/shardalg.hpp>
#include <shardalg/nn/layers/block.hpp>
#include <shardalg/observe/held_bytes.hpp>

using namespace shardalg;
using M = CpuBackend::matrix<double>;

namespace {

nn::BlockConfig config() {
  nn::BlockConfig c;
  c.hidden = 256, c.heads = 8, c.seq = 128, c.ffn = 1024, c.eps = 1e-5, c.dropout = 0.1, c.dropout_seed = 5;
  return c;
}
constexpr Index kTokens = 512;

template <class L>
Sharded<double, L> as(const Sharded<double, Replicated>& x) {
  return Sharded<double, L>(x.local(), x.rows(), x.cols(), x.group());
}

struct Setup {
  nn::BlockConfig c = config();
  M x = M::Random(kTokens, c.hidden), dy = M::Random(kTokens, c.hidden);
  nn::TransformerBlock<double> blk;
  explicit Setup(const Group& g) : blk(nn::TransformerBlock<double>::init(c, g, nn::InitConfig{7, 0.02, 1, 0})) {}
};

ad::BlockParams<double, Invariant> params(ad::Tape& t, const nn::TransformerBlock<double>& b, double eps) {
  auto col = [&](const auto& l) { return ad::ColumnParams<double>{t.input(l.weight()), t.input(*l.bias())}; };
  auto row = [&](const auto& l) { return ad::RowParams<double, Invariant>{t.input(l.weight()), t.input(as<Invariant>(*l.bias()))}; };
  auto norm = [&](const auto& n) {
    return ad::NormParams<double, Invariant>{t.input(as<Invariant>(n.gamma())), t.input(as<Invariant>(*n.beta())), eps};
  };
  return {norm(b.ln1()), col(b.attention().qkv()), row(b.attention().proj()), norm(b.ln2()), col(b.mlp().fc1()),
          row(b.mlp().fc2())};
}

nn::Dropout drop(const nn::BlockConfig& c, nn::TensorKind k) { return nn::Dropout(c.dropout, c.dropout_seed, nn::tensor_id(c.layer, k)); }

void handwritten(benchmark::State& state, const Group& g, Setup& s) {
  double held = 0;
  for (auto _ : state) {
    auto f = s.blk.forward(shard<Replicated>(s.x, g));
    const auto& c = f.cache;
    held = double(verify::sum_bytes(c.ln1.xhat, c.ln1.rstd, c.attn.qkv_in.x, c.attn.qkv, c.attn.probs, c.attn.proj.h,
                                    c.ln2.xhat, c.ln2.rstd, c.mlp.fc1.x, c.mlp.h, c.mlp.fc2.h));
    auto b = s.blk.backward(f.cache, shard<Replicated>(s.dy, g));
    benchmark::DoNotOptimize(b.dx.local().data());
  }
  state.counters["held_bytes"] = held;
}

void derived(benchmark::State& state, const Group& g, Setup& s) {
  double held = 0;
  for (auto _ : state) {
    ad::Tape t;
    const auto p = params(t, s.blk, s.c.eps);
    std::size_t inputs = 0;
    {
      auto x = t.input(shard<Invariant>(s.x, g));
      inputs = t.held_bytes();  // the weights and the input
      auto y = ad::block(x, p, s.c, drop(s.c, nn::TensorKind::dropout_attn), drop(s.c, nn::TensorKind::dropout_mlp));
      held = double(t.held_bytes() - inputs - static_cast<std::size_t>(y.value().local().size()) * sizeof(double));
      t.backward(y, shard<Invariant>(s.dy, g));
    }
    benchmark::DoNotOptimize(&t);
  }
  state.counters["held_bytes"] = held;
}

void BM_block_handwritten_tp1(benchmark::State& state) {
  Group g(SelfComm{});
  Setup s(g);
  handwritten(state, g, s);
}
void BM_block_derived_tp1(benchmark::State& state) {
  Group g(SelfComm{});
  Setup s(g);
  derived(state, g, s);
}
}  // namespace

BENCHMARK(BM_block_handwritten_tp1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_block_derived_tp1)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
