// shardalg/nn/optim/grad_buckets.hpp — data-parallel gradient buckets: the parameters packed into
// flat buffers of at most `bucket_elements` values each, so that small gradients travel in one
// collective (PyTorch DDP's and Megatron's buckets), in the order the backward makes them.
//
//   visit order    p0 p1 p2 p3 p4 p5                  (embedding, block 0, …, the final norm)
//   plan           [p4 p5] = 0 | [p3] = 1 | [p0 p1 p2] = 2
//                  greedy from the last parameter back: the backward hands gradients over in about
//                  the reverse of the visit order (the final norm's first, the embedding's last), so
//                  bucket 0 fills first and is reduced while the backward goes on; a parameter larger
//                  than a bucket gets one of its own; 0 elements: one per parameter; with units
//                  (ZeRO-3: the embedding, each block, the final norm) a bucket never spans two, so a
//                  unit's parameters are gathered by its own buckets
//   bucket b       dG_b[dp:Partial] (1 × n_b, this tensor-parallel rank's local blocks side by side,
//                  in visit order)
//                  all_reduce<dp>               → dG_b[dp:R]     (one all_reduce per bucket)
//                  reduce_scatter<dp, C>        → dG_b[dp:C]     (ZeRO-1: nn/optim/sharded_adam.hpp)
//
// A bucket is a one-axis tensor on dp: its columns are this rank's local blocks of tensors that
// live on tp, so its values are the same kind of thing on every rank of a dp group (one tp rank's
// shards), and the per-parameter type is restored on the way out:
//   G[dp:Partial, tp:L] → bucket → … → G[dp:R, tp:L].
// For ZeRO each bucket is padded with zeros to a multiple of the dp size (at most dp − 1 values).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "shardalg/mesh/collectives.hpp"
#include "shardalg/nn/optim/optim.hpp"

namespace shardalg::nn {

/// One parameter's place in the flat buffers, and what the gradient norm needs of it.
struct BucketSlot {
  std::string name;
  std::size_t bucket = 0;
  Index offset = 0;  // within its bucket
  Index rows = 0, cols = 0;  // its local block
  Index col0 = 0;            // the global column of the local block's first column (col_weight)
  bool replicated = false;   // R on tp: every tp rank holds it whole (counted once in the norm)
  bool decay = false;
  std::function<double(Index)> col_weight;
  std::size_t unit = 0;  // the unit it belongs to (what ZeRO-3 gathers together); all 0: no units
  [[nodiscard]] Index size() const { return rows * cols; }
};

struct BucketPlan {
  std::vector<BucketSlot> slots;         // in visit order; a bucket's slots are consecutive
  std::vector<Index> elements;           // per bucket: the values it carries
  std::vector<Index> padded;             // per bucket: rounded up to a multiple of `pad_to`
  std::vector<std::size_t> units;        // per bucket: the unit of its parameters
  std::size_t bucket_elements = 0;
  int pad_to = 1;

  /// The plan of `visit` (the parameters in visit order): packed greedily from the last parameter
  /// back, at most `cap` values a bucket (0: one bucket per parameter), each padded to a multiple
  /// of `pad_to`; within a bucket its parameters lie in visit order. A parameter of another unit
  /// than the open bucket's starts a new bucket.
  static BucketPlan backward_order(std::vector<BucketSlot> visit, std::size_t cap, int pad_to) {
    BucketPlan p;
    p.bucket_elements = cap;
    p.pad_to = pad_to;
    for (std::size_t i = visit.size(); i-- > 0;) {
      const Index n = visit[i].size();
      const bool open = !p.elements.empty() && cap > 0 && static_cast<std::size_t>(p.elements.back() + n) <= cap &&
                        p.units.back() == visit[i].unit;
      if (!open) {
        p.elements.push_back(0);
        p.units.push_back(visit[i].unit);
      }
      visit[i].bucket = p.elements.size() - 1;
      p.elements.back() += n;
    }
    std::vector<Index> next(p.elements.size(), 0);
    for (auto& s : visit) {
      s.offset = next[s.bucket];
      next[s.bucket] += s.size();
    }
    for (Index e : p.elements) p.padded.push_back((e + pad_to - 1) / pad_to * pad_to);
    p.slots = std::move(visit);
    return p;
  }

  [[nodiscard]] std::size_t buckets() const { return elements.size(); }
  /// Σ local parameter values (Ψ of this tensor-parallel rank).
  [[nodiscard]] Index parameters() const {
    Index n = 0;
    for (Index e : elements) n += e;
    return n;
  }
};

/// The global gradient norm from this rank's ZeRO slices G_b[dp:C] (`gslice[b]`, bucket b's
/// columns [r·n_b/D, (r + 1)·n_b/D)): √(Σ_tp Σ_dp sharded + Σ_dp replicated), each value weighted
/// by its slot's col_weight. One all_reduce of two values on `data`, one of one value on `tp`; with
/// `outer` (parameters split over it as well: the pipeline's stages) one more of one value. The
/// caller opens the ledger scope ("grad_norm").
template <class Mat>
double sliced_grad_norm(const BucketPlan& plan, const std::vector<Mat>& gslice, const Group& data, const Group& tp,
                        const Group* outer = nullptr) {
  const int d = data.size(), r = data.rank();
  double acc[2] = {0, 0};  // sharded, replicated
  for (const auto& s : plan.slots) {
    const Index len = plan.padded[s.bucket] / d, lo = r * len;
    const Index a = std::max(lo, s.offset), e = std::min(lo + len, s.offset + s.size());
    for (Index i = a; i < e; ++i) {
      const double x = static_cast<double>(gslice[s.bucket].data()[i - lo]);
      const Index col = s.col0 + (i - s.offset) % s.cols;
      acc[s.replicated ? 1 : 0] += (s.col_weight ? s.col_weight(col) : 1.0) * x * x;
    }
  }
  if (d > 1) {
    Group g = data;
    g.all_reduce(acc, 2, ReduceOp::sum, CallInfo{"Partial", "R"});
  }
  if (tp.size() > 1) {
    Group t = tp;
    t.all_reduce(acc, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
  }
  double s = acc[0] + acc[1];
  if (outer && outer->size() > 1) {
    Group o = *outer;
    o.all_reduce(&s, 1, ReduceOp::sum, CallInfo{"Partial", "R"});
  }
  return std::sqrt(s);
}

/// The slot of a parameter: its local shape, where it starts, and its norm weights.
template <class T, class L, class B>
BucketSlot slot_of(const ParamInfo& info, const Sharded<T, L, B>& w) {
  return BucketSlot{info.name, 0, 0, w.local_rows(), w.local_cols(), w.col_offset(),
                    WholeLayout<L>, info.decay, info.col_weight, 0};
}

/// Copy a local block into its place in a flat bucket, and back out.
template <class M, class F>
void pack(const M& local, const BucketSlot& s, F& flat) {
  std::copy_n(local.data(), s.size(), flat.data() + s.offset);
}
template <class M, class F>
void unpack(const F& flat, const BucketSlot& s, M& local) {
  std::copy_n(flat.data() + s.offset, s.size(), local.data());
}

}  // namespace shardalg::nn
