// Context parallelism in 16-bit storage: ring and all-to-all attention on bf16 and fp16 (fp32
// compute) against exact arithmetic (double) on the same rounded inputs, element by element,
// with the first-order bound of nn/layers/ring_attention.hpp computed here from the exact
// quantities: error ÷ bound ≤ 1 for O, dQ, dK and dV at cp 1–4 with grouped K/V, and not vacuous
// (the median ratio ≥ 1e-3; O's largest ≥ 0.25: its error is one rounding). The messages: K|V
// travel in 16 bits, the dK|dV partial sums in fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "cp_cases.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/observe/ledger.hpp"

using namespace shardalg;
using cpt::Shape;

namespace {

using cpt::Ratios;

template <class T>
void check_cp(bool ulysses) {
  for (int cp : {1, 2, 3, 4})
    for (const Shape s : {Shape{2, 4 * cp, 4, 2, 8}, Shape{1, 6 * cp, 4, 4, 16}}) {
      if (ulysses && (s.heads % cp != 0 || s.groups % cp != 0)) continue;  // whole heads per rank
      CAPTURE(cp);
      CAPTURE(s.seq);
      CAPTURE(s.groups);
      std::vector<Ratios> got(static_cast<std::size_t>(cp));
      run_ranks(cp, [&](ThreadComm& c) {
        Group g(c);
        got[static_cast<std::size_t>(c.rank())] = cpt::case_16bit<T>(g, s, ulysses, 7);
      });
      Ratios w;
      for (const auto& r : got) {
        w.o_max = std::max(w.o_max, r.o_max), w.dq_max = std::max(w.dq_max, r.dq_max);
        w.dk_max = std::max(w.dk_max, r.dk_max), w.dv_max = std::max(w.dv_max, r.dv_max);
        w.o_med = std::max(w.o_med, r.o_med), w.grad_med = std::min(w.grad_med, r.grad_med);
      }
      INFO("error ÷ bound, largest: O ", w.o_max, ", dQ ", w.dq_max, ", dK ", w.dk_max, ", dV ", w.dv_max,
           "; median: O ", w.o_med, ", the gradients' smallest ", w.grad_med);
      CHECK(w.o_max <= 1.0);
      CHECK(w.dq_max <= 1.0);
      CHECK(w.dk_max <= 1.0);
      CHECK(w.dv_max <= 1.0);
      CHECK(w.o_max >= 0.25);      // O's error is one rounding: the bound is nearly reached
      CHECK(w.o_med >= 1e-3);      // not vacuous
      CHECK(w.grad_med >= 1e-3);
    }
}

}  // namespace

TEST_CASE("ring attention in bf16 and fp16 storage (fp32 compute): every element within its derived bound, cp 1–4, GQA") {
  check_cp<Eigen::bfloat16>(false);
  check_cp<Eigen::half>(false);
}

TEST_CASE("all-to-all attention in bf16 storage: every element within the same bound, cp 1, 2, 4") {
  check_cp<Eigen::bfloat16>(true);
}

TEST_CASE("ring attention in bf16: K|V travel in 16 bits, the dK|dV partial sums in fp32 (the ledger's bytes)") {
  for (int cp : {2, 4}) {
    CAPTURE(cp);
    run_ranks(cp, [&](ThreadComm& c) {
      using RA = nn::RingAttention<Eigen::bfloat16>;
      const Shape s{2, 4 * cp, 4, 2, 3};
      const nn::CpTokens tok{s.seq, s.batch, cp, c.rank()};
      const Index n = s.batch * s.seq, rows = tok.rows();
      auto in = [&](Index cols, unsigned seed) { return RA::Mat(tok.take(cpt::random(n, cols, seed)).cast<Eigen::bfloat16>()); };
      const auto q = in(12, 1), k = in(6, 2), v = in(6, 3);
      Ledger lf, lb;
      Group gf = ledgered(c, lf), gb = ledgered(c, lb);
      const auto f = RA::forward(gf, tok, {4, 2, 3, true}, q, k, v);
      (void)RA::backward(gb, tok, {4, 2, 3, true}, q, k, v, f, q);
      const auto kv = static_cast<std::size_t>(rows * 2 * 2 * 3);  // rows × 2·G·d elements
      std::size_t fwd = 0, bwd = 0;
      for (const auto& e : lf.entries())
        if (e.kind == CollectiveKind::send) fwd += e.bytes;
      for (const auto& e : lb.entries())
        if (e.kind == CollectiveKind::send) bwd += e.bytes;
      CHECK(fwd == static_cast<std::size_t>(cp - 1) * kv * 2);                               // K|V, bf16
      CHECK(bwd == static_cast<std::size_t>(cp - 1) * kv * 2 + static_cast<std::size_t>(cp) * kv * 4);  // + dK|dV, fp32
    });
  }
}
