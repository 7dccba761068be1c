// Data parallelism in the types (issue 13) on threads: DP × TP meshes train like one rank on the
// whole batch; the sharded optimizer (ZeRO-1) updates like Adam and holds 1/dp of its state; ZeRO-2
// and ZeRO-3 (gradients, then parameters, held as slices) train bitwise like ZeRO-1; the
// DP collectives in the ledger, by axis; checkpoints across meshes; bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>

#include "dp_cases.hpp"

using namespace shardalg;
using dp_cases::Opt;

namespace {
/// Run `steps` on a dp × tp thread mesh; rank 0's curve (every rank computes the same loss).
std::vector<double> mesh_curve(int d, int t, const nn::GptConfig& c, int steps, Opt which,
                               std::size_t bucket = std::size_t{1} << 16, double clip = 1.0) {
  std::vector<double> out;
  std::mutex m;
  run_ranks(d * t, [&](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", d}, {"tp", t}});
    auto curve = dp_cases::train(c, mesh, steps, which, bucket, clip);
    if (comm.rank() == 0) {
      std::lock_guard lk(m);
      out = curve;
    }
  });
  return out;
}

/// 4 sharded-Adam steps at DP=2 × TP=2 (options `o`), then the weights and the optimizer state as
/// logical masters (rank 0's).
void sharded_steps_then_state(const nn::GptConfig& c, nn::DataParallelGpt<double>::Options o, nn::Masters& weights,
                              nn::Masters& moments) {
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    auto model = nn::DataParallelGpt<double>::init(c, mesh, o);
    nn::ShardedAdam<double> zero(gt::adam_options());
    for (int s = 0; s < 4; ++s) {
      const auto [x, y] = gt::batch_at(c, gt::kText, s);
      model.forward_backward(x, y);
      model.step(zero, 1.0);
    }
    auto w = model.masters();
    auto m = model.optimizer_masters(zero);
    if (comm.rank() == 0) {
      weights = std::move(w);
      moments = std::move(m);
    }
  });
}
}  // namespace

TEST_CASE("data parallel: DP x TP meshes train like one rank on the whole batch (25 steps, <= 1e-12)") {
  for (bool sp : {false, true}) {
    const auto c = dp_cases::config(sp);
    const auto ref = dp_cases::reference(c, 25);
    struct Shape {
      int d, t;
    };
    for (Shape s : {Shape{2, 2}, Shape{2, 1}, Shape{4, 1}, Shape{1, 2}}) {
      for (Opt which : {Opt::adam, Opt::sharded_adam}) {
        CAPTURE(sp);
        CAPTURE(s.d);
        CAPTURE(s.t);
        CAPTURE(static_cast<int>(which));
        const auto got = mesh_curve(s.d, s.t, c, 25, which);
        REQUIRE(got.size() == 25);
        const double diff = gt::curve_diff(got, ref);
        CHECK(diff <= 1e-12);
        CHECK(got.back() < got.front());  // it trains
        if (s.d == 2 && s.t == 2 && !sp) MESSAGE("DP=2 x TP=2 against one rank, largest relative difference per step: ", diff);
      }
    }
  }
}

TEST_CASE("data parallel: the sharded optimizer updates bitwise like Adam (no clipping), and with clipping <= 1e-12") {
  const auto c = dp_cases::config(false);
  nn::Masters plain, zero;
  std::vector<double> lp, lz;
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    nn::Masters a, z;
    auto la = dp_cases::train(c, mesh, 6, Opt::adam, 4096, 0.0, &a);
    auto lzz = dp_cases::train(c, mesh, 6, Opt::sharded_adam, 4096, 0.0, &z);
    if (comm.rank() == 0) {
      plain = std::move(a);
      zero = std::move(z);
      lp = la;
      lz = lzz;
    }
  });
  CHECK(lp == lz);  // bitwise: the same reduced gradients, the same kernel per element
  REQUIRE(plain.size() == zero.size());
  for (const auto& entry : plain) {
    CAPTURE(entry.first);
    CHECK(zero.at(entry.first) == entry.second);
  }
  const auto ref = dp_cases::reference(c, 6, 0.0);
  CHECK(gt::curve_diff(lz, ref) <= 1e-12);
}

namespace {
nn::BucketSlot slot(Index rows, Index cols) {
  nn::BucketSlot s;
  s.name = "p";
  s.rows = rows;
  s.cols = cols;
  return s;
}
}  // namespace

TEST_CASE("gradient buckets: packed greedily from the last parameter back, each bucket's parameters consecutive in visit order") {
  // A worked case: sizes 3 5 2 7 at 8 values a bucket → from the back [7] [5 2] [3].
  {
    std::vector<nn::BucketSlot> v;
    for (Index n : {3, 5, 2, 7}) v.push_back(slot(1, n));
    const auto p = nn::BucketPlan::backward_order(v, 8, 2);
    CHECK(p.elements == std::vector<Index>{7, 7, 3});
    CHECK(p.padded == std::vector<Index>{8, 8, 4});
    CHECK(p.slots[0].bucket == 2);
    CHECK(p.slots[1].bucket == 1);
    CHECK(p.slots[1].offset == 0);  // within a bucket, visit order
    CHECK(p.slots[2].bucket == 1);
    CHECK(p.slots[2].offset == 5);
    CHECK(p.slots[3].bucket == 0);
  }
  // With units (ZeRO-3's plan), a bucket never spans two: sizes 3 5 2 7 in units 0 0 1 1 at 8 →
  // from the back [7] [2] (the 2 does not fit beside the 7) [3 5] (unit 0's, 8 values).
  {
    std::vector<nn::BucketSlot> v;
    const std::size_t unit[] = {0, 0, 1, 1};
    std::size_t i = 0;
    for (Index n : {3, 5, 2, 7}) v.push_back(slot(1, n)), v.back().unit = unit[i++];
    const auto p = nn::BucketPlan::backward_order(v, 8, 2);
    CHECK(p.elements == std::vector<Index>{7, 2, 8});
    CHECK(p.units == std::vector<std::size_t>{1, 1, 0});
    CHECK(p.slots[0].bucket == 2);
    CHECK(p.slots[1].bucket == 2);
    CHECK(p.slots[1].offset == 3);
    CHECK(p.slots[2].bucket == 1);
  }
  // The laws over random sizes, caps (0: one per parameter), padding and units.
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<nn::BucketSlot> v;
    const int n = 1 + static_cast<int>(gen() % 12);
    std::size_t u = 0;  // nondecreasing along the visit, as the model's units are; all 0 in odd trials
    for (int i = 0; i < n; ++i) {
      v.push_back(slot(1 + Index(gen() % 3), 1 + Index(gen() % 40)));
      if (trial % 2 == 0 && gen() % 3 == 0) ++u;
      v.back().unit = u;
    }
    const std::size_t cap = trial % 5 == 0 ? 0 : 1 + gen() % 100;
    const int pad = 1 + static_cast<int>(gen() % 4);
    CAPTURE(trial);
    const auto p = nn::BucketPlan::backward_order(v, cap, pad);
    REQUIRE(p.slots.size() == v.size());
    std::vector<Index> sum(p.buckets(), 0);
    for (std::size_t i = 0; i < v.size(); ++i) {
      CHECK(p.slots[i].size() == v[i].size());  // visit order kept
      if (i + 1 < v.size()) CHECK((p.slots[i].bucket == p.slots[i + 1].bucket || p.slots[i].bucket == p.slots[i + 1].bucket + 1));
      CHECK(p.slots[i].offset == sum[p.slots[i].bucket]);  // consecutive, no gap, no overlap
      CHECK(p.units[p.slots[i].bucket] == v[i].unit);        // no bucket spans two units
      sum[p.slots[i].bucket] += p.slots[i].size();
    }
    CHECK(p.slots.back().bucket == 0);  // the last parameter is in the first bucket
    for (std::size_t b = 0; b < p.buckets(); ++b) {
      CHECK(sum[b] == p.elements[b]);
      CHECK(p.padded[b] % pad == 0);
      CHECK(p.padded[b] - p.elements[b] < pad);
      if (cap == 0) CHECK(std::count_if(p.slots.begin(), p.slots.end(), [&](const auto& s) { return s.bucket == b; }) == 1);
      else if (p.elements[b] > static_cast<Index>(cap))  // over the cap only as a lone parameter
        CHECK(std::count_if(p.slots.begin(), p.slots.end(), [&](const auto& s) { return s.bucket == b; }) == 1);
      // greedy: the next parameter back did not fit this bucket, or is another unit's
      if (cap > 0 && b + 1 < p.buckets()) {
        const auto first = std::find_if(p.slots.begin(), p.slots.end(), [&](const auto& s) { return s.bucket == b; });
        REQUIRE(first != p.slots.begin());
        CHECK((p.elements[b] + std::prev(first)->size() > static_cast<Index>(cap) || std::prev(first)->unit != first->unit));
      }
    }
  }
}

TEST_CASE("data parallel ZeRO-2: gradients reduce-scattered during the backward train bitwise like ZeRO-1, and no rank holds them whole") {
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    const auto c = dp_cases::config(sp);
    struct Shape {
      int d, t;
    };
    for (Shape s : {Shape{2, 2}, Shape{4, 1}}) {
      CAPTURE(s.d);
      CAPTURE(s.t);
      std::vector<double> l1, l2, la;
      nn::Masters m1, m2;
      std::mutex mu;
      run_ranks(s.d * s.t, [&](ThreadComm& comm) {
        Mesh mesh(comm, {{"dp", s.d}, {"tp", s.t}});
        nn::Masters a, b;
        auto z1 = dp_cases::train(c, mesh, 6, Opt::sharded_adam, 4096, 1.0, &a);
        auto z2 = dp_cases::train(c, mesh, 6, Opt::sharded_adam, 4096, 1.0, &b, nn::CpAlgo::ring, true);
        auto ad = dp_cases::train(c, mesh, 6, Opt::adam, 4096, 1.0, nullptr, nn::CpAlgo::ring, true);  // slices gathered back
        if (comm.rank() == 0) {
          std::lock_guard lk(mu);
          l1 = z1, l2 = z2, la = ad, m1 = std::move(a), m2 = std::move(b);
        }
      });
      CHECK(l2 == l1);  // bitwise: the same buckets, the same reduce_scatter, the same slice update
      REQUIRE(m1.size() == m2.size());
      for (const auto& entry : m1) CHECK(m2.at(entry.first) == entry.second);
      const auto ref = dp_cases::reference(c, 6);
      CHECK(gt::curve_diff(l2, ref) <= 1e-12);
      CHECK(gt::curve_diff(la, ref) <= 1e-12);
    }
  }
  // One backward at dp 2 × tp 2 with buckets of 4096 values: what a rank holds, and the ledger.
  const auto c = dp_cases::config(false);
  run_ranks(4, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(Group(comm), ledger), {{"dp", 2}, {"tp", 2}});
    nn::DataParallelGpt<double>::Options o;
    o.bucket_elements = 4096;
    o.shard_gradients = true;
    auto model = nn::DataParallelGpt<double>::init(c, mesh, o);
    const auto [x, y] = gt::batch_at(c, gt::kText, 0);
    model.forward_backward(x, y);
    const auto& plan = model.plan();
    std::size_t whole = 0, slices = 0, left = 0;
    for (Index n : plan.elements) whole += static_cast<std::size_t>(n) * sizeof(double);
    for (const auto& g : model.gradient_slices()) slices += static_cast<std::size_t>(g.size()) * sizeof(double);
    model.replica().visit([&](const nn::ParamInfo&, auto&, const auto& g) { left += static_cast<std::size_t>(g.local().size()); });
    std::size_t padded = 0;
    for (Index n : plan.padded) padded += static_cast<std::size_t>(n) * sizeof(double);
    CHECK(left == 0);                 // every whole gradient was released into its bucket
    CHECK(slices == padded / 2);      // this rank keeps 1/dp of every (padded) bucket
    CHECK(model.gradient_peak_bytes() < whole);                   // never the whole gradient …
    // … but the slices, and the buckets open while one block's gradients arrive: those holding a
    // part of it (⌈V/4096⌉ + 1 for its V values) and one still waiting for the block after it.
    std::size_t v = 0;
    for (const auto& sl : plan.slots)
      if (sl.name.rfind("layers.0.", 0) == 0) v += static_cast<std::size_t>(sl.size());
    CHECK(model.gradient_peak_bytes() <= padded / 2 + ((v + 4095) / 4096 + 2) * 4096 * sizeof(double));
    CHECK(plan.buckets() > 4);
    CHECK(ledger.count(CollectiveKind::reduce_scatter) == plan.buckets());  // during the backward, one per bucket
    CHECK(ledger.count(CollectiveKind::all_gather) == 0);
    if (comm.rank() == 0)
      MESSAGE("ZeRO-2 at dp 2 × tp 2, ", plan.buckets(), " buckets: the whole gradient is ", whole, " B per rank; held at most ",
              model.gradient_peak_bytes(), " B during the backward, ", slices, " B after it");
  });
}

TEST_CASE("data parallel ZeRO-3: parameter slices gathered in the forward train bitwise like ZeRO-1 and like one rank (8 steps, <= 1e-12)") {
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    const auto c = dp_cases::config(sp);
    const auto ref = dp_cases::reference(c, 8);
    struct Shape {
      int d, t;
    };
    for (Shape s : {Shape{2, 2}, Shape{4, 1}}) {
      CAPTURE(s.d);
      CAPTURE(s.t);
      std::vector<double> l1, l3;
      nn::Masters m1, m3;
      std::mutex mu;
      run_ranks(s.d * s.t, [&](ThreadComm& comm) {
        Mesh mesh(comm, {{"dp", s.d}, {"tp", s.t}});
        nn::Masters a, b;
        // ZeRO-1 on ZeRO-3's plan (buckets by unit): the same buckets, so the same norm's bits
        auto z1 = dp_cases::train(c, mesh, 8, Opt::sharded_adam, 4096, 1.0, &a, nn::CpAlgo::ring, false, false, true);
        auto z3 = dp_cases::train(c, mesh, 8, Opt::sharded_adam, 4096, 1.0, &b, nn::CpAlgo::ring, true, true);
        if (comm.rank() == 0) {
          std::lock_guard lk(mu);
          l1 = z1, l3 = z3, m1 = std::move(a), m3 = std::move(b);
        }
      });
      REQUIRE(l3.size() == 8);
      CHECK(l3 == l1);  // bitwise: the same buckets and reductions; the gathered values are ZeRO-1's
      REQUIRE(m1.size() == m3.size());
      for (const auto& entry : m1) {
        CAPTURE(entry.first);
        CHECK(m3.at(entry.first) == entry.second);
      }
      CHECK(gt::curve_diff(l3, ref) <= 1e-12);
      CHECK(l3.back() < l3.front());
    }
  }
}

namespace {
/// One bucket of the restated plan: its values and its unit.
struct Bucket {
  Index n = 0;
  std::size_t unit = 0;
};
/// The greedy buckets of `sizes` (visit order, each with its unit) at `cap` values, packed from the
/// last parameter back, a new bucket at each change of unit (nn/optim/grad_buckets.hpp's rule,
/// restated here); bucket 0 holds the last parameters.
std::vector<Bucket> unit_buckets(const std::vector<std::pair<Index, std::size_t>>& sizes, Index cap) {
  std::vector<Bucket> b;
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    if (b.empty() || b.back().n + it->first > cap || b.back().unit != it->second) b.push_back({0, it->second});
    b.back().n += it->first;
  }
  return b;
}
/// The unit of a parameter by its logical name (restated): 0 the embedding, k + 1 layers.k, L + 1
/// the final norm.
std::size_t unit_by_name(const std::string& name, Index layers) {
  if (name.rfind("final_norm", 0) == 0) return static_cast<std::size_t>(layers) + 1;
  if (name.rfind("layers.", 0) == 0) return std::stoul(name.substr(7)) + 1;
  return 0;
}
}  // namespace

TEST_CASE("data parallel ZeRO-3: each block gathered before its forward and again before its backward, the embedding and final norm once; per-unit bytes held; prefetch on and off the same bits") {
  struct Shape {
    int d, t;
    bool sp;
  };
  for (Shape s : {Shape{2, 2, false}, Shape{4, 1, false}, Shape{2, 2, true}}) {
    CAPTURE(s.d);
    CAPTURE(s.t);
    CAPTURE(s.sp);
    auto c = dp_cases::config(s.sp);
    c.layers = 4;  // enough blocks that two of them are less than the replica
    std::map<bool, std::vector<double>> curves;  // prefetch → rank 0's losses
    std::mutex mu;
    for (bool prefetch : {true, false}) {
      CAPTURE(prefetch);
      run_ranks(s.d * s.t, [&](ThreadComm& comm) {
        // The analytic figures from a plain replica's parameters (not the ZeRO-3 model's plan):
        // their local sizes and units, packed into buckets of 4096 by unit, padded to multiples of dp.
        std::vector<std::pair<Index, std::size_t>> sizes;
        {
          Mesh plain_mesh(comm, {{"dp", s.d}, {"tp", s.t}});
          auto plain = nn::DataParallelGpt<double>::init(c, plain_mesh, {4096});
          plain.replica().visit_params([&](const nn::ParamInfo& i, const nn::TensorMap&, auto& w) {
            sizes.emplace_back(w.local().size(), unit_by_name(i.name, c.layers));
          });
        }
        const auto buckets = unit_buckets(sizes, 4096);
        const auto L = static_cast<std::size_t>(c.layers);
        const auto pad = [&](Index n) { return (n + s.d - 1) / s.d * s.d; };
        Index psi = 0, padded = 0, gathered = 0;  // gathered: values all_gathered per forward_backward
        std::size_t gathers = 0, biggest = 0;
        std::vector<std::size_t> unit_bytes(L + 2, 0);  // each unit's whole parameters
        for (const auto& b : buckets) {
          psi += b.n, padded += pad(b.n);
          const bool block = b.unit >= 1 && b.unit <= L;
          gathers += block ? 2 : 1;
          gathered += (block ? 2 : 1) * pad(b.n);
          biggest = std::max(biggest, static_cast<std::size_t>(pad(b.n)) * sizeof(double));
          unit_bytes[b.unit] += static_cast<std::size_t>(b.n) * sizeof(double);
        }
        std::size_t two_blocks = 0, one_block = 0;  // the most bytes of two adjacent blocks, and of one
        for (std::size_t u = 1; u <= L; ++u) {
          one_block = std::max(one_block, unit_bytes[u]);
          if (u < L) two_blocks = std::max(two_blocks, unit_bytes[u] + unit_bytes[u + 1]);
        }
        const std::size_t slices = static_cast<std::size_t>(padded / s.d) * sizeof(double);
        const std::size_t whole = static_cast<std::size_t>(psi) * sizeof(double);
        const std::size_t root = unit_bytes[0] + unit_bytes[L + 1];  // the embedding and the final norm

        Ledger led;
        Mesh mesh(ledgered(Group(comm), led), {{"dp", s.d}, {"tp", s.t}});
        nn::DataParallelGpt<double>::Options o;
        o.bucket_elements = 4096;
        o.shard_parameters = true;
        o.prefetch = prefetch;
        auto model = nn::DataParallelGpt<double>::init(c, mesh, o);
        nn::ShardedAdam<double> zero(gt::adam_options());
        CHECK(model.parameter_bytes() == slices);  // from init on: only the slices
        CHECK(model.parameter_slices().size() == buckets.size());
        REQUIRE(model.plan().buckets() == buckets.size());
        for (std::size_t b = 0; b < buckets.size(); ++b) CHECK(model.plan().units[b] == buckets[b].unit);
        std::vector<double> losses;
        for (int step = 0; step < 3; ++step) {
          CAPTURE(step);
          const auto [x, y] = gt::batch_at(c, gt::kText, step);
          const std::size_t e0 = led.select().size();
          losses.push_back(model.forward_backward(x, y));
          CHECK(model.parameter_bytes() == slices);  // the backward released every gathered parameter
          // The most held: the slices, the embedding, the final norm, the blocks in use (two
          // adjacent with prefetch, one without) and one bucket in flight — not the replica.
          const std::size_t in_use = prefetch ? two_blocks : one_block;
          CHECK(model.parameter_peak_bytes() >= slices + unit_bytes[0] + in_use);
          CHECK(model.parameter_peak_bytes() <= slices + root + in_use + biggest);
          CHECK(model.parameter_peak_bytes() < slices + whole);
          const std::size_t e1 = led.select().size();
          model.step(zero, 1.0);
          CHECK(model.parameter_bytes() == slices);  // between steps: Σ padded/dp values per rank
          const auto all = led.select();
          std::map<std::string, std::size_t> fb, st;
          std::map<std::string, Index> fb_el;
          for (std::size_t i = e0; i < all.size(); ++i) {
            const auto& e = all[i];
            const std::string k = std::string(to_string(e.kind)) + "@" + e.axis;
            if (i < e1) ++fb[k], fb_el[k] += static_cast<Index>(e.elements);
            else ++st[k];
          }
          CHECK(fb["all_gather@dp"] == gathers);  // blocks: forward and backward; the embedding and final norm: once
          CHECK(fb_el["all_gather@dp"] == gathered);
          CHECK(fb["reduce_scatter@dp"] == buckets.size());  // the gradients, during the backward
          CHECK(fb_el["reduce_scatter@dp"] == padded);
          CHECK(fb["all_reduce@dp"] == 1);  // the loss
          CHECK(st["all_gather@dp"] == 0);  // nothing gathered after the update: the next forward does
          CHECK(st["reduce_scatter@dp"] == 0);
          CHECK(st["all_reduce@dp"] == 1);  // the norm's two values
        }
        if (comm.rank() == 0) {
          std::lock_guard lk(mu);
          curves[prefetch] = losses;
          if (s.d == 2 && !s.sp)
            MESSAGE("ZeRO-3 at dp ", s.d, " × tp ", s.t, ", ", c.layers, " blocks, prefetch ", prefetch, ", ", buckets.size(),
                    " buckets: parameters ", whole, " B whole per replica; held ", model.parameter_bytes(),
                    " B between steps (e·Σ padded/dp = ", slices, " B), at most ", model.parameter_peak_bytes(),
                    " B during forward_backward (embedding + final norm ", root, " B, blocks in use ", (prefetch ? two_blocks : one_block), " B)");
        }
        // loss() gathers block by block too, and releases; masters() gathers all and releases;
        // Adam (not sharded) is refused.
        const auto [x, y] = gt::batch_at(c, gt::kText, 3);
        const std::size_t e2 = led.select().size();
        model.loss(x, y);
        std::size_t loss_gathers = 0;
        const auto after = led.select();
        for (std::size_t i = e2; i < after.size(); ++i)
          loss_gathers += after[i].kind == CollectiveKind::all_gather && after[i].axis == "dp";
        CHECK(loss_gathers == buckets.size());  // a forward only: every unit once
        CHECK(model.parameter_bytes() == slices);
        const auto m = model.masters();
        CHECK(model.parameter_bytes() == slices);
        CHECK(m.size() > 0);
        model.forward_backward(x, y);
        nn::Adam<double> adam;
        CHECK_THROWS_WITH_AS(model.step(adam),
                             "DataParallelGpt: with shard_parameters (ZeRO-3) the replica holds no whole parameters between "
                             "steps; step with a ShardedAdam",
                             ShapeError);
      });
    }
    CHECK(curves[true] == curves[false]);  // the prefetch changes when, not what
    CHECK(curves[true].size() == 3);
  }
}

TEST_CASE("data parallel ZeRO-3: a checkpoint written with parameter slices loads at ZeRO-3, ZeRO-1 and ZeRO-0 on other meshes and training continues the same") {
  const auto c = dp_cases::config(false);
  const auto ref = dp_cases::reference(c, 8);
  nn::Masters weights, moments;
  nn::DataParallelGpt<double>::Options o;
  o.shard_parameters = true;
  sharded_steps_then_state(c, o, weights, moments);  // 4 steps at dp 2 × tp 2, ZeRO-3
  struct Target {
    int d, t, zero;
  };
  for (Target tg : {Target{4, 1, 3}, Target{4, 1, 1}, Target{1, 4, 0}}) {
    CAPTURE(tg.d);
    CAPTURE(tg.zero);
    std::vector<double> got;
    run_ranks(tg.d * tg.t, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", tg.d}, {"tp", tg.t}});
      nn::DataParallelGpt<double>::Options to;
      to.shard_parameters = tg.zero == 3;
      auto model = nn::DataParallelGpt<double>::init(c, mesh, to);
      model.load(weights);
      model.replica().set_steps(4);
      nn::ShardedAdam<double> zero(gt::adam_options());
      nn::Adam<double> adam(gt::adam_options());
      if (tg.zero) {
        model.load_optimizer(zero, moments);
        zero.set_step_count(4);
      } else {
        model.load_optimizer(adam, moments);
        adam.set_step_count(4);
      }
      std::vector<double> l;
      for (int k = 4; k < 8; ++k) {
        const auto [x, y] = gt::batch_at(c, gt::kText, k);
        l.push_back(model.forward_backward(x, y));
        if (tg.zero) model.step(zero, 1.0);
        else model.step(adam, 1.0);
      }
      if (comm.rank() == 0) got = l;
    });
    REQUIRE(got.size() == 4);
    CHECK(gt::curve_diff(got, std::vector<double>(ref.begin() + 4, ref.end())) <= 1e-12);
  }
}

TEST_CASE("data parallel: the DP collectives in the ledger, by axis, beside their analytic count") {
  const auto c = dp_cases::config(false);
  for (std::size_t bucket : {std::size_t{0}, std::size_t{1} << 30}) {
    for (Opt which : {Opt::adam, Opt::sharded_adam}) {
      CAPTURE(bucket);
      CAPTURE(static_cast<int>(which));
      run_ranks(4, [&](ThreadComm& comm) {
        Ledger led;
        Mesh mesh(ledgered(comm, led), {{"dp", 2}, {"tp", 2}});
        auto model = nn::DataParallelGpt<double>::init(c, mesh, {bucket});
        // The analytic count, from the parameters themselves: P tensors, Ψ local values.
        std::size_t params = 0;
        Index psi = 0, psi_padded = 0;
        model.replica().visit_params([&](const nn::ParamInfo&, const nn::TensorMap&, auto& w) {
          ++params;
          psi += w.local().size();
          psi_padded += (w.local().size() + 1) / 2 * 2;
        });
        const auto [x, y] = gt::batch_at(c, gt::kText, 0);
        model.forward_backward(x, y);
        nn::Adam<double> adam(gt::adam_options());
        nn::ShardedAdam<double> zero(gt::adam_options());
        const std::size_t before = led.select().size();
        if (which == Opt::adam) model.step(adam, 1.0);
        else model.step(zero, 1.0);
        std::map<std::string, std::size_t> count;
        std::map<std::string, Index> elements;
        for (const auto& e : led.select()) {
          CHECK((e.axis == "dp" || e.axis == "tp"));  // every collective names its axis
          CHECK(e.group_size == 2);
        }
        const auto all = led.select();
        for (std::size_t i = before; i < all.size(); ++i) {
          const auto& e = all[i];
          const std::string k = std::string(to_string(e.kind)) + "@" + e.axis;
          ++count[k];
          elements[k] += static_cast<Index>(e.elements);
        }
        const std::size_t buckets = bucket == 0 ? params : 1;
        if (which == Opt::adam) {
          CHECK(count["all_reduce@dp"] == buckets);  // one per bucket
          CHECK(elements["all_reduce@dp"] == psi);
          CHECK(count["reduce_scatter@dp"] == 0);
          CHECK(count["all_reduce@tp"] == 1);  // the norm, as Gpt::step
        } else {
          CHECK(count["reduce_scatter@dp"] == buckets);
          CHECK(count["all_gather@dp"] == buckets);
          CHECK(elements["reduce_scatter@dp"] == (bucket == 0 ? psi_padded : (psi + 1) / 2 * 2));
          CHECK(elements["all_gather@dp"] == elements["reduce_scatter@dp"]);
          CHECK(count["all_reduce@dp"] == 1);  // the norm's two values
          CHECK(elements["all_reduce@dp"] == 2);
          CHECK(count["all_reduce@tp"] == 1);
        }
        CHECK(led.count(CollectiveKind::all_reduce, "dp.loss") == 1);  // the loss, in forward_backward
      });
    }
  }
}

TEST_CASE("data parallel: the sharded optimizer's state per rank, measured, is the formula 2·Ψ·8/dp bytes") {
  const auto c = dp_cases::config(false);
  for (int d : {2, 4}) {
    run_ranks(d, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", d}, {"tp", 1}});
      auto model = nn::DataParallelGpt<double>::init(c, mesh, {std::size_t{1} << 30});  // one bucket
      Index psi = 0;
      model.replica().visit_params([&](const nn::ParamInfo&, const nn::TensorMap&, auto& w) { psi += w.local().size(); });
      const auto [x, y] = gt::batch_at(c, gt::kText, 0);
      nn::Adam<double> adam(gt::adam_options());
      nn::ShardedAdam<double> zero(gt::adam_options());
      model.forward_backward(x, y);
      model.step(adam, 1.0);
      model.forward_backward(x, y);
      model.step(zero, 1.0);
      std::size_t adam_bytes = 0;
      for (const auto& [n, mo] : adam.state()) adam_bytes += static_cast<std::size_t>(mo.m.size() + mo.v.size()) * sizeof(double);
      const std::size_t formula = 2 * sizeof(double) * static_cast<std::size_t>((psi + d - 1) / d);
      CHECK(adam_bytes == 2 * sizeof(double) * static_cast<std::size_t>(psi));
      CHECK(zero.state_bytes() == formula);
      if (comm.rank() == 0)
        MESSAGE("dp=", d, ": Ψ=", psi, " values; Adam state ", adam_bytes, " bytes per rank; ZeRO-1 state ",
                zero.state_bytes(), " bytes per rank (formula 2·8·⌈Ψ/dp⌉ = ", formula, ")");
    });
  }
}

TEST_CASE("data parallel: a checkpoint written at one mesh loads at another and training continues the same") {
  const auto c = dp_cases::config(false);
  const auto ref = dp_cases::reference(c, 8);
  // 4 steps at DP=2 × TP=2 with the sharded optimizer, then the state as logical masters.
  nn::Masters weights, moments;
  sharded_steps_then_state(c, {}, weights, moments);
  // Resume at DP=1 × TP=4 (Adam), DP=4 × TP=1 (sharded) and DP=2 × TP=1 (sharded): steps 5–8.
  struct Shape {
    int d, t;
    bool sharded;
  };
  for (Shape s : {Shape{1, 4, false}, Shape{4, 1, true}, Shape{2, 1, true}}) {
    CAPTURE(s.d);
    CAPTURE(s.t);
    std::vector<double> got;
    run_ranks(s.d * s.t, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", s.d}, {"tp", s.t}});
      auto model = nn::DataParallelGpt<double>::init(c, mesh);
      model.load(weights);
      model.replica().set_steps(4);
      nn::Adam<double> adam(gt::adam_options());
      nn::ShardedAdam<double> zero(gt::adam_options());
      if (s.sharded) model.load_optimizer(zero, moments);
      else model.load_optimizer(adam, moments);
      adam.set_step_count(4);
      zero.set_step_count(4);
      std::vector<double> l;
      for (int k = 4; k < 8; ++k) {
        const auto [x, y] = gt::batch_at(c, gt::kText, k);
        l.push_back(model.forward_backward(x, y));
        if (s.sharded) model.step(zero, 1.0);
        else model.step(adam, 1.0);
      }
      if (comm.rank() == 0) got = l;
    });
    REQUIRE(got.size() == 4);
    CHECK(gt::curve_diff(got, std::vector<double>(ref.begin() + 4, ref.end())) <= 1e-12);
  }
}

TEST_CASE("data parallel: bad input is an error naming the values") {
  auto c = dp_cases::config(false);
  run_ranks(4, [&](ThreadComm& comm) {
    Mesh flat(comm, {{"ep", 4}});
    CHECK_THROWS_WITH_AS(nn::DataParallelGpt<double>::init(c, flat),
                         "DataParallelGpt: the mesh ep=4 needs the axes dp and tp", MeshError);
    Mesh three(comm, {{"dp", 2}, {"pp", 2}, {"tp", 1}});
    CHECK_THROWS_WITH_AS(nn::DataParallelGpt<double>::init(c, three),
                         "DataParallelGpt: axis pp of size 2 is not supported (only dp, cp and tp)", MeshError);
    Mesh mesh(comm, {{"dp", 4}, {"tp", 1}});
    auto odd = c;
    odd.batch = 3;
    CHECK_THROWS_WITH_AS(nn::DataParallelGpt<double>::init(odd, mesh),
                         "DataParallelGpt: batch 3 is smaller than the dp size 4 (every replica needs a sequence)",
                         DivisibilityError);
    auto model = nn::DataParallelGpt<double>::init(c, mesh);
    nn::Adam<double> adam;
    CHECK_THROWS_WITH_AS(model.step(adam), "DataParallelGpt: step() without gradients; call forward_backward first",
                         ShapeError);
    const std::vector<std::int64_t> few(10, 1);
    CHECK_THROWS_WITH_AS(model.forward_backward(few, few),
                         "DataParallelGpt: 10 tokens and 10 targets for a global batch of 4 × 16 = 64", ShapeError);
  });
}

TEST_CASE("data parallel: the reduced gradients are the whole batch's (against one rank, <= 1e-13 normwise)") {
  for (bool sp : {false, true}) {
    const auto c = dp_cases::config(sp);
    const auto batch = gt::batch_at(c, gt::kText, 3);  // no structured binding: a lambda captures it (Clang 14)
    const auto& x = batch.first;
    const auto& y = batch.second;
    auto one = nn::Gpt<double>::init(c, SelfComm{});
    one.forward_backward(x, y);
    const auto want = one.grad_masters();
    run_ranks(4, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", 2}, {"tp", 2}});
      auto model = nn::DataParallelGpt<double>::init(c, mesh, {1000});
      model.forward_backward(x, y);
      const auto got = model.grad_masters();
      CHECK(got.size() == want.size());
      // Per tensor, normwise; a tensor whose true gradient is 0 (the key bias: softmax does not see
      // a shift common to a row) holds rounding noise on both sides, so it is held to the scale of
      // the whole gradient instead.
      double total = 0;
      for (const auto& entry : want) total += entry.second.squaredNorm();
      total = std::sqrt(total);
      for (const auto& entry : want) {
        const auto& g = got.at(entry.first);
        CAPTURE(entry.first);
        CHECK((g - entry.second).norm() <= 1e-13 * std::max(entry.second.norm(), 1e-6 * total));
      }
      // The sharded step refuses gradients that were already all-reduced.
      nn::ShardedAdam<double> zero;
      CHECK_THROWS_WITH_AS(model.step(zero),
                           "DataParallelGpt: the gradients are already all-reduced (reduce_gradients); the sharded "
                           "optimizer reduce-scatters them itself: step it before reducing",
                           ShapeError);
    });
  }
}

TEST_CASE("context parallelism: dp × cp × tp meshes train like one rank on the whole batch (10 steps, <= 1e-12), ring and all-to-all, ± SP, ± attention dropout") {
  struct Shape {
    int d, cp, t;
    nn::CpAlgo algo;
    bool sp;
    Opt which;
  };
  const std::vector<Shape> shapes{{1, 2, 2, nn::CpAlgo::ring, false, Opt::adam},       {1, 2, 2, nn::CpAlgo::all_to_all, false, Opt::adam},
                                  {2, 2, 1, nn::CpAlgo::ring, false, Opt::sharded_adam}, {1, 4, 1, nn::CpAlgo::ring, false, Opt::adam},
                                  {1, 2, 2, nn::CpAlgo::ring, true, Opt::adam},        {2, 2, 1, nn::CpAlgo::all_to_all, true, Opt::adam}};
  std::map<bool, std::vector<double>> refs;
  for (bool sp : {false, true}) refs[sp] = dp_cases::reference(dp_cases::config(sp), 10);
  {  // attention dropout as well: the dense mask at every cp (ring and all-to-all)
    auto c = dp_cases::config(false);
    c.attn_dropout = 0.1;
    const auto ref = dp_cases::reference(c, 10);
    for (auto algo : {nn::CpAlgo::ring, nn::CpAlgo::all_to_all}) {
      CAPTURE(static_cast<int>(algo));
      std::vector<double> got;
      std::mutex m;
      run_ranks(4, [&](ThreadComm& comm) {
        Mesh mesh(comm, {{"dp", 1}, {"cp", 2}, {"tp", 2}});
        const auto losses = dp_cases::train(c, mesh, 10, Opt::adam, std::size_t{1} << 16, 1.0, nullptr, algo);
        if (comm.rank() == 0) {
          std::lock_guard lk(m);
          got = losses;
        }
      });
      REQUIRE(got.size() == 10);
      CHECK(gt::curve_diff(got, ref) <= 1e-12);
    }
  }
  for (const auto& s : shapes) {
    CAPTURE(s.d);
    CAPTURE(s.cp);
    CAPTURE(s.t);
    CAPTURE(static_cast<int>(s.algo));
    CAPTURE(s.sp);
    const auto c = dp_cases::config(s.sp);
    std::vector<double> got;
    std::mutex m;
    run_ranks(s.d * s.cp * s.t, [&](ThreadComm& comm) {
      Mesh mesh(comm, {{"dp", s.d}, {"cp", s.cp}, {"tp", s.t}});
      const auto losses = dp_cases::train(c, mesh, 10, s.which, std::size_t{1} << 16, 1.0, nullptr, s.algo);
      if (comm.rank() == 0) {
        std::lock_guard lk(m);
        got = losses;
      }
    });
    REQUIRE(got.size() == 10);
    const double diff = gt::curve_diff(got, refs[s.sp]);
    CHECK(diff <= 1e-12);
    CHECK(got.back() < got.front());
    if (s.d == 1 && s.cp == 2 && s.t == 2 && !s.sp && s.algo == nn::CpAlgo::ring)
      MESSAGE("cp=2 x tp=2 (ring) against one rank, largest relative difference per step: ", diff);
  }
}

TEST_CASE("context parallelism: a sequence that does not split into 2·cp chunks is refused by name") {
  run_ranks(4, [](ThreadComm& comm) {
    Mesh mesh(comm, {{"dp", 1}, {"cp", 4}, {"tp", 1}});
    auto c = dp_cases::config(false);
    c.seq = 12;
    CHECK_THROWS_WITH_AS(nn::DataParallelGpt<double>::init(c, mesh),
                         "context parallelism: sequence length 12 is not divisible by 2·cp = 8 (two chunks per rank, for the causal balance)",
                         DivisibilityError);
  });
}
