// shardalg/nn/layers/dropout.hpp — dropout whose mask is a function of (seed, tensor, global row,
// global column): mask(i, j) = [uniform(seed, tensor, i, j) ≥ p], y = x ⊙ mask / (1 − p).
//
//   forward   X[L] → Y[L] for L = R, Row or C (each rank masks its own block by global index);
//             on Partial too: dropout with a fixed mask is linear, (Σ X_r) ⊙ m = Σ (X_r ⊙ m)
//   backward  dX = dY ⊙ mask / (1 − p), same layout; the mask is recomputed, nothing is stored
//   forward_add(x, z) = x + forward(z): the residual add fused into the same pass
//   forward_bias_add(x, z, b) = x + forward(z + b): a row-parallel output bias too, where the
//             backend fuses it (CUDA)
//
// Under context parallelism (`cp` set) a rank's rows are its two chunks of every sequence
// (nn/layers/cp_tokens.hpp), not one run of global rows: the mask is applied run by run, each at
// its global rows, so it is still the one-rank mask's rows.
//
// The sharded mask equals the dense mask for any layout and any world size, so Megatron's
// "synchronised RNG state" for replicated regions and "different state per rank" for sharded
// ones are both this one function. Vary `seed` per step (e.g. seed ⊕ step).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

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
  /// Context parallelism: the sequence length and this rank's place on the cp axis (cp_tokens.hpp).
  struct CpRows {
    Index seq;
    int cp, rank;
  };
  std::optional<CpRows> cp;

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
    if (cp && p != 0.0) return x + apply(z);  // run by run (below); the same values, two passes
    return Sharded<T, L, B>(Fused<B>::dropout_add(x.local(), z.local(), p, seed, tensor, row_base + z.row_offset(), z.col_offset()),
                            x.rows(), x.cols(), g);
  }
  /// x + forward(z + b): a row-parallel layer's output bias b[R] added in the same pass as the
  /// dropout and the residual (Megatron's bias-dropout-add) when the backend fuses the three
  /// (nn::Fused<B>::bias_dropout_add, the CUDA backend's); otherwise z + b, then forward_add. The same
  /// values either way: z + b rounded to T, then x + mask · (z + b) / (1 − p).
  template <class T, class L, class B>
  Sharded<T, L, B> forward_bias_add(const Sharded<T, L, B>& x, const Sharded<T, L, B>& z,
                                    const Sharded<T, Replicated, B>& b) const {
    if constexpr (requires(const typename B::template matrix<T>& m) {
                    Fused<B>::bias_dropout_add(m, m, m, p, seed, tensor, Index{0}, Index{0});
                  }) {
      if (!cp) {
        const Group& g = shardalg::detail::same_shape_group(x, z, "add");
        if (b.rows() != 1 || b.cols() != z.cols())
          throw ShapeError(shardalg::detail::cat("Dropout::forward_bias_add: bias ", b.rows(), "x", b.cols(), " for ",
                                                 z.rows(), "x", z.cols()));
        auto e = explain_op(g, "add", dtype_of<T>, {note(x), " + ", note(z), " + ", note(b), " → ", note(x)});
        return Sharded<T, L, B>(Fused<B>::bias_dropout_add(x.local(), z.local(), b.local(), p, seed, tensor,
                                                           row_base + z.row_offset(), z.col_offset()),
                                x.rows(), x.cols(), g);
      }
    }
    return forward_add(x, add_bias(z, b));
  }

 private:
  template <class T, class L, class B>
  Sharded<T, L, B> apply(const Sharded<T, L, B>& x) const {
    if (p == 0.0) return x;
    if (cp) return apply_runs(x);
    return Sharded<T, L, B>(Kernels<B>::dropout(x.local(), p, seed, tensor, row_base + x.row_offset(), x.col_offset()), x.rows(),
                            x.cols(), x.group());
  }
  /// This rank's rows [o, o + m) of its cp share, cut at the chunks' edges: each piece masked at
  /// its global rows (row_base + sequence · seq + chunk · c + offset in the chunk).
  template <class T, class L, class B>
  Sharded<T, L, B> apply_runs(const Sharded<T, L, B>& x) const {
    const Index c = cp->seq / (2 * Index{cp->cp}), o = x.row_offset(), m = x.local().rows(), w = x.local().cols();
    auto out = x.local();
    for (Index k = o / c; k * c < o + m; ++k) {  // run k: sequence k / 2, local chunk k % 2
      const Index a = std::max(k * c, o), e = std::min((k + 1) * c, o + m);
      const Index chunk = k % 2 == 0 ? cp->rank : 2 * Index{cp->cp} - 1 - cp->rank;
      const Index g0 = row_base + (k / 2) * cp->seq + chunk * c + (a - k * c);
      Kernels<B>::place(out, a - o, 0, Kernels<B>::dropout(B::copy_block(x.local(), a - o, 0, e - a, w), p, seed, tensor, g0, x.col_offset()));
    }
    return Sharded<T, L, B>(std::move(out), x.rows(), x.cols(), x.group());
  }
};

}  // namespace shardalg::nn
