// shardalg/comm/mpi_p2p.hpp — MpiComm's point to point: the Requests of isend/irecv, and in
// checked mode (base/checks.hpp) the message check and the watchdog.
//
// Checked mode, per message from rank s to rank d on one communicator:
//
//   s: header   MessageRecord (comm/p2p_check.hpp: dtype, count, layout, shape, seq k), tag
//               mpi_p2p_header_tag — verification traffic: the ledger does not count it
//   s: data     the buffer, tag mpi_p2p_data_tag(k): k is the message's number on (s, d)
//   d: receive  the header first (headers match in the order the receives are posted, as MPI
//               matches); if it disagrees with the receive's own record: CollectiveMismatchError
//               on d before any data lands (never MPI_ERR_TRUNCATE's abort); else the data's
//               receive is posted with the header's tag — so a Request waited for out of order
//               still takes its own message.
//
// Every wait of a checked send or receive is under the watchdog: past collective_timeout() it
// raises CollectiveTimeoutError ("MpiComm: rank 0 waited more than 0.5 s in recv of f64 × 3
// from rank 1; the communicator is unusable now"), after cancelling its receives. As for a
// checked collective, the communicator must not be used after a timeout.
//
// Unchecked (the release default), send/recv are MPI_Send/MPI_Recv and isend/irecv MPI_Isend/
// MPI_Irecv with tag 0: a mismatch is MPI's to report, and a receive with no send waits for ever.
// Both sides of a message must use the same mode (the switch is per process: set it before
// ranks start).
//
// A Request destroyed while an exception unwinds is cancelled (a receive: MPI_Cancel, then
// MPI_Wait, so MPI never writes into its buffer afterwards; a send: MPI_Request_free). One
// destroyed normally whose wait fails ends the job: one line "shardalg: rank R: …" and
// MPI_Abort, as run_mpi does — the error cannot leave a destructor, and after a timeout the
// communicator is unusable.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardalg/comm/collective_check.hpp"
#include "shardalg/comm/p2p_check.hpp"

namespace shardalg::detail {

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    // 16-bit storage moves as its bits: MpiComm never hands it to an MPI reduction (mpi.hpp).
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    default: break;
  }
  throw CommError(cat("MpiComm: no MPI datatype for ", to_string(t)));
}

/// The number of the next checked message from this process to `peer` on the communicator
/// `comm_key` — counted per process, so that two MpiComm handles of one communicator never
/// reuse a number (the receive takes the number from the header).
inline std::uint64_t next_p2p_seq(std::uintptr_t comm_key, int peer) {
  static std::mutex m;
  static std::map<std::pair<std::uintptr_t, int>, std::uint64_t> sent;
  std::lock_guard lk(m);
  return sent[{comm_key, peer}]++;
}

/// The tag of the headers of checked point to point (reserved, as mpi_check_tag).
inline constexpr int mpi_p2p_header_tag = 23070;
/// The data of checked message k of a (sender, receiver) pair: tags 24576 … 32767 (MPI
/// guarantees tags up to 32767), distinct for 8192 messages in flight on one pair.
constexpr int mpi_p2p_data_tag(std::uint64_t k) { return 24576 + static_cast<int>(k % 8192); }

/// The one line run_mpi prints for an exception, and the abort (never returns).
[[noreturn]] inline void abort_world(const char* what) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string line = cat("shardalg: rank ", rank, ": ", what, "\n");
  std::cout.flush();
  std::fflush(stdout);
  std::fputs(line.c_str(), stderr);  // one write of the whole line: ranks' lines do not interleave
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; in case an implementation does
}

/// A Request destroyed unfinished whose wait failed: end the job (see the top of the file).
[[noreturn]] inline void abort_dropped(const std::exception_ptr& e) noexcept {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  abort_world(cat(what, " (in a Request destroyed before it completed)").c_str());
}

/// Give up a request: a receive is cancelled and completed (its buffer is free afterwards), a
/// send released to MPI. Never throws.
inline void mpi_abandon(MPI_Request& q, bool is_recv) noexcept {
  if (q == MPI_REQUEST_NULL) return;
  if (is_recv) {
    MPI_Cancel(&q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  } else {
    MPI_Request_free(&q);
  }
  q = MPI_REQUEST_NULL;
}

inline void mpi_p2p_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw CommError(cat("MpiComm: ", what, " failed in checked point-to-point"));
}

/// The watchdog: poll `q` until it completes or collective_timeout() passes; then abandon it and
/// raise, naming `what` ("recv of f64 × 3 from rank 1").
inline void mpi_wait_watched(MPI_Request& q, bool is_recv, int rank, const std::string& what) {
  const double limit = collective_timeout();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  for (long polls = 0;; ++polls) {
    int flag = 0;
    mpi_p2p_check(MPI_Test(&q, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) return;
    if (std::chrono::steady_clock::now() > deadline) {
      mpi_abandon(q, is_recv);
      throw CollectiveTimeoutError(cat("MpiComm: rank ", rank, " waited more than ", timeout_text(limit), " in ", what,
                                       "; the communicator is unusable now"));
    }
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// An unchecked MPI_Isend / MPI_Irecv.
struct MpiRequest {
  MPI_Request req = MPI_REQUEST_NULL;
  bool is_recv = false;
  bool test() {
    int flag = 0;
    mpi_p2p_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }
  void wait() { mpi_p2p_check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait"); }
  void cancel() noexcept { mpi_abandon(req, is_recv); }
  void dropped(const std::exception_ptr& e) noexcept { abort_dropped(e); }
};

/// A checked isend: the header and the data in flight (the header's record lives here).
struct MpiCheckedSend {
  std::unique_ptr<MessageRecord> rec;
  MPI_Request header = MPI_REQUEST_NULL, data = MPI_REQUEST_NULL;
  int rank = 0;
  std::string what;  // "send of f64 × 3 to rank 1"
  bool test() {
    int a = 0, b = 0;
    mpi_p2p_check(MPI_Test(&header, &a, MPI_STATUS_IGNORE), "MPI_Test");
    mpi_p2p_check(MPI_Test(&data, &b, MPI_STATUS_IGNORE), "MPI_Test");
    return a && b;
  }
  void wait() {
    mpi_wait_watched(header, false, rank, what);
    mpi_wait_watched(data, false, rank, what);
  }
  void cancel() noexcept {
    mpi_abandon(header, false);
    mpi_abandon(data, false);
  }
  void dropped(const std::exception_ptr& e) noexcept { abort_dropped(e); }

  static MpiCheckedSend start(MPI_Comm comm, int rank, const void* buf, int n, MPI_Datatype type, int peer,
                              const MessageRecord& r) {
    MpiCheckedSend s;
    s.rec = std::make_unique<MessageRecord>(r);
    s.rank = rank;
    s.what = cat("send of ", describe(r), " to rank ", peer);
    mpi_p2p_check(MPI_Isend(s.rec.get(), sizeof(MessageRecord), MPI_BYTE, peer, mpi_p2p_header_tag, comm, &s.header),
                  "MPI_Isend");
    mpi_p2p_check(MPI_Isend(buf, n, type, peer, mpi_p2p_data_tag(r.seq), comm, &s.data), "MPI_Isend");
    return s;
  }
};

/// A checked irecv: the header's receive is posted at once; the data's once the header agrees.
struct MpiCheckedRecv {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, peer = 0, n = 0;
  MPI_Datatype type = MPI_BYTE;
  void* buf = nullptr;
  std::unique_ptr<MessageRecord> want, got;
  MPI_Request header = MPI_REQUEST_NULL, data = MPI_REQUEST_NULL;
  bool data_posted = false;

  static MpiCheckedRecv start(MPI_Comm comm, int rank, void* buf, int n, MPI_Datatype type, int peer,
                              const MessageRecord& want) {
    MpiCheckedRecv r;
    r.comm = comm, r.rank = rank, r.peer = peer, r.n = n, r.type = type, r.buf = buf;
    r.want = std::make_unique<MessageRecord>(want);
    r.got = std::make_unique<MessageRecord>();
    mpi_p2p_check(MPI_Irecv(r.got.get(), sizeof(MessageRecord), MPI_BYTE, peer, mpi_p2p_header_tag, comm, &r.header),
                  "MPI_Irecv");
    return r;
  }
  [[nodiscard]] std::string what() const { return cat("recv of ", describe(*want), " from rank ", peer); }
  // The header has arrived: compare, then post the data's receive. A message that does not
  // match is still taken (into a scratch buffer, as the sender described it) and dropped, so
  // that it can never land in a later receive.
  void header_arrived() {
    if (std::string msg = message_mismatch("MpiComm", rank, peer, *want, *got); !msg.empty()) {
      const DType t = static_cast<DType>(got->dtype);
      std::vector<char> scratch(static_cast<std::size_t>(got->count) * size_of(t));
      data_posted = true;
      mpi_p2p_check(MPI_Irecv(scratch.data(), static_cast<int>(got->count), mpi_type(t), peer,
                              mpi_p2p_data_tag(got->seq), comm, &data),
                    "MPI_Irecv");
      mpi_wait_watched(data, true, rank, what());
      throw CollectiveMismatchError(std::move(msg));
    }
    data_posted = true;
    mpi_p2p_check(MPI_Irecv(buf, n, type, peer, mpi_p2p_data_tag(got->seq), comm, &data), "MPI_Irecv");
  }
  bool test() {
    if (!data_posted) {
      int flag = 0;
      mpi_p2p_check(MPI_Test(&header, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) return false;
      header_arrived();
    }
    int flag = 0;
    mpi_p2p_check(MPI_Test(&data, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }
  void wait() {
    if (!data_posted) {
      mpi_wait_watched(header, true, rank, what());
      header_arrived();
    }
    mpi_wait_watched(data, true, rank, what());
  }
  void cancel() noexcept {
    mpi_abandon(header, true);
    mpi_abandon(data, true);
  }
  void dropped(const std::exception_ptr& e) noexcept { abort_dropped(e); }
};

}  // namespace shardalg::detail
