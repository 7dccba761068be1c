// shardalg/pipeline/errors.hpp — the exceptions of the pipeline-parallel part.
//
// Every one derives from shardalg::Error (base/errors.hpp) through PipelineError, and its message
// names the values that were wrong: `catch (const shardalg::Error&)` catches them all, and a
// test can compare the whole text.
#pragma once

#include "shardalg/base/errors.hpp"

namespace shardalg::pipeline {

/// A bad argument to a schedule builder or to the simulator (p < 1, m < 1, v < 1, m not a
/// multiple of p for the interleaved schedule, a negative cost), or a schedule that fails the
/// validity check (an op missing or repeated on a rank).
struct PipelineError : Error {
  using Error::Error;
};

/// The simulator found no rank able to run its next op while ops remain: each rank waits for an
/// op that can only run later. The message names every rank's blocked op and what it waits for.
struct PipelineDeadlockError : PipelineError {
  using PipelineError::PipelineError;
};

/// A `pipeline_model_parallel_layout` string that does not parse or does not fit the model
/// (layout_string.hpp): unknown character, unbalanced parentheses, E or L misplaced, a layer
/// count that differs from the model's, stages not divisible by the pipeline-parallel size, or
/// a layer type this library cannot build (the multi-token-prediction head 'm').
struct PipelineLayoutError : PipelineError {
  using PipelineError::PipelineError;
};

}  // namespace shardalg::pipeline
