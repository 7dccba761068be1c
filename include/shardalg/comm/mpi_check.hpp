// shardalg/comm/mpi_check.hpp — checked collectives over MPI: the fingerprint exchange
// MpiComm runs before a collective when check_collectives() is on (base/checks.hpp).
//
// Each rank sends its fingerprint (a FingerprintRecord, 152 bytes) to every other rank and
// receives theirs: point-to-point on the group's communicator with the reserved tag
// `mpi_check_tag` (verification traffic: the ledger does not count it). The receives are polled
// with MPI_Test against a deadline — the watchdog — so a rank whose peer skipped the collective
// raises instead of waiting for ever:
//
//   - every fingerprint arrived and they agree: the collective runs;
//   - they differ: CollectiveMismatchError on every rank, the same text on each, before any data
//     moves ("MpiComm: mismatched collectives: rank 0: all_reduce f64 × 8 (#3, mlp.fwd); rank 1:
//     all_gather f64 × 4 (#3)");
//   - some did not arrive within collective_timeout(): CollectiveTimeoutError naming this rank's
//     call, the ranks that did not arrive and what the others are in ("MpiComm: rank 0 waited more
//     than 0.5 s in all_reduce f64 × 8 (#1); rank 1 did not arrive; the communicator is unusable
//     now"). A timed-out exchange cannot be taken back (its messages may still arrive), so after a
//     timeout the communicator must not be used again: end the job (run_mpi turns the exception
//     into MPI_Abort) or carry on with another communicator.
//
// Point-to-point send/recv are checked their own way (comm/mpi_p2p.hpp). A user's own MPI_ANY_TAG receive on the same
// communicator could take a fingerprint: use another tag range or a communicator of its own.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shardalg/comm/collective_check.hpp"

namespace shardalg::detail {

/// The tag of the fingerprint messages (reserved on every communicator MpiComm checks).
inline constexpr int mpi_check_tag = 23069;

/// Per group (shared by an MpiComm's copies): the sequence count of checked collectives.
struct MpiCheckState {
  std::uint64_t seq = 0;
};

/// Exchange `mine` with every rank of `comm` and compare (see the top of this file).
inline void mpi_check_collective(MPI_Comm comm, int rank, int size, const Fingerprint& mine) {
  if (size == 1) return;
  const auto fail = [](int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw CommError(cat("MpiComm: ", what, " failed in the collective check"));
  };
  std::vector<FingerprintRecord> all(static_cast<std::size_t>(size));
  all[static_cast<std::size_t>(rank)] = FingerprintRecord(mine);
  std::vector<MPI_Request> recvs(static_cast<std::size_t>(size), MPI_REQUEST_NULL), sends = recvs;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    fail(MPI_Irecv(&all[static_cast<std::size_t>(r)], sizeof(FingerprintRecord), MPI_BYTE, r, mpi_check_tag, comm,
                   &recvs[static_cast<std::size_t>(r)]),
         "MPI_Irecv");
    fail(MPI_Isend(&all[static_cast<std::size_t>(rank)], sizeof(FingerprintRecord), MPI_BYTE, r, mpi_check_tag, comm,
                   &sends[static_cast<std::size_t>(r)]),
         "MPI_Isend");
  }
  // The watchdog: poll until every request is done or the deadline passes.
  const double limit = collective_timeout();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  const auto pending = [](std::vector<MPI_Request>& reqs, auto&& fail_) {
    bool any = false;
    for (auto& q : reqs) {
      if (q == MPI_REQUEST_NULL) continue;
      int flag = 0;
      fail_(MPI_Test(&q, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      any = any || !flag;
    }
    return any;
  };
  for (long polls = 0;; ++polls) {
    const bool waiting = pending(recvs, fail);
    const bool sending = pending(sends, fail);
    if (!waiting && !sending) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string msg = cat("MpiComm: rank ", rank, " waited more than ", timeout_text(limit), " in ", describe(mine));
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        if (recvs[static_cast<std::size_t>(r)] != MPI_REQUEST_NULL) msg += cat("; rank ", r, " did not arrive");
        else msg += cat("; rank ", r, " is in ", describe(all[static_cast<std::size_t>(r)].view()));
      }
      msg += "; the communicator is unusable now";
      for (auto& q : recvs)
        if (q != MPI_REQUEST_NULL) {
          MPI_Cancel(&q);
          MPI_Wait(&q, MPI_STATUS_IGNORE);
        }
      for (auto& q : sends)
        if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
      throw CollectiveTimeoutError(std::move(msg));
    }
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::string msg = mismatch_text("MpiComm", size, [&](int r) -> const FingerprintRecord& {
    return all[static_cast<std::size_t>(r)];
  });
  if (!msg.empty()) throw CollectiveMismatchError(std::move(msg));
}

}  // namespace shardalg::detail
