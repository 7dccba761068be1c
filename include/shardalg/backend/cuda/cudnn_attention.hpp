// shardalg/backend/cuda/cudnn_attention.hpp — fused causal attention from cuDNN 9 (its scaled
// dot-product attention graph, built with cuDNN's frontend), forward and backward: online softmax,
// masked tiles skipped, no [s, s] matrix in memory; bf16/fp16 storage with fp32 accumulation.
//
//   O[b, h, i, :] = Σ_{j ≤ i} softmax_j(Q[b, h, i, :] · K[b, h, j, :] / √d) · V[b, h, j, :]
//   L[b, h, i]    = log Σ_{j ≤ i} exp(Q·Kᵀ/√d)          (what the backward needs instead of P)
//
// Compiled once, in the optional component shardalg::cudnn (src/cuda/cudnn_attention.cpp, plain
// C++ against cuDNN's headers and the frontend in third_party/); a program that links it gets
// SHARDALG_WITH_CUDNN, and nn::Kernels<CudaBackend> (kernels.cuh) then offers the fused path to
// the attention layer (nn/layers/attention.hpp). Without it the unfused path (cuBLAS + the causal
// softmax kernels) is the only one, and it stays the reference the fused one is tested against.
//
// The tensors are views with strides, so Q, K and V are read in place from the layer's fused QKV
// block and dQ, dK, dV written in place into its gradient: element (b, h, i, c) of a view is at
// base + b·batch + h·head + i·row + c.
//
// Plain C++ (CUDA runtime header only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace shardalg::cuda::cudnn {

/// Strides (in elements) of a [batch, heads, seq, head_dim] view; the last dimension is contiguous.
struct HeadsView {
  std::int64_t batch = 0, head = 0, row = 0;
};

/// One causal self-attention problem (MHA: as many K/V heads as query heads).
struct AttnProblem {
  std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool bf16 = true;  // storage type: bf16, else fp16
  HeadsView qkv;     // Q, K and V (one block: the same strides, different bases)
  HeadsView out;     // O and dO
  HeadsView dqkv;    // dQ, dK and dV
};

/// Whether cuDNN runs the forward and the backward of p on the current device: builds (and
/// caches, per thread) both graphs. On false, *why says what cuDNN refused.
bool supported(const AttnProblem& p, std::string* why = nullptr);

/// O and L (float, [batch·heads·seq], (b, h, i) row-major) on `stream`. Throws CudaError when cuDNN
/// fails (call supported() first to choose a path).
void forward(const AttnProblem& p, const void* q, const void* k, const void* v, void* o, float* lse,
             cudaStream_t stream);

/// dQ, dK, dV (written, not accumulated) from Q, K, V, O, dO and L, deterministically (the same
/// bits every run).
void backward(const AttnProblem& p, const void* q, const void* k, const void* v, const void* o, const void* dout,
              const float* lse, void* dq, void* dk, void* dv, cudaStream_t stream);

/// The cuDNN library version this program runs with (e.g. 91900), 0 when it cannot be loaded.
std::size_t version();

}  // namespace shardalg::cuda::cudnn
