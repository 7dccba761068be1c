// shardalg/verify/check.hpp — a sharded layer checked against its dense twin.
//
// A layer runs sharded (ColumnParallelLinear: X[R] · W[C] → Y[C]; RowParallelLinear:
// H[C] · W[Row] → Z[Partial] → Z[R]; a block: X[R] → Y[R], …) and the same layer runs dense on the
// gathered masters (X · W → Y, one matrix each). Every output and every gradient of the sharded
// run is gathered (to_dense: the dense value D of the layout) and compared with the dense one E:
//
//   normwise relative error   e = max_ij |D_ij − E_ij| / max_ij |E_ij|        (bridge/dense.hpp)
//   pass                      e ≤ tol,  tol = 1e-12 in double, 1e-5 in float (tolerance_for<T>)
//
// A sharded tensor may be padded past its dense twin (a vocabulary padded to a multiple of
// divisor·P: E[V, h] beside D[V′, h], V′ ≥ V): the overlap D[0:V, 0:h] is compared with E, and the
// padding must be exactly zero — a second check, "<name> padding = 0".
//
// A LayerCheck collects the checks of one layer; it passes when every check passes, its error
// is the largest of its checks'. Nothing here communicates except check_sharded (to_dense is a
// collective: every rank calls it).
//
//   verify::LayerCheck row{"fc1", verify::tolerance_for<double>()};
//   row.add("y", to_dense(f.y), X * W + b.replicate(X.rows(), 1));   // X[R] · W[C] → Y[C]
//   row.add("dW", to_dense(g.params.dw), X.transpose() * dY);         // Xᵀ[R] · dY[C] → dW[C]
//   if (!row.all_pass()) …   row.max_error(), row.worst()->name
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "shardalg/bridge/dense.hpp"
#include "shardalg/core/sharded.hpp"

namespace shardalg::verify {

/// The threshold for the normwise relative error of one pass in T: 1e-12 in double, 1e-5 in float.
template <class T>
[[nodiscard]] constexpr double tolerance_for() {
  return sizeof(T) >= sizeof(double) ? 1e-12 : 1e-5;
}

/// One compared tensor (or fact): its error against the dense twin, and whether it passed.
struct Check {
  std::string name;
  ErrorReport err;
  bool pass = false;
};

/// A fact that holds or not (replicas bit-identical, two seeds equal): error 0 or ∞.
[[nodiscard]] inline Check check_flag(std::string name, bool holds) {
  Check c{std::move(name), {}, holds};
  c.err.max_rel = holds ? 0.0 : std::numeric_limits<double>::infinity();
  return c;
}

/// An error relative to a scale, as compare() reports it: 0 when the difference is 0 (also on a
/// zero scale: 0/0 is agreement), ∞ when the difference is NaN or the scale 0, else diff / scale.
[[nodiscard]] inline double relative_error(double abs_diff, double scale) {
  if (std::isnan(abs_diff) || std::isnan(scale)) return std::numeric_limits<double>::infinity();
  if (abs_diff == 0) return 0.0;
  return scale > 0 ? abs_diff / scale : std::numeric_limits<double>::infinity();
}

/// One number against its dense twin: |a − e| and |a − e| / |e|. Equal finite values pass (0 against
/// 0 too); a NaN or ∞ on either side fails with error ∞ (as in compare()).
[[nodiscard]] inline Check check_scalar(std::string name, double actual, double expected, double tol) {
  Check c{std::move(name), {}, false};
  if (!std::isfinite(actual) || !std::isfinite(expected)) {
    c.err.max_abs = c.err.max_rel = std::numeric_limits<double>::infinity();
    return c;
  }
  c.err.max_abs = std::abs(actual - expected);
  c.err.max_rel = relative_error(c.err.max_abs, std::abs(expected));
  c.pass = c.err.max_rel <= tol;
  return c;
}

/// The checks of one layer (or one whole model) against its dense twin.
struct LayerCheck {
  std::string name;
  double tolerance = tolerance_for<double>();
  std::vector<Check> checks;

  LayerCheck() = default;
  explicit LayerCheck(std::string n, double tol = tolerance_for<double>()) : name(std::move(n)), tolerance(tol) {}

  /// D (gathered, possibly padded past E) against E: the overlap normwise; a padding, exactly zero.
  template <class DA, class DE>
  void add(const std::string& what, const Eigen::MatrixBase<DA>& actual, const Eigen::MatrixBase<DE>& expected) {
    const auto d = actual.template cast<double>().eval();
    const auto e = expected.template cast<double>().eval();
    const Index r = std::min(d.rows(), e.rows()), c = std::min(d.cols(), e.cols());
    ErrorReport rep = compare(d.topLeftCorner(r, c), e);
    checks.push_back({what, rep, rep.within(tolerance)});
    if (d.rows() > e.rows() || d.cols() > e.cols()) {
      double mx = 0;
      for (Index i = 0; i < d.rows(); ++i)
        for (Index j = 0; j < d.cols(); ++j)
          if (i >= e.rows() || j >= e.cols()) mx = std::max(mx, std::abs(d(i, j)));
      Check pad{what + " padding = 0", {}, mx == 0};
      pad.err.max_abs = mx;
      pad.err.max_rel = mx == 0 ? 0.0 : std::numeric_limits<double>::infinity();
      checks.push_back(pad);
    }
  }
  /// A sharded tensor against its dense twin: gathers (a collective — every rank of x's group
  /// calls it), then compares on every rank.
  template <class T, class L, class B, class DE>
  void add_sharded(const std::string& what, const Sharded<T, L, B>& actual, const Eigen::MatrixBase<DE>& expected) {
    add(what, B::to_host(to_dense(actual)), expected);
  }
  void add(Check c) { checks.push_back(std::move(c)); }

  [[nodiscard]] bool all_pass() const {
    return std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.pass; });
  }
  [[nodiscard]] std::size_t failures() const {
    return static_cast<std::size_t>(std::count_if(checks.begin(), checks.end(), [](const Check& c) { return !c.pass; }));
  }
  /// The largest relative error of the checks (0 for none; a NaN one counts as ∞).
  [[nodiscard]] double max_error() const {
    double e = 0;
    for (const auto& c : checks) e = std::max(e, std::isnan(c.err.max_rel) ? std::numeric_limits<double>::infinity() : c.err.max_rel);
    return e;
  }
  /// The check to show for the layer: the first failing one with the largest error, else the
  /// passing one with the largest error (the first of equals); null when there are none.
  [[nodiscard]] const Check* worst() const {
    const Check* w = nullptr;
    for (const auto& c : checks)
      if (!w || (!c.pass && w->pass) || (c.pass == w->pass && c.err.max_rel > w->err.max_rel)) w = &c;
    return w;
  }
};

}  // namespace shardalg::verify
