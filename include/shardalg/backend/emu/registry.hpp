// shardalg/backend/emu/registry.hpp — emulated device memory: page-aligned mappings the host
// cannot read, and the guard that opens them for the length of one backend call.
//
//   void* p = Registry::get().allocate(bytes);     // mmap'd, PROT_NONE: a host read is a SIGSEGV
//   { Open o(p, bytes, "what"); /* read and write p here */ }   // PROT_READ|WRITE, then PROT_NONE
//   Registry::get().release(p);                    // munmap
//
// One allocation, as laid out in memory (page = sysconf(_SC_PAGESIZE)):
//
//   base                      base + bytes          base + mapped = base + ⌈bytes / page⌉·page
//   | the elements (row-major) | slack (never valid) |
//   └──────────── one mmap, one protection: PROT_NONE while closed ────────────┘
//
// mprotect is process-wide and the simulated ranks are threads of one process, so an allocation
// is opened by count: the first Open makes it readable and writable, the last one to close makes
// it PROT_NONE again. Counts, the address map and every mprotect are under one mutex; a guard
// remembers the allocation's id, so closing after the allocation was freed (and its address
// reused) touches nothing.
//
// The fault handler (fault.hpp) must name an allocation from inside a signal handler, where the
// mutex may not be taken: each live allocation also sits in a slot of a fixed table of atomics
// that the handler scans (allocations beyond kSlots still work; the handler just cannot name them).
//
// POSIX only (mmap, mprotect, sysconf).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardalg/base/errors.hpp"

namespace shardalg::emu {

/// Misuse of emulated device memory that is found without a signal: opening host memory as
/// device memory, a range past the end of its allocation, a failed mmap or mprotect. The message
/// names the addresses and sizes.
struct EmuError : Error {
  using Error::Error;
};

namespace detail {

/// "0x" and lowercase hex digits, no padding (glibc's %p): async-signal-safe, for the handler
/// too. `out` holds at least 19 characters; returns the length.
inline std::size_t format_hex(std::uintptr_t v, char* out) {
  char tmp[16];
  std::size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 0xF];
    v >>= 4;
  } while (v != 0);
  out[0] = '0';
  out[1] = 'x';
  for (std::size_t i = 0; i < n; ++i) out[2 + i] = tmp[n - 1 - i];
  return n + 2;
}
inline std::string hex(const void* p) {
  char buf[20];
  return std::string(buf, format_hex(reinterpret_cast<std::uintptr_t>(p), buf));
}

inline std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

/// The handler's table: base == 0 is a free slot. Written under the registry's mutex (bytes and
/// mapped first, base last, released), read by the handler without it.
struct Slot {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> mapped{0};
  std::atomic<std::size_t> bytes{0};
};
inline constexpr int kSlots = 1 << 15;
inline Slot g_slots[kSlots];

}  // namespace detail

/// What the registry knows of one allocation.
struct AllocationInfo {
  const void* base = nullptr;
  std::size_t bytes = 0;   // as asked for
  std::size_t mapped = 0;  // whole pages
  int opens = 0;           // guards holding it open now
};

/// The live allocations of emulated device memory (one per process; never destroyed, so that
/// matrices with static storage may outlive main).
class Registry {
 public:
  static Registry& get() {
    static Registry* r = new Registry;
    return *r;
  }

  /// A new allocation of `bytes` (> 0) bytes, page-aligned, zero-filled, PROT_NONE.
  void* allocate(std::size_t bytes) {
    if (bytes == 0) throw EmuError("emu: an allocation of 0 bytes (an empty matrix holds no device memory)");
    const std::size_t page = detail::page_size();
    if (bytes > SIZE_MAX - page)
      throw EmuError(shardalg::detail::cat("emu: an allocation of ", bytes, " bytes overflows the address space"));
    const std::size_t mapped = (bytes + page - 1) / page * page;
    void* p = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw EmuError(shardalg::detail::cat("emu: mmap of ", mapped, " bytes failed: ", std::strerror(errno)));
    const auto base = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lk(m_);
    int slot = -1;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else if (next_slot_ < detail::kSlots) {
      slot = next_slot_++;
    }
    if (slot >= 0) {
      auto& s = detail::g_slots[slot];
      s.bytes.store(bytes, std::memory_order_relaxed);
      s.mapped.store(mapped, std::memory_order_relaxed);
      s.base.store(base, std::memory_order_release);
    }
    live_.emplace(base, Record{bytes, mapped, next_id_++, 0, slot});
    return p;
  }

  /// Unmap an allocation made by allocate() (p its base). Anything else is a bug in the caller:
  /// reported on stderr, then abort (this runs in destructors).
  void release(void* p) noexcept {
    const auto base = reinterpret_cast<std::uintptr_t>(p);
    std::size_t mapped = 0;
    {
      std::lock_guard lk(m_);
      const auto it = live_.find(base);
      if (it == live_.end()) fatal("emu: release of ", p, ", which is not the base of a live allocation");
      if (it->second.opens > 0) --open_;
      if (it->second.slot >= 0) {
        detail::g_slots[it->second.slot].base.store(0, std::memory_order_release);
        free_slots_.push_back(it->second.slot);
      }
      mapped = it->second.mapped;
      live_.erase(it);
    }
    ::munmap(p, mapped);
  }

  /// The allocation holding address p, if any.
  [[nodiscard]] bool find(const void* p, AllocationInfo* info = nullptr) {
    std::lock_guard lk(m_);
    const auto it = holding(reinterpret_cast<std::uintptr_t>(p));
    if (it == live_.end()) return false;
    if (info)
      *info = {reinterpret_cast<const void*>(it->first), it->second.bytes, it->second.mapped, it->second.opens};
    return true;
  }
  /// Allocations alive now, and how many of them are open (0 between backend calls).
  [[nodiscard]] std::size_t live() {
    std::lock_guard lk(m_);
    return live_.size();
  }
  [[nodiscard]] std::size_t open() {
    std::lock_guard lk(m_);
    return open_;
  }

  /// What Open holds: the allocation's base and id (base 0: nothing is open).
  struct Ticket {
    std::uintptr_t base = 0;
    std::uint64_t id = 0;
  };

  /// Open the allocation holding [p, p + n) (n > 0). Host memory: a null ticket when
  /// `host_ok`, else EmuError; a range that leaves its allocation: EmuError. `what` names the caller.
  Ticket open(const void* p, std::size_t n, bool host_ok, std::string_view what) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lk(m_);
    const auto it = holding(a);
    if (it == live_.end()) {
      if (host_ok) return {};
      throw EmuError(shardalg::detail::cat("emu: ", what, ": ", detail::hex(p),
                                           " is not emulated device memory (no emu allocation holds it)"));
    }
    Record& r = it->second;
    if (n > r.bytes - (a - it->first))
      throw EmuError(shardalg::detail::cat("emu: ", what, ": ", n, " bytes at ", detail::hex(p),
                                           " run past the end of their allocation (", r.bytes, " bytes at ",
                                           detail::hex(reinterpret_cast<const void*>(it->first)), ", offset ",
                                           a - it->first, ")"));
    if (r.opens == 0) {
      if (::mprotect(reinterpret_cast<void*>(it->first), r.mapped, PROT_READ | PROT_WRITE) != 0)
        throw EmuError(shardalg::detail::cat("emu: ", what, ": mprotect(PROT_READ|PROT_WRITE) of ", r.mapped,
                                             " bytes at ", detail::hex(reinterpret_cast<const void*>(it->first)),
                                             " failed: ", std::strerror(errno)));
      ++open_;
    }
    ++r.opens;
    return {it->first, r.id};
  }
  /// Close what open() opened; the last close makes the pages PROT_NONE again.
  void close(Ticket t) noexcept {
    if (t.base == 0) return;
    std::lock_guard lk(m_);
    const auto it = live_.find(t.base);
    if (it == live_.end() || it->second.id != t.id) return;  // freed meanwhile
    Record& r = it->second;
    if (--r.opens == 0) {
      --open_;
      if (::mprotect(reinterpret_cast<void*>(it->first), r.mapped, PROT_NONE) != 0)
        fatal("emu: mprotect(PROT_NONE) of ", reinterpret_cast<void*>(it->first), " failed");
    }
  }

 private:
  struct Record {
    std::size_t bytes, mapped;
    std::uint64_t id;
    int opens;
    int slot;  // in detail::g_slots, or −1
  };
  using Map = std::map<std::uintptr_t, Record>;

  Registry() = default;

  /// The allocation whose [base, base + bytes) holds a (the mutex held).
  Map::iterator holding(std::uintptr_t a) {
    auto it = live_.upper_bound(a);
    if (it == live_.begin()) return live_.end();
    --it;
    return a - it->first < it->second.bytes ? it : live_.end();
  }

  [[noreturn]] static void fatal(const char* what, const void* p, const char* rest) noexcept {
    std::fprintf(stderr, "%s%s%s\n", what, detail::hex(p).c_str(), rest);
    std::abort();
  }

  std::mutex m_;
  Map live_;
  std::vector<int> free_slots_;
  int next_slot_ = 0;
  std::uint64_t next_id_ = 1;
  std::size_t open_ = 0;
};

/// Opens the emu allocation holding [p, p + n) for this guard's lifetime (n = 0: nothing).
/// Construction throws EmuError when p is not emulated device memory or the range runs past its
/// allocation; `Open::if_emu` lets host memory through untouched (the communicator's copies,
/// whose buffers may be either).
class Open {
 public:
  Open() = default;
  Open(const void* p, std::size_t n, std::string_view what)
      : t_(n == 0 ? Registry::Ticket{} : Registry::get().open(p, n, false, what)) {}
  [[nodiscard]] static Open if_emu(const void* p, std::size_t n, std::string_view what) {
    Open o;
    if (n != 0) o.t_ = Registry::get().open(p, n, true, what);
    return o;
  }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
  Open(Open&& o) noexcept : t_(std::exchange(o.t_, {})) {}
  Open& operator=(Open&& o) noexcept {
    if (this != &o) {
      Registry::get().close(t_);
      t_ = std::exchange(o.t_, {});
    }
    return *this;
  }
  ~Open() { Registry::get().close(t_); }

  /// Whether this guard holds device memory open (false for host memory and n = 0).
  [[nodiscard]] bool holds() const { return t_.base != 0; }

 private:
  Registry::Ticket t_;
};

}  // namespace shardalg::emu
