// tools/verify/rows.cpp — the rows' ledger and analytic tallies, times and memory (rank 0).
#include "rows.hpp"

#include <algorithm>

namespace sv {

void assemble_rows(std::vector<Row>& rows, Row gr, const Options& o, int p, bool sp, std::size_t elem,
                   const std::vector<LedgerEntry>& entries, const cost::Calibration& cal, const Gathered& g) {
  const bool SP = sp;
  const Index Tk = o.tokens(), h = o.hidden;
  const std::size_t nlayers = static_cast<std::size_t>(o.layers);
  const std::size_t nc = g.n_coll, nmem = g.n_mem, nph = g.n_phase;
  const auto& all_phase = g.phase;
  const auto& all_mem = g.mem;
  auto coll_at = [&](int r, std::size_t i) { return g.coll[static_cast<std::size_t>(r) * nc + i]; };
  const cost::TransformerShape shape{o.batch, o.seq, o.hidden, o.heads, o.ffn_size(), o.layers};
  // The counts of cost::layer_comm; at P = 1 the same calls run on a group of one (no traffic).
  const auto lc = cost::layer_comm(shape, std::max(p, 2), static_cast<double>(elem), SP);
  const std::size_t Th = static_cast<std::size_t>(Tk * h) * elem;
  const std::size_t norm_grad = static_cast<std::size_t>((o.norm_kind() == nn::NormKind::layer ? 2 : 1) * h) * elem;
  for (std::size_t ri = 0; ri < rows.size(); ++ri) {
    Row& row = rows[ri];
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < entries.size(); ++i)
      for (const auto& sc : row.scopes) {
        const bool f = Ledger::in_scope(entries[i].scope, "fwd/" + sc), b = Ledger::in_scope(entries[i].scope, "bwd/" + sc);
        if (!f && !b) continue;
        mine.push_back(i);
        (f ? row.ledger_fwd : row.ledger_bwd).add(entries[i]);
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
  er.analytic_fwd.add(SP ? RS : AR, Th);  // lookup: Y[Partial] → Row (SP) or R
  if (SP) er.analytic_bwd.add(AG, Th);    // reduce_scatter's adjoint
  for (std::size_t l = 0; l < nlayers; ++l) {
    Row& row = rows[l + 1];
    const auto each = static_cast<std::size_t>(lc.dense_bytes_each);
    for (verify::CommTally* t : {&row.analytic_fwd, &row.analytic_bwd}) {  // (adding 0 collectives adds no kind)
      t->add(AR, each, static_cast<std::size_t>(lc.all_reduces));
      t->add(AG, each, static_cast<std::size_t>(lc.all_gathers));
      t->add(RS, each, static_cast<std::size_t>(lc.reduce_scatters));
    }
    if (o.recompute == "full") {  // the backward runs the block's forward again, its collectives too
      row.analytic_bwd.add(AR, each, static_cast<std::size_t>(lc.all_reduces));
      row.analytic_bwd.add(AG, each, static_cast<std::size_t>(lc.all_gathers));
      row.analytic_bwd.add(RS, each, static_cast<std::size_t>(lc.reduce_scatters));
    }
    if (SP) row.analytic_bwd.add(AR, norm_grad, 2);  // reduce_grads: γ ‖ β of both norms
    if (o.num_groups() < p)  // GQA with K/V copies on several ranks: the replica sync (nn/layers/attention.hpp)
      row.analytic_bwd.add(AR, static_cast<std::size_t>((h + (o.no_bias ? 0 : 1)) * 2 * o.num_groups() * (h / o.heads)) * elem);
    row.flops = 3.0 * cost::layer_forward_flops(shape) / p;
  }
  if (SP) rows[nlayers + 1].analytic_bwd.add(AR, norm_grad);  // the final norm's γ ‖ β
  Row& hr = rows.back();
  if (SP) hr.analytic_fwd.add(AG, Th);                                    // X[Row] → R before the head
  hr.analytic_fwd.add(AR, static_cast<std::size_t>(Tk) * elem);           // loss: max
  hr.analytic_fwd.add(AR, 2 * static_cast<std::size_t>(Tk) * elem);       // loss: Σe and the target logit
  hr.analytic_bwd.add(SP ? RS : AR, Th);                                  // head: dX[Partial] → Row or R

  // nn::Gpt: its collectives must be the layer-by-layer run's, kind by kind (it puts the SP norm
  // reductions in scope "grads", after the backward; so compare the whole step)
  gr.ledger_fwd = verify::tally(entries, "gpt/fwd");
  gr.ledger_bwd = verify::tally_if(entries, [](const LedgerEntry& en) {
    return !Ledger::in_scope(en.scope, "gpt/fwd") && Ledger::in_scope(en.scope, "gpt");
  });
  for (const auto& row : rows) {
    gr.analytic_fwd += row.ledger_fwd;
    gr.analytic_bwd += row.ledger_bwd;
  }
  rows.push_back(std::move(gr));
}

}  // namespace sv
