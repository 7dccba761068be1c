// The cost model's formulas against values derived by hand (written here as literals or as
// plain arithmetic on literals, never through the functions under test).
#include <doctest/doctest.h>

#include <string>

#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

TEST_CASE("units") {
  CHECK(cost::MiB == 1048576.0);
  CHECK(cost::GiB == 1073741824.0);
  CHECK(cost::MB == 1000000.0);
}

TEST_CASE("ring traffic factors") {
  // V = 800 bytes on P = 8: all-reduce 2·7/8·800 = 1400, gather/scatter 700, all-to-all 7/64·800 = 87.5
  CHECK(cost::all_reduce_bytes_per_rank(800, 8) == 1400.0);
  CHECK(cost::reduce_scatter_bytes_per_rank(800, 8) == 700.0);
  CHECK(cost::all_gather_bytes_per_rank(800, 8) == 700.0);
  CHECK(cost::all_to_all_bytes_per_rank(800, 8) == 87.5);
  // P = 2: all-reduce moves V, gather/scatter V/2, all-to-all V/4
  CHECK(cost::all_reduce_bytes_per_rank(1000, 2) == 1000.0);
  CHECK(cost::all_gather_bytes_per_rank(1000, 2) == 500.0);
  CHECK(cost::all_to_all_bytes_per_rank(1000, 2) == 250.0);
  // one rank: nothing moves
  CHECK(cost::all_reduce_bytes_per_rank(1000, 1) == 0.0);
  CHECK(cost::all_reduce_seconds({1e-6, 1e9}, 1000, 1) == 0.0);
  // an all-reduce is a reduce-scatter plus an all-gather, in bytes and in steps
  for (int p : {2, 3, 4, 8, 16}) {
    CHECK(cost::all_reduce_bytes_per_rank(4096, p) ==
          doctest::Approx(cost::reduce_scatter_bytes_per_rank(4096, p) + cost::all_gather_bytes_per_rank(4096, p)));
    CHECK(cost::all_reduce_steps(p) == cost::reduce_scatter_steps(p) + cost::all_gather_steps(p));
  }
}

TEST_CASE("alpha-beta times") {
  const cost::AlphaBeta link{2e-6, 1e9};  // 2 µs, 1 GB/s
  // all-reduce of 8e6 bytes on 4 ranks: 6 steps · 2 µs + 1.5 · 8e6 B / 1e9 B/s = 12 µs + 12 ms
  CHECK(cost::all_reduce_seconds(link, 8e6, 4) == doctest::Approx(0.012012));
  // all-gather: 3 · 2 µs + 0.75 · 8e6 / 1e9 = 6 µs + 6 ms
  CHECK(cost::all_gather_seconds(link, 8e6, 4) == doctest::Approx(0.006006));
  CHECK(cost::reduce_scatter_seconds(link, 8e6, 4) == doctest::Approx(0.006006));
  // all-to-all: 3 · 2 µs + 3/16 · 8e6 / 1e9 = 6 µs + 1.5 ms
  CHECK(cost::all_to_all_seconds(link, 8e6, 4) == doctest::Approx(0.001506));
  CHECK(cost::collective_seconds(link, shardalg::CollectiveKind::all_reduce, 8e6, 4) == doctest::Approx(0.012012));
  CHECK(cost::collective_bytes_per_rank(shardalg::CollectiveKind::all_gather, 8e6, 4) == 6e6);
}

TEST_CASE("communication per layer: d=4096, s=2048, b=4, TP=8, fp16") {
  const cost::TransformerShape x{.batch = 4, .seq = 2048, .hidden = 4096, .heads = 32};
  // T·h·e = 4·2048·4096·2 = 67,108,864 B = 64 MiB
  CHECK(cost::activation_bytes(x, 2) == 67108864.0);
  const auto fwd = cost::layer_comm(x, 8, 2, false);
  CHECK(fwd.all_reduces == 2);
  CHECK(fwd.all_gathers == 0);
  CHECK(fwd.dense_bytes_each == 64 * 1048576.0);
  // per all-reduce: 2·7/8·64 MiB = 112 MiB = 117,440,512 B; two per layer: 224 MiB = 234,881,024 B
  CHECK(cost::all_reduce_bytes_per_rank(fwd.dense_bytes_each, 8) == 117440512.0);
  CHECK(fwd.bytes_per_rank == 234881024.0);
  // sequence parallelism: 2 all-gathers + 2 reduce-scatters, the same 224 MiB
  const auto sp = cost::layer_comm(x, 8, 2, true);
  CHECK(sp.all_reduces == 0);
  CHECK(sp.all_gathers == 2);
  CHECK(sp.reduce_scatters == 2);
  CHECK(sp.bytes_per_rank == 234881024.0);
  // TP = 1: nothing
  CHECK(cost::layer_comm(x, 1, 2, false).collectives() == 0);
  // bandwidth only at 900 GB/s: 234,881,024 / 9e11 s = 260.98 µs
  CHECK(cost::layer_comm_seconds(x, 8, 2, false, {0, 900e9}) == doctest::Approx(260.978915e-6));
}

TEST_CASE("FLOPs and the compute/communication ratio") {
  const cost::TransformerShape x{.batch = 4, .seq = 2048, .hidden = 4096, .heads = 32};
  // 24·4·2048·4096² = 3,298,534,883,328; 4·4·2048²·4096 = 274,877,906,944; sum 3,573,412,790,272
  CHECK(cost::layer_forward_flops(x) == 3573412790272.0);
  CHECK(cost::layer_backward_flops(x) == 2 * 3573412790272.0);
  CHECK(cost::layer_forward_flops_per_rank(x, 8) == 446676598784.0);
  const auto r = cost::forward_compute_comm_ratio(x, 8, 2, 989e12, {0, 900e9});
  // 446,676,598,784 / 989e12 = 451.64 µs; 260.98 µs of all-reduce; R = 1.7306
  CHECK(r.compute_seconds == doctest::Approx(451.644690e-6));
  CHECK(r.comm_seconds == doctest::Approx(260.978916e-6));
  CHECK(r.ratio == doctest::Approx(1.730579).epsilon(1e-5));
  CHECK(r.compute_bound());
  // a non-default ffn: f = 2h gives 8Th² + 8Th² + 4bs²h
  const cost::TransformerShape y{.batch = 1, .seq = 10, .hidden = 100, .heads = 4, .ffn_hidden = 200};
  CHECK(cost::layer_forward_flops(y) == 8.0 * 10 * 100 * 100 + 4.0 * 10 * 100 * 200 + 4.0 * 1 * 100 * 100);
  // simplified R = 3·d·β/((P−1)·F): d = 8192 → 3·8192·9e11 / (7·989e12) = 3.19492
  CHECK(cost::simplified_compute_comm_ratio(8192, 8, 989e12, 900e9) == doctest::Approx(3.194915).epsilon(1e-6));
}

TEST_CASE("memory per parameter and activations") {
  CHECK(cost::mixed_precision_adam_bytes_per_parameter == 16.0);
  CHECK(cost::optimizer_and_master_bytes_per_parameter == 12.0);
  CHECK(cost::training_state_bytes(8.3e9) == 132.8e9);
  CHECK(cost::training_state_bytes(8.3e9, 12) == doctest::Approx(99.6e9));
  // 32e9 B per GPU: 1.2B·16 = 19.2 GB → 1; 2.5B → 40 GB → 2; 4.2B → 67.2 GB → 33.6 at 2 → 4;
  // 8.3B → 132.8 GB → 33.2 at 4 → 8
  CHECK(cost::smallest_power_of_two_tp(1.2e9, 32e9) == 1);
  CHECK(cost::smallest_power_of_two_tp(2.5e9, 32e9) == 2);
  CHECK(cost::smallest_power_of_two_tp(4.2e9, 32e9) == 4);
  CHECK(cost::smallest_power_of_two_tp(8.3e9, 32e9) == 8);
  // 32 GiB = 34,359,738,368 B: 33.6e9 and 33.2e9 fit, so 4.2B → 2 and 8.3B → 4
  CHECK(cost::smallest_power_of_two_tp(4.2e9, 34359738368.0) == 2);
  CHECK(cost::smallest_power_of_two_tp(8.3e9, 34359738368.0) == 4);
  CHECK(cost::smallest_power_of_two_tp(1e12, 1.0, 16, 8) == 0);
  // LayerNorm statistics: 2 values · 8192 tokens · 4 B = 65,536 B = 8·b·s
  CHECK(cost::layernorm_statistics_bytes(4 * 2048) == 65536.0);
  // Activations (Korthikanti et al.): s=2048, b=4, h=4096, a=32 → sbh = 33,554,432; 5as/h = 80
  const cost::TransformerShape x{.batch = 4, .seq = 2048, .hidden = 4096, .heads = 32};
  CHECK(cost::activation_bytes_per_layer(x, 1, false) == 33554432.0 * 114);
  CHECK(cost::activation_bytes_per_layer(x, 8, false) == 33554432.0 * 23);    // 10 + 3 + 10
  CHECK(cost::activation_bytes_per_layer(x, 8, true) == 33554432.0 * 14.25);  // 114 / 8
  CHECK(cost::residual_activation_bytes_per_rank(x, 8, 2, false) == 67108864.0);
  CHECK(cost::residual_activation_bytes_per_rank(x, 8, 2, true) == 8388608.0);
}

TEST_CASE("valid TP degrees and the heads error") {
  CHECK(cost::valid_tp_degrees(96) == std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96});
  CHECK(cost::valid_tp_degrees(64) == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
  CHECK(cost::valid_tp_degrees(32) == std::vector<int>{1, 2, 4, 8, 16, 32});
  CHECK_THROWS_WITH_AS(cost::check_tp_degree(32, 6), "heads 32 is not divisible by tensor-parallel size 6",
                       shardalg::DivisibilityError);
  CHECK_THROWS_WITH_AS(cost::check_tp_degree(32, 8, 3004), "hidden 3004 is not divisible by tensor-parallel size 8",
                       shardalg::DivisibilityError);
  CHECK_NOTHROW(cost::check_tp_degree(32, 8, 4096, 16384));
}

TEST_CASE("vocabulary padding and the fused loss") {
  // 50,257 up to a multiple of 128·8 = 1024: 50 · 1024 = 51,200; of 128: 393 · 128 = 50,304
  CHECK(cost::padded_vocab_size(50257, 128, 8) == 51200);
  CHECK(cost::padded_vocab_size(50257, 128, 1) == 50304);
  CHECK(cost::padded_vocab_size(51200, 128, 8) == 51200);
  CHECK(cost::gathered_logits_values(4, 1024, 51200) == 209715200.0);
  CHECK(cost::fused_cross_entropy_values(4, 1024) == 12288.0);
}
