// shardalg/autodiff/verify.hpp — verify any differentiable program against its dense twin.
//
//   auto program = [](ad::Builder<double>& b) {
//     auto x = b.input<Invariant>("x");                 // shard<Invariant>(inputs["x"], group)
//     auto w = b.input<ColSharded>("w");
//     b.output("y", ad::matmul(ad::copy_to(x), w));     // y[C]
//   };
//   auto report = ad::verify(program, {{"x", X}, {"w", W}}, {.worlds = {2, 4}});
//   std::cout << report.text();                          // report.pass()
//
// For P = 1 (the dense twin: the same program on a group of one, where every layout is the whole
// matrix) and each requested world size, on ThreadComm ranks: the program's forward, then its
// derived backward from a fixed random cotangent D_o of every output (sharded to cot(L_o); a
// Partial one as random summands), then every output and every input's gradient gathered with
// to_dense. Reported per output and per gradient: the normwise relative error of P against P = 1;
// and for P = 1, a central finite-difference check of every gradient of L(x) = Σ_o ⟨y_o(x), D_o⟩
// (double; `fd_samples` entries per input, h = 1e-5·max(1, |x|); the error is normwise over the
// samples, relative to the gradient's norm scaled to their share). The report's columns are
// shardalg-verify's: name, checks, max rel error, worst, PASS / FAIL.
//
// With `.bounds = true` (a program generic in its builder, [](auto& b) { … }; the CPU backend):
// at P = 1 and each world the program runs in T and, on the same ranks, over precision::
// bound_of<T> — Running<f64 | f32>, Stored<bf16 | f16, f32> (precision/element.hpp) — whose
// elements carry the exact value and the rounding bound of that very run: its kernels, its
// summation splits, its all_reduce's order. Reported per output and gradient: the largest and the
// median over the elements of |run − exact| ÷ bound; pass ≤ 1. For T = double the exact value is
// itself a double evaluation, so the ratio is taken against twice the bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shardalg/autodiff/tape.hpp"
#include "shardalg/comm/run_ranks.hpp"
#include "shardalg/bridge/dense.hpp"
#include "shardalg/precision/element.hpp"

namespace shardalg::ad {

/// Named dense matrices (double): a program's inputs, outputs or gradients.
using Named = std::map<std::string, Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

/// What a program sees on one rank: its inputs sharded by the layout it asks for, and where its
/// outputs go. Every rank's program must ask for the same inputs in the same layouts.
template <Element T, class B = CpuBackend>
class Builder {
 public:
  using Dense = Named::mapped_type;
  using element_type = T;  // a generic program's literals (an ε) and its bounds-only branches
  Builder(Tape& tape, Group g, const Named& inputs) : tape_(&tape), g_(std::move(g)), inputs_(&inputs) {}

  /// A differentiated input (or parameter) `name`, as layout L; its gradient is reported.
  template <Layout L>
  Var<T, L, B> input(const std::string& name) {
    auto v = tape_->input(shard_as<L>(name));
    grads_.emplace(name, [v](const Tape& t) { return gathered(t.grad(v)); });
    if constexpr (bounded) grad_vars_.emplace(name, [v](const Tape& t) { return bounds_of(t.grad(v)); });
    return v;
  }
  /// An input that is not differentiated (no gradient reported).
  template <Layout L>
  Var<T, L, B> constant(const std::string& name) {
    return tape_->constant(shard_as<L>(name));
  }
  /// An output: seeded with D_name (the same dense cotangent on every world) and reported.
  template <class L>
  void output(const std::string& name, const Var<T, L, B>& y) {
    outputs_.emplace(name, gathered(y.value()));
    if constexpr (bounded) output_bounds_.emplace(name, bounds_of(y.value()));
    const Dense d = cotangent_of(name, y.rows(), y.cols());
    tape_->seed(y, cotangent_shard<cot_t<L>>(d));
  }

  [[nodiscard]] const Group& group() const { return g_; }
  [[nodiscard]] Tape& tape() { return *tape_; }

  // Used by verify(): run the backward, collect.
  Named take_outputs() { return std::move(outputs_); }
  Named gradients() const {
    Named out;
    for (const auto& [name, f] : grads_) out.emplace(name, f(*tape_));
    return out;
  }
  /// Over a running bound's element (precision/element.hpp): each output's and gradient's bound.
  Named take_output_bounds() { return std::move(output_bounds_); }
  Named gradient_bounds() const {
    Named out;
    if constexpr (bounded)
      for (const auto& [name, v] : grad_vars_) out.emplace(name, v(*tape_));
    return out;
  }
  /// The fixed cotangent of output `name` (a function of the name and the shape only).
  static Dense cotangent_of(const std::string& name, Index rows, Index cols) {
    std::uint64_t h = 1469598103934665603ULL;
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    std::mt19937_64 gen(h);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    Dense d(rows, cols);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) d(i, j) = u(gen);
    return d;
  }

 private:
  template <Layout L>
  Sharded<T, L, B> shard_as(const std::string& name) {
    auto it = inputs_->find(name);
    if (it == inputs_->end()) throw AutodiffError(shardalg::detail::cat("ad::verify: the program asks for input \"", name, "\", which is not given"));
    const Dense& d = it->second;
    if constexpr (std::is_same_v<L, Partial>) {
      return partial_shard(d.template cast<T>());
    } else {
      const typename B::template matrix<T> m = d.template cast<T>();
      try {
        return shard<L>(m, g_);
      } catch (const DivisibilityError& e) {  // name the input and the world being checked
        throw DivisibilityError(shardalg::detail::cat("ad::verify: input \"", name, "\" (", d.rows(), "x", d.cols(),
                                                      ", ", L::name, ") at world size ", g_.size(), ": ", e.what()));
      }
    }
  }
  /// A Partial whose summands are random (rank 0 takes the rest), so a mistake that keeps one
  /// rank's summand does not pass by luck.
  template <class M>
  Sharded<T, Partial, B> partial_shard(const M& d) const {
    const int p = g_.size(), r = g_.rank();
    typename B::template matrix<T> part = B::template zeros<T>(d.rows(), d.cols());
    std::mt19937_64 gen(0x5eed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    typename B::template matrix<T> rest = d;
    for (int s = 1; s < p; ++s) {
      typename B::template matrix<T> x(d.rows(), d.cols());
      for (Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(u(gen));
      rest -= x;
      if (s == r) part = x;
    }
    if (r == 0) part = rest;
    return Sharded<T, Partial, B>(std::move(part), d.rows(), d.cols(), g_);
  }
  template <Layout CL>
  Sharded<T, CL, B> cotangent_shard(const Dense& d) const {
    if constexpr (std::is_same_v<CL, Partial>) {
      return partial_shard(d.template cast<T>());
    } else {
      const typename B::template matrix<T> m = d.template cast<T>();
      return shard<CL>(m, g_);
    }
  }
  template <class L>
  static Dense gathered(const Sharded<T, L, B>& x) {
    if constexpr (bounded) return to_dense(x).unaryExpr([](const T& e) { return e.value(); });
    else return to_dense(x).template cast<double>();
  }
  template <class L>
  static Dense bounds_of(const Sharded<T, L, B>& x) {
    return to_dense(x).unaryExpr([](const T& e) { return e.bound(); });
  }
  static constexpr bool bounded = precision::is_bound_element_v<T>;

  Tape* tape_;
  Group g_;
  const Named* inputs_;
  Named outputs_, output_bounds_;
  std::map<std::string, std::function<Dense(const Tape&)>> grads_, grad_vars_;
};

struct VerifyOptions {
  std::vector<int> worlds = {2, 4};  // thread world sizes checked against P = 1
  double tolerance = 1e-12;          // normwise relative error, outputs and gradients vs P = 1
  double fd_tolerance = 1e-7;        // relative error of the central differences (double)
  int fd_samples = 12;               // entries per input checked by finite differences (0: none)
  /// Derived bounds instead of `tolerance`: at P = 1 and each world, every element of every
  /// output and gradient of the run in T against its exact value, error ÷ its rounding bound
  /// (the same program over precision::bound_of<T>); pass ≤ 1. Needs a program generic in its
  /// builder ([](auto& b) { … }), the CPU backend and a floating-point T.
  bool bounds = false;
};

struct VerifyCheck {
  std::string name;  // "y" (output), "d w" (gradient), "fd d w" (finite differences)
  int world = 1;
  double error = 0;   // bounds: the largest error ÷ bound
  bool pass = true;
  double median = 0;  // bounds: the median error ÷ bound over the tensor's elements
};

struct VerifyReport {
  std::vector<VerifyCheck> checks;
  Named outputs, gradients;  // at P = 1
  bool bounds = false;       // the checks are error ÷ bound (VerifyOptions::bounds)
  [[nodiscard]] bool pass() const {
    return std::all_of(checks.begin(), checks.end(), [](const VerifyCheck& c) { return c.pass; });
  }
  /// One line per check, then PASS or FAIL (the format of shardalg-verify's rows).
  [[nodiscard]] std::string text() const {
    std::ostringstream os;
    char line[256];
    if (bounds) {
      os << "ad::verify — every element of the run against its exact value, error ÷ its rounding bound (pass ≤ 1)\n";
      std::snprintf(line, sizeof line, "%-28s %6s  %-13s %-13s %s\n", "tensor", "world", "max err/bound", "median", "");
      os << line;
      for (const auto& c : checks) {
        std::snprintf(line, sizeof line, "%-28s %6d  %-13.3g %-13.3g %s\n", c.name.c_str(), c.world, c.error, c.median,
                      c.pass ? "" : "FAIL");
        os << line;
      }
      os << (pass() ? "PASS\n" : "FAIL\n");
      return os.str();
    }
    os << "ad::verify — the program's forward and derived backward, sharded vs its dense twin (P = 1)\n";
    std::snprintf(line, sizeof line, "%-28s %6s  %-13s %s\n", "check", "world", "max rel error", "");
    os << line;
    for (const auto& c : checks) {
      std::snprintf(line, sizeof line, "%-28s %6d  %-13.1e %s\n", c.name.c_str(), c.world, c.error, c.pass ? "" : "FAIL");
      os << line;
    }
    os << (pass() ? "PASS\n" : "FAIL\n");
    return os.str();
  }
};

namespace detail {
inline double rel_error(const Named::mapped_type& got, const Named::mapped_type& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return std::numeric_limits<double>::infinity();
  const double scale = want.norm();
  const double diff = (got - want).norm();
  return scale > 0 ? diff / scale : diff;
}

/// One run of the program on p thread ranks: rank 0's gathered outputs and gradients; over a
/// running bound's element (precision/element.hpp) their values and, beside them, their bounds.
struct Run {
  Named outs, grads, out_bounds, grad_bounds;
};
template <Element T, class B, class Program>
Run run_program(Program& program, const Named& inputs, int p) {
  Run out;
  std::mutex m;
  run_ranks(p, [&](ThreadComm& comm) {
    Tape tape;
    Builder<T, B> b(tape, Group(comm), inputs);
    program(b);
    tape.run();
    Run mine{b.take_outputs(), b.gradients(), b.take_output_bounds(), b.gradient_bounds()};
    if (comm.rank() == 0) {
      std::lock_guard lk(m);
      out = std::move(mine);
    }
  });
  return out;
}

/// max and median over the elements of |got − value| ÷ (factor·bound): 0 where both are 0, ∞
/// where only the bound is (or the shapes differ).
inline std::pair<double, double> error_over_bound(const Named::mapped_type& got, const Named::mapped_type& value,
                                                  const Named::mapped_type& bound, double factor) {
  if (got.rows() != value.rows() || got.cols() != value.cols()) return {std::numeric_limits<double>::infinity(), 0.0};
  std::vector<double> r(static_cast<std::size_t>(got.size()));
  for (Index i = 0; i < got.size(); ++i) {
    const double e = std::abs(got.data()[i] - value.data()[i]), b = factor * bound.data()[i];
    r[static_cast<std::size_t>(i)] = e == 0.0 ? 0.0 : b > 0.0 ? e / b : std::numeric_limits<double>::infinity();
  }
  if (r.empty()) return {0.0, 0.0};
  const double worst = *std::max_element(r.begin(), r.end());
  std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
  return {worst, r[r.size() / 2]};
}

/// VerifyOptions::bounds: P = 1 and each world, in T and over bound_of<T>.
template <Element T, class B, class Program>
void check_bounds(VerifyReport& rep, Program& program, const Named& inputs, const VerifyOptions& o) {
  if constexpr (!std::is_same_v<B, CpuBackend> || !std::is_floating_point_v<compute_t<T>>) {
    throw AutodiffError("ad::verify: bounds run on the CPU backend in double, float, bf16 or fp16");
  } else {
    using R = precision::bound_of<T>;
    if constexpr (!std::is_invocable_v<Program&, Builder<R, B>&>) {
      throw AutodiffError(
          "ad::verify: bounds run the program over a running bound's element too; write it generic in its builder: "
          "[](auto& b) { … }");
    } else {
      // The reference value is itself a double evaluation of the program: for T = double it is
      // within the bound of the exact value as the run is, so the two are within twice the bound.
      const double factor = std::is_same_v<T, double> ? 2.0 : 1.0;
      std::vector<int> worlds{1};
      for (int p : o.worlds)
        if (std::find(worlds.begin(), worlds.end(), p) == worlds.end()) worlds.push_back(p);
      for (int p : worlds) {
        const Run got = run_program<T, B>(program, inputs, p);
        Run ref;
        try {
          ref = run_program<R, B>(program, inputs, p);
        } catch (const precision::PrecisionError& e) {  // a bound that does not exist fails, named
          rep.checks.push_back({std::string("(bound) ") + e.what(), p, std::numeric_limits<double>::infinity(), false, 0.0});
          continue;
        }
        const auto add = [&](const std::string& label, const Named& got, const Named& values, const Named& bounds,
                             const std::string& name) {
          const auto it = got.find(name);
          const auto [worst, median] =
              it == got.end() ? std::pair{std::numeric_limits<double>::infinity(), 0.0}
                              : error_over_bound(it->second, values.at(name), bounds.at(name), factor);
          rep.checks.push_back({label, p, worst, worst <= 1.0, median});
        };
        for (const auto& [name, v] : ref.outs) add(name, got.outs, ref.outs, ref.out_bounds, name);
        for (const auto& [name, v] : ref.grads) add("d " + name, got.grads, ref.grads, ref.grad_bounds, name);
      }
    }
  }
}

/// L(x) = Σ_o ⟨y_o(x), D_o⟩ at P = 1.
template <Element T, class B, class Program>
double objective(Program& program, const Named& inputs) {
  const Run run = run_program<T, B>(program, inputs, 1);
  double l = 0;
  for (const auto& [name, y] : run.outs) l += y.cwiseProduct(Builder<T, B>::cotangent_of(name, y.rows(), y.cols())).sum();
  return l;
}
}  // namespace detail

/// Verify `program` (a callable taking Builder<T>&) on `inputs`: see the file's comment.
template <Element T = double, class B = CpuBackend, class Program>
VerifyReport verify(Program program, const Named& inputs, const VerifyOptions& o = {}) {
  VerifyReport rep;
  detail::Run one = detail::run_program<T, B>(program, inputs, 1);
  const Named& outs1 = one.outs;
  const Named& grads1 = one.grads;
  rep.bounds = o.bounds;
  if (o.bounds) detail::check_bounds<T, B>(rep, program, inputs, o);
  for (int p : o.bounds ? std::vector<int>{} : o.worlds) {
    const detail::Run run = detail::run_program<T, B>(program, inputs, p);
    const Named &outs = run.outs, &grads = run.grads;
    for (const auto& [name, y] : outs1) {
      const double e = outs.count(name) ? detail::rel_error(outs.at(name), y) : std::numeric_limits<double>::infinity();
      rep.checks.push_back({name, p, e, e <= o.tolerance});
    }
    for (const auto& [name, g] : grads1) {
      const double e = grads.count(name) ? detail::rel_error(grads.at(name), g) : std::numeric_limits<double>::infinity();
      rep.checks.push_back({"d " + name, p, e, e <= o.tolerance});
    }
  }
  // Central differences of L at P = 1, on `fd_samples` entries of each input (evenly spread).
  if constexpr (std::is_same_v<T, double>) {
    if (o.fd_samples > 0) {
      for (const auto& [name, g] : grads1) {
        const auto& x = inputs.at(name);
        const Index n = x.size(), k = std::min<Index>(n, o.fd_samples);
        double num = 0, den = 0;
        for (Index s = 0; s < k; ++s) {
          const Index idx = k == n ? s : (s * (n - 1)) / std::max<Index>(k - 1, 1);
          Named in = inputs;
          const double x0 = x.data()[idx], h = 1e-5 * std::max(1.0, std::abs(x0));
          in.at(name).data()[idx] = x0 + h;
          const double lp = detail::objective<T, B>(program, in);
          in.at(name).data()[idx] = x0 - h;
          const double lm = detail::objective<T, B>(program, in);
          const double fd = (lp - lm) / (2 * h), an = g.data()[idx];
          num += (fd - an) * (fd - an);
          den += an * an;
        }
        // Relative to the gradient's scale: the sampled entries' share of its norm (a sample of
        // tiny entries would otherwise measure only the differences' rounding).
        (void)den;
        const double scale = g.norm() * std::sqrt(static_cast<double>(k) / static_cast<double>(n));
        const double e = scale > 0 ? std::sqrt(num) / scale : std::sqrt(num);
        rep.checks.push_back({"fd d " + name, 1, e, e <= o.fd_tolerance});
      }
    }
  }
  rep.outputs = std::move(one.outs);
  rep.gradients = std::move(one.grads);
  return rep;
}

}  // namespace shardalg::ad
