// tests/conv/test_conv.cpp — the spatially sharded convolution (nn/layers/conv2d.hpp) and the halo
// exchange (collective/halo.hpp) on thread worlds of 1, 2, 3 and 4 ranks, against the dense
// direct-loop convolution (reference/conv2d.hpp): the reference itself against a hand-computed
// case and finite differences; forward and every gradient bit for bit on integer operands (float
// and double) and within 1e-12 on real ones; the ledger's halo bytes against 2·⌊k/2⌋·N·W·C per
// interior rank and pass; the halo exchange's adjoint law (and a wrong adjoint that breaks it);
// deadlock freedom under synchronous sends; the error texts; one SGD step.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "conv_cases.hpp"

namespace {
using namespace ct;

const std::vector<int> kWorlds = {1, 2, 3, 4};
const std::vector<Index> kKernels = {1, 3, 5};

/// Every rank's gathered results against the dense twin: bit for bit (tol = 0) or normwise.
void check_runs(const std::vector<Run>& runs, const Expected& e, double tol, const std::string& what) {
  for (const auto& r : runs) {
    const std::pair<std::string, std::pair<const Mat<double>*, const ref::M*>> items[] = {
        {"y", {&r.y, &e.y}}, {"dx", {&r.dx, &e.dx}}, {"dw", {&r.dw, &e.dw}}, {"dw (sum of the Partial)", {&r.dw_partial_sum, &e.dw}}};
    for (const auto& item : items) {  // no structured binding: Clang 14 cannot capture one in doctest's lambdas
      const std::string& name = item.first;
      const auto err = compare(*item.second.first, *item.second.second);
      if (tol == 0) CHECK_MESSAGE((err.shape_ok && err.max_abs == 0), what << " " << name << " rank " << r.rank << ": " << err);
      else CHECK_MESSAGE(err.within(tol), what << " " << name << " rank " << r.rank << ": " << err);
    }
    if (e.db.size() != 0) {
      const auto err = compare(r.db, e.db);
      if (tol == 0) CHECK_MESSAGE((err.shape_ok && err.max_abs == 0), what << " db rank " << r.rank << ": " << err);
      else CHECK_MESSAGE(err.within(tol), what << " db rank " << r.rank << ": " << err);
    } else {
      CHECK(r.db.size() == 0);
    }
    CHECK(r.dw_replicas_agree);
  }
}

std::string describe(const Case& c, int p) {
  return "k=" + std::to_string(c.k) + " P=" + std::to_string(p) + " N=" + std::to_string(c.n) + " H=" +
         std::to_string(c.h) + " W=" + std::to_string(c.w) + (c.bias ? " bias" : " no bias");
}

/// Sends that return only once the receiver has taken the message — MPI_Ssend's semantics, which
/// MPI_Send has for messages above the eager limit. The acknowledgements travel in a second thread
/// world (a split of the first), so they never mix with the data; a rank waiting for one is under
/// the watchdog, so a schedule that deadlocks raises CollectiveTimeoutError instead of hanging.
class SyncSendComm {
 public:
  explicit SyncSendComm(ThreadComm& c) : data_(c), acks_(c.split(0, c.rank())) {}
  int rank() const { return data_.rank(); }
  int size() const { return data_.size(); }
  std::uintptr_t key() const { return data_.key(); }
  std::string name() const { return "SyncSendComm"; }
  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op) { data_.all_reduce(b, n, t, op); }
  void all_gather(const void* s, void* r, std::size_t n, DType t) { data_.all_gather(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) { data_.reduce_scatter(s, r, n, t, op); }
  void all_to_all(const void* s, void* r, std::size_t n, DType t) { data_.all_to_all(s, r, n, t); }
  void broadcast(void* b, std::size_t n, DType t, int root) { data_.broadcast(b, n, t, root); }
  void send(const void* b, std::size_t n, DType t, int peer) {
    data_.send(b, n, t, peer);
    std::int64_t ack = 0;
    acks_.recv(&ack, 1, DType::i64, peer);
  }
  void recv(void* b, std::size_t n, DType t, int peer) {
    data_.recv(b, n, t, peer);
    const std::int64_t ack = 1;
    acks_.send(&ack, 1, DType::i64, peer);
  }
  void barrier() { data_.barrier(); }

 private:
  ThreadComm data_, acks_;
};
static_assert(Communicator<SyncSendComm>);

/// The watchdog's limit for one test; the previous limit afterwards.
struct ShortTimeout {
  double saved = collective_timeout();
  explicit ShortTimeout(double s) { set_collective_timeout(s); }
  ~ShortTimeout() { set_collective_timeout(saved); }
};
}  // namespace

TEST_CASE("dense reference: hand-computed cases and central finite differences") {
  using ref::M;
  // A 3x3 image of ones, one channel, a 3x3 kernel of ones: each output counts its in-image
  // neighbours (the zero padding), plus the bias.
  {
    const ref::ConvDims d{1, 3, 3, 1, 1, 3};
    M want(3, 3);
    want << 4, 6, 4, 6, 9, 6, 4, 6, 4;
    CHECK(ref::conv2d(M::Ones(3, 3), M::Ones(9, 1), M::Constant(1, 1, 0.5), d) == (want.array() + 0.5).matrix());
  }
  // Orientation (a cross-correlation): the tap (i, j) = (0, 2) reads x(h − 1, w + 1).
  {
    const ref::ConvDims d{1, 3, 3, 1, 1, 3};
    M x(3, 3), w = M::Zero(9, 1), want(3, 3);
    x << 1, 2, 3, 4, 5, 6, 7, 8, 9;
    w(0 * 3 + 2, 0) = 1;
    want << 0, 0, 0, 2, 3, 0, 5, 6, 0;
    CHECK(ref::conv2d(x, w, M(), d) == want);
  }
  // Two images of one pixel, two channels, k = 1: a channel mix per pixel; images do not mix.
  {
    const ref::ConvDims d{2, 1, 1, 2, 1, 1};
    M x(1, 4), w(2, 1), want(1, 2);
    x << 1, 2, 10, 20;  // image 0: channels (1, 2); image 1: (10, 20)
    w << 3, 5;
    want << 13, 130;
    CHECK(ref::conv2d(x, w, M(), d) == want);
  }
  // Central differences of L = Σ dY ⊙ conv2d(X, W, b) (linear in each argument).
  {
    const ref::ConvDims d{2, 4, 3, 2, 3, 3};
    const M x = testing::random_real<double>(4, 2 * 3 * 2, 11), w = testing::random_real<double>(18, 3, 12),
            b = testing::random_real<double>(1, 3, 13), dy = testing::random_real<double>(4, 2 * 3 * 3, 14);
    const auto g = ref::conv2d_backward(x, w, dy, d);
    const auto loss = [&](const M& xx, const M& ww, const M& bb) { return dy.cwiseProduct(ref::conv2d(xx, ww, bb, d)).sum(); };
    const double h = 1e-6;
    double worst = 0;
    const auto fd = [&](const M& base, const M& grad, auto&& eval) {
      for (Index i = 0; i < base.rows(); ++i)
        for (Index j = 0; j < base.cols(); ++j) {
          M up = base, down = base;
          up(i, j) += h;
          down(i, j) -= h;
          worst = std::max(worst, std::abs((eval(up) - eval(down)) / (2 * h) - grad(i, j)));
        }
    };
    fd(x, g.dx, [&](const M& v) { return loss(v, w, b); });
    fd(w, g.dw, [&](const M& v) { return loss(x, v, b); });
    fd(b, g.db, [&](const M& v) { return loss(x, w, v); });
    CHECK(worst < 1e-8);
  }
}

TEST_CASE_TEMPLATE("Conv2d equals the dense convolution bit for bit on integer operands: k 1, 3, 5 and P 1-4", T, float,
                   double) {
  std::uint64_t seed = 100;
  for (const Index k : kKernels)
    for (const int p : kWorlds)
      for (const Index n : {Index(1), Index(2)})
        for (const bool bias : {true, false}) {
          const Case c{.n = n, .h = 12, .w = 5, .cin = 2, .cout = 3, .k = k, .bias = bias, .seed = seed += 10};
          const auto runs = testing::per_rank<Run>(p, [&](const Group& g) { return run_conv<T>(g, c); });
          check_runs(runs, expected(c), 0, describe(c, p));
        }
  // The tightest splits: H/P = ⌊k/2⌋ (a halo is a neighbour's whole block; the middle rank of three
  // gets rows from both sides into one row when H/P = 1), and an image narrower than the kernel.
  for (const Index k : {Index(3), Index(5)})
    for (const int p : {2, 3, 4}) {
      const Case c{.n = 2, .h = p * (k / 2), .w = 2, .cin = 3, .cout = 2, .k = k, .seed = seed += 10};
      const auto runs = testing::per_rank<Run>(p, [&](const Group& g) { return run_conv<T>(g, c); });
      check_runs(runs, expected(c), 0, "tight " + describe(c, p));
    }
}

TEST_CASE("Conv2d on real-valued double operands: within 1e-12 of the dense convolution") {
  for (const Index k : kKernels)
    for (const int p : kWorlds) {
      const Case c{.n = 2, .h = 12, .w = 6, .cin = 3, .cout = 4, .k = k, .integer = false, .seed = static_cast<std::uint64_t>(900 + 7 * k + p)};
      const auto runs = testing::per_rank<Run>(p, [&](const Group& g) { return run_conv<double>(g, c); });
      check_runs(runs, expected(c), 1e-12, "real " + describe(c, p));
    }
}

TEST_CASE_TEMPLATE("ledger: the halo is 2·⌊k/2⌋·N·W·C_in elements per interior rank and pass, and nothing else", T,
                   float, double) {
  for (const Index k : kKernels)
    for (const int p : kWorlds) {
      const Case c{.n = 2, .h = 12, .w = 5, .cin = 2, .cout = 3, .k = k};
      const auto runs = testing::per_rank<Run>(p, [&](const Group& g) { return run_conv<T>(g, c); });
      const std::size_t r = static_cast<std::size_t>(k / 2), NWC = static_cast<std::size_t>(c.n * c.w * c.cin);
      const std::size_t message = r * NWC;  // one neighbour's boundary rows, every image
      std::size_t total_fwd = 0, total_bwd = 0;
      for (const auto& run : runs) {
        CAPTURE(k);
        CAPTURE(p);
        CAPTURE(run.rank);
        const std::size_t nb = neighbours(run.rank, p);
        const std::size_t msgs = (r > 0 && p > 1) ? nb : 0;
        for (const Tally* t : {&run.fwd, &run.bwd}) {
          CHECK(t->sends == msgs);
          CHECK(t->recvs == msgs);
          CHECK(t->send_bytes == msgs * message * sizeof(T));
          CHECK(t->recv_bytes == msgs * message * sizeof(T));
          CHECK(t->halo == t->send_bytes);
          if (msgs > 0) {
            CHECK(t->message_elements_min == message);
            CHECK(t->message_elements_max == message);
          }
          CHECK(t->wrong_layouts == 0);  // Row → Row+halo forward, Row+halo → Row backward
          CHECK(t->others.empty());      // no collective in either pass
        }
        if (run.rank > 0 && run.rank + 1 < p) {  // an interior rank: the issue's formula, exactly
          CHECK(run.fwd.send_bytes == 2 * (static_cast<std::size_t>(k) / 2) * NWC * sizeof(T));
          CHECK(run.bwd.send_bytes == 2 * (static_cast<std::size_t>(k) / 2) * NWC * sizeof(T));
        }
        total_fwd += run.fwd.send_bytes;
        total_bwd += run.bwd.send_bytes;
        // The gradient reduction: one all_reduce of dW (k²·C_in·C_out) and one of db (C_out).
        REQUIRE(run.reduce.size() == 2);
        CHECK(run.reduce[0].kind == CollectiveKind::all_reduce);
        CHECK(run.reduce[0].elements == static_cast<std::size_t>(k * k * c.cin * c.cout));
        CHECK(run.reduce[0].layout_in == "Partial");
        CHECK(run.reduce[0].layout_out == "R");
        CHECK(run.reduce[1].kind == CollectiveKind::all_reduce);
        CHECK(run.reduce[1].elements == static_cast<std::size_t>(c.cout));
        CHECK(run.total_entries == 2 * msgs * 2 + 2);
      }
      // Over the world: each of the P − 1 cuts moves r rows each way.
      CHECK(total_fwd == 2 * static_cast<std::size_t>(p - 1) * message * sizeof(T));
      CHECK(total_bwd == total_fwd);
      if (k == 5 && p == 4 && std::is_same_v<T, double>)
        std::printf("conv ledger, k=5 P=4 N=2 W=5 C_in=2, double: halo bytes sent per rank forward %zu %zu %zu %zu "
                    "(formula 2*2*2*5*2*8 = %zu for an interior rank), backward %zu %zu %zu %zu\n",
                    runs[0].fwd.send_bytes, runs[1].fwd.send_bytes, runs[2].fwd.send_bytes, runs[3].fwd.send_bytes,
                    2 * r * NWC * sizeof(double), runs[0].bwd.send_bytes, runs[1].bwd.send_bytes,
                    runs[2].bwd.send_bytes, runs[3].bwd.send_bytes);
    }
}

TEST_CASE("halo_exchange: the padded block is the neighbours' rows; the adjoint law holds exactly, a wrong adjoint breaks it") {
  const Index rows = 12, cols = 5;
  const Mat<double> X = testing::random_int<double>(rows, cols, 7);
  struct Res {
    bool padded_ok = false;
    double lhs = 0, rhs = 0, rhs_wrong = 0;
  };
  for (const int p : kWorlds)
    for (const Index r : {Index(0), Index(1), Index(2), Index(3)}) {
      const auto res = testing::per_rank<Res>(p, [&](const Group& g) {
        Res out;
        const auto x = shard<RowSharded>(X, g);
        const auto h = halo_exchange(x, r);
        const Index m = rows / p, off = g.rank() * m;
        Mat<double> want = Mat<double>::Zero(m + 2 * r, cols);
        for (Index i = 0; i < m + 2 * r; ++i)
          if (off - r + i >= 0 && off - r + i < rows) want.row(i) = X.row(off - r + i);
        out.padded_ok = h.local() == want && h.own_rows() == m && h.row_offset() == off;
        // ⟨halo(x), ỹ⟩ = ⟨x, adjoint(ỹ)⟩, summed over ranks, with a per-rank cotangent ỹ.
        const Mat<double> yt = testing::random_int<double>(m + 2 * r, cols, 1000 + g.rank());
        const auto adj = adjoint::halo_exchange(HaloBlock<double>(yt, r, rows, cols, g));
        out.lhs = h.local().cwiseProduct(yt).sum();
        out.rhs = x.local().cwiseProduct(adj.local()).sum();
        // A wrong adjoint: crop ỹ to the own rows, dropping the halo's gradient (no reduction).
        out.rhs_wrong = x.local().cwiseProduct(yt.middleRows(r, m)).sum();
        return out;
      });
      double lhs = 0, rhs = 0, wrong = 0;
      for (const auto& o : res) {
        CHECK(o.padded_ok);
        lhs += o.lhs, rhs += o.rhs, wrong += o.rhs_wrong;
      }
      CAPTURE(p);
      CAPTURE(r);
      CHECK(lhs == rhs);
      if (p > 1 && r > 0) CHECK(lhs != wrong);  // so the law can fail
    }
}

TEST_CASE("halo_exchange is deadlock-free when every send waits for its receive (MPI_Ssend semantics)") {
  const Case c{.n = 1, .h = 12, .w = 4, .cin = 2, .cout = 2, .k = 5};
  const Expected e = expected(c);
  for (const int p : {2, 3, 4}) {
    const auto runs = testing::per_rank<Run>(p, [&](const Group& g) { return run_conv<double>(g, c); });
    std::vector<Run> sync(p);
    run_ranks(p, [&](ThreadComm& comm) { sync[comm.rank()] = run_conv<double>(Group(SyncSendComm(comm)), c); });
    check_runs(sync, e, 0, "synchronous sends P=" + std::to_string(p));
    for (int q = 0; q < p; ++q) CHECK(sync[q].fwd.send_bytes == runs[q].fwd.send_bytes);
  }
  // The test communicator can deadlock: a naive order (every rank sends both boundaries, then
  // receives) waits for ever under synchronous sends — here the watchdog ends it — while the same
  // order passes on ThreadComm, whose sends are buffered.
  const auto naive = [](Group g) {
    const Index m = 2, cols = 3;
    const Mat<double> own = Mat<double>::Constant(m, cols, g.rank());
    Mat<double> top(1, cols), bottom(1, cols);
    const int q = g.rank(), p = g.size();
    if (q + 1 < p) g.send(own.data() + (m - 1) * cols, cols, DType::f64, q + 1);
    if (q > 0) g.send(own.data(), cols, DType::f64, q - 1);
    if (q > 0) g.recv(top.data(), cols, DType::f64, q - 1);
    if (q + 1 < p) g.recv(bottom.data(), cols, DType::f64, q + 1);
  };
  CHECK_NOTHROW(run_ranks(2, [&](ThreadComm& comm) { naive(Group(comm)); }));
  {
    ShortTimeout t(0.3);
    CHECK_THROWS_AS(run_ranks(2, [&](ThreadComm& comm) { naive(Group(SyncSendComm(comm))); }), CollectiveTimeoutError);
  }
}

TEST_CASE("errors: even kernel, H not divisible by P, H/P below the halo, wrong shapes — typed, naming the values") {
  const Group self(SelfComm{});
  const nn::NormalInit init{1, 0.1};
  using Conv = nn::Conv2d<double>;
  nn::Conv2dShape s{.height = 8, .width = 5, .in_channels = 4, .out_channels = 2, .kernel = 4, .batch = 2};
  CHECK_THROWS_WITH_AS(Conv::init(s, true, self, init, 0),
                       "Conv2d: kernel size 4 is not odd; a stride-1 \"same\" convolution needs an odd kernel (1, 3, 5, ...)",
                       ShapeError);
  s.kernel = 3;
  s.height = 10;
  CHECK_THROWS_WITH_AS(run_ranks(4, [&](ThreadComm& comm) { (void)Conv::init(s, true, Group(comm), init, 0); }),
                       "Conv2d: image height 10 is not divisible by spatial-parallel size 4", DivisibilityError);
  s.height = 8;
  s.kernel = 7;
  CHECK_THROWS_WITH_AS(run_ranks(4, [&](ThreadComm& comm) { (void)Conv::init(s, true, Group(comm), init, 0); }),
                       "Conv2d: 2 image rows per rank (height 8 on 4 ranks) are fewer than the halo of 3 rows a 7x7 "
                       "kernel needs from each neighbour: use fewer ranks or a smaller kernel",
                       ShapeError);
  s.height = 3;
  s.kernel = 5;
  CHECK_THROWS_WITH_AS(run_ranks(3, [&](ThreadComm& comm) { (void)Conv::init(s, true, Group(comm), init, 0); }),
                       "Conv2d: 1 image row per rank (height 3 on 3 ranks) is fewer than the halo of 2 rows a 5x5 "
                       "kernel needs from each neighbour: use fewer ranks or a smaller kernel",
                       ShapeError);
  CHECK_THROWS_WITH_AS(run_ranks(4,
                                 [&](ThreadComm& comm) {
                                   const auto x = shard<RowSharded>(Mat<double>(Mat<double>::Zero(8, 5)), Group(comm));
                                   (void)halo_exchange(x, 3);
                                 }),
                       "halo_exchange: 2 rows per rank (8 rows on 4 ranks) are fewer than the halo radius 3: a halo "
                       "must come from the adjacent ranks alone",
                       ShapeError);
  s.height = 8;
  s.kernel = 3;
  const auto conv = Conv::init(s, true, self, init, 0);
  const auto x = shard<RowSharded>(Mat<double>(Mat<double>::Zero(8, 30)), self);
  CHECK_THROWS_WITH_AS(conv.forward(x), "Conv2d: input is 8x30, expected 8x40 (H x N*W*C_in = 8 x 2*5*4)", ShapeError);
  const Mat<double> w = Mat<double>::Zero(9, 2);
  CHECK_THROWS_WITH_AS(Conv::from_dense(s, w, static_cast<const Mat<double>*>(nullptr), self), "Conv2d::from_dense: weight is 9x2, expected 36x2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(HaloBlock<double>(Mat<double>::Zero(3, 5), 1, 8, 5, self),
                       "HaloBlock: local block 3x5 is not 10x5 (8 own rows + 2 × halo 1 on 1 rank)", ShapeError);
}

TEST_CASE("one SGD step: reduce_grads (two all-reduces), then the update equals the dense step") {
  // nn::sgd_update(conv.weight(), grads.params.dw, lr) with dW still Partial does not compile:
  // [shardalg.E130], tests/conv/E130_conv_partial_grad.cpp (CTest compile_fail.conv.E130_*).
  const Case c{.n = 2, .h = 12, .w = 4, .cin = 2, .cout = 3, .k = 3};
  const Operands o = operands(c);
  const auto g = ref::conv2d_backward(o.x, o.w, o.dy, dims_of(c));
  const double lr = 0.5;  // exact on integers
  const ref::M w_next = o.w - lr * g.dw, b_next = o.b - lr * g.db;
  for (const int p : kWorlds) {
    struct Res {
      Mat<double> w, b;
    };
    const auto res = testing::per_rank<Res>(p, [&](const Group& grp) {
      const Mat<double> w = o.w, b = o.b;
      auto conv = nn::Conv2d<double>::from_dense(shape_of(c), w, &b, grp);
      const auto f = conv.forward(shard<RowSharded>(Mat<double>(o.x), grp));
      const auto grads = conv.backward(f.cache, shard<RowSharded>(Mat<double>(o.dy), grp));
      conv.sgd(nn::Conv2d<double>::reduce_grads(grads.params), lr);
      return Res{conv.weight().local(), conv.bias()->local()};
    });
    for (const auto& r : res) {
      CHECK(compare(r.w, w_next).max_abs == 0);
      CHECK(compare(r.b, b_next).max_abs == 0);
    }
  }
}

TEST_CASE("explain log: the halo exchange and the halo reduction in layout notation") {
  run_ranks(2, [&](ThreadComm& comm) {
    Ledger ledger;
    ledger.explain(true);
    const Group g = ledgered(comm, ledger);
    const auto x = shard<RowSharded>(Mat<double>(testing::random_int<double>(4, 6, 3)), g);
    const auto h = halo_exchange(x, 1);
    (void)adjoint::halo_exchange(h);
    const auto& ops = ledger.explained();
    if (comm.rank() == 0) {
      REQUIRE(ops.size() == 2);
      CHECK(ops[0].op == "halo_exchange");
      CHECK(ops[0].layouts == "4x6[Row] → 4x6[Row+halo] (halo 1)");
      CHECK(ops[0].collectives.size() == 2);  // rank 0: one send, one recv
      CHECK(ops[1].op == "adjoint::halo_exchange");
      CHECK(ops[1].layouts == "4x6[Row+halo] (halo 1) → 4x6[Row]");
    }
  });
}
