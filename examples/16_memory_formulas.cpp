// 16 — Memory per rank, the Ultra-Scale Playbook's formulas beside what the library's GPT holds:
// parameters N = h·v + L(12h² + 13h) + 2h, 16 bytes per parameter (20 with fp32 gradient
// accumulation), activations s·b·h·(34 + 5as/h) per layer — against the bytes measured by summing
// the stored matrices (nn/train/measured_memory.hpp), at TP 1, 2, 4, with and without sequence parallelism, in
// double and float. Every difference is named, term by term, and checked exactly.
//
//   16_memory_formulas [--vocab 512] [--hidden 64] [--heads 8] [--layers 2] [--seq 16] [--batch 2]
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "shardalg/cost/cost.hpp"
#include "shardalg/nn/train/measured_memory.hpp"
#include "shardalg/nn.hpp"

using namespace shardalg;
namespace cost = shardalg::cost;
namespace nn = shardalg::nn;

namespace {

nn::GptConfig base_config(int argc, char** argv) {
  nn::GptConfig c;
  c.vocab = 512;  // a multiple of 128 · 4: no padding at TP 1, 2, 4
  c.hidden = 64;
  c.heads = 8;
  c.layers = 2;
  c.seq = 16;
  c.batch = 2;
  const example::Flags flags("16_memory_formulas", argc, argv,
                             {{"vocab", &c.vocab}, {"hidden", &c.hidden}, {"heads", &c.heads}, {"layers", &c.layers},
                              {"seq", &c.seq}, {"batch", &c.batch}});
  flags.require(c.vocab % 512 == 0, "--vocab must be a multiple of 128 · 4 = 512 (no padding at TP 1, 2, 4)");
  flags.require(c.heads % 4 == 0 && c.hidden % c.heads == 0, "--heads must be a multiple of 4 (TP 4) and divide --hidden");
  flags.require(c.seq % 4 == 0 && c.batch * c.seq % 4 == 0, "--seq must be a multiple of 4 (sequence parallelism at TP 4)");
  return c;
}

std::vector<std::int64_t> ids(const nn::GptConfig& c, std::uint64_t seed) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(c.tokens()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::int64_t>(example::splitmix64(seed * 7919 + i) % static_cast<std::uint64_t>(c.vocab));
  return v;
}

/// One report per rank: every rank runs measure_memory (one Adam step) on the same batch.
template <class T>
std::vector<nn::MemoryReport> measure(const nn::GptConfig& c, int tp) {
  std::vector<nn::MemoryReport> out(static_cast<std::size_t>(tp));
  const auto x = ids(c, 1), y = ids(c, 2);
  run_ranks(tp, [&](ThreadComm& comm) {
    Group g(comm);
    auto model = nn::Gpt<T>::init(c, g);
    nn::Adam<T> adam;
    out[static_cast<std::size_t>(comm.rank())] = nn::measure_memory(model, adam, x, y);
  });
  return out;
}

bool same_terms(const nn::ActivationTerms& a, const nn::ActivationTerms& b) {
  return a.norm_xhat == b.norm_xhat && a.norm_rstd == b.norm_rstd && a.qkv_input == b.qkv_input && a.qkv == b.qkv &&
         a.scores == b.scores && a.proj_input == b.proj_input && a.fc1_input == b.fc1_input &&
         a.fc1_output == b.fc1_output && a.fc2_input == b.fc2_input && a.embedding_ids == b.embedding_ids &&
         a.embedding_output == b.embedding_output && a.stream == b.stream && a.final_norm_output == b.final_norm_output &&
         a.final_norm_cache == b.final_norm_cache && a.head_input == b.head_input && a.logits == b.logits &&
         a.loss_probs == b.loss_probs && a.loss_tokens == b.loss_tokens;
}

bool same_report(const nn::MemoryReport& a, const nn::MemoryReport& b) {
  return a.parameter_count == b.parameter_count && a.gradients.measured_bytes == b.gradients.measured_bytes &&
         a.optimizer.measured_bytes == b.optimizer.measured_bytes && same_terms(a.held, b.held);
}

/// The Playbook's per-layer activation bytes minus ours re-expressed at 2 bytes per value, as the
/// named terms: dropout masks (1 B: sbh after attention, sbh after the MLP, a·s²·b/t on the
/// scores), the attention-dropout output (2·a·s²·b/t), our LayerNorms' 1/σ (2 norms × rows × 2 B),
/// and under SP the gathered QKV and fc1 inputs we keep (2 × (T·h − T·h/t) × 2 B).
double named_difference_per_layer(const nn::GptConfig& c, int t) {
  const double T = static_cast<double>(c.tokens()), h = static_cast<double>(c.hidden);
  const double as = static_cast<double>(c.heads) * static_cast<double>(c.seq);
  const double rows = c.sp && t > 1 ? T / t : T;
  const double layer_masks = 2 * rows * h * 1.0;    // after attention and after the MLP (replicated without SP)
  const double score_mask = T * as / t * 1.0;       // b·(a/t)·s² = T·a·s/t
  const double score_dropout_out = T * as / t * 2.0;
  const double rstd = 2 * rows * 2.0;
  const double gathered = c.sp && t > 1 ? 2 * (T * h - T * h / t) * 2.0 : 0.0;
  return layer_masks + score_mask + score_dropout_out - rstd - gathered;
}

std::string mib(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f KiB", b / 1024.0);
  return s;
}

template <class T>
void run_dtype(const char* name, const nn::GptConfig& base, int& checked) {
  const double N = cost::playbook_parameters(base.hidden, base.vocab, base.layers);
  std::printf("\n%s (e = %zu bytes per element)\n", name, sizeof(T));
  std::printf("  %-9s %10s %10s %11s %11s %11s %11s %11s %11s %7s\n", "TP / SP", "params", "N/t", "param B",
              "grads B", "Adam B", "act (ours)", "expected", "Playbook", "ratio");
  // ratio: measured activation bytes / the Playbook's (which assumes 2-byte values and 1-byte masks)
  for (int tp : {1, 2, 4}) {
    for (bool sp : {false, true}) {
      if (sp && tp == 1) continue;
      nn::GptConfig c = base;
      c.sp = sp;
      const auto reps = measure<T>(c, tp);
      const auto& r = reps[0];
      bool ranks_equal = true;
      for (const auto& q : reps) ranks_equal = ranks_equal && same_report(q, r);
      const auto ex = nn::expected_activations(c, tp, sizeof(T));
      std::printf("  TP %d %-4s %10.0f %10.0f %11.0f %11.0f %11.0f %11.0f %11.0f %11.0f %7.3f\n", tp,
                  sp ? "SP" : "", r.parameter_count, r.playbook_parameter_count_per_rank, r.parameters.measured_bytes,
                  r.gradients.measured_bytes, r.optimizer.measured_bytes, r.activations.measured_bytes, ex.layers(),
                  r.activations.formula_bytes, r.activations.ratio());
      const std::string tag = std::string(name) + " TP " + std::to_string(tp) + (sp ? " SP" : "");
      bool ok = ranks_equal;
      ok = ok && r.playbook_parameter_count == N;
      ok = ok && r.parameter_count == nn::expected_parameters_per_rank(c, tp);
      // N/t plus the replicated 6h per layer and final 2h, counted on every rank instead of once:
      const double h = static_cast<double>(c.hidden), L = static_cast<double>(c.layers);
      ok = ok && r.parameter_count == N / tp + (6 * h * L + 2 * h) * (1.0 - 1.0 / tp);
      ok = ok && r.parameters.measured_bytes == r.parameter_count * sizeof(T);
      ok = ok && r.gradients.measured_bytes == r.parameters.measured_bytes;
      ok = ok && r.optimizer.measured_bytes == 2 * r.parameters.measured_bytes;
      ok = ok && same_terms(r.held, ex);
      // The Playbook's activations = ours at 2 bytes per value + the named differences, exactly.
      const double ours_at_2 = r.activations.measured_bytes / sizeof(T) * 2.0;
      ok = ok && example::close(r.activations.formula_bytes, ours_at_2 + L * named_difference_per_layer(c, tp), 1e-12);
      example::check(ok, tag + ": every rank equal; parameters = N/t + replicated; grads = params; Adam = 2 × params;"
                               " activations = expected, term by term; Playbook = ours at 2 B + named terms");
      ++checked;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const nn::GptConfig c = base_config(argc, argv);
  const double h = c.hidden, v = c.vocab, L = c.layers;
  std::printf("GPT: vocabulary %lld, hidden %lld, %lld heads, ffn 4h, %lld layers, sequence %lld, batch %lld;\n"
              "GeLU, LayerNorm, biases, tied embedding, no position embedding, dropout 0, one Adam step.\n\n",
              (long long)c.vocab, (long long)c.hidden, (long long)c.heads, (long long)c.layers, (long long)c.seq,
              (long long)c.batch);

  // ---- the parameter count --------------------------------------------------------------------
  const double N = cost::playbook_parameters(c.hidden, c.vocab, c.layers);
  std::printf("Parameters, the Playbook: N = h·v + L(12h² + 13h) + 2h = %.0f + %.0f + %.0f = %.0f\n", h * v,
              L * (12 * h * h + 13 * h), 2 * h, N);
  double logical = 0;
  run_ranks(1, [&](ThreadComm& comm) {
    auto model = nn::Gpt<double>::init(c, Group(comm));
    for (const auto& [name, m] : model.masters()) logical += static_cast<double>(m.size());
  });
  std::printf("  our GPT's logical tensors (masters()): %.0f\n", logical);
  const double N_formula = h * v + L * (12 * h * h + 13 * h) + 2 * h;
  example::check(logical == N && N == N_formula,
                 "N matches the library's GPT exactly: " + example::grouped(static_cast<long long>(N_formula)));
  std::printf("  The architectures agree term by term: the tied embedding h·v (the LM head is its transpose),\n"
              "  QKV 3h² + 3h, output h² + h, MLP 8h² + 4h + h, two LayerNorms 4h, the final LayerNorm 2h; no\n"
              "  position embedding on either side.\n");
  nn::GptConfig odd = c;
  odd.vocab = c.vocab - 12;
  double odd_phys = 0;
  run_ranks(1, [&](ThreadComm& comm) {
    auto model = nn::Gpt<double>::init(odd, Group(comm));
    model.visit_params([&](const nn::ParamInfo&, const nn::TensorMap&, auto& w) { odd_phys += w.local().size(); });
  });
  const double odd_N = cost::playbook_parameters(odd.hidden, odd.vocab, odd.layers);
  const long long odd_padded = (odd.vocab + 127) / 128 * 128;  // the next multiple of 128 at TP 1
  std::printf("  Where they differ: vocabulary %lld is padded to %lld (a multiple of 128 · TP): %.0f stored, N = %.0f;\n"
              "  the difference is the (%lld − %lld)·h = %.0f zero rows of the padded embedding.\n",
              (long long)odd.vocab, (long long)nn::padded_vocab(odd.vocab, 128, 1), odd_phys, odd_N, odd_padded,
              (long long)odd.vocab, (odd_padded - odd.vocab) * h);
  example::check(odd_phys - odd_N == (odd_padded - odd.vocab) * h, "vocabulary padding: stored − N = (v_padded − v)·h");

  // ---- bytes per parameter ------------------------------------------------------------------------
  const auto p16 = cost::playbook_bytes_per_parameter(), p20 = cost::playbook_bytes_per_parameter(true);
  std::printf("\nBytes per parameter, the Playbook: bf16 weight %.0f + bf16 grad %.0f + fp32 master %.0f + Adam m %.0f +"
              " v %.0f = %.0f;\n  with fp32 gradient accumulation +%.0f = %.0f.\n",
              p16.weight, p16.grad, p16.master, p16.adam_m, p16.adam_v, p16.total(), p20.grad_fp32, p20.total());
  example::check(p16.total() == 16 && p20.total() == 20 && p16.optimizer() == 12, "16 bytes; 20 with fp32 accumulation");
  std::printf("  Ours: weight, gradient, Adam m and v all in the model's dtype, no master copy: 4e = %d (double),\n"
              "  %d (float) — float matches 16, split 4 + 4 + 8 instead of 2 + 2 + 12.\n",
              int(4 * sizeof(double)), int(4 * sizeof(float)));

  // ---- activations: our formula ---------------------------------------------------------------------
  const double T = static_cast<double>(c.tokens()), s = c.seq, a = c.heads;
  std::printf("\nActivations per layer, the Playbook: s·b·h·(34 + 5as/h) = %.0f·(34 + %.4g) = %.0f B (16-bit).\n",
              T * h, 5 * a * s / h, T * h * (34 + 5 * a * s / h));
  example::check(cost::activation_bytes_per_layer({.batch = c.batch, .seq = c.seq, .hidden = c.hidden, .heads = c.heads},
                                                  1, false) == T * h * (34 + 5 * a * s / h),
                 "cost::activation_bytes_per_layer is the Playbook's formula");
  std::printf("Ours per layer and rank (rows = T, or T/t under SP): e·[2·rows·(h + 1) + 2·T·h + T·(3h + a·s + h + 4h + 4h)/t]\n");

  // ---- the runs -------------------------------------------------------------------------------------
  int checked = 0;
  run_dtype<double>("double", c, checked);
  run_dtype<float>("float", c, checked);
  example::check(checked == 10, "10 configurations: TP 1, 2, 4 × SP off/on (not at TP 1) × double, float");

  // ---- term by term, one configuration each way -------------------------------------------------
  for (bool sp : {false, true}) {
    nn::GptConfig cc = c;
    cc.sp = sp;
    const int t = 2;
    const auto r = measure<double>(cc, t)[0];
    const auto& m = r.held;
    const double rows = sp ? T / t : T;
    std::printf("\nTerm by term, double, TP 2%s, per rank, L = %lld layers (bytes; Playbook at 2 B/value, 1 B/mask%s):\n",
                sp ? ", SP" : "", (long long)c.layers, sp ? ", every term ÷ t" : "");
    std::printf("  %-22s %9s   %-26s %9s\n", "ours (measured)", "bytes", "Playbook term", "bytes");
    auto row = [](const char* ours, double ob, const char* pb, double pbb) {
      std::printf("  %-22s %9.0f   %-26s %9.0f\n", ours, ob, pb, pbb);
    };
    const double red = sp ? t : 1;  // the Playbook under SP divides everything by t
    row("LN xhat (2 norms)", m.norm_xhat, "LN inputs 2·2sbh", L * 2 * 2 * T * h / red);
    row("LN rstd (2 norms)", m.norm_rstd, "—", 0);
    row(sp ? "QKV input (gathered)" : "QKV input", m.qkv_input, "QKV input 2sbh", L * 2 * T * h / red);
    row("Q, K, V", m.qkv, "Q, K 4sbh/t + V 2sbh/t", L * 6 * T * h / t);
    row("softmax probs", m.scores, "softmax 2as²b/t", L * 2 * T * a * s / t);
    row("—", 0, "attn dropout mask as²b/t", L * T * a * s / t);
    row("—", 0, "attn dropout out 2as²b/t", L * 2 * T * a * s / t);
    row("proj input O", m.proj_input, "proj input 2sbh/t", L * 2 * T * h / t);
    row("—", 0, "2 dropout masks 2sbh", L * 2 * T * h / red);
    row(sp ? "fc1 input (gathered)" : "fc1 input", m.fc1_input, "fc1 input 2sbh", L * 2 * T * h / red);
    row("GeLU input H", m.fc1_output, "GeLU input 8sbh/t", L * 8 * T * h / t);
    row("fc2 input", m.fc2_input, "fc2 input 8sbh/t", L * 8 * T * h / t);
    std::printf("  %-22s %9.0f   %-26s %9.0f\n", "layers, total", m.layers(), "Playbook, total",
                r.activations.formula_bytes);
    std::printf("  outside the layers (the Playbook leaves these out): ids %.0f, embedding output %.0f, stream %.0f,\n"
                "  final norm %.0f + %.0f, head input %.0f, logits %.0f, loss softmax %.0f, per-token %.0f: %s\n",
                m.embedding_ids, m.embedding_output, m.stream, m.final_norm_output, m.final_norm_cache, m.head_input,
                m.logits, m.loss_probs, m.loss_tokens, mib(m.outside()).c_str());
    const double e = 8;
    bool ok = m.norm_xhat == L * 2 * rows * h * e && m.norm_rstd == L * 2 * rows * e &&
              m.qkv_input == L * T * h * e && m.qkv == L * 3 * T * h / t * e && m.scores == L * T * a * s / t * e &&
              m.proj_input == L * T * h / t * e && m.fc1_input == L * T * h * e &&
              m.fc1_output == L * 4 * T * h / t * e && m.fc2_input == L * 4 * T * h / t * e;
    example::check(ok, std::string("each measured term equals its hand-derived formula") + (sp ? " (SP)" : ""));
    if (sp)
      example::check(m.qkv_input == L * T * h * e && m.norm_xhat == L * 2 * (T / t) * h * e,
                     "SP: the norms keep T/t rows, the QKV and fc1 inputs the gathered T (Megatron keeps T/t and re-gathers)");
  }

  // ---- dropout keeps no mask -------------------------------------------------------------------------
  nn::GptConfig dc = c;
  dc.dropout = 0.1;
  const auto with_dropout = measure<double>(dc, 2)[0], without = measure<double>(c, 2)[0];
  std::printf("\nDropout 0.1: activations held %.0f B, the same as without (%.0f B): masks are recomputed\n"
              "from (seed, tensor, index) in the backward, never stored (nn/layers/dropout.hpp).\n",
              with_dropout.activations.measured_bytes, without.activations.measured_bytes);
  example::check(same_terms(with_dropout.held, without.held), "dropout adds no stored bytes");

  return example::finish("16_memory_formulas");
}
