// Built twice by tests/unit/CMakeLists.txt — with the build's flags and with -march=native — and
// run by the test unit_simd_rows_flags, which requires the two to print the same line: a float
// LayerNorm and RMSNorm (y, x̂, rstd; dX with and without the residual; the fused and the unfused
// path), the GeLU and the softmax kernels have one set of bits whatever the compiler targets
// (backend/cpu/simd.hpp, backend/cpu/simd_rows.hpp). dγ and dβ are left out: column sums keep Eigen's order,
// which follows the packet width (backend/cpu/col_sum_order.hpp).
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <shardalg/nn.hpp>

using namespace shardalg;
using Mf = CpuBackend::matrix<float>;

namespace {
std::uint64_t fnv(std::uint64_t h, const Mf& m) {
  const auto* p = reinterpret_cast<const unsigned char*>(m.data());
  for (Index i = 0; i < m.size() * Index(sizeof(float)); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
/// Values in [−scale, scale) from an LCG (no library generator whose code could vary by flags).
Mf values(Index r, Index c, float scale, std::uint64_t seed) {
  Mf m(r, c);
  for (Index i = 0; i < m.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    m.data()[i] = scale * (static_cast<float>(seed >> 40) / 8388608.0f - 1.0f);
  }
  return m;
}
}  // namespace

int main() {
  using K = nn::Kernels<CpuBackend>;
  using F = nn::Fused<CpuBackend>;
  const Index rows = 19, n = 1029;  // n: whole vectors and a tail
  const Mf x = values(rows, n, 3.0f, 1), gamma = values(1, n, 1.0f, 2), beta = values(1, n, 1.0f, 3);
  const Mf dy = values(rows, n, 1.0f, 4), res = values(rows, n, 1.0f, 5);
  std::uint64_t h = 1469598103934665603ull;
  for (bool center : {true, false}) {
    const Mf* b = center ? &beta : nullptr;
    const auto o = K::norm_apply(x, K::row_mean_var(x, center), gamma, b, 1e-5f);
    const auto sums = K::norm_grad_sums(dy, o.xhat, gamma);
    const Mf dx = K::norm_grad_apply(dy, o.xhat, gamma, o.rstd, sums, n, center);
    const auto fo = F::norm_forward(x, gamma, b, 1e-5f, center);
    const auto fb = F::norm_backward(dy, fo.xhat, gamma, fo.rstd, center, center, &res);
    for (const Mf* m : std::initializer_list<const Mf*>{&o.y, &o.xhat, &o.rstd, &sums, &dx, &fo.y, &fb.dx}) h = fnv(h, *m);
  }
  Mf g(rows, n), gd(rows, n), e = x;
  simd::gelu_tanh(x.data(), g.data(), x.size());
  simd::gelu_tanh_grad(x.data(), gd.data(), x.size());
  for (Index i = 0; i < rows; ++i) e(i, 0) = simd::exp_sum(e.data() + i * n, 0.125f, 0.5f, n);
  for (const Mf* m : std::initializer_list<const Mf*>{&g, &gd, &e}) h = fnv(h, *m);
  std::printf("%s %016llx\n", simd::level() == simd::Level::avx2 ? "avx2" : "scalar", static_cast<unsigned long long>(h));
}
