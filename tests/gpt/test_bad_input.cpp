// Bad input and bad numbers (issue 14): sizes that are negative or whose products overflow are
// refused by name before anything is allocated; a softmax over no columns is refused; eps and
// init_std are validated; a step with a NaN or infinite gradient norm applies nothing and says so;
// the finite check names the first layer that produced a NaN; replicas_agree compares bits, so a
// NaN agrees with itself. Each text is checked exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gpt_cases.hpp"
#include "testing.hpp"

using namespace gt;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const shardalg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

nn::GptConfig base() {
  auto c = tiny(false);
  c.dropout = 0;
  return c;
}

bool same_bits(const nn::Masters& a, const nn::Masters& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    const auto& w = b.at(k);
    if (v.size() != w.size() || std::memcmp(v.data(), w.data(), sizeof(double) * static_cast<std::size_t>(v.size())) != 0)
      return false;
  }
  return true;
}
}  // namespace

TEST_CASE("bad input: a negative shape is refused where it enters (from_global, Sharded)") {
  const Group g{SelfComm{}};
  CHECK(error_of([&] { (void)nn::from_global<double, RowSharded>(-4, 8, g, [](Index, Index) { return 0.0; }); }) ==
        "from_global<RowSharded>: shape -4x8 has a negative dimension");
  CHECK(error_of([&] { (void)nn::from_global<double, Replicated>(4, -1, g, [](Index, Index) { return 0.0; }); }) ==
        "from_global<Replicated>: shape 4x-1 has a negative dimension");
  CHECK(error_of([&] { (void)Sharded<double, ColSharded>(testing::Mat<double>(0, 0), -2, 0, g); }) ==
        "Sharded<ColSharded>: shape -2x0 has a negative dimension");
}

TEST_CASE("bad input: softmax over 0 columns is refused") {
  const Group g{SelfComm{}};
  auto x = shard<Replicated>(testing::Mat<double>(3, 0), g);
  CHECK(error_of([&] { (void)softmax_rows(x); }) ==
        "softmax_rows: 3x0 has no columns (a softmax over 0 entries is undefined)");
}

TEST_CASE("bad input: sizes whose products overflow 64 bits are refused before allocation") {
  auto c = base();
  c.batch = Index(1) << 32;
  c.seq = Index(1) << 32;
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 2); }) ==
        "Gpt: batch 4294967296 × seq 4294967296 tokens × 256 values × 8 bytes (or the 256x32 embedding) overflows "
        "64-bit sizes");
  c = base();
  c.vocab_divisor = Index(1) << 62;
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 2); }) ==
        "vocabulary 256 padded to a multiple of divisor 4611686018427387904 × tensor-parallel size 2 overflows 64-bit "
        "sizes");
  c = base();
  c.hidden = Index(1) << 58;  // 64 tokens × ffn 2^60 values overflows
  c.heads = 1;
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 1); }).find("overflows 64-bit sizes") != std::string::npos);
}

TEST_CASE("bad input: eps and init_std are validated") {
  auto c = base();
  c.eps = 0;
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 1); }) == "Gpt: eps 0 must be positive and finite");
  c.eps = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 1); }) == "Gpt: eps nan must be positive and finite");
  c = base();
  c.init_std = -0.5;
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 1); }) == "Gpt: init_std -0.5 must be finite and not negative");
  c.init_std = std::numeric_limits<double>::infinity();
  CHECK(error_of([&] { nn::Gpt<double>::check(c, 1); }) == "Gpt: init_std inf must be finite and not negative");
}

TEST_CASE("bad numbers: replicas_agree compares bits, so the same NaN agrees and a different value does not") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    const auto agree = testing::per_rank<int>(p, [&](const Group& g) {
      testing::Mat<double> a = testing::Mat<double>::Ones(2, 2);
      a(1, 0) = std::numeric_limits<double>::quiet_NaN();
      const bool same_nan = replicas_agree(shard<Replicated>(a, g));
      if (g.rank() == p - 1) a(0, 1) = 2;
      ReplicaCheck off(false);  // shard<Replicated> would refuse the differing copy itself
      const bool differs = !replicas_agree(shard<Replicated>(a, g));
      return int(same_nan) + 2 * int(differs);
    });
    for (int v : agree) CHECK(v == 3);
  }
}

TEST_CASE("bad numbers: a NaN gradient norm skips the update, counts it, and changes nothing") {
  for (int p : {1, 2}) {
    CAPTURE(p);
    testing::per_rank<int>(p, [&](const Group& g) {
      const auto c = base();
      auto masters = nn::Gpt<double>::init(c, Group(SelfComm{})).masters();
      masters.at("layers.0.mlp.w2")(3, 5) = std::numeric_limits<double>::quiet_NaN();
      auto model = nn::Gpt<double>::from_masters(c, masters, g);
      nn::Adam<double> opt(adam_options());
      const auto before = model.masters();
      const auto [x, y] = batch_at(c, kText, 0);
      model.forward_backward(x, y);
      const double norm = model.step(opt, 1.0);
      CHECK(std::isnan(norm));
      CHECK(model.last_step_skipped());
      CHECK(model.skipped_steps() == 1);
      CHECK(model.steps() == 0);
      CHECK(opt.step_count() == 0);
      CHECK(same_bits(before, model.masters()));  // the NaN is still there, nothing else moved
      return 0;
    });
  }
}

TEST_CASE("bad numbers: the finite check names the first layer with a NaN, on every rank") {
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    const auto msgs = testing::per_rank<std::string>(p, [&](const Group& g) {
      const auto c = base();
      auto masters = nn::Gpt<double>::init(c, Group(SelfComm{})).masters();
      masters.at("layers.1.mlp.w2")(3, 5) = std::numeric_limits<double>::infinity();
      auto model = nn::Gpt<double>::from_masters(c, masters, g);
      model.check_finite(true);
      const auto batch = batch_at(c, kText, 0);  // no structured binding: Clang 14 cannot capture one
      return error_of([&] { model.forward_backward(batch.first, batch.second); });
    });
    for (const auto& m : msgs)
      CHECK(m == "Gpt: a NaN or infinity first appears in the forward: layer 1 output (step 0), on rank 0");
  }
  // Off (the default), the same model runs to a non-finite loss without a word.
  const auto c = base();
  auto masters = nn::Gpt<double>::init(c, Group(SelfComm{})).masters();
  masters.at("layers.1.mlp.w2")(3, 5) = std::numeric_limits<double>::infinity();
  auto model = nn::Gpt<double>::from_masters(c, masters, Group(SelfComm{}));
  const auto [x, y] = batch_at(c, kText, 0);
  CHECK_FALSE(std::isfinite(model.forward_backward(x, y)));
}

TEST_CASE("bad numbers: the finite check passes a healthy model (every output and gradient checked)") {
  testing::per_rank<int>(2, [&](const Group& g) {
    const auto c = base();
    auto model = nn::Gpt<double>::init(c, g);
    model.check_finite(true);
    const auto [x, y] = batch_at(c, kText, 0);
    CHECK_NOTHROW(model.forward_backward(x, y));  // a healthy model passes every check
    return 0;
  });
}
