// tests/conv/conv_cases.hpp — one run of the spatially sharded Conv2d on a group, shared by the
// thread tests (test_conv.cpp) and the MPI tests (test_conv_mpi.cpp): forward, backward and the
// gradient reduction on a ledgered handle, each in its own ledger scope; the results gathered
// to dense (verification traffic, not in the ledger) and what this rank's ledger recorded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "shardalg/nn/layers/conv2d.hpp"
#include "shardalg/reference/conv2d.hpp"
#include "testing.hpp"

namespace ct {

using namespace shardalg;
template <class T>
using Mat = CpuBackend::matrix<T>;

/// N images of H × W, C_in → C_out, kernel k; integer-valued operands (exact in float and double)
/// or uniform reals.
struct Case {
  Index n = 1, h = 12, w = 5, cin = 2, cout = 3, k = 3;
  bool bias = true;
  bool integer = true;
  std::uint64_t seed = 1;
};

inline nn::Conv2dShape shape_of(const Case& c) {
  return {.height = c.h, .width = c.w, .in_channels = c.cin, .out_channels = c.cout, .kernel = c.k, .batch = c.n};
}
inline ref::ConvDims dims_of(const Case& c) { return {c.n, c.h, c.w, c.cin, c.cout, c.k}; }

/// The dense operands (every rank makes the same ones).
struct Operands {
  ref::M x, w, b, dy;
};
inline Operands operands(const Case& c) {
  const auto gen = [&](Index r, Index cols, std::uint64_t s) -> ref::M {
    if (c.integer) return testing::random_int<double>(r, cols, s);
    return testing::random_real<double>(r, cols, s);
  };
  return {gen(c.h, c.n * c.w * c.cin, c.seed), gen(c.k * c.k * c.cin, c.cout, c.seed + 1),
          c.bias ? gen(1, c.cout, c.seed + 2) : ref::M(), gen(c.h, c.n * c.w * c.cout, c.seed + 3)};
}

/// What one ledger scope recorded: the halo's messages and anything else.
struct Tally {
  std::size_t sends = 0, recvs = 0, send_bytes = 0, recv_bytes = 0;
  std::size_t message_elements_min = 0, message_elements_max = 0;  // over the halo messages
  std::size_t halo = 0;            // halo_bytes(ledger, scope)
  std::size_t wrong_layouts = 0;   // halo messages whose layouts are not `in` → `out`
  std::vector<LedgerEntry> others;  // entries that are not sends or recvs
};
inline Tally tally(const Ledger& l, std::string_view scope, std::string_view in, std::string_view out) {
  Tally t;
  bool first = true;
  for (const auto& e : l.select(scope)) {
    if (e.kind != CollectiveKind::halo && e.kind != CollectiveKind::recv) {  // a halo's send is kind halo
      t.others.push_back(e);
      continue;
    }
    (e.kind == CollectiveKind::halo ? t.sends : t.recvs) += 1;
    (e.kind == CollectiveKind::halo ? t.send_bytes : t.recv_bytes) += e.bytes;
    t.message_elements_min = first ? e.elements : std::min(t.message_elements_min, e.elements);
    t.message_elements_max = first ? e.elements : std::max(t.message_elements_max, e.elements);
    first = false;
    if (e.layout_in != in || e.layout_out != out) ++t.wrong_layouts;
  }
  t.halo = halo_bytes(l, scope);
  return t;
}

/// One rank's results: the dense values (gathered) and its ledger.
struct Run {
  int rank = 0, size = 1;
  Mat<double> y, dx, dw, db;          // dw, db: after reduce_grads
  Mat<double> dw_partial_sum;          // Σ_ranks of the Partial dW (to_dense sums the summands)
  bool dw_replicas_agree = false;
  Tally fwd, bwd;
  std::vector<LedgerEntry> reduce;     // the "conv.reduce" scope
  std::size_t total_entries = 0;
};

template <class T>
Run run_conv(Group base, const Case& c) {
  Ledger ledger;
  Group g = ledgered(std::move(base), ledger);
  const Operands o = operands(c);
  const Mat<T> wt = o.w.cast<T>(), b = o.b.cast<T>();
  auto conv = nn::Conv2d<T>::from_dense(shape_of(c), wt, c.bias ? &b : nullptr, g);
  const auto x = shard<RowSharded>(Mat<T>(o.x.cast<T>()), g);
  const auto dy = shard<RowSharded>(Mat<T>(o.dy.cast<T>()), g);

  typename nn::Conv2d<T>::Forward f;
  {
    auto s = ledger.scope("conv.fwd");
    f = conv.forward(x);
  }
  typename nn::Conv2d<T>::Grads gr;
  {
    auto s = ledger.scope("conv.bwd");
    gr = conv.backward(f.cache, dy);
  }
  static_assert(std::is_same_v<decltype(gr.params.dw), Sharded<T, Partial>>, "dW is Partial across the image rows");
  static_assert(std::is_same_v<decltype(gr.dx), Sharded<T, RowSharded>>, "dX is Row like X");
  Run r;
  r.rank = g.rank();
  r.size = g.size();
  r.dw_partial_sum = to_dense(gr.params.dw).template cast<double>();
  typename nn::Conv2d<T>::ReducedGrads red;
  {
    auto s = ledger.scope("conv.reduce");
    red = nn::Conv2d<T>::reduce_grads(gr.params);
  }
  r.y = to_dense(f.y).template cast<double>();
  r.dx = to_dense(gr.dx).template cast<double>();
  r.dw = red.dw.local().template cast<double>();
  r.dw_replicas_agree = replicas_agree(red.dw);
  if (red.db) r.db = red.db->local().template cast<double>();
  r.fwd = tally(ledger, "conv.fwd", "Row", "Row+halo");
  r.bwd = tally(ledger, "conv.bwd", "Row+halo", "Row");
  r.reduce = ledger.select("conv.reduce");
  r.total_entries = ledger.entries().size();
  return r;
}

/// The dense twin's results for a case.
struct Expected {
  ref::M y, dx, dw, db;
};
inline Expected expected(const Case& c) {
  const Operands o = operands(c);
  const auto d = dims_of(c);
  const auto g = ref::conv2d_backward(o.x, o.w, o.dy, d);
  return {ref::conv2d(o.x, o.w, o.b, d), g.dx, g.dw, c.bias ? g.db : ref::M()};  // no bias: no db to compare
}

/// Halo elements rank q sends per pass: r·N·W·C_in to each neighbour it has.
inline std::size_t neighbours(int q, int p) { return static_cast<std::size_t>((q > 0 ? 1 : 0) + (q + 1 < p ? 1 : 0)); }

}  // namespace ct
