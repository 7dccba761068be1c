// Context parallelism in 16-bit storage: ring and all-to-all attention on bf16 and fp16 (fp32
// compute) against exact arithmetic (double) on the same rounded inputs, element by element,
// with the first-order bound of nn/layers/ring_attention.hpp computed here from the exact
// quantities: error ÷ bound ≤ 1 for O, dQ, dK and dV at cp 1–4 with grouped K/V, and not vacuous
// (the median ratio ≥ 1e-3; O's largest ≥ 0.25: its error is one rounding). The messages: K|V
// travel in 16 bits, the dK|dV partial sums in fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cp_cases.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/observe/ledger.hpp"
#include "shardalg/precision/rounding.hpp"

using namespace shardalg;
using cpt::Md;
using cpt::Shape;

namespace {

/// The bound of each output (whole batch, the dense layout of cp_cases.hpp), u = T's unit roundoff,
/// from the exact computation `r` on the rounded inputs. Per (sequence, head), with P the causal
/// softmax, D_i = dO_i·O_i, dP_ij = dO_i·V_j:
///   fp32 terms: g = (s + d + 16)·2⁻²⁴, P's relative error e = g·(2 + max Σ|q||k|/√d + max|L|);
///   each fp32 result within (e + g)·M of exact, M the same sum over absolute values;
///   B_O = u|O| + (1+u)(e+g)·ΣP|V|;  B_D = Σ|dO|·B_O + g·Σ|dO||O| (D is computed from the rounded O);
///   B_dV = u|dV| + (1+u)(e+g)·ΣPᵀ|dO|;
///   B_dQ = u|dQ| + (1+u)(Σ_j P_ij·B_D_i·|K_j|/√d + (e+g)·Σ_j P_ij(|dO_i||V_j| + |D_i|)|K_j|/√d);
///   B_dK = u|dK| + (1+u)(Σ_i P_ij·B_D_i·|Q_i|/√d + (e+g)·Σ_i P_ij(|dO_i||V_j| + |D_i|)|Q_i|/√d).
cpt::Dense bounds(const Shape& s, const Md& q, const Md& k, const Md& v, const Md& dout, const cpt::Dense& r, double u) {
  const Index rep = s.heads / s.groups, n = s.batch * s.seq;
  const double g = double(s.seq + s.d + 16) * std::ldexp(1.0, -24), rd = 1.0 / std::sqrt(double(s.d));
  double smax = 0;
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h)
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j <= i; ++j) {
          const Index r0 = b * s.seq, gk = (h / rep) * s.d;
          smax = std::max(smax, q.block(r0 + i, h * s.d, 1, s.d).cwiseAbs().cwiseProduct(k.block(r0 + j, gk, 1, s.d).cwiseAbs()).sum() * rd);
        }
  const double e = g * (2 + smax + r.lse.cwiseAbs().maxCoeff()), f = e + g;
  cpt::Dense B{Md::Zero(n, s.heads * s.d), Md::Zero(n, s.heads), Md::Zero(n, s.heads * s.d), Md::Zero(n, s.groups * s.d),
               Md::Zero(n, s.groups * s.d)};
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      const Index r0 = b * s.seq, gk = (h / rep) * s.d, hd = h * s.d;
      const Md qb = q.block(r0, hd, s.seq, s.d), kb = k.block(r0, gk, s.seq, s.d), vb = v.block(r0, gk, s.seq, s.d);
      const Md dob = dout.block(r0, hd, s.seq, s.d), ob = r.o.block(r0, hd, s.seq, s.d);
      Md p = Md::Zero(s.seq, s.seq);
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j <= i; ++j) p(i, j) = std::exp(qb.row(i).dot(kb.row(j)) * rd - r.lse(r0 + i, h));
      const Md bo = u * ob.cwiseAbs() + (1 + u) * f * (p * vb.cwiseAbs());
      B.o.block(r0, hd, s.seq, s.d) = bo;
      Md bd(s.seq, 1), dabs(s.seq, 1);
      for (Index i = 0; i < s.seq; ++i) {
        bd(i) = dob.row(i).cwiseAbs().dot(bo.row(i)) + g * dob.row(i).cwiseAbs().dot(ob.row(i).cwiseAbs());
        dabs(i) = std::abs(dob.row(i).dot(ob.row(i)));
      }
      const Md mdp = dob.cwiseAbs() * vb.cwiseAbs().transpose();  // |dO||V|ᵀ
      Md wq(s.seq, s.seq), wf(s.seq, s.seq);                    // P·B_D and P·(|dP| + |D|)
      for (Index i = 0; i < s.seq; ++i)
        for (Index j = 0; j < s.seq; ++j) {
          wq(i, j) = p(i, j) * bd(i);
          wf(i, j) = p(i, j) * (mdp(i, j) + dabs(i));
        }
      B.dq.block(r0, hd, s.seq, s.d) = (1 + u) * (wq * kb.cwiseAbs() + f * wf * kb.cwiseAbs()) * rd;
      B.dk.block(r0, gk, s.seq, s.d) += (1 + u) * (wq.transpose() * qb.cwiseAbs() + f * wf.transpose() * qb.cwiseAbs()) * rd;
      B.dv.block(r0, gk, s.seq, s.d) += (1 + u) * f * (p.transpose() * dob.cwiseAbs());
    }
  B.dq += u * r.dq.cwiseAbs();
  B.dk += u * r.dk.cwiseAbs();
  B.dv += u * r.dv.cwiseAbs();
  return B;
}

/// |got − want| ÷ bound, element by element.
std::vector<double> ratios(const Md& got, const Md& want, const Md& bound) {
  std::vector<double> out(static_cast<std::size_t>(got.size()));
  for (Index i = 0; i < got.size(); ++i) out[static_cast<std::size_t>(i)] = std::abs(got.data()[i] - want.data()[i]) / bound.data()[i];
  return out;
}
double median(std::vector<double> x) {
  std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2), x.end());
  return x[x.size() / 2];
}

struct Ratios {
  double o_max = 0, dq_max = 0, dk_max = 0, dv_max = 0;
  double o_med = 0, grad_med = 1;
};

/// One case on this rank: the inputs rounded to T, the exact computation on them, ring (or
/// all-to-all) attention in T, each output's largest and median error ÷ bound on this rank's rows.
template <class T>
Ratios case_16bit(Group& g, const Shape& s, bool ulysses, unsigned seed) {
  using RA = nn::RingAttention<T>;
  using MT = typename RA::Mat;
  const Index n = s.batch * s.seq;
  auto rounded = [](const Md& m) { return Md(m.template cast<T>().template cast<double>()); };
  const Md q = rounded(cpt::random(n, s.heads * s.d, seed)), k = rounded(cpt::random(n, s.groups * s.d, seed + 1)),
           v = rounded(cpt::random(n, s.groups * s.d, seed + 2)), dout = rounded(cpt::random(n, s.heads * s.d, seed + 3));
  const cpt::Dense ref = cpt::dense_attention(s, q, k, v, dout);
  const cpt::Dense bnd = bounds(s, q, k, v, dout, ref, precision::unit_roundoff_v<T>);
  const nn::CpTokens tok{s.seq, s.batch, g.size(), g.rank()};
  const nn::RingAttentionConfig cfg{s.heads, s.groups, s.d, true};
  const MT ql = tok.take(q).template cast<T>(), kl = tok.take(k).template cast<T>(), vl = tok.take(v).template cast<T>(),
           dl = tok.take(dout).template cast<T>();
  MT o, dq, dk, dv;
  if (ulysses) {
    using UA = nn::UlyssesAttention<T>;
    const auto f = UA::forward(g, tok, cfg, ql, kl, vl);
    const auto gr = UA::backward(g, tok, cfg, f, dl);
    o = f.o, dq = gr.dq, dk = gr.dk, dv = gr.dv;
  } else {
    const auto f = RA::forward(g, tok, cfg, ql, kl, vl);
    const auto gr = RA::backward(g, tok, cfg, ql, kl, vl, f, dl);
    o = f.o, dq = gr.dq, dk = gr.dk, dv = gr.dv;
  }
  auto rs = [&](const MT& got, const Md& want, const Md& b) { return ratios(got.template cast<double>(), tok.take(want), tok.take(b)); };
  const auto ro = rs(o, ref.o, bnd.o), rq = rs(dq, ref.dq, bnd.dq), rk = rs(dk, ref.dk, bnd.dk), rv = rs(dv, ref.dv, bnd.dv);
  auto mx = [](const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); };
  return {mx(ro), mx(rq), mx(rk), mx(rv), median(ro), std::min({median(rq), median(rk), median(rv)})};
}

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
        got[static_cast<std::size_t>(c.rank())] = case_16bit<T>(g, s, ulysses, 7);
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
