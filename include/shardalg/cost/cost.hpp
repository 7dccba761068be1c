// shardalg/cost/cost.hpp — the cost model: α-β collectives, per-layer FLOPs and communication,
// memory per parameter and activations, per-rank memory and traffic of a DP × TP × PP × ZeRO
// setting, valid TP degrees and vocabulary padding, and a
// calibration that measures α and β on this machine. Everything but the calibration is
// constexpr arithmetic with the unit in each name.
#pragma once

#include "shardalg/cost/units.hpp"
#include "shardalg/cost/alpha_beta.hpp"
#include "shardalg/cost/transformer.hpp"
#include "shardalg/cost/memory_formulas.hpp"
#include "shardalg/cost/playbook.hpp"
#include "shardalg/cost/parallel_config.hpp"
#include "shardalg/cost/training_per_rank.hpp"
#include "shardalg/cost/calibrate.hpp"
