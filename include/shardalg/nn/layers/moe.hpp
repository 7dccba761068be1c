// shardalg/nn/layers/moe.hpp — a mixture-of-experts layer: a top-k router (nn/layers/moe_router.hpp), E expert
// MLPs split across the ranks of an `ep` axis (expert parallelism), each MLP itself column/row
// parallel on an `etp` axis (expert tensor parallelism, Megatron's expert_tensor_parallel_size:
// its size need not be the dense layers' tp), tokens dispatched to their experts' ranks by an
// all-to-all of variable counts and combined back by the inverse one.
//
// Mesh ep × etp (etp fastest). Rank (d, t) holds tokens block d and experts [d·E/EP, (d+1)·E/EP).
//
//   forward   X[ep:Row, etp:R] · Wr[ep:R, etp:R] → L[ep:Row, etp:R];  route: p, top-k, w   (local)
//             counts: C[ep:Row] (c_i, Σ_t p_t,i of this rank's tokens, 2E) → all_gather<ep> → C[ep:R]
//             dispatch: X's rows by (expert, token) → all_to_allv<ep> → Xd[ep:Row~]           (Row~: ragged)
//             expert e (local), on its received rows in global token order, the first C kept:
//               Xe[etp:R] · W1e[etp:C] → He[etp:C];  act;  He · W2e[etp:Row] → Partial;  g: all_reduce<etp>
//             combine: Yd[ep:Row~] → all_to_allv<ep> back (counts swapped) → rows of X's assignments
//             Y_t = Σ_s w_t,s · Yd_t,s → Y[ep:Row, etp:R];  aux = α·E·Σ f_i·P_i  (every rank: the batch's)
//   backward  dYd_t,s = w_t,s · dY_t;  dw_t,s = ⟨dY_t, Yd_t,s⟩
//             combine's adjoint: all_to_allv<ep> (the dispatch's counts) → the experts' rows
//             expert e: MLP backward; f's adjoint: all_reduce<etp> → dXe[etp:R];  dW1e[etp:C], dW2e[etp:Row]
//             dispatch's adjoint: all_to_allv<ep> back → dX_t = Σ_s dXd_t,s
//             router: dL (nn/layers/moe_router.hpp);  dX += dL · Wrᵀ;  dWr = Xᵀ[ep:C] · dL[ep:Row] → dWr[ep:Partial]
//   reduce_grads: all_reduce<ep> dWr (h·E) → dWr[ep:R]: the gradient of every rank's tokens.
//
// Capacity (capacity_factor = cf; unset: dropless, an explicit state, never C = 0): each expert
// processes at most C = ⌈cf · k · T / E⌉ assignments, clamped to [1, T] (T: the batch's tokens; an
// expert gets at most one assignment per token, so C = T drops nothing). Its rows arrive rank 0's
// first, each rank's in token order, so the order is the global token order: the first C are kept
// and the rest dropped — a dropped assignment contributes 0 to Y_t (the residual carries the
// token) and gets no gradient. Deterministic and independent of EP. Dropped rows still travel
// (zeros on the way back): the all-to-all counts do not depend on the capacity. The counts travel
// as elements of T, so a rank may hold at most 2^digits(T) tokens (2^24 in float; ShapeError
// before the exchange), and each count comes back through a checked conversion.
//
// Ledger per rank and layer (n_e: rows expert e processes, N: rows this rank's experts receive,
// T_l: this rank's tokens): forward 1 all_gather of EP·2E, all_to_all of k·T_l·h (dispatch) and
// N·h (combine), one all_reduce<etp> of n_e·h per local expert with n_e > 0; backward the same
// two all_to_all and all_reduces; reduce_grads 1 all_reduce<ep> of h·E. The ledger records an
// all_to_allv as all_to_all with the elements this rank sends.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardalg/collective/all_gather.hpp"
#include "shardalg/collective/all_to_allv.hpp"
#include "shardalg/comm/communicator.hpp"
#include "shardalg/mesh/collectives.hpp"
#include "shardalg/mesh/ops.hpp"
#include "shardalg/nn/layers/mlp.hpp"
#include "shardalg/nn/layers/moe_router.hpp"

namespace shardalg {
/// Expert parallelism: the experts are split across this axis, tokens travel between its ranks.
struct ep {
  static constexpr std::string_view name = "ep";
};
/// Expert tensor parallelism: every expert's MLP is column/row-parallel on this axis.
struct etp {
  static constexpr std::string_view name = "etp";
};
}  // namespace shardalg

namespace shardalg::nn {

inline constexpr TensorKind moe_router_kind = static_cast<TensorKind>(32);
inline constexpr TensorKind moe_fc1_kind = static_cast<TensorKind>(33);  // GeLU fc1, or SwiGLU's gate
inline constexpr TensorKind moe_up_kind = static_cast<TensorKind>(34);
inline constexpr TensorKind moe_fc2_kind = static_cast<TensorKind>(35);
/// The tensor id of expert e's weight of one kind (the expert above the layer's id bits).
constexpr std::uint64_t expert_tensor_id(std::uint32_t layer, Index e, TensorKind k) {
  return (static_cast<std::uint64_t>(e + 1) << 40) | tensor_id(layer, k);
}

struct MoeConfig {
  Index hidden = 0;
  Index experts = 0;  // E
  Index top_k = 1;    // k
  Index ffn = 0;      // each expert's MLP hidden size
  Activation act = Activation::gelu_tanh;
  bool bias = true;
  std::optional<double> capacity_factor;  // unset: dropless
  bool renormalize = true;                // renormalised top-k combine weights
  double aux_loss_coeff = 0.0;            // α of the load-balancing loss
  std::uint32_t layer = 0;                // keys the init

  [[nodiscard]] RouterConfig router() const { return {experts, top_k, renormalize, aux_loss_coeff}; }
  [[nodiscard]] MlpConfig expert() const { return {hidden, ffn, act, bias}; }
  /// Each expert's capacity for a batch of `tokens` tokens; nullopt when dropless (no factor).
  /// C = ⌈cf · k · T / E⌉ (in double), clamped to [1, T]: a tiny factor still keeps each expert's
  /// first assignment, and an expert takes at most one assignment per token, so a C above T would
  /// drop nothing (T = 0: C = 0, nothing to keep). ShapeError for a factor that is not positive
  /// and finite.
  [[nodiscard]] std::optional<Index> capacity(Index tokens) const {
    if (!capacity_factor) return std::nullopt;
    const double cf = *capacity_factor;
    if (!(cf > 0 && std::isfinite(cf)))
      throw ShapeError(detail::cat("Moe: capacity factor ", cf,
                                   " must be positive and finite (leave it unset for dropless routing)"));
    if (tokens <= 0) return Index{0};
    const double c = std::ceil(cf * (static_cast<double>(top_k) * static_cast<double>(tokens)) / static_cast<double>(experts));
    if (!(c < static_cast<double>(tokens))) return tokens;     // ≥ T (or E = 0): the clamp, before any conversion
    return std::clamp(static_cast<Index>(c), Index{1}, tokens);  // 0 ≤ c < T: in range
  }
};

namespace detail {
/// The largest count an element of T carries exactly (2^24 for float, 2^53 for double).
template <class T>
constexpr Index exact_count_limit() {
  return Index{1} << std::numeric_limits<T>::digits;
}
/// A count that travelled as an element of T, back as an Index: ShapeError unless it is a whole
/// number in [0, bound].
template <class T>
Index checked_count(T v, Index bound, std::string_view what) {
  const double d = static_cast<double>(v);
  if (!(d >= 0 && d <= static_cast<double>(bound) && d == std::floor(d)))
    throw ShapeError(cat("Moe: ", what, " ", d, " is not a whole number in [0, ", bound, "]"));
  return static_cast<Index>(d);
}
}  // namespace detail

/// Dense logical masters for Moe::from_dense: the router [h, E] and every expert's MLP (all E).
template <class M>
struct MoeMasters {
  const M* router;
  std::vector<MlpMasters<M>> experts;
};

template <Element T, class B = CpuBackend>
class Moe {
  static_assert(std::is_same_v<B, CpuBackend>, "nn::Moe: the routing and the row moves are host loops (CPU backend)");

 public:
  using Mat = typename B::template matrix<T>;
  using Tokens = MeshSharded<T, Axes<On<ep, RowSharded>, On<etp, Replicated>>, B>;       // X[ep:Row, etp:R]
  using RouterWeight = MeshSharded<T, Axes<On<ep, Replicated>, On<etp, Replicated>>, B>;  // Wr[ep:R, etp:R]
  using RouterGrad = MeshSharded<T, Axes<On<ep, Partial>, On<etp, Replicated>>, B>;      // dWr[ep:Partial, etp:R]
  using Expert = Mlp<T, B>;                                                              // on the etp group

  /// How this rank's assignments travelled (kept for the combine and the backward).
  struct Dispatch {
    std::vector<Index> send_rows, recv_rows;      // per ep peer
    std::vector<Index> pos;                       // [T_l·k]: row of assignment (t, s) in the send order
    std::vector<std::vector<Index>> expert_rows;  // per local expert: its kept received rows, in token order
    std::vector<Index> counts;                    // [E]: the batch's assignments per expert
    Index tokens = 0;                             // the batch's
  };
  struct Cache {
    Tokens x;
    Routing<T> routing;
    Dispatch d;
    std::vector<std::optional<typename Expert::Cache>> experts;
    Mat back;  // [T_l·k, h]: each assignment's expert output in send order (0 when dropped)
  };
  struct Forward {
    Tokens y;
    T aux;  // α·E·Σ f_i·P_i of the batch, the same on every rank
    Cache cache;
  };
  struct ParamGrads {
    RouterGrad router;
    std::vector<typename Expert::ParamGrads> experts;  // the local experts
  };
  struct ReducedGrads {
    RouterWeight router;
    std::vector<typename Expert::ParamGrads> experts;
  };
  struct Grads {
    Tokens dx;
    ParamGrads params;
  };

  /// The typed errors, naming the values.
  static void check(const MoeConfig& c, int ep_size, int etp_size) {
    using detail::cat;
    TopKRouter<T>::check(c.router());
    if (c.experts % ep_size != 0)
      throw DivisibilityError(cat("Moe: ", c.experts, " experts are not divisible by expert-parallel size ", ep_size));
    (void)c.capacity(1);  // the capacity factor's ShapeError
    Expert::check(c.expert(), etp_size);
  }

  /// Megatron-style init keyed by global index (the same model at every EP and ETP): the router and
  /// fc1 (and up) normal(0, std), fc2 normal(0, std/√(2L)), zero biases.
  static Moe init(const MoeConfig& c, const Mesh& mesh, const InitConfig& ic) {
    const auto [eg, tg] = groups(mesh);
    check(c, eg.size(), tg.size());
    const auto n = ic.normal(), no = ic.scaled_output();
    auto wr = from_fn(c.hidden, c.experts, mesh, [&](Index i, Index j) { return n(tensor_id(c.layer, moe_router_kind), i, j); });
    std::vector<Expert> ex;
    for (Index e : local_experts(c, eg)) {
      auto gen = [&](Index r, Index k, NormalInit f, TensorKind kind) {
        Mat m(r, k);
        for (Index i = 0; i < r; ++i)
          for (Index j = 0; j < k; ++j) m(i, j) = static_cast<T>(f(expert_tensor_id(c.layer, e, kind), i, j));
        return Eigen::MatrixXd(m.template cast<double>());
      };
      const bool glu = c.act == Activation::swiglu;
      const Eigen::MatrixXd w1 = gen(c.hidden, c.ffn, n, moe_fc1_kind), w2 = gen(c.ffn, c.hidden, no, moe_fc2_kind);
      const Eigen::MatrixXd wu = glu ? gen(c.hidden, c.ffn, n, moe_up_kind) : Eigen::MatrixXd();
      const Eigen::MatrixXd b1 = Eigen::MatrixXd::Zero(1, c.ffn), b2 = Eigen::MatrixXd::Zero(1, c.hidden);
      const auto* b = c.bias ? &b1 : nullptr;
      ex.push_back(Expert::from_dense(c.expert(), MlpMasters<Eigen::MatrixXd>{&w1, b, glu ? &wu : nullptr, glu ? b : nullptr,
                                                                             &w2, c.bias ? &b2 : nullptr},
                                      tg));
    }
    return Moe(c, mesh, std::move(wr), std::move(ex));
  }

  /// The layer with the given logical masters: each rank takes the router and its own experts.
  template <class M>
  static Moe from_dense(const MoeConfig& c, const MoeMasters<M>& m, const Mesh& mesh) {
    const auto [eg, tg] = groups(mesh);
    check(c, eg.size(), tg.size());
    detail::require_master("Moe.from_dense", "router", m.router, true, c.hidden, c.experts);
    if (static_cast<Index>(m.experts.size()) != c.experts)
      throw ShapeError(detail::cat("Moe.from_dense: ", m.experts.size(), " expert masters for ", c.experts, " experts"));
    auto wr = from_fn(c.hidden, c.experts, mesh, [&](Index i, Index j) { return (*m.router)(i, j); });
    std::vector<Expert> ex;
    for (Index e : local_experts(c, eg)) ex.push_back(Expert::from_dense(c.expert(), m.experts[static_cast<std::size_t>(e)], tg));
    return Moe(c, mesh, std::move(wr), std::move(ex));
  }

  [[nodiscard]] const MoeConfig& config() const { return cfg_; }
  [[nodiscard]] const RouterWeight& router_weight() const { return wr_; }
  [[nodiscard]] const std::vector<Expert>& experts() const { return experts_; }
  /// The global index of local expert q.
  [[nodiscard]] Index expert_index(Index q) const { return ep_.rank() * local_count() + q; }
  [[nodiscard]] Index local_count() const { return cfg_.experts / ep_.size(); }
  [[nodiscard]] const AxisGroup<ep>& ep_group() const { return ep_; }
  [[nodiscard]] const AxisGroup<etp>& etp_group() const { return etp_; }

  Forward forward(const Tokens& x) const {
    detail::require_cols("Moe", x.cols(), cfg_.hidden);
    const Index tl = x.local_rows(), k = cfg_.top_k, h = cfg_.hidden;
    // The counts exchange sends each expert's count of this rank's assignments (≤ T_l: a token picks
    // an expert once) as an element of T. Every ep rank holds T/EP tokens, so all of them refuse
    // alike, before the exchange.
    if (tl > detail::exact_count_limit<T>())
      throw ShapeError(detail::cat("Moe: ", tl, " tokens on one rank exceed ", detail::exact_count_limit<T>(),
                                   ", the largest count the counts exchange carries exactly in ", to_string(dtype_of<T>)));
    auto lscope = scope("moe");
    const auto logits = matmul(x, wr_);  // X[ep:Row, etp:R] · Wr[ep:R, etp:R] → L[ep:Row, etp:R]
    Routing<T> r = router_.route(logits.local());
    auto plan = [&] {
      auto s = scope("counts");
      return exchange(r, x.rows());
    }();
    Dispatch d = std::move(plan.first);  // (no structured binding: lambdas below capture d; Clang 14)
    const std::vector<T> psum = std::move(plan.second);
    const T aux = router_.aux_loss(d.counts, psum, d.tokens);
    Mat send(tl * k, h);
    for (Index t = 0; t < tl; ++t)
      for (Index s = 0; s < k; ++s) send.row(d.pos[static_cast<std::size_t>(t * k + s)]) = x.local().row(t);
    const auto rx = [&] {
      auto s = scope("dispatch");
      return all_to_allv(RaggedRows<T, B>{std::move(send), d.send_rows, ep_}, d.recv_rows);  // X[Row~] → Xd[Row~]
    }();
    Mat out = Mat::Zero(rx.local.rows(), h);
    std::vector<std::optional<typename Expert::Cache>> caches(experts_.size());
    for (std::size_t q = 0; q < experts_.size(); ++q) {
      const auto& rows = d.expert_rows[q];
      if (rows.empty()) continue;  // no token: no work, no collective (every etp rank agrees)
      auto s = scope("expert" + std::to_string(expert_index(static_cast<Index>(q))));
      auto f = experts_[q].forward(Sharded<T, Replicated, B>(take(rx.local, rows), static_cast<Index>(rows.size()), h, etp_));
      put(out, rows, f.z.local());
      caches[q] = std::move(f.cache);
    }
    auto back = [&] {
      auto s = scope("combine");
      return all_to_allv(RaggedRows<T, B>{std::move(out), d.recv_rows, ep_}, d.send_rows);  // Yd[Row~] → back
    }();
    Mat y = Mat::Zero(tl, h);
    for (Index t = 0; t < tl; ++t)
      for (Index s = 0; s < k; ++s) y.row(t) += r.weights(t, s) * back.local.row(d.pos[static_cast<std::size_t>(t * k + s)]);
    return {Tokens(std::move(y), x.rows(), h, x.groups()), aux,
            Cache{x, std::move(r), std::move(d), std::move(caches), std::move(back.local)}};
  }

  /// dY[ep:Row, etp:R] (the whole cotangent of each token) and daux (the aux loss's cotangent).
  Grads backward(const Cache& c, const Tokens& dy, T daux = T(1)) const {
    const Index tl = dy.local_rows(), k = cfg_.top_k, h = cfg_.hidden;
    const auto& d = c.d;
    const auto& r = c.routing;
    auto lscope = scope("moe");
    Mat dback(tl * k, h), dw(tl, k);
    for (Index t = 0; t < tl; ++t)
      for (Index s = 0; s < k; ++s) {
        const Index row = d.pos[static_cast<std::size_t>(t * k + s)];
        dback.row(row) = r.weights(t, s) * dy.local().row(t);
        dw(t, s) = dy.local().row(t).dot(c.back.row(row));
      }
    const auto dout = [&] {  // the combine's adjoint: back along the dispatch's counts
      auto s = scope("combine");
      return adjoint::all_to_allv(RaggedRows<T, B>{std::move(dback), d.send_rows, ep_}, d.recv_rows);
    }();
    Mat dxr = Mat::Zero(dout.local.rows(), h);
    std::vector<typename Expert::ParamGrads> pg;
    for (std::size_t q = 0; q < experts_.size(); ++q) {
      const auto& rows = d.expert_rows[q];
      if (rows.empty()) {
        pg.push_back(zero_grads(experts_[q]));
        continue;
      }
      auto s = scope("expert" + std::to_string(expert_index(static_cast<Index>(q))));
      auto g = experts_[q].backward(*c.experts[q],
                                    Sharded<T, Replicated, B>(take(dout.local, rows), static_cast<Index>(rows.size()), h, etp_));
      put(dxr, rows, g.dx.local());
      pg.push_back(std::move(g.params));
    }
    const auto dxa = [&] {  // the dispatch's adjoint: the rows go home
      auto s = scope("dispatch");
      return adjoint::all_to_allv(RaggedRows<T, B>{std::move(dxr), d.recv_rows, ep_}, d.send_rows);
    }();
    const Mat dl = router_.backward(r, dw, daux, d.counts, d.tokens);
    Mat dx = dl * wr_.local().transpose();  // dL[ep:Row, etp:R] · Wrᵀ[ep:R, etp:R] → Row
    for (Index t = 0; t < tl; ++t)
      for (Index s = 0; s < k; ++s) dx.row(t) += dxa.local.row(d.pos[static_cast<std::size_t>(t * k + s)]);
    Mat dwr = c.x.local().transpose() * dl;  // Xᵀ[ep:C, etp:R] · dL[ep:Row, etp:R] → dWr[ep:Partial, etp:R]
    return {Tokens(std::move(dx), dy.rows(), h, dy.groups()),
            {RouterGrad(std::move(dwr), cfg_.hidden, cfg_.experts, wr_.groups()), std::move(pg)}};
  }

  /// dWr[ep:Partial] → all_reduce<ep> → dWr[ep:R] (h·E): call once per step, after accumulating.
  ReducedGrads reduce_grads(ParamGrads g) const {
    auto s = scope("moe_grads");
    return {all_reduce<ep>(g.router), std::move(g.experts)};
  }

  /// Plain SGD; handed the unreduced ParamGrads it does not compile (the router's is Partial).
  void sgd(const ReducedGrads& g, T lr) {
    wr_.local() -= lr * g.router.local();
    for (std::size_t q = 0; q < experts_.size(); ++q) experts_[q].sgd(g.experts[q], lr);
  }

  // ---- the MoE region inside a dense model whose residual stream is X[R] on the world ----------
  /// X[R] → X[ep:Row, etp:R]: this rank keeps its ep coordinate's tokens (free; its balanced block
  /// when ep does not divide them). Adjoint: gather_tokens.
  static Tokens split_tokens(const Sharded<T, Replicated, B>& x, const Mesh& mesh) {
    const auto [eg, tg] = groups(mesh);
    const BlockExtent mine = block_of(x.rows(), eg.size(), eg.rank());
    return Tokens(x.local().block(mine.offset, 0, mine.size, x.cols()), x.rows(), x.cols(),
                  typename Tokens::Groups{eg.group(), tg.group()});
  }
  /// Y[ep:Row, etp:R] → all_gather<ep> (T·h) → Y[R] on `world`. Adjoint: split_tokens (free).
  static Sharded<T, Replicated, B> gather_tokens(const Tokens& y, const Group& world) {
    auto all = all_gather<ep>(y);
    return Sharded<T, Replicated, B>(std::move(all).local(), y.rows(), y.cols(), world);
  }

 private:
  Moe(const MoeConfig& c, const Mesh& mesh, RouterWeight wr, std::vector<Expert> ex)
      : cfg_(c), router_(c.router()), ep_(mesh.axis<ep>()), etp_(mesh.axis<etp>()), wr_(std::move(wr)),
        experts_(std::move(ex)) {}

  static std::pair<AxisGroup<ep>, AxisGroup<etp>> groups(const Mesh& mesh) { return {mesh.axis<ep>(), mesh.axis<etp>()}; }
  static std::vector<Index> local_experts(const MoeConfig& c, const AxisGroup<ep>& g) {
    std::vector<Index> out;
    const Index n = c.experts / g.size();
    for (Index q = 0; q < n; ++q) out.push_back(g.rank() * n + q);
    return out;
  }
  template <class F>
  static RouterWeight from_fn(Index r, Index k, const Mesh& mesh, F f) {
    Mat m(r, k);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < k; ++j) m(i, j) = static_cast<T>(f(i, j));
    return RouterWeight(std::move(m), r, k, mesh);
  }
  RecorderScope scope(const std::string& label) const { return shardalg::scope(ep_.group(), label); }

  /// The counts exchange and the dispatch plan. C[ep:Row] = (c_i as T, Σ_t p_t,i) of this rank →
  /// all_gather<ep> → every rank's: the batch's counts and probability sums (aux loss), and how
  /// many rows each peer sends to this rank's experts.
  std::pair<Dispatch, std::vector<T>> exchange(const Routing<T>& r, Index tokens) const {
    const Index e = cfg_.experts, k = cfg_.top_k, tl = r.tokens(), el = local_count();
    const int p = ep_.size(), me = ep_.rank();
    const auto ps = router_.prob_sums(r);
    Mat mine(1, 2 * e);
    for (Index j = 0; j < e; ++j) {
      mine(0, j) = static_cast<T>(r.counts[static_cast<std::size_t>(j)]);
      mine(0, e + j) = ps[static_cast<std::size_t>(j)];
    }
    const auto all = all_gather(Sharded<T, RowSharded, B>(std::move(mine), p, 2 * e, ep_));  // C[ep:Row] → C[ep:R]
    // A peer routes at most one assignment per expert per token of its own (its balanced block).
    auto count = [&](int peer, Index j) {
      return detail::checked_count(all.local()(peer, j), block_size(tokens, p, peer), "assignment count");
    };
    Dispatch d;
    d.tokens = tokens;
    d.counts.assign(static_cast<std::size_t>(e), 0);
    std::vector<T> psum(static_cast<std::size_t>(e), T(0));
    for (int q = 0; q < p; ++q)  // rank order: every rank sums alike
      for (Index j = 0; j < e; ++j) {
        d.counts[static_cast<std::size_t>(j)] += count(q, j);
        psum[static_cast<std::size_t>(j)] += all.local()(q, e + j);
      }
    // Send order: by expert (hence by destination), then token. pos[t·k + s] = its row.
    std::vector<Index> next(static_cast<std::size_t>(e), 0);
    for (Index j = 1; j < e; ++j) next[static_cast<std::size_t>(j)] = next[static_cast<std::size_t>(j - 1)] + r.counts[static_cast<std::size_t>(j - 1)];
    d.pos.resize(static_cast<std::size_t>(tl * k));
    for (Index t = 0; t < tl; ++t)
      for (Index s = 0; s < k; ++s) d.pos[static_cast<std::size_t>(t * k + s)] = next[static_cast<std::size_t>(r.of(t, s))]++;
    d.send_rows.assign(static_cast<std::size_t>(p), 0);
    d.recv_rows.assign(static_cast<std::size_t>(p), 0);
    for (Index j = 0; j < e; ++j) d.send_rows[static_cast<std::size_t>(j / el)] += r.counts[static_cast<std::size_t>(j)];
    for (int q = 0; q < p; ++q)
      for (Index j = me * el; j < (me + 1) * el; ++j) d.recv_rows[static_cast<std::size_t>(q)] += count(q, j);
    // The receive side: peer q's run holds its rows for this rank's experts, by expert then token.
    const std::optional<Index> cap = cfg_.capacity(tokens);  // nullopt: dropless
    d.expert_rows.assign(static_cast<std::size_t>(el), {});
    Index base = 0;
    for (int q = 0; q < p; ++q) {
      for (Index j = 0; j < el; ++j) {
        const Index n = count(q, me * el + j);
        auto& rows = d.expert_rows[static_cast<std::size_t>(j)];
        for (Index i = 0; i < n; ++i)
          if (!cap || static_cast<Index>(rows.size()) < *cap) rows.push_back(base + i);
        base += n;
      }
    }
    return {std::move(d), std::move(psum)};
  }

  static Mat take(const Mat& m, const std::vector<Index>& rows) {
    Mat out(static_cast<Index>(rows.size()), m.cols());
    for (std::size_t i = 0; i < rows.size(); ++i) out.row(static_cast<Index>(i)) = m.row(rows[i]);
    return out;
  }
  static void put(Mat& m, const std::vector<Index>& rows, const Mat& v) {
    for (std::size_t i = 0; i < rows.size(); ++i) m.row(rows[i]) = v.row(static_cast<Index>(i));
  }
  /// An expert that processed no row: every gradient is zero (in its parameter's layout).
  static typename Expert::ParamGrads zero_grads(const Expert& x) {
    auto zeros = [](const auto& w) {
      using S = std::remove_cvref_t<decltype(w)>;
      return S(B::template zeros<T>(w.local_rows(), w.local_cols()), w.rows(), w.cols(), w.group());
    };
    typename Expert::ParamGrads g{{zeros(x.fc1().weight()), std::nullopt}, {zeros(x.fc2().weight()), std::nullopt}};
    if (x.fc1().bias()) g.fc1.db = zeros(*x.fc1().bias());
    if (x.fc2().bias()) g.fc2.db = zeros(*x.fc2().bias());
    return g;
  }

  MoeConfig cfg_;
  TopKRouter<T> router_;
  AxisGroup<ep> ep_;
  AxisGroup<etp> etp_;
  RouterWeight wr_;
  std::vector<Expert> experts_;
};

}  // namespace shardalg::nn

#if defined(SHARDALG_EXTERN_TEMPLATES)
// shardalg::compiled (src/moe.cpp) holds these instantiations: a program that links it compiles
// none of the layer's code itself.
namespace shardalg::nn {
extern template class Moe<float, CpuBackend>;
extern template class Moe<double, CpuBackend>;
extern template Moe<float, CpuBackend> Moe<float, CpuBackend>::from_dense(const MoeConfig&,
                                                                          const MoeMasters<Eigen::MatrixXd>&, const Mesh&);
extern template Moe<double, CpuBackend> Moe<double, CpuBackend>::from_dense(const MoeConfig&,
                                                                            const MoeMasters<Eigen::MatrixXd>&, const Mesh&);
}  // namespace shardalg::nn
#endif
