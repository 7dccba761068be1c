// 19 — Context parallelism: the sequence split over cp ranks (nn/layers/cp_tokens.hpp), attention
// as a ring of K/V blocks or as an all-to-all over heads. Part 1 measures the activation bytes a
// rank holds (nn/train/measured_memory.hpp) at cp = 1, 2, 4: every term is per token, so it is the
// one-rank figure ÷ cp, and the causal split gives every rank the same attention work. Part 2 counts
// one block's cp messages in the ledger, ring against all-to-all, beside their formulas.
//
//   19_context_parallel [--seq 64] [--batch 2] [--hidden 64] [--heads 8]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/nn.hpp"
#include "shardalg/nn/train/measured_memory.hpp"

using namespace shardalg;
namespace nn = shardalg::nn;

namespace {

struct Args {
  Index seq = 64, batch = 2, hidden = 64, heads = 8;
};

Args parse(int argc, char** argv) {
  Args a;
  example::Flags("19_context_parallel", argc, argv,
                 {{"seq", &a.seq}, {"batch", &a.batch}, {"hidden", &a.hidden}, {"heads", &a.heads}});
  return a;
}

nn::GptConfig config(const Args& a) {
  nn::GptConfig c;
  c.vocab = 256;
  c.hidden = a.hidden;
  c.heads = a.heads;
  c.layers = 2;
  c.seq = a.seq;
  c.batch = a.batch;
  c.vocab_divisor = 64;
  return c;
}

/// Rank 0's activation bytes (the layers' caches, and everything held outside them) at cp ranks.
nn::ActivationTerms measure(const nn::GptConfig& c, int cp) {
  nn::ActivationTerms out;
  std::mutex m;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(c.batch * c.seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 37 + 11) % 256);
  run_ranks(cp, [&](ThreadComm& comm) {
    Group g(comm);
    auto model = nn::Gpt<double>::init(c, SelfComm{});  // TP 1: the whole model on every rank
    model.set_context_parallel(g);                       // the ring over cp (at cp = 1: over itself)
    const nn::CpTokens tok{c.seq, c.batch, cp, comm.rank()};
    std::vector<std::int64_t> x(static_cast<std::size_t>(tok.rows())), y(x.size());
    for (Index i = 0; i < tok.rows(); ++i) {
      x[static_cast<std::size_t>(i)] = ids[static_cast<std::size_t>(tok.global_row(i))];
      y[static_cast<std::size_t>(i)] = ids[static_cast<std::size_t>((tok.global_row(i) + 1) % (c.batch * c.seq))];
    }
    nn::Adam<double> adam;
    const auto r = nn::measure_memory(model, adam, x, y);
    if (comm.rank() == 0) {
      std::lock_guard lk(m);
      out = r.held;
    }
  });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const nn::GptConfig c = config(a);
  std::printf("Part 1: activation bytes per rank, measured (GPT: %ld layers, hidden %ld, %ld heads, %ld × %ld tokens, double)\n\n",
              static_cast<long>(c.layers), static_cast<long>(c.hidden), static_cast<long>(c.heads), static_cast<long>(c.batch),
              static_cast<long>(c.seq));
  std::printf("  cp   layers' caches   outside the layers   total        total × cp / total at cp 1\n");
  double one = 0;
  for (int cp : {1, 2, 4}) {
    if (c.seq % (2 * cp) != 0) continue;
    const auto h = measure(c, cp);
    if (cp == 1) one = h.total();
    std::printf("  %-4d %12.0f B   %14.0f B   %10.0f B   %.4f\n", cp, h.layers(), h.outside(), h.total(), h.total() * cp / one);
    example::check(std::abs(h.total() * cp / one - 1.0) <= 0.05, "cp " + std::to_string(cp) + ": held bytes ÷ cp within 5% of cp 1's");
  }
  std::printf("\n  Every term is per token (the attention core keeps Q, K, V, O and a log-sum-exp per head,\n"
              "  no s × s matrix), so a rank holds 1/cp of the one-rank bytes.\n\n");

  // Part 2: one block's cp messages, ring against all-to-all (TP 1, MHA).
  std::printf("Part 2: one attention's cp messages per rank, forward + backward (ledger beside formula)\n\n");
  std::printf("  cp   ring: sends   bytes sent   formula      a2a: calls   ledger bytes   sent per rank   formula\n");
  const Index d = c.hidden / c.heads;
  for (int cp : {2, 4}) {
    if (c.seq % (2 * cp) != 0 || c.heads % cp != 0) continue;
    std::size_t sends = 0, ring_bytes = 0, a2a_calls = 0, a2a_bytes = 0;
    std::mutex m;
    run_ranks(cp, [&](ThreadComm& comm) {
      const nn::CpTokens tok{c.seq, c.batch, cp, comm.rank()};
      nn::RingAttention<double>::Mat q = nn::RingAttention<double>::Mat::Random(tok.rows(), c.heads * d);
      for (int algo = 0; algo < 2; ++algo) {
        Ledger l;
        Group g = ledgered(comm, l);
        const nn::RingAttentionConfig rc{c.heads, c.heads, d, true};
        if (algo == 0) {
          const auto f = nn::RingAttention<double>::forward(g, tok, rc, q, q, q);
          (void)nn::RingAttention<double>::backward(g, tok, rc, q, q, q, f, q);
        } else {
          const auto f = nn::UlyssesAttention<double>::forward(g, tok, rc, q, q, q);
          (void)nn::UlyssesAttention<double>::backward(g, tok, rc, f, q);
        }
        if (comm.rank() != 0) continue;
        std::lock_guard lk(m);
        for (const auto& e : l.entries()) {
          if (algo == 0 && e.kind == CollectiveKind::send) ++sends, ring_bytes += e.bytes;
          if (algo == 1 && e.kind == CollectiveKind::all_to_all) ++a2a_calls, a2a_bytes += e.bytes;
        }
      }
    });
    // ring: (cp − 1) K|V forward, (cp − 1) K|V + cp dK|dV backward, each rows × 2h × 8 B
    const std::size_t rows = static_cast<std::size_t>(c.batch * c.seq / cp), kv = rows * 2 * static_cast<std::size_t>(c.hidden) * 8;
    const std::size_t ring_formula = static_cast<std::size_t>(3 * cp - 2) * kv;
    // a2a: Q|K|V and O forward, dO and dQ|dK|dV backward; the ledger counts an all_to_all as cp² tiles
    // of rows × (width / cp), i.e. cp · rows · width elements
    const std::size_t a2a_formula = static_cast<std::size_t>(cp) * rows * static_cast<std::size_t>(2 * (3 + 1) * c.hidden) * 8;
    // what one rank sends of it: (cp − 1)/cp of its cp tiles' worth, i.e. ledger bytes · (cp − 1)/cp²
    const std::size_t a2a_sent = a2a_bytes / static_cast<std::size_t>(cp * cp) * static_cast<std::size_t>(cp - 1);
    const std::size_t a2a_sent_formula = rows * static_cast<std::size_t>(8 * c.hidden) * 8 / static_cast<std::size_t>(cp) * static_cast<std::size_t>(cp - 1);
    std::printf("  %-4d %11zu   %-10zu   %-10zu   %10zu   %-12zu   %-13zu   %zu\n", cp, sends, ring_bytes, ring_formula, a2a_calls,
                a2a_bytes, a2a_sent, a2a_sent_formula);
    example::check(sends == static_cast<std::size_t>(3 * cp - 2) && ring_bytes == ring_formula, "ring cp " + std::to_string(cp) + ": 3·cp − 2 sends");
    example::check(a2a_calls == 4 && a2a_bytes == a2a_formula && a2a_sent == a2a_sent_formula,
                   "a2a cp " + std::to_string(cp) + ": 4 all_to_alls, (cp − 1)/cp of 8·h values per token sent");
  }
  std::printf("\n  The ring sends a K/V block 3·cp − 2 times per step (forward and backward); the all-to-all sends\n"
              "  (cp − 1)/cp of Q, K, V, O and their gradients once each: cp(3cp − 2)/(4(cp − 1)) times fewer\n"
              "  bytes (2 at cp 2, 3.3 at cp 4). The ring's sends can hide behind each block's compute and it\n"
              "  needs no head divisibility; the all-to-all waits for its transfers and needs heads %% cp = 0.\n");
  return example::finish("19_context_parallel");
}
