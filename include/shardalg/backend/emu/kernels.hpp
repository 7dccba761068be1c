// shardalg/backend/emu/kernels.hpp — Kernels<EmuBackend>: the layers' local kernels
// (backend/kernels.hpp) on emulated device memory, as an adapter over Kernels<CpuBackend>: every
// input is downloaded (opened, copied, closed), the CPU kernel runs on the host copies, every
// output is uploaded. The results are the CPU kernels' bits; what the adapter checks is that the
// layers hand their kernels device blocks and never read those blocks themselves.
//
//   Kernels<EmuBackend>::f(x₁ … xₙ, args) = upload(Kernels<CpuBackend>::f(download(x₁) … download(xₙ), args))
//
// Attention takes an AttnDropout, as the CPU's does, so the layers' attention dropout runs here.
// Fused<EmuBackend> is backend/fused.hpp's generic composition over these and EmuBackend's operations.
#pragma once

#include <cstdint>
#include <utility>

#include "shardalg/backend/cpu/kernels.hpp"
#include "shardalg/backend/emu/backend.hpp"
#include "shardalg/backend/kernels.hpp"

namespace shardalg::nn {

template <>
struct Kernels<emu::EmuBackend> {
  template <class T>
  using M = emu::EmuMatrix<T>;
  using Cpu = Kernels<CpuBackend>;

  template <class T, class F>
  static M<T> generate(Index r, Index c, F f) {
    return Cpu::generate<T>(r, c, std::move(f));
  }
  /// dst[r0 : r0 + src.rows, c0 : c0 + src.cols] := src.
  template <class T>
  static void place(M<T>& dst, Index r0, Index c0, const M<T>& src) {
    emu::EmuBackend::paste_block(dst, r0, c0, src);
  }

  template <class T>
  static M<T> row_mean_var(const M<T>& x, bool center) {
    return Cpu::row_mean_var(x.host(), center);
  }
  template <class T>
  static M<T> row_power_sums(const M<T>& x) {
    return Cpu::row_power_sums(x.host());
  }
  template <class T>
  static M<T> mean_var_from_sums(const M<T>& s, Index n, bool center) {
    return Cpu::mean_var_from_sums(s.host(), n, center);
  }

  template <class T>
  struct NormOut {
    M<T> y, xhat, rstd;  // rstd: [rows, 1]
  };
  template <class T>
  static NormOut<T> norm_apply(const M<T>& x, const M<T>& mv, const M<T>& gamma, const M<T>* beta, T eps) {
    const auto hb = beta ? beta->host() : emu::HostMatrix<T>();
    auto o = Cpu::norm_apply(x.host(), mv.host(), gamma.host(), beta ? &hb : nullptr, eps);
    return {M<T>(o.y), M<T>(o.xhat), M<T>(o.rstd)};
  }
  template <class T>
  static M<T> norm_grad_sums(const M<T>& dy, const M<T>& xhat, const M<T>& gamma) {
    return Cpu::norm_grad_sums(dy.host(), xhat.host(), gamma.host());
  }
  template <class T>
  static M<T> norm_grad_apply(const M<T>& dy, const M<T>& xhat, const M<T>& gamma, const M<T>& rstd, const M<T>& sums,
                              Index n, bool center) {
    return Cpu::norm_grad_apply(dy.host(), xhat.host(), gamma.host(), rstd.host(), sums.host(), n, center);
  }

  template <class T>
  static M<T> swiglu(const M<T>& h) {
    return Cpu::swiglu(h.host());
  }
  template <class T>
  static M<T> swiglu_grad(const M<T>& h, const M<T>& da) {
    return Cpu::swiglu_grad(h.host(), da.host());
  }
  template <class T>
  static M<T> dropout(const M<T>& x, double p, std::uint64_t seed, std::uint64_t tensor, Index r0, Index c0) {
    return Cpu::dropout(x.host(), p, seed, tensor, r0, c0);
  }

  template <class T>
  struct AttnOut {
    M<T> out;    // [tokens, units·q_per_unit·head_dim]
    M<T> probs;  // [(batch·units·q_per_unit)·seq, seq]
  };
  template <class T>
  static AttnOut<T> causal_attention(const M<T>& qkv, const AttnShape& s, const AttnDropout& drop = {}) {
    auto o = Cpu::causal_attention(qkv.host(), s, drop);
    return {M<T>(o.out), M<T>(o.probs)};
  }
  template <class T>
  static M<T> causal_attention_grad(const M<T>& qkv, const M<T>& probs, const M<T>& dout, const AttnShape& s,
                                    const AttnDropout& drop = {}) {
    return Cpu::causal_attention_grad(qkv.host(), probs.host(), dout.host(), s, drop);
  }
};

}  // namespace shardalg::nn
