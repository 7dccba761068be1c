// shardalg/base/errors.hpp — the two kinds of error shardalg reports.
//
// 1. Layout mistakes are compile errors, each a static_assert with a stable ID ([shardalg.E1xx])
//    whose text names the collective that fixes it and that collective's adjoint. Their texts
//    are the catalogue of base/diagnostics.hpp, the only place an ID's text is written.
// 2. Bad values (shapes, divisibility, groups) are typed exceptions whose message names the
//    values (this file). Nothing is modified before the check: a throwing call loses no data.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>


namespace shardalg {

// ---------------------------------------------------------------------------------------------
// Runtime errors
// ---------------------------------------------------------------------------------------------

/// Base of every exception shardalg throws.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Shapes that do not chain (matmul inner dimensions, elementwise operands, bias length).
struct ShapeError : Error {
  using Error::Error;
};
/// An index (a token id, a target class) outside the range it indexes.
struct IndexError : ShapeError {
  using ShapeError::ShapeError;
};
/// A dimension that must be split into equal blocks is not divisible by the group size.
struct DivisibilityError : Error {
  using Error::Error;
};
/// Operands that live on different communicator groups.
struct GroupMismatchError : Error {
  using Error::Error;
};
/// A sharded tensor, or a local block, handed to a communicator of another size.
struct GroupSizeError : Error {
  using Error::Error;
};
/// An operation on an empty tensor or handle: a default-constructed Sharded or Group (no
/// communicator). The message names the operation.
struct EmptyTensorError : Error {
  using Error::Error;
};
/// A communicator backend reported a failure (MPI error string, thread-world misuse).
struct CommError : Error {
  using Error::Error;
};
/// A collective given up because another rank failed (ThreadComm's world was aborted): a
/// bystander's error. run_ranks rethrows the failing rank's own exception in preference to it.
struct CommAbortedError : CommError {
  using CommError::CommError;
};
/// Checked mode (base/checks.hpp): the ranks of a group called different collectives (kind,
/// dtype, count, root, layouts or sequence number differ). Raised on every rank, before any data
/// moves; the message names both sides.
struct CollectiveMismatchError : CommError {
  using CommError::CommError;
};
/// Checked mode's watchdog: a rank waited longer than collective_timeout() in a collective; the
/// message names what this rank is in and what the others are in (or that they did not arrive).
struct CollectiveTimeoutError : CommError {
  using CommError::CommError;
};
/// run_ranks could not start a rank's thread (std::thread threw): the message names the rank.
struct ThreadStartError : CommError {
  using CommError::CommError;
};
/// A rank number outside its group (a source rank of distribute, a root): the message names it
/// and the group size.
struct RankError : Error {
  using Error::Error;
};
/// A Replicated tensor whose ranks hold different values (found by the replica check of
/// shard<Replicated>, base/checks.hpp): the message names the shape and the first rank that
/// differs from rank 0.
struct ReplicaMismatchError : Error {
  using Error::Error;
};

/// A NaN or an infinity where the check for finite values was asked for (nn::Gpt's
/// check_finite): the message names the first layer and the first rank that produced one.
struct NonFiniteError : Error {
  using Error::Error;
};

namespace detail {
/// The arguments written one after another, as an ostream writes them.
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace shardalg
