// shardalg/cost/units.hpp — the byte and time units the cost model speaks in.
//
// Binary (KiB, MiB, GiB) and decimal (kB, MB, GB) units are kept apart on purpose: the source
// documents write "112 MB" for 112 MiB = 117.4 MB, and a 32 GB V100 holds 32 GiB. Every
// quantity in the cost model carries its unit in its name: `_bytes`, `_seconds`, `_flops`,
// `_bytes_per_second`, `_flops_per_second`.
#pragma once

namespace shardalg::cost {

inline constexpr double KiB = 1024.0;
inline constexpr double MiB = 1024.0 * KiB;
inline constexpr double GiB = 1024.0 * MiB;
inline constexpr double kB = 1e3;
inline constexpr double MB = 1e6;
inline constexpr double GB = 1e9;

inline constexpr double microseconds = 1e-6;  // seconds per µs
inline constexpr double TFLOP = 1e12;         // flops per TFLOP

/// Bytes per element of the usual training dtypes.
inline constexpr double fp16_bytes = 2.0;
inline constexpr double bf16_bytes = 2.0;
inline constexpr double fp32_bytes = 4.0;

}  // namespace shardalg::cost
