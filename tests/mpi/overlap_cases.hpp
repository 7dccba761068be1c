// tests/mpi/overlap_cases.hpp — the overlapped backward (Megatron's async dgrad) against the
// sequential one and the dense reference. Shared by the thread-world test (tests/unit) and the
// MPI test: each case returns what it measured, and the caller asserts on the test's own thread.
//
// Operands are integer-valued, so every sum of the linear layer is exact in float and double
// whatever its order: the chunked weight gradient Σ_k X[k]ᵀ·dY[k] and the asynchronous
// all-reduce must give the dense result bit for bit. The MLP and the block (GeLU, softmax) are
// compared with the sequential schedule at a tolerance for a different summation order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardalg/nn.hpp"
#include "shardalg/reference/dense_layers.hpp"
#include "testing.hpp"

namespace ov {

using namespace shardalg;
using shardalg::Index;
using nn::Overlap;
using nn::OverlapConfig;

struct Result {
  std::vector<std::pair<std::string, double>> errors;  // max |actual − expected|
  std::size_t all_reduces = 0;                         // ledger entries of kind all_reduce
  std::size_t all_reduce_elements = 0;
  std::optional<bool> chosen;  // Overlap::automatic's decision
  bool async = false;          // the group starts all-reduces asynchronously
};

template <class S>
double max_err(const S& actual, const ref::M& expected) {
  return compare(to_dense(actual), expected).max_abs;
}

/// The raw Group::iall_reduce on an int64 buffer: rank r contributes r + i·(r+1) at element i.
inline Result raw_iall_reduce(Group world, std::size_t n) {
  Ledger ledger;
  Group g = ledgered(world, ledger);
  const int p = g.size(), r = g.rank();
  std::vector<std::int64_t> buf(n);
  for (std::size_t i = 0; i < n; ++i) buf[i] = r + static_cast<std::int64_t>(i) * (r + 1);
  Request req = g.iall_reduce(buf.data(), n, DType::i64, ReduceOp::sum, CallInfo{"Partial", "R"});
  for (int spins = 0; spins < 1000000 && !req.test();) ++spins;  // progress by test() alone
  req.wait();
  Result out;
  double worst = req.done() ? 0.0 : 1.0;
  // Σ_r (r + i(r+1)) = P(P−1)/2 + i·P(P+1)/2
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t want = std::int64_t{p} * (p - 1) / 2 + static_cast<std::int64_t>(i) * p * (p + 1) / 2;
    worst = std::max(worst, static_cast<double>(std::llabs(buf[i] - want)));
  }
  out.errors.push_back({"iall_reduce", worst});
  out.all_reduces = ledger.count(CollectiveKind::all_reduce);
  out.all_reduce_elements = ledger.entries().empty() ? 0 : ledger.entries().front().elements;
  out.async = g.async_all_reduce();
  return out;
}

/// ColumnParallelLinear::backward under `cfg`, `calls` times, against ref::linear_backward.
template <class T>
Result column_linear(Group world, OverlapConfig cfg, int calls) {
  constexpr Index m = 20, in = 12, out = 24;  // m not a multiple of most chunk counts
  const ref::M x = testing::random_int<double>(m, in, 1), w = testing::random_int<double>(in, out, 2),
               b = testing::random_int<double>(1, out, 3), dy = testing::random_int<double>(m, out, 4);
  const auto want = ref::linear_backward(x, w, dy);
  const ref::M want_db = ref::colsum(dy);
  Ledger ledger;
  Group g = ledgered(world, ledger);
  auto col = nn::ColumnParallelLinear<T>::from_dense(w, &b, g);
  col.set_overlap(cfg);
  const auto f = col.forward(shard<Replicated>(testing::Mat<T>(x.cast<T>()), g));
  const auto dY = shard<ColSharded>(testing::Mat<T>(dy.cast<T>()), g);
  Result res;
  double ex = 0, ew = 0, eb = 0;
  for (int i = 0; i < calls; ++i) {
    const auto gr = col.backward(f.cache, dY);
    ex = std::max(ex, max_err(gr.dx, want.dx));
    ew = std::max(ew, max_err(gr.params.dw, want.dw));
    eb = std::max(eb, max_err(*gr.params.db, want_db));
  }
  res.errors = {{"dx", ex}, {"dw", ew}, {"db", eb}};
  res.all_reduces = ledger.count(CollectiveKind::all_reduce);
  for (const auto& e : ledger.entries())
    if (e.kind == CollectiveKind::all_reduce) res.all_reduce_elements += e.elements;
  res.chosen = col.overlap_chosen();
  res.async = g.async_all_reduce();
  return res;
}

/// A layer's backward with overlap on against the same layer's sequential backward.
template <class Layer, class X>
Result on_vs_off(Layer layer, const X& x, OverlapConfig cfg) {
  const auto f = layer.forward(x);
  const auto& y = [&]() -> const auto& {
    if constexpr (requires { f.z; }) return f.z;
    else return f.y;
  }();
  const auto seq = layer.backward(f.cache, y);
  layer.set_overlap(cfg);
  const auto ovl = layer.backward(f.cache, y);
  Result res;
  res.errors.push_back({"dx", max_err(ovl.dx, to_dense(seq.dx))});
  return res;
}

inline Result mlp(Group g) {
  auto layer = nn::Mlp<double>::init({24, 96, nn::Activation::gelu_tanh, true}, g, nn::InitConfig{});
  const auto x = shard<Replicated>(testing::random_real<double>(16, 24, 5), g);
  auto r = on_vs_off(layer, x, {Overlap::on, 3});
  // the weight gradient of fc1 too: the one the chunks compute
  const auto f = layer.forward(x);
  layer.set_overlap({Overlap::off, 4});
  const auto seq = layer.backward(f.cache, f.z);
  layer.set_overlap({Overlap::on, 3});
  const auto ovl = layer.backward(f.cache, f.z);
  r.errors.push_back({"dw1", max_err(ovl.params.fc1.dw, to_dense(seq.params.fc1.dw))});
  return r;
}

inline Result block(Group g) {
  nn::BlockConfig c;
  c.hidden = 24;
  c.heads = 4;
  c.seq = 6;
  c.ffn = 96;
  auto layer = nn::TransformerBlock<double>::init(c, g, nn::InitConfig{});
  const auto x = shard<Replicated>(testing::random_real<double>(12, 24, 6), g);
  return on_vs_off(layer, x, {Overlap::on, 4});
}

}  // namespace ov
