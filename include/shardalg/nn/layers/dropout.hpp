// shardalg/nn/layers/dropout.hpp — dropout whose mask is a function of (seed, tensor, global row,
// global column): mask(i, j) = [uniform(seed, tensor, i, j) ≥ p], y = x ⊙ mask / (1 − p).
//
//   forward   X[L] → Y[L] for L = R, Row or C (each rank masks its own block by global index);
//             on Partial too: dropout with a fixed mask is linear, (Σ X_r) ⊙ m = Σ (X_r ⊙ m)
//   backward  dX = dY ⊙ mask / (1 − p), same layout; the mask is recomputed, nothing is stored
//   forward_add(x, z) = x + forward(z): the residual add fused into the same pass
//
// The sharded mask equals the dense mask for any layout and any world size, so Megatron's
// "synchronised RNG state" for replicated regions and "different state per rank" for sharded
// ones are both this one function. Vary `seed` per step (e.g. seed ⊕ step).
#pragma once

#include <cstdint>

#include "shardalg/core/elementwise.hpp"
#include "shardalg/core/sharded.hpp"
#include "shardalg/backend/cpu/fused.hpp"
#include "shardalg/backend/cpu/kernels.hpp"

namespace shardalg::nn {

struct Dropout {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t tensor = tensor_id(0, TensorKind::dropout);
  /// Added to every global row index: a data-parallel replica's first token in the global batch,
  /// so the masks of DP replicas are the rows of the one-replica mask (nn/models/data_parallel.hpp).
  Index row_base = 0;

  Dropout(double prob, std::uint64_t s, std::uint64_t t) : p(prob), seed(s), tensor(t) {
    if (!(p >= 0.0 && p < 1.0))
      throw ShapeError(shardalg::detail::cat("Dropout: probability ", p, " is outside [0, 1)"));
  }

  template <class T, class L, class B>
  Sharded<T, L, B> forward(const Sharded<T, L, B>& x) const {
    return apply(x);
  }
  template <class T, class L, class B>
  Sharded<T, L, B> backward(const Sharded<T, L, B>& dy) const {
    return apply(dy);  // the same mask and scale: dropout is linear in its input
  }
  /// The residual add after a sub-layer, x + forward(z), in one pass (backend/cpu/fused.hpp): the same
  /// values as `x + forward(z)`, and the same checks as the core's add (x's layout, E112).
  template <class T, class L, class B>
  Sharded<T, L, B> forward_add(const Sharded<T, L, B>& x, const Sharded<T, L, B>& z) const {
    const Group& g = shardalg::detail::same_shape_group(x, z, "add");
    auto e = explain_op(g, "add", dtype_of<T>, {note(x), " + ", note(z), " → ", note(x)});
    return Sharded<T, L, B>(Fused<B>::dropout_add(x.local(), z.local(), p, seed, tensor, row_base + z.row_offset(), z.col_offset()),
                            x.rows(), x.cols(), g);
  }

 private:
  template <class T, class L, class B>
  Sharded<T, L, B> apply(const Sharded<T, L, B>& x) const {
    if (p == 0.0) return x;
    return Sharded<T, L, B>(Kernels<B>::dropout(x.local(), p, seed, tensor, row_base + x.row_offset(), x.col_offset()), x.rows(),
                            x.cols(), x.group());
  }
};

}  // namespace shardalg::nn
