// shardalg/base/errors.hpp — the two kinds of error shardalg reports.
//
// 1. Layout mistakes are compile errors, each a static_assert with a stable ID ([shardalg.E1xx])
//    whose text names the collective that fixes it and that collective's adjoint. Their texts
//    are the catalogue of base/diagnostics.hpp, the only place an ID's text is written.
// 2. Bad values (shapes, divisibility, groups) are typed exceptions whose message names the
//    values (this file). Nothing is modified before the check: a throwing call loses no data.
#pragma once

#include <cstddef>
#include <ostream>
#include <sstream>
#include <string_view>
#include <type_traits>
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
/// One argument of cat(), kept as one of a few types so that cat itself is a single function:
/// a message costs its callers a list of these, not an instantiation of the stream chain per
/// argument list. Formatted exactly as `std::ostream << x` formats x (a float prints as the
/// double it is promoted to; the char types as characters; bool as 0/1); any other type with an
/// operator<< is formatted into a string on the spot.
class CatPiece {
 public:
  template <class X>
  CatPiece(const X& x) {  // NOLINT: implicit, from cat's arguments
    using D = std::remove_cvref_t<X>;
    if constexpr (std::is_convertible_v<const X&, std::string_view>) {
      kind_ = Kind::text;
      text_ = std::string_view(x);
    } else if constexpr (std::is_same_v<D, char> || std::is_same_v<D, signed char> || std::is_same_v<D, unsigned char>) {
      kind_ = Kind::character;
      ch_ = static_cast<char>(x);
    } else if constexpr (std::is_integral_v<D> && std::is_signed_v<D>) {
      kind_ = Kind::signed_int;
      i_ = x;
    } else if constexpr (std::is_integral_v<D>) {
      kind_ = Kind::unsigned_int;
      u_ = x;
    } else if constexpr (std::is_floating_point_v<D>) {
      kind_ = Kind::floating;
      d_ = static_cast<long double>(x);
      long_double_ = std::is_same_v<D, long double>;
    } else {
      std::ostringstream os;
      os << x;
      owned_ = os.str();
      kind_ = Kind::text;
      text_ = owned_;
    }
  }
  CatPiece(const CatPiece&) = delete;
  CatPiece& operator=(const CatPiece&) = delete;

  friend std::ostream& operator<<(std::ostream& os, const CatPiece& p) {
    switch (p.kind_) {
      case Kind::text: return os << p.text_;
      case Kind::character: return os << p.ch_;
      case Kind::signed_int: return os << p.i_;
      case Kind::unsigned_int: return os << p.u_;
      case Kind::floating: return p.long_double_ ? os << p.d_ : os << static_cast<double>(p.d_);
    }
    return os;
  }

 private:
  enum class Kind : unsigned char { text, character, signed_int, unsigned_int, floating };
  Kind kind_ = Kind::text;
  bool long_double_ = false;
  char ch_ = 0;
  long long i_ = 0;
  unsigned long long u_ = 0;
  long double d_ = 0;
  std::string_view text_;
  std::string owned_;
};

inline std::string cat_pieces(const CatPiece* p, std::size_t n) {
  std::ostringstream os;
  for (std::size_t i = 0; i < n; ++i) os << p[i];
  return os.str();
}

/// The arguments written one after another, as an ostream writes them.
template <class... Args>
std::string cat(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return {};
  } else {
    const CatPiece pieces[] = {CatPiece(args)...};
    return cat_pieces(pieces, sizeof...(Args));
  }
}
}  // namespace detail

}  // namespace shardalg
