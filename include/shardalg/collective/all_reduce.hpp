// shardalg/collective/all_reduce.hpp — Z[Partial] → Z[R] (or Z[I]): every rank gets Σ_r Z_r.
// Ring traffic per rank: 2(P−1)/P · V.
//
//   all_reduce(z)              Partial → R   backward: all_reduce Partial → R   (cot(R) = Partial)
//   all_reduce<Invariant>(z)   Partial → I   backward: identity I → R           (Megatron's g)
//
// The hand-written layers read an R-typed cotangent as whole on every rank (the I convention):
// adjoint::all_reduce(dy[R]) is the identity, as g's. With I in the types the two cases are
// distinct: adjoint::all_reduce(dy[I]) → R (identity), adjoint::all_reduce(dy[Partial]) → R
// (one all_reduce).
#pragma once

#include "shardalg/core/explain.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg {

/// Partial → To (R by default, or I), in place on the moved-in block: `all_reduce(std::move(z))`
/// copies nothing.
template <WholeLayout To = Replicated, class T, class L, class B>
auto all_reduce(Sharded<T, L, B> x) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::all_reduce_input, L>();
  } else {
    detail::check_operand(x.group(), "all_reduce");
    auto e = explain_op(x.group(), "all_reduce", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), To::kind)});
    const Index r = x.rows(), c = x.cols();
    Group g = x.group();
    auto local = std::move(x).local();
    g.all_reduce(local.data(), static_cast<std::size_t>(local.size()), ReduceOp::sum, CallInfo{"Partial", To::notation});
    return Sharded<T, To, B>(std::move(local), r, c, std::move(g));
  }
}

/// Z[Partial] → Z[R], started but not waited for: the block stays with the pending all-reduce
/// until `wait()` hands it back as R. Drive progress with `test()` between pieces of independent
/// work (a communicator without asynchronous all-reduce completes it at the start).
template <class T, class B>
class PendingAllReduce {
 public:
  using matrix = typename B::template matrix<T>;
  PendingAllReduce(matrix local, Index rows, Index cols, Group g, const CallInfo& info)
      : local_(std::move(local)), rows_(rows), cols_(cols), g_(std::move(g)) {
    req_ = g_.iall_reduce(local_.data(), static_cast<std::size_t>(local_.size()), dtype_of<T>, ReduceOp::sum, info);
  }
  // The request points into the block's storage; a move hands over the storage itself (Eigen
  // and DeviceMatrix move by pointer), so the address stays valid.
  PendingAllReduce(PendingAllReduce&&) noexcept = default;
  PendingAllReduce& operator=(PendingAllReduce&&) = delete;

  /// Drive progress; true once complete.
  bool test() { return req_.test(); }
  /// Complete it: Z[R].
  Sharded<T, Replicated, B> wait() && {
    req_.wait();
    return Sharded<T, Replicated, B>(std::move(local_), rows_, cols_, std::move(g_));
  }

 private:
  matrix local_;
  Index rows_, cols_;
  Group g_;
  Request req_;  // declared last: destroyed (waited for) before local_
};

/// Start all_reduce(Z[Partial]) → Z[R]; the ledger records it as the all_reduce it is.
template <class T, class L, class B>
auto all_reduce_start(Sharded<T, L, B> x) {
  if constexpr (!std::is_same_v<L, Partial>) {
    return diagnose<Diag::all_reduce_input, L>();
  } else {
    detail::check_operand(x.group(), "all_reduce_start");
    auto e = explain_op(x.group(), "all_reduce_start", dtype_of<T>,
                        {note(x), " → ", note(x.rows(), x.cols(), LayoutKind::replicated)});
    const Index r = x.rows(), c = x.cols();
    Group g = x.group();
    return PendingAllReduce<T, B>(std::move(x).local(), r, c, std::move(g), CallInfo{"Partial", "R"});
  }
}

namespace adjoint {
/// Backward of all_reduce with a whole cotangent (the layers' R convention): dZ[R] → dZ_r[R] for
/// every summand, no communication.
template <class T, class B>
Sharded<T, Replicated, B> all_reduce(Sharded<T, Replicated, B> dy) {
  return dy;
}
/// Backward of all_reduce<Invariant> (g): dZ[I] → dZ[R], the identity: every summand's gradient is
/// the whole gradient, which every rank holds.
template <class T, class B>
Sharded<T, Replicated, B> all_reduce(Sharded<T, Invariant, B> dy) {
  const Index r = dy.rows(), c = dy.cols();
  Group g = dy.group();
  return Sharded<T, Replicated, B>(std::move(dy).local(), r, c, std::move(g));
}
/// Backward of all_reduce → R whose output fed per-rank work: its cotangent is Partial
/// (cot(R) = Partial), and every summand's gradient is the sum: one all_reduce → dZ[R].
template <class T, class B>
Sharded<T, Replicated, B> all_reduce(Sharded<T, Partial, B> dy) {
  return shardalg::all_reduce(std::move(dy));
}
}  // namespace adjoint

}  // namespace shardalg
