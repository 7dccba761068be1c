// shardalg/verify/compare.hpp — another framework's sharded run against its one-rank reference,
// tensor by tensor, with a diagnosis in layout terms where they differ.
//
// For each tensor of the reference (forward tensors in their written order, then the gradients,
// `LayoutMap::grad_suffix`), every rank's copy is fetched and the mesh's axes are folded from the
// fastest to the slowest, each by the tensor's layout on it (layout_map.hpp):
//   R, I, Partial→R   the ranks of the axis must agree (within the tolerance); the first is kept
//   Shard(d)          the blocks are concatenated along d (blocks of any size: uneven is fine)
//   Partial           the blocks are summed
// and the result is compared with the reference: ‖x − ref‖ / ‖ref‖ ≤ tol. A tensor passes when
// the replicas agreed and the error is within the tolerance.
//
// Where it does not, each rule below is tried in turn on the evidence, and the ones that hold are
// reported (compare.md in docs/ lists them with their rules):
//   partial-not-reduced  ranks disagree on an R tensor, and folding that axis as Partial (the sum)
//                        matches the reference: an all_reduce is missing
//   rank-differs         one rank alone differs from the others, which agree with the reference
//   replicas-disagree    ranks disagree on an R tensor, no rule above explains it
//   not-split            every block of a Shard axis is the same, or a rank holds the whole
//                        dimension: replicated where a split was declared
//   rank-order           each block matches a block of the reference, in another rank order
//   reduced-twice        x = n · ref, n the size of an axis (or of the whole mesh)
//   scaled-down          x = ref / n: divided by an axis's size once too often (a loss scaled twice)
//   scaled               x = s · ref for another s
//   bias-before-reduce   every row of x − ref is the same vector; named further when that vector
//                        is (n − 1) times a bias of the same module in the reference
//   boundary             along a Shard dimension, only the first or the last rank's rows are off,
//                        or only rows next to a boundary between ranks (a halo)
//   shape, missing       a rank lacks the tensor, or the shapes cannot be what the layout says
//   mismatch             none of the above: the values differ
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardalg/verify/layout_map.hpp"
#include "shardalg/verify/safetensors.hpp"

namespace shardalg::verify {

/// A whole or partial tensor as doubles, row-major.
struct DenseTensor {
  std::vector<std::int64_t> shape;
  std::vector<double> v;
};

/// What one rank (or the reference) dumped: the names in written order and a way to fetch one.
struct Dump {
  std::vector<std::string> names;
  std::function<std::optional<DenseTensor>(const std::string&)> get;
  double tol = 1e-12;  // the default tolerance its element type suggests
};

struct Diagnosis {
  std::string code;  // one of the rule names in the file comment
  std::string text;  // what it means and its evidence, in layout terms
};

struct TensorReport {
  std::string name;
  bool backward = false;
  std::string layout;  // "tp:Shard(0)" …
  std::vector<std::int64_t> shape;
  double rel_error = std::numeric_limits<double>::quiet_NaN();
  double replica_spread = 0;  // the largest ‖copy − first‖ / ‖first‖ over R/I axes
  bool pass = false;
  std::vector<Diagnosis> diagnoses;
};

struct CompareReport {
  std::vector<TensorReport> tensors;
  std::vector<std::string> only_in_ranks;  // dumped by a rank, absent from the reference
  double tol = 0;
  bool pass = true;
  std::optional<std::size_t> first_divergence;
};

/// The tolerance a dump's element type suggests until bounds are derived from its rounding:
/// normwise relative, F64 1e-12, F32 1e-5, F16 2e-3, BF16 2e-2, integers exact.
inline double default_tolerance(StDtype d) {
  switch (d) {
    case StDtype::F64: return 1e-12;
    case StDtype::F32: return 1e-5;
    case StDtype::F16: return 2e-3;
    case StDtype::BF16: return 2e-2;
    default: return 0;
  }
}

/// A mapped safetensors file as a Dump (the file must outlive it); its tolerance is its loosest
/// element type's.
inline Dump dump_of(const SafetensorsFile& f) {
  Dump d;
  d.tol = 0;
  for (const auto& t : f.tensors()) {
    d.names.push_back(t.name);
    d.tol = std::max(d.tol, default_tolerance(t.dtype));
  }
  d.get = [&f](const std::string& name) -> std::optional<DenseTensor> {
    const auto* t = f.find(name);
    if (!t) return std::nullopt;
    return DenseTensor{t->shape, t->to_double()};
  };
  return d;
}

namespace detail {

inline double norm(const std::vector<double>& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}
inline double diff_norm(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}
/// ‖a − b‖ / ‖b‖ (absolute where b is zero); infinity for different shapes.
inline double rel_err(const DenseTensor& a, const DenseTensor& b) {
  if (a.shape != b.shape) return std::numeric_limits<double>::infinity();
  const double d = diff_norm(a.v, b.v), n = norm(b.v);
  return n > 0 ? d / n : d;
}
inline std::int64_t numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
inline int real_dim(int d, std::size_t rank) { return d < 0 ? d + static_cast<int>(rank) : d; }

/// Blocks concatenated along `dim` (the other dimensions must agree: else nothing).
inline std::optional<DenseTensor> concat(const std::vector<DenseTensor>& parts, int dim) {
  DenseTensor out;
  out.shape = parts[0].shape;
  if (dim < 0 || dim >= static_cast<int>(out.shape.size())) return std::nullopt;
  std::int64_t total = 0;
  for (const auto& p : parts) {
    if (p.shape.size() != out.shape.size()) return std::nullopt;
    for (std::size_t k = 0; k < p.shape.size(); ++k)
      if (static_cast<int>(k) != dim && p.shape[k] != out.shape[k]) return std::nullopt;
    total += p.shape[dim];
  }
  out.shape[dim] = total;
  std::int64_t outer = 1, inner = 1;
  for (int k = 0; k < dim; ++k) outer *= out.shape[k];
  for (std::size_t k = dim + 1; k < out.shape.size(); ++k) inner *= out.shape[k];
  out.v.reserve(static_cast<std::size_t>(numel(out.shape)));
  for (std::int64_t o = 0; o < outer; ++o)
    for (const auto& p : parts) {
      const std::int64_t len = p.shape[dim] * inner;
      out.v.insert(out.v.end(), p.v.begin() + o * len, p.v.begin() + (o + 1) * len);
    }
  return out;
}

/// The slice [lo, hi) of `t` along `dim`.
inline DenseTensor slice(const DenseTensor& t, int dim, std::int64_t lo, std::int64_t hi) {
  DenseTensor out;
  out.shape = t.shape;
  out.shape[dim] = hi - lo;
  std::int64_t outer = 1, inner = 1;
  for (int k = 0; k < dim; ++k) outer *= t.shape[k];
  for (std::size_t k = dim + 1; k < t.shape.size(); ++k) inner *= t.shape[k];
  for (std::int64_t o = 0; o < outer; ++o) {
    const auto base = t.v.begin() + (o * t.shape[dim] + lo) * inner;
    out.v.insert(out.v.end(), base, base + (hi - lo) * inner);
  }
  return out;
}

/// What folding the axes found, beside the folded tensor.
struct Folded {
  std::optional<DenseTensor> x;  // nothing when the shapes did not fit the layout
  double spread = 0;
  struct Disagreement {
    std::size_t axis;
    std::vector<int> off;       // members (axis coordinates) that differ from member 0
    int lone = -1;              // the one member that differs from all the others (which agree), if any
  };
  std::optional<Disagreement> disagree;
  std::optional<std::size_t> all_equal_shards;  // a Shard axis whose blocks are all the same
  std::string shape_problem;
};

/// Folds `parts` (one per rank, row-major over the mesh) by `layouts`, optionally reading axis
/// `as_partial` as Partial (a hypothesis).
inline Folded fold(const LayoutMap& map, std::vector<DenseTensor> parts, const std::vector<AxisLayout>& layouts, double tol,
                   std::optional<std::size_t> as_partial = std::nullopt) {
  Folded f;
  std::vector<int> sizes;
  for (const auto& a : map.mesh) sizes.push_back(a.second);
  for (std::size_t ax = map.mesh.size(); ax-- > 0;) {
    const int n = sizes[ax];
    AxisLayout l = layouts[ax];
    if (as_partial && *as_partial == ax) l = {AxisLayout::Partial, 0};
    std::vector<DenseTensor> next;
    for (std::size_t g = 0; g < parts.size(); g += n) {
      std::vector<DenseTensor> m(parts.begin() + g, parts.begin() + g + n);
      for (int k = 1; k < n; ++k)
        if (l.kind != AxisLayout::Shard && m[k].shape != m[0].shape) {
          f.shape_problem = cat("the ranks of axis ", map.mesh[ax].first, " hold shapes ", shape_text(m[0].shape), " and ",
                                shape_text(m[k].shape), " of a tensor declared ", layout_text(l), " on it");
          return f;
        }
      if (l.kind == AxisLayout::Shard) {
        const int d = real_dim(l.dim, m[0].shape.size());
        if (n > 1) {
          bool same = true;
          for (int k = 1; k < n && same; ++k) same = m[k].shape == m[0].shape && m[k].v == m[0].v;
          if (same && norm(m[0].v) > 0) f.all_equal_shards = ax;
        }
        auto c = (d >= 0 && d < static_cast<int>(m[0].shape.size())) ? concat(m, d) : std::nullopt;
        if (!c) {
          f.shape_problem = cat("the blocks of axis ", map.mesh[ax].first, " (", shape_text(m[0].shape),
                                " on its first rank) cannot be joined along dimension ", l.dim);
          return f;
        }
        next.push_back(std::move(*c));
      } else if (l.kind == AxisLayout::Partial) {
        DenseTensor s = m[0];
        for (int k = 1; k < n; ++k)
          for (std::size_t i = 0; i < s.v.size(); ++i) s.v[i] += m[k].v[i];
        next.push_back(std::move(s));
      } else {
        std::vector<int> off;
        const double n0 = norm(m[0].v);
        for (int k = 1; k < n; ++k) {
          const double d = diff_norm(m[k].v, m[0].v);
          const double rel = n0 > 0 ? d / n0 : d;
          f.spread = std::max(f.spread, rel);
          if (rel > tol) off.push_back(k);
        }
        if (!off.empty() && !f.disagree) {
          Folded::Disagreement dis{ax, off, -1};
          if (off.size() == 1 && off[0] != 0) dis.lone = off[0];
          if (n > 2 && off.size() == static_cast<std::size_t>(n - 1)) {  // member 0 alone may be the odd one
            bool rest_agree = true;
            const double n1 = norm(m[1].v);
            for (int k = 2; k < n && rest_agree; ++k) rest_agree = diff_norm(m[k].v, m[1].v) <= tol * std::max(n1, 1e-300);
            if (rest_agree) dis.lone = 0;
          }
          f.disagree = dis;
        }
        next.push_back(std::move(m[0]));
      }
    }
    parts = std::move(next);
  }
  f.x = std::move(parts[0]);
  return f;
}

inline std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

/// The module of an activation name: "a.b.output" → "a.b" (nothing when it is not `<m>.output`).
inline std::optional<std::string> module_of(const std::string& name) {
  const std::string suffix = ".output";
  if (name.size() > suffix.size() && name.ends_with(suffix)) return name.substr(0, name.size() - suffix.size());
  return std::nullopt;
}

}  // namespace detail

/// Compares every rank's dump with the reference under `map`; `tol` ≤ 0 takes the dumps' default
/// (the loosest of their element types').
inline CompareReport compare_dumps(const LayoutMap& map, const std::vector<Dump>& ranks, const Dump& reference, double tol = 0) {
  using detail::cat;
  using detail::num;
  CompareReport rep;
  if (static_cast<int>(ranks.size()) != map.ranks())
    throw LayoutMapError(cat(ranks.size(), " rank dumps for a mesh of ", map.ranks(), " ranks"));
  if (tol <= 0) {
    tol = reference.tol;
    for (const auto& r : ranks) tol = std::max(tol, r.tol);
  }
  rep.tol = tol;
  std::vector<std::string> order;
  for (const auto& n : reference.names)
    if (!map.is_grad(n)) order.push_back(n);
  for (const auto& n : reference.names)
    if (map.is_grad(n)) order.push_back(n);
  for (const auto& r : ranks)
    for (const auto& n : r.names)
      if (std::find(reference.names.begin(), reference.names.end(), n) == reference.names.end() &&
          std::find(rep.only_in_ranks.begin(), rep.only_in_ranks.end(), n) == rep.only_in_ranks.end())
        rep.only_in_ranks.push_back(n);

  for (const auto& name : order) {
    TensorReport t;
    t.name = name;
    t.backward = map.is_grad(name);
    const auto layouts = map.layout_of(name);
    t.layout = map.layout_text_of(name);
    const DenseTensor ref = *reference.get(name);
    t.shape = ref.shape;
    auto say = [&](std::string code, std::string text) { t.diagnoses.push_back({std::move(code), std::move(text)}); };
    std::vector<DenseTensor> parts;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      auto p = ranks[r].get(name);
      if (!p) {
        say("missing", cat("rank ", r, " did not dump it"));
        break;
      }
      parts.push_back(std::move(*p));
    }
    if (parts.size() != ranks.size()) {
      rep.tensors.push_back(std::move(t));
      continue;
    }
    // A rank that holds the whole dimension a Shard axis splits: not split.
    for (std::size_t ax = 0; ax < map.mesh.size(); ++ax) {
      const auto l = layouts[ax];
      if (l.kind != AxisLayout::Shard || map.mesh[ax].second == 1) continue;
      const int d = detail::real_dim(l.dim, ref.shape.size());
      if (d < 0 || d >= static_cast<int>(ref.shape.size()) || ref.shape[d] == 0) continue;
      bool whole = true;  // every rank holds the whole dimension (uneven blocks may leave one rank all of it)
      for (const auto& p : parts) whole = whole && p.shape.size() == ref.shape.size() && p.shape[d] == ref.shape[d];
      if (whole)
        say("not-split", cat("rank 0 holds the whole of dimension ", d, " (", shape_text(parts[0].shape), ", the reference is ",
                             shape_text(ref.shape), ") where Shard(", l.dim, ") over ", map.mesh[ax].first,
                             " was declared: replicated where a split was declared (the input not split?)"));
    }
    const auto f = detail::fold(map, parts, layouts, tol);
    t.replica_spread = f.spread;
    if (!f.x) {
      say("shape", f.shape_problem);
      rep.tensors.push_back(std::move(t));
      continue;
    }
    const DenseTensor& x = *f.x;
    t.rel_error = detail::rel_err(x, ref);
    t.pass = t.rel_error <= tol && !f.disagree && t.diagnoses.empty();
    if (!t.pass) {
      if (x.shape != ref.shape && t.diagnoses.empty())
        say("shape", cat("reassembled by its layout it is ", shape_text(x.shape), ", the reference ", shape_text(ref.shape)));
      if (f.disagree) {
        const auto& d = *f.disagree;
        const std::string axis = map.mesh[d.axis].first;
        const auto as_sum = detail::fold(map, parts, layouts, tol, d.axis);
        const double sum_err = as_sum.x ? detail::rel_err(*as_sum.x, ref) : std::numeric_limits<double>::infinity();
        if (sum_err <= tol) {
          say("partial-not-reduced",
              cat("a Partial never reduced over ", axis, ": the ranks' copies differ (spread ", num(f.spread), ") and their sum equals the reference (error ",
                  num(sum_err), "); declared ", layout_text(layouts[d.axis]), ", so its all_reduce over ", axis, " is missing"));
        } else if (d.lone >= 0) {
          say("rank-differs", cat("rank ", d.lone, " of axis ", axis, " alone differs from the others, which agree: an all_reduce missing on rank ",
                                  d.lone, ", or a value computed from rank-local data (a dropout mask or a seed not shared)"));
        } else {
          std::string who;
          for (int k : d.off) who += (who.empty() ? "" : ", ") + std::to_string(k);
          say("replicas-disagree", cat("ranks ", who, " of axis ", axis, " differ from rank 0 on a tensor declared ",
                                       layout_text(layouts[d.axis]), " (spread ", num(f.spread), "); their sum is not the reference either"));
        }
      }
      if (f.all_equal_shards && x.shape == ref.shape && t.rel_error > tol)
        say("not-split", cat("every block over ", map.mesh[*f.all_equal_shards].first, " equals block 0: replicated where ",
                             layout_text(layouts[*f.all_equal_shards]), " was declared (the input not split?)"));
      if (x.shape == ref.shape && t.rel_error > tol && !f.disagree) {  // (where ranks disagree, x is one copy of many)
        // x = s · ref?
        double xr = 0, rr = 0;
        for (std::size_t i = 0; i < x.v.size(); ++i) {
          xr += x.v[i] * ref.v[i];
          rr += ref.v[i] * ref.v[i];
        }
        bool scaled = false;
        if (rr > 0) {
          const double s = xr / rr;
          double res = 0;
          for (std::size_t i = 0; i < x.v.size(); ++i) res += (x.v[i] - s * ref.v[i]) * (x.v[i] - s * ref.v[i]);
          const double xn = detail::norm(x.v);
          if (std::sqrt(res) <= tol * std::max(xn, 1e-300) && std::abs(s - 1) > tol) {
            scaled = true;
            std::vector<std::pair<std::string, int>> sizes = map.mesh;
            if (map.mesh.size() > 1) sizes.emplace_back("the whole mesh", map.ranks());
            const double close = std::max(10 * tol, 1e-9);
            bool named = false;
            for (const auto& [axis, n] : sizes) {
              if (n < 2 || named) continue;
              if (std::abs(s / n - 1) <= close) {
                say("reduced-twice", cat(num(s), " × the reference (", axis, " has ", n, " ranks): summed over ", axis,
                                         " once more than its layout allows (an all_reduce of a tensor already R, or a Partial reduced twice)"));
                named = true;
              } else if (std::abs(s * n - 1) <= close) {
                say("scaled-down", cat("1/", n, " of the reference (factor ", num(s), "; ", axis, " has ", n, " ranks): divided by the size of ", axis,
                                       " once too often (a loss scaled by 1/", n, " twice?)"));
                named = true;
              }
            }
            if (!named) say("scaled", cat(num(s), " × the reference: a scale factor is wrong"));
          }
        }
        // every row of x − ref the same vector?
        if (!scaled && x.shape.size() >= 2) {
          const std::int64_t cols = x.shape.back(), rows = detail::numel(x.shape) / std::max<std::int64_t>(cols, 1);
          if (rows > 1 && cols > 0) {
            std::vector<double> mean(static_cast<std::size_t>(cols), 0.0);
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t c = 0; c < cols; ++c) mean[c] += (x.v[r * cols + c] - ref.v[r * cols + c]) / static_cast<double>(rows);
            double res = 0;
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t c = 0; c < cols; ++c) {
                const double e = x.v[r * cols + c] - ref.v[r * cols + c] - mean[c];
                res += e * e;
              }
            const double rn = detail::norm(ref.v), mn = detail::norm(mean);
            if (std::sqrt(res) <= tol * std::max(rn, 1e-300) && mn > tol * std::max(rn, 1e-300) / std::sqrt(double(rows))) {
              std::string more;
              if (const auto mod = detail::module_of(name)) {
                const auto bias = reference.get(*mod + ".bias");
                if (bias && bias->v.size() == mean.size()) {
                  double bb = 0, mb = 0;
                  for (std::size_t c = 0; c < mean.size(); ++c) {
                    bb += bias->v[c] * bias->v[c];
                    mb += mean[c] * bias->v[c];
                  }
                  const double k = bb > 0 ? mb / bb : 0;
                  for (const auto& [axis, n] : map.mesh)
                    if (n > 1 && std::abs(k - (n - 1)) <= 1e-3 * n)
                      more = cat(": the offset is ", num(k), " = (", n, " − 1) × '", *mod, ".bias', the bias added on every rank of ", axis,
                                 " before the all_reduce (it belongs after it, once)");
                }
              }
              say("bias-before-reduce",
                  cat("every row is off by the same vector (norm ", num(mn), "): a vector added too often, as a bias added before the reduction", more));
            }
          }
        }
        // along a Shard dimension: only the first/last rank's rows, or rows at a boundary?
        for (std::size_t ax = 0; ax < map.mesh.size() && t.diagnoses.empty(); ++ax) {
          const auto l = layouts[ax];
          const int n = map.mesh[ax].second;
          if (l.kind != AxisLayout::Shard || n < 2) continue;
          const int d = detail::real_dim(l.dim, x.shape.size());
          const std::int64_t len = x.shape[d];
          if (map.mesh.size() != 1) continue;  // the blocks' edges are known exactly on one axis
          std::vector<std::int64_t> edges{0};
          for (int k = 0; k < n; ++k) edges.push_back(edges.back() + parts[k].shape[d]);
          if (edges.back() != len) continue;
          std::vector<std::int64_t> bad;
          const double rn = detail::norm(ref.v);
          for (std::int64_t i = 0; i < len; ++i) {
            const auto xs = detail::slice(x, d, i, i + 1), rs = detail::slice(ref, d, i, i + 1);
            if (detail::diff_norm(xs.v, rs.v) > tol * std::max(rn, 1e-300) / std::sqrt(double(len))) bad.push_back(i);
          }
          if (bad.empty()) continue;
          auto block_of = [&](std::int64_t i) {
            int k = 0;
            while (edges[k + 1] <= i) ++k;
            return k;
          };
          const int b0 = block_of(bad.front()), b1 = block_of(bad.back());
          const std::string rows = cat(bad.size(), " of ", len, " indices of dimension ", d);
          if (b0 == b1 && (b0 == 0 || b0 == n - 1) && static_cast<std::int64_t>(bad.size()) < len) {
            say("boundary", cat("only rank ", b0, "'s block (the ", b0 == 0 ? "first" : "last", ") is off: ", rows,
                                ": a boundary condition at the ", b0 == 0 ? "start" : "end", " of the split dimension"));
          } else {
            bool near_edge = true;
            for (auto i : bad) {
              bool ok = false;
              for (int k = 1; k < n; ++k) {
                const std::int64_t width = std::max<std::int64_t>(1, (edges[k] - edges[k - 1]) / 4);
                if (i >= edges[k] - width && i < edges[k] + width) ok = true;
              }
              near_edge = near_edge && ok;
            }
            if (near_edge)
              say("boundary", cat("only indices next to the boundaries between ranks are off (", rows,
                                  "): a halo exchange or a boundary condition between blocks"));
          }
        }
        // each block matches a reference block in another order?
        if (map.mesh.size() == 1 && t.diagnoses.empty() && layouts[0].kind == AxisLayout::Shard && map.mesh[0].second > 1) {
          const int n = map.mesh[0].second;
          const int d = detail::real_dim(layouts[0].dim, ref.shape.size());
          std::vector<int> holds;
          std::int64_t at = 0;
          std::vector<std::int64_t> starts;
          for (int k = 0; k < n; ++k) {
            starts.push_back(at);
            at += parts[k].shape[d];
          }
          for (int k = 0; k < n; ++k) {
            int found = -1;
            for (int j = 0; j < n && found < 0; ++j) {
              if (parts[j].shape[d] != parts[k].shape[d]) continue;
              const auto blk = detail::slice(ref, d, starts[j], starts[j] + parts[k].shape[d]);
              if (detail::rel_err(parts[k], blk) <= tol) found = j;
            }
            holds.push_back(found);
          }
          const bool all = std::find(holds.begin(), holds.end(), -1) == holds.end();
          if (all) {
            std::string m;
            for (int k = 0; k < n; ++k)
              if (holds[k] != k) m += cat(m.empty() ? "" : ", ", "rank ", k, " holds block ", holds[k]);
            say("rank-order", cat("each rank's block is a block of the reference, in another order (", m,
                                  "): the ranks of ", map.mesh[0].first, " are ordered differently from the layout's"));
          }
        }
      }
      if (t.diagnoses.empty() && t.rel_error > tol)
        say("mismatch", cat("differs from the reference (error ", num(t.rel_error), " > ", num(tol), "); no layout rule explains it"));
    }
    rep.tensors.push_back(std::move(t));
  }
  for (std::size_t i = 0; i < rep.tensors.size(); ++i)
    if (!rep.tensors[i].pass) {
      rep.pass = false;
      if (!rep.first_divergence) rep.first_divergence = i;
    }
  return rep;
}

}  // namespace shardalg::verify
