// shardalg/backend/cuda/lt_gemm.hpp — GEMMs with an epilogue (cuBLASLt), for the passes a linear
// layer would otherwise run over its output after the GEMM:
//
//   Epilogue::bias           C = op(A)·op(B) + 1·b                    (X[R] · W[C] + b[C] → Y[C])
//   Epilogue::gelu_aux_bias  C = GeLU(op(A)·op(B) + 1·b), aux = op(A)·op(B) + 1·b   (fc1: A and H)
//   Epilogue::bgrad          C = op(A)·op(B) and g = Σ_rows op(B)  (dW = Xᵀ·dY and db = Σ_rows dY)
//
// Row-major blocks, as backend.hpp's gemm: a row-major M×N block with leading dimension ld is the
// column-major N×M block Mᵀ, so C = op(A)·op(B) is Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's "A" is our B and
// its "B" our A, m ↔ n. Then our row vector b[1, N] is cuBLASLt's bias over D's rows (BIAS,
// GELU_AUX_BIAS), and Σ_rows op(B) — the sum over the reduction index k of cuBLASLt's A — is its
// BGRADA epilogue, which needs that operand untransposed (our B not transposed: dY as it is).
//
// 16-bit storage only (bf16/fp16 A, B, C and vectors; fp32 compute): what the epilogues run on
// (GPU.md's probes on an H200: BIAS and GELU_AUX_BIAS at the plain GEMM's speed, BGRADA at
// ~740 TFLOP/s). `matmul` returns false when cuBLASLt offers no algorithm for the problem (the
// caller then runs the unfused passes); it throws CudaError when a call fails.
//
// Plain C++ (host compiler + CUDA runtime / cuBLASLt headers).
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "shardalg/backend/cpu/backend.hpp"
#include "shardalg/backend/cuda/allocator.hpp"
#include "shardalg/backend/cuda/context.hpp"
#include "shardalg/backend/cuda/types.hpp"

namespace shardalg::cuda::lt {

enum class Epilogue { bias, gelu_aux_bias, bgrad };

namespace detail {
[[noreturn]] inline void fail(cublasStatus_t s, const char* what) {
  throw CudaError(shardalg::detail::cat("cuBLASLt error ", static_cast<int>(s), " (", cublasGetStatusName(s), ") in ",
                                        what));
}
#define SHARDALG_LT_CHECK(call)                                              \
  do {                                                                       \
    const cublasStatus_t shardalg_lt_s_ = (call);                            \
    if (shardalg_lt_s_ != CUBLAS_STATUS_SUCCESS)                             \
      ::shardalg::cuda::lt::detail::fail(shardalg_lt_s_, #call);             \
  } while (0)

/// This thread's cuBLASLt handle.
inline cublasLtHandle_t handle() {
  struct H {
    cublasLtHandle_t h = nullptr;
    H() { SHARDALG_LT_CHECK(cublasLtCreate(&h)); }
    ~H() {
      if (h) cublasLtDestroy(h);
    }
  };
  thread_local H h;
  return h.h;
}
/// The descriptors of one call, destroyed in any case.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descs() = default;
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};
template <class V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  SHARDALG_LT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
constexpr std::size_t kWorkspace = std::size_t{32} << 20;  // what the heuristics may use

/// What cuBLASLt's heuristic sees of one problem: the device, the epilogue, the element type, the operations,
/// the shapes and the leading dimensions (the pointers are not part of it: the preference assumes
/// the default 256-byte alignment, as every call did before the cache).
struct ProblemKey {
  int device, epilogue, type, ta, tb;
  std::uint64_t m, n, k, lda, ldb, ldc, ldaux;
  auto tie() const { return std::tie(device, epilogue, type, ta, tb, m, n, k, lda, ldb, ldc, ldaux); }
  bool operator<(const ProblemKey& o) const { return tie() < o.tie(); }
};
/// The heuristic's answer for a problem (found = false: cuBLASLt has no algorithm for it).
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};
/// This thread's answers, asked once per problem: the heuristic query costs tens of microseconds of
/// host time per call, which a step of a dozen GEMMs pays on the GPU's critical path.
inline std::map<ProblemKey, Choice>& choices() {
  thread_local std::map<ProblemKey, Choice> c;
  return c;
}
}  // namespace detail

/// Row-major C[m, n] (leading dimension ldc) := op(A)·op(B) with `e`, on ctx's stream.
///   bias: `vec` = b[1, n] (read);  gelu_aux_bias: `vec` = b, `aux` = the pre-activation [m, n] with
///   leading dimension ldaux (a multiple of 8);  bgrad: `vec` = Σ_rows op(B), n values (written).
/// Returns false when cuBLASLt has no algorithm for it.
template <HalfElement T>
bool matmul(const Context& ctx, Epilogue e, MatView<T> a, MatView<T> b, T* c, Index ldc, T* vec, T* aux = nullptr,
            Index ldaux = 0) {
  const Index m = a.rows, k = a.cols, n = b.cols;
  if (m == 0 || n == 0 || k == 0) return false;
  if (e == Epilogue::bgrad && b.trans) return false;  // BGRADA wants cuBLASLt's A (our B) untransposed
  detail::Descs d;
  SHARDALG_LT_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  detail::set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  detail::set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  const cublasLtEpilogue_t epi = e == Epilogue::bias            ? CUBLASLT_EPILOGUE_BIAS
                                 : e == Epilogue::gelu_aux_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                : CUBLASLT_EPILOGUE_BGRADA;
  detail::set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  detail::set(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(vec));
  if (e == Epilogue::gelu_aux_bias) {
    detail::set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux));
    detail::set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(ldaux));
  }
  // cuBLASLt's A = our B (stored [b.rows, b.cols] or its transpose), its B = our A, D = Cᵀ: [n, m].
  const auto rows_of = [](const MatView<T>& v) { return static_cast<std::uint64_t>(v.trans ? v.rows : v.cols); };
  const auto cols_of = [](const MatView<T>& v) { return static_cast<std::uint64_t>(v.trans ? v.cols : v.rows); };
  SHARDALG_LT_CHECK(cublasLtMatrixLayoutCreate(&d.a, cuda_data_type<T>, rows_of(b), cols_of(b), b.ld));
  SHARDALG_LT_CHECK(cublasLtMatrixLayoutCreate(&d.b, cuda_data_type<T>, rows_of(a), cols_of(a), a.ld));
  SHARDALG_LT_CHECK(cublasLtMatrixLayoutCreate(&d.c, cuda_data_type<T>, static_cast<std::uint64_t>(n),
                                               static_cast<std::uint64_t>(m), ldc));
  const detail::ProblemKey key{ctx.device(), static_cast<int>(epi), static_cast<int>(cuda_data_type<T>), static_cast<int>(ta),
                               static_cast<int>(tb), static_cast<std::uint64_t>(m), static_cast<std::uint64_t>(n),
                               static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(b.ld),
                               static_cast<std::uint64_t>(a.ld), static_cast<std::uint64_t>(ldc),
                               static_cast<std::uint64_t>(ldaux)};
  auto& choices = detail::choices();
  auto it = choices.find(key);
  if (it == choices.end()) {
    SHARDALG_LT_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const std::size_t ws = detail::kWorkspace;
    SHARDALG_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(detail::handle(), d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heur, &found);
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED)
      detail::fail(hs, "cublasLtMatmulAlgoGetHeuristic");
    detail::Choice c;
    c.found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    if (c.found) c.algo = heur.algo, c.workspace = heur.workspaceSize;
    it = choices.emplace(key, c).first;
  }
  const detail::Choice& heur = it->second;
  if (!heur.found) return false;
  const float alpha = 1.0f, beta = 0.0f;
  void* work = heur.workspace ? device_allocate(heur.workspace, ctx.stream()) : nullptr;
  const cublasStatus_t s = cublasLtMatmul(detail::handle(), d.op, &alpha, b.data, d.a, a.data, d.b, &beta, c, d.c, c,
                                          d.c, &heur.algo, work, heur.workspace, ctx.stream());
  device_free(work, ctx.stream(), ctx.stream());
  if (s != CUBLAS_STATUS_SUCCESS) detail::fail(s, "cublasLtMatmul");
  return true;
}

}  // namespace shardalg::cuda::lt
