// shardalg/backend/emu/fault.hpp — a host read of emulated device memory, reported by name.
//
// A closed emu allocation is PROT_NONE (registry.hpp), so code that dereferences a device pointer
// on the host outside the backend's entry points takes a SIGSEGV. The handler installed here
// looks the faulting address up in the registry's slot table and, when it lies in an emu
// allocation, writes one line with write(2) before the process dies:
//
//   shardalg emu: host read of emulated device memory at 0x7f0c2d9e3010 (allocation of 96 bytes
//   at 0x7f0c2d9e3000, offset 16): only the backend's entry points open device memory; copy it to
//   the host with EmuBackend::to_host
//
// ("read" or "write" from the x86-64 page-fault error code; "access" on other machines). Then it
// hands the signal on to the handler it displaced (a test framework's report, ASan's) and
// restores the default action, so the process still dies of SIGSEGV. A fault elsewhere is passed
// to the displaced handler untouched.
//
// Staying on top: a test framework installs its own handler around each test case and puts back
// what it found afterwards. `install_fault_handler()` runs at every allocation (device_allocate)
// and reinstalls this handler when another one has replaced it, remembering that one as the next
// in line. A re-entry (the next handler raising the signal again) goes straight to the default.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "shardalg/backend/emu/registry.hpp"

namespace shardalg::emu {

namespace detail {

inline struct sigaction g_next_segv {};  // the handler this one displaced
inline std::atomic<int> g_fault_depth{0};
inline std::mutex g_install_mutex;

inline void put(char*& at, const char* s) {
  while (*s) *at++ = *s++;
}
inline void put_dec(char*& at, std::size_t v) {
  char tmp[24];
  std::size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n) *at++ = tmp[--n];
}

/// The line the handler writes for a fault at `addr` in the allocation [base, base + bytes);
/// `kind` is "read", "write" or "access". Async-signal-safe; `out` holds at least 512 characters.
inline std::size_t fault_message(char* out, const char* kind, std::uintptr_t addr, std::uintptr_t base,
                                 std::size_t bytes) {
  char* at = out;
  put(at, "shardalg emu: host ");
  put(at, kind);
  put(at, " of emulated device memory at ");
  at += format_hex(addr, at);
  put(at, " (allocation of ");
  put_dec(at, bytes);
  put(at, " bytes at ");
  at += format_hex(base, at);
  put(at, ", offset ");
  put_dec(at, addr - base);
  put(at, "): only the backend's entry points open device memory; copy it to the host with EmuBackend::to_host\n");
  return static_cast<std::size_t>(at - out);
}

inline const char* fault_kind([[maybe_unused]] void* ctx) {
#if defined(__linux__) && defined(__x86_64__) && defined(REG_ERR)
  // Bit 1 of the page-fault error code: the access was a write.
  const auto* uc = static_cast<const ucontext_t*>(ctx);
  return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
#else
  return "access";
#endif
}

inline void restore_default() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGSEGV, &dfl, nullptr);
}

inline void on_fault(int sig, siginfo_t* info, void* ctx);

/// Call the displaced handler, if it is a function (not SIG_DFL, SIG_IGN or this one).
inline bool chain(int sig, siginfo_t* info, void* ctx) {
  const struct sigaction next = g_next_segv;
  if (next.sa_flags & SA_SIGINFO) {
    if (next.sa_sigaction == nullptr || next.sa_sigaction == &on_fault) return false;
    next.sa_sigaction(sig, info, ctx);
    return true;
  }
  if (next.sa_handler == SIG_DFL || next.sa_handler == SIG_IGN) return false;
  next.sa_handler(sig);
  return true;
}

inline void on_fault(int sig, siginfo_t* info, void* ctx) {
  if (g_fault_depth.fetch_add(1) != 0) {  // re-entered: the next handler re-raised, or a fault in here
    restore_default();
    return;
  }
  bool ours = false;
  if (info != nullptr && info->si_code > 0) {  // raised by the kernel for an access, not by kill/raise
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (int i = 0; i < kSlots && !ours; ++i) {
      const std::uintptr_t base = g_slots[i].base.load(std::memory_order_acquire);
      if (base == 0 || addr < base) continue;
      const std::size_t mapped = g_slots[i].mapped.load(std::memory_order_relaxed);
      if (addr - base >= mapped) continue;
      char msg[512];
      const std::size_t n = fault_message(msg, fault_kind(ctx), addr, base, g_slots[i].bytes.load(std::memory_order_relaxed));
      [[maybe_unused]] const auto w = ::write(STDERR_FILENO, msg, n);
      ours = true;
    }
  }
  if (ours) {
    (void)chain(sig, info, ctx);  // e.g. the test framework names the test case
    restore_default();            // then die: the access faults again, or the re-raise arrives
    return;
  }
  if (!chain(sig, info, ctx)) {
    restore_default();
    return;
  }
  g_fault_depth.fetch_sub(1);  // the next handler returned: it dealt with the fault
}

}  // namespace detail

/// Install the handler, or reinstall it over one that replaced it (remembering that one as the
/// next in line). Cheap when it is already installed: one sigaction query.
inline void install_fault_handler() {
  std::lock_guard lk(detail::g_install_mutex);
  struct sigaction cur {};
  if (::sigaction(SIGSEGV, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &detail::on_fault) return;
  detail::g_next_segv = cur;
  struct sigaction sa {};
  sa.sa_sigaction = &detail::on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, nullptr);
}

/// A new device allocation (registry.hpp) with the fault handler on top.
inline void* device_allocate(std::size_t bytes) {
  install_fault_handler();
  return Registry::get().allocate(bytes);
}
inline void device_release(void* p) noexcept {
  if (p) Registry::get().release(p);
}

}  // namespace shardalg::emu
