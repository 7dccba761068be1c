// shardalg/base/linkage.hpp — where the library's runtime is compiled: in every translation unit
// that includes it (header-only, the default), or once, in shardalg::compiled.
//
// Header-only: every body is in the headers; SHARDALG_FUNC is `inline`.
// A program that links shardalg::compiled defines SHARDALG_EXTERN_TEMPLATES (the CMake and Meson
// targets do). Then the runtime's non-template functions marked SHARDALG_FUNC (the thread world's
// rendezvous and mailbox, the ledger's bookkeeping and tables, the fingerprints' descriptions) are
// declared in the headers and defined once, in src/runtime.cpp, which defines
// SHARDALG_COMPILE_RUNTIME before it includes them; and the common instantiations (ThreadComm, its
// ledgered Group) are `extern template`. A user's translation unit compiles none of it — the way
// fmt offers FMT_HEADER_ONLY or a compiled library.
#pragma once

#if defined(SHARDALG_EXTERN_TEMPLATES)
#define SHARDALG_FUNC
#if defined(SHARDALG_COMPILE_RUNTIME)
#define SHARDALG_RUNTIME_BODIES 1
#else
#define SHARDALG_RUNTIME_BODIES 0
#endif
#else
#define SHARDALG_FUNC inline
#define SHARDALG_RUNTIME_BODIES 1
#endif
