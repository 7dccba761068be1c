// shardalg/backend/cpu/allocator.hpp — keep freed memory in the process (glibc malloc), so that a
// training loop's step, which frees and allocates the same large blocks every time, reuses
// mapped pages instead of faulting fresh zeroed ones in.
//
// By default glibc hands large blocks back to the kernel: blocks above the mmap threshold (at
// most 32 MiB) are mmapped and unmapped per allocation, the top of a heap beyond the trim
// threshold is released, and a thread's own arena (ThreadComm's rank threads get one each)
// releases whole heaps as they empty. Each released page faults back in, zeroed, on the next
// step: at m = 2048, h = 1024, ffn = 4h, TP = 2 that is ~18,000 faults per rank and step, more on
// a rank thread than in a process (its arena also returns heaps, and in one address space every
// release is a TLB shootdown that interrupts the other ranks' cores). docs/performance.md
// measures both.
//
// retain_freed_memory() sets, process-wide: one arena for every thread (M_ARENA_MAX = 1), no
// mmapped blocks (M_MMAP_MAX = 0: every block from the heap, which is reused), and no trimming
// (M_TRIM_THRESHOLD at its maximum). The resident size then stays at the high-water mark: that
// is the trade. Call it once, first thing in main (before any thread starts; run_ranks' threads
// then share the arena). Opt-in: a library should not change its user's allocator unasked.
// Outside glibc it does nothing and returns false. The same effect without code:
// MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=18446744073709551615.
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardalg {

/// Keep freed memory mapped for reuse (glibc); true when the settings took.
inline bool retain_freed_memory() {
#if defined(__GLIBC__)
  const bool a = mallopt(M_ARENA_MAX, 1) == 1;
  const bool m = mallopt(M_MMAP_MAX, 0) == 1;
  const bool t = mallopt(M_TRIM_THRESHOLD, -1) == 1;  // (unsigned long) −1: never trim
  return a && m && t;
#else
  return false;
#endif
}

}  // namespace shardalg
