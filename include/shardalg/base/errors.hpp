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
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardalg/base/linkage.hpp"

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
/// cat's stream: the common argument types written by functions compiled once (base/linkage.hpp),
/// so that a message's cat(…) instantiates a few calls, not an ostringstream of its own.
class CatStream {
 public:
  SHARDALG_FUNC CatStream();
  SHARDALG_FUNC ~CatStream();
  CatStream(const CatStream&) = delete;
  CatStream& operator=(const CatStream&) = delete;
  SHARDALG_FUNC void text(std::string_view s);
  SHARDALG_FUNC void character(char c);
  SHARDALG_FUNC void integer(long long v);
  SHARDALG_FUNC void unsigned_integer(unsigned long long v);
  SHARDALG_FUNC void real(double v);
  SHARDALG_FUNC void real(long double v);
  /// Anything else, as its operator<< writes it.
  [[nodiscard]] std::ostream& stream() { return os_; }
  [[nodiscard]] SHARDALG_FUNC std::string str() const;

 private:
  std::ostringstream os_;
};

/// One argument, as `os << a` writes it: a char type as a character, bool as 1/0, an integer,
/// float as double (ostream widens it), text by value.
template <class A>
void cat_one(CatStream& s, const A& a) {
  if constexpr (std::is_same_v<A, char> || std::is_same_v<A, signed char> || std::is_same_v<A, unsigned char>)
    s.character(static_cast<char>(a));
  else if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) s.integer(a);
  else if constexpr (std::is_integral_v<A>) s.unsigned_integer(a);  // bool too: 0 or 1
  else if constexpr (std::is_same_v<A, long double>) s.real(a);
  else if constexpr (std::is_floating_point_v<A>) s.real(static_cast<double>(a));
  else if constexpr (std::is_convertible_v<const A&, std::string_view>) s.text(std::string_view(a));
  else s.stream() << a;
}

/// The arguments written one after another, as an ostream writes them.
template <class... Args>
std::string cat(const Args&... args) {
  CatStream s;
  (cat_one(s, args), ...);
  return s.str();
}

#if SHARDALG_RUNTIME_BODIES  // base/linkage.hpp
SHARDALG_FUNC CatStream::CatStream() = default;
SHARDALG_FUNC CatStream::~CatStream() = default;
SHARDALG_FUNC void CatStream::text(std::string_view s) { os_ << s; }
SHARDALG_FUNC void CatStream::character(char c) { os_ << c; }
SHARDALG_FUNC void CatStream::integer(long long v) { os_ << v; }
SHARDALG_FUNC void CatStream::unsigned_integer(unsigned long long v) { os_ << v; }
SHARDALG_FUNC void CatStream::real(double v) { os_ << v; }
SHARDALG_FUNC void CatStream::real(long double v) { os_ << v; }
SHARDALG_FUNC std::string CatStream::str() const { return os_.str(); }
#endif
}  // namespace detail

}  // namespace shardalg
