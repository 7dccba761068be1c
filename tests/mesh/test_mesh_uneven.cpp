// Meshes on shapes that do not divide: a split on an inner axis takes its balanced block of the
// block the outer axes leave (MeshSharded::nested_block). Checked against blocks dealt out
// independently here (n items dealt one at a time to the ranks of an axis, the first n mod P
// getting one more), on 2 × 3 and 3 × 2 meshes: the local blocks, to_dense, the collectives on
// one axis (value, ledger element counts), and the product X[dp:Row, tp:R] · W[dp:R, tp:C]; a ZeRO-3
// parameter W[tp:L, dp:Row] (nn::FullyShardedParam): its rows, unshard and the gradient's reduce-scatter.
#include <doctest/doctest.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <shardalg/nn/models/zero3.hpp>
#include <shardalg/shardalg.hpp>

#include "testing.hpp"

using namespace shardalg;
using V = std::int64_t;
using Mat = CpuBackend::matrix<V>;

namespace {

/// Rank r's (offset, size) of n on p ranks, dealt one at a time.
std::pair<Index, Index> dealt(Index n, int p, int r) {
  std::vector<Index> size(static_cast<std::size_t>(p), 0);
  for (Index i = 0; i < n; ++i) ++size[static_cast<std::size_t>(i % p)];
  Index off = 0;
  for (int s = 0; s < r; ++s) off += size[static_cast<std::size_t>(s)];
  return {off, size[static_cast<std::size_t>(r)]};
}

/// Every failure as text, collected over the ranks.
struct Fails {
  std::mutex m;
  std::vector<std::string> all;
  void add(const std::string& s) {
    std::lock_guard lock(m);
    all.push_back(s);
  }
};

void run(int d, int t, Index rows, Index cols, Fails& fails) {
  const Mat X = testing::random_int<V>(rows, cols, 41);
  const Mat W = testing::random_int<V>(cols, 4, 42);
  const std::string where = " on dp " + std::to_string(d) + " × tp " + std::to_string(t) + ", " + std::to_string(rows) +
                            "x" + std::to_string(cols);
  run_ranks(d * t, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(Group(comm), ledger), {{"dp", d}, {"tp", t}});
    const int dr = mesh.coord("dp"), tr = mesh.coord("tp");
    // X[dp:Row, tp:Row]: tp's block of dp's block.
    const auto x = shard<Axes<On<dp, RowSharded>, On<tp, RowSharded>>>(X, mesh);
    const auto [o1, n1] = dealt(rows, d, dr);
    const auto [o2, n2] = dealt(n1, t, tr);
    if (x.local() != X.middleRows(o1 + o2, n2) || x.row_offset() != o1 + o2) fails.add("nested Row block" + where);
    if (to_dense(x) != X) fails.add("to_dense of [dp:Row, tp:Row]" + where);
    ledger.clear();
    const auto g1 = all_gather<tp>(x);  // → [dp:Row, tp:R]: dp's block, whole
    if (g1.local() != X.middleRows(o1, n1)) fails.add("all_gather<tp> gives dp's block" + where);
    if (ledger.entries().size() != 1 || ledger.entries()[0].elements != static_cast<std::size_t>(n1 * cols))
      fails.add("all_gather<tp>'s ledger is one gather of dp's block" + where);
    const auto g2 = all_gather<dp>(g1);
    if (g2.local() != X) fails.add("all_gather<dp> after <tp> gives X" + where);
    // X[dp:Row, tp:C]: rows by dp, columns by tp; the product with W[dp:R, tp:C]ᵀ-free form below.
    const auto xc = shard<Axes<On<dp, RowSharded>, On<tp, ColSharded>>>(X, mesh);
    const auto [c0, cn] = dealt(cols, t, tr);
    if (xc.local() != X.block(o1, c0, n1, cn)) fails.add("[dp:Row, tp:C] block" + where);
    // reduce_scatter<tp, C> of a Partial on tp: each rank of tp holds X on coordinate 0 only.
    const auto xp = shard<Axes<On<dp, RowSharded>, On<tp, Partial>>>(X, mesh);
    ledger.clear();
    const auto rs = reduce_scatter<tp, ColSharded>(xp);
    if (rs.local() != X.block(o1, c0, n1, cn)) fails.add("reduce_scatter<tp, C> value" + where);
    if (ledger.entries().size() != 1 || ledger.entries()[0].elements != static_cast<std::size_t>(n1 * cols))
      fails.add("reduce_scatter<tp>'s ledger is one of dp's block" + where);
    // Y[dp:Row, tp:C] = X[dp:Row, tp:R] · W[dp:R, tp:C], columns of W (4) on tp.
    const auto w = shard<Axes<On<dp, Replicated>, On<tp, ColSharded>>>(W, mesh);
    const auto y = matmul(g1, w);
    if (to_dense(y) != Mat(X * W)) fails.add("matmul [dp:Row, tp:R] · [dp:R, tp:C]" + where);
  });
}

/// nn::FullyShardedParam<V, L> of a rows × cols weight: rank (d, t) keeps the rows dealt to d of
/// tp rank t's block; unshard gives the block back with one all_gather on dp; reduce_scatter_grad
/// of each replica's summand gives rank d's rows of the block of the sum.
template <class L>
void run_fully_sharded(int d, int t, Index rows, Index cols, Fails& fails) {
  const Mat W = testing::random_int<V>(rows, cols, 43);
  std::vector<Mat> G;  // replica k's gradient summand
  for (int k = 0; k < d; ++k) G.push_back(testing::random_int<V>(rows, cols, 50 + static_cast<unsigned>(k)));
  const std::string where = std::string(" [tp:") + std::string(L::name) + ", dp:Row] on dp " + std::to_string(d) +
                            " × tp " + std::to_string(t) + ", " + std::to_string(rows) + "x" + std::to_string(cols);
  run_ranks(d * t, [&](ThreadComm& comm) {
    Ledger ledger;
    Mesh mesh(ledgered(Group(comm), ledger), {{"dp", d}, {"tp", t}});
    const int dr = mesh.coord("dp"), tr = mesh.coord("tp");
    // The tp block, dealt here: columns for C, rows for Row.
    const bool by_rows = std::is_same_v<L, RowSharded>;
    const auto [bo, bn] = dealt(by_rows ? rows : cols, t, tr);
    const Mat block = by_rows ? Mat(W.middleRows(bo, bn)) : Mat(W.middleCols(bo, bn));
    const auto [ro, rn] = dealt(block.rows(), d, dr);
    const auto w = view<tp>(shard<Axes<On<dp, Replicated>, On<tp, L>>>(W, mesh));  // W[tp:L] on every replica
    ledger.clear();
    const auto p = nn::FullyShardedParam<V, L>::shard(w, mesh.group("dp"));
    if (!ledger.entries().empty()) fails.add("shard moves nothing" + where);
    if (p.sharded().local() != block.middleRows(ro, rn)) fails.add("rank's rows of its tp block" + where);
    if (p.bytes() != static_cast<std::size_t>(rn * block.cols()) * sizeof(V)) fails.add("bytes held" + where);
    const Sharded<V, L> u = nn::unshard(p);
    if (u.local() != block || u.rows() != rows || u.cols() != cols) fails.add("unshard gives the tp block" + where);
    if (ledger.entries().size() != 1 || ledger.entries()[0].axis != "dp" ||
        ledger.entries()[0].elements != static_cast<std::size_t>(block.size()))
      fails.add("unshard is one all_gather on dp of the tp block" + where);
    const Mat mine = by_rows ? Mat(G[static_cast<std::size_t>(dr)].middleRows(bo, bn))
                             : Mat(G[static_cast<std::size_t>(dr)].middleCols(bo, bn));
    Mat sum = Mat::Zero(block.rows(), block.cols());
    for (const auto& g : G) sum += by_rows ? Mat(g.middleRows(bo, bn)) : Mat(g.middleCols(bo, bn));
    const auto dg = nn::reduce_scatter_grad(p, Sharded<V, L>(mine, rows, cols, w.group()));
    if (dg.local() != sum.middleRows(ro, rn)) fails.add("reduce_scatter_grad: my rows of the sum" + where);
  });
}

}  // namespace

TEST_CASE("a ZeRO-3 parameter W[tp:L, dp:Row]: its rows, unshard, and its gradient reduce-scattered back") {
  Fails fails;
  for (const auto& [d, t] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {2, 2}})
    for (const auto& [r, c] : std::vector<std::pair<Index, Index>>{{7, 5}, {13, 11}}) {
      run_fully_sharded<ColSharded>(d, t, r, c, fails);
      run_fully_sharded<RowSharded>(d, t, r, c, fails);
    }
  for (const auto& f : fails.all) FAIL_CHECK(f);
  CHECK(fails.all.empty());
}

TEST_CASE("meshes on shapes that do not divide: nested balanced blocks, collectives per axis, the product") {
  Fails fails;
  for (const auto& [d, t] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {2, 2}})
    for (const auto& [r, c] : std::vector<std::pair<Index, Index>>{{7, 5}, {10, 3}, {2, 7}, {13, 11}}) run(d, t, r, c, fails);
  for (const auto& f : fails.all) FAIL_CHECK(f);
  CHECK(fails.all.empty());
}
