// cost/training_per_rank.hpp against figures derived by hand (literals, or plain arithmetic on
// literals written here, never through the functions under test).
#include <doctest/doctest.h>

#include "shardalg/cost/cost.hpp"

namespace cost = shardalg::cost;

TEST_CASE("training per rank: the models' parameter counts") {
  // 12288·50257 + 96·(12·12288² + 13·12288) + 2·12288
  CHECK(cost::gpt3_175b.parameters() == 617558016.0 + 96.0 * (1811939328.0 + 159744.0) + 24576.0);
  // 3072·51200 + 72·(12·3072² + 13·3072) + 2·3072
  CHECK(cost::megatron_8_3b.parameters() == 157286400.0 + 72.0 * (113246208.0 + 39936.0) + 6144.0);
}

TEST_CASE("training per rank: ZeRO model states, stage by stage") {
  const double psi = 1000, n = 8;
  const auto s0 = cost::zero_model_state_bytes(psi, 8, 0), s1 = cost::zero_model_state_bytes(psi, 8, 1);
  const auto s2 = cost::zero_model_state_bytes(psi, 8, 2), s3 = cost::zero_model_state_bytes(psi, 8, 3);
  CHECK(s0.total() == 16000.0);
  CHECK(s1.total() == 2000.0 + 2000.0 + 12000.0 / n);  // 5500
  CHECK(s2.total() == 2000.0 + 14000.0 / n);           // 3750
  CHECK(s3.total() == 16000.0 / n);                    // 2000
  CHECK(s2.weights == 2000.0);
  CHECK(s2.gradients == 250.0);
  CHECK(s3.weights == 250.0);
  CHECK(cost::zero_model_state_bytes(psi, 1, 3).total() == 16000.0);  // one rank: nothing to partition
  // dp traffic: an all-reduce of 2Ψ bytes, 2·7/8·2000 = 3500; stage 3 half as much again
  CHECK(cost::zero_dp_bytes_per_rank(psi, 8, 0) == 3500.0);
  CHECK(cost::zero_dp_bytes_per_rank(psi, 8, 2) == 3500.0);
  CHECK(cost::zero_dp_bytes_per_rank(psi, 8, 3) == 5250.0);
  CHECK(cost::zero_dp_bytes_per_rank(psi, 1, 3) == 0.0);
}

TEST_CASE("training per rank: activations with recomputation (Korthikanti et al. Table 2)") {
  // s 2048, b 4, h 4096, a 32: sbh = 33,554,432, 5as/h = 80
  const cost::TransformerShape x{.batch = 4, .seq = 2048, .hidden = 4096, .heads = 32};
  const double sbh = 33554432.0;
  using R = cost::Recompute;
  CHECK(cost::activation_bytes_per_layer(x, 1, false, R::none) == sbh * 114);
  CHECK(cost::activation_bytes_per_layer(x, 1, false, R::selective) == sbh * 34);
  CHECK(cost::activation_bytes_per_layer(x, 1, false, R::full) == sbh * 2);
  CHECK(cost::activation_bytes_per_layer(x, 8, false, R::selective) == sbh * 13);  // 10 + 24/8
  CHECK(cost::activation_bytes_per_layer(x, 8, true, R::selective) == sbh * 4.25);  // 34/8
  CHECK(cost::activation_bytes_per_layer(x, 8, false, R::full) == sbh * 2);
  CHECK(cost::activation_bytes_per_layer(x, 8, true, R::full) == sbh * 0.25);  // 2/8
}

TEST_CASE("training per rank: one setting, every figure") {
  // 8.3B at dp 2 × tp 4 × pp 2, ZeRO-1, selective, SP, micro-batch 2, 8 micro-batches
  cost::TrainingSetting s;
  s.dp = 2, s.tp = 4, s.pp = 2, s.zero = 1, s.recompute = cost::Recompute::selective, s.sequence_parallel = true;
  s.micro_batch = 2, s.micro_batches = 8;
  const auto r = cost::training_per_rank(cost::megatron_8_3b, s);
  const double n = 157286400.0 + 72.0 * (113246208.0 + 39936.0) + 6144.0, psi = n / 8;
  CHECK(r.parameters == doctest::Approx(psi).epsilon(1e-15));
  CHECK(r.states.total() == doctest::Approx(4 * psi + 12 * psi / 2).epsilon(1e-15));
  const double sbh = 1024.0 * 2 * 3072;  // 6,291,456
  // 36 layers per stage, min(2, 8) = 2 micro-batches in flight, 34·sbh/4 each
  CHECK(r.activations == doctest::Approx(36.0 * 2 * 34 * sbh / 4).epsilon(1e-15));
  // tp: 8 micro-batches · 36 layers · 2 passes · (2 all-gathers + 2 reduce-scatters of sbh·2 B, 3/4 each)
  CHECK(r.tp_bytes == doctest::Approx(8.0 * 36 * 2 * 4 * 0.75 * sbh * 2).epsilon(1e-15));
  CHECK(r.dp_bytes == doctest::Approx(2.0 * 0.5 * 2 * psi).epsilon(1e-15));
  CHECK(r.pp_bytes == doctest::Approx(2.0 * 8 * sbh * 2 / 4).epsilon(1e-15));
  // full recomputation runs the forward's collectives again: 3 passes
  s.recompute = cost::Recompute::full;
  CHECK(cost::training_per_rank(cost::megatron_8_3b, s).tp_bytes == doctest::Approx(8.0 * 36 * 3 * 4 * 0.75 * sbh * 2).epsilon(1e-15));
  CHECK_THROWS_AS(cost::check_training_setting(cost::megatron_8_3b, {.dp = 1, .tp = 5}), shardalg::DivisibilityError);
  CHECK_THROWS_AS(cost::check_training_setting(cost::gpt3_175b, {.pp = 7}), shardalg::DivisibilityError);
  CHECK_THROWS_AS(cost::check_training_setting(cost::gpt3_175b, {.zero = 4}), shardalg::DivisibilityError);
  CHECK_NOTHROW(cost::check_training_setting(cost::gpt3_175b, {.dp = 8, .tp = 8, .pp = 16, .zero = 3}));
}
