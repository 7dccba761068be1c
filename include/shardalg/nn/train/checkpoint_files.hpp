// shardalg/nn/train/checkpoint_files.hpp — the two files of a checkpoint, written atomically and
// verified on read. Needs nlohmann-json and POSIX (open/write/fsync/rename/symlink).
//
// Layout on disk, for a checkpoint at path `ck`:
//   ck                 a symbolic link to the current version, `ck.v<nonce>` (relative)
//   ck.v<nonce>/meta.json     {"format", "version": 2, …, "tensors": [{"name", "rows", "cols",
//                              "offset", "fnv1a64"}], "tensors_bin": {"bytes", "fnv1a64"},
//                              "meta_fnv1a64"}
//   ck.v<nonce>/tensors.bin   every tensor as little-endian float64, row-major, at its offset
// Reading `ck/meta.json` follows the link, so the user's path names the checkpoint.
//
// Why a link: a directory cannot be replaced by rename(2) while it holds files, but a link can.
// A save writes a fresh `ck.v<nonce>` (each file written with checked write(2) calls, fsynced,
// closed; the directory fsynced), makes a new link beside the old one and renames it over `ck`
// (atomic), fsyncs the parent, and only then removes the previous version. A crash at any point
// leaves `ck` naming either the old complete version or the new complete one; leftovers of a
// crashed save (`ck.v*` not named by the link, `.ck.link-*`) are removed by the next save.
//
// Verification on read: meta.json's fields, typed (nn/train/checkpoint_meta.hpp: a wrong type,
// a missing key or a number out of range is a CheckpointError naming the file and the key), the
// hash of its own content (meta_fnv1a64, over the JSON without that field), the size and hash of
// tensors.bin as meta.json states them (so a meta.json beside another run's tensors.bin is
// refused), the tensors stored back to back within it, and each tensor's hash. Every failure is a
// CheckpointError naming the file, the entry and what differs. Only version 2 is read: version 1
// (a plain directory, no hashes) is refused, not read unverified.
//
// Reading while another process saves: read_checkpoint_files(ck, group) resolves the link once
// (rank 0), every rank opens that version's two files, and reads them; a version removed before
// every rank had it open is retried with the one the link names then. Every rank reads one
// complete save, the same one (see read_checkpoint_files).
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shardalg/comm/self.hpp"
#include "shardalg/nn/models/gpt.hpp"
#include "shardalg/nn/train/checkpoint_meta.hpp"

namespace shardalg::nn {

namespace detail {
using shardalg::detail::cat;

/// 64-bit FNV-1a over bytes, continuing from `h` (detects every single-bit flip; not a MAC).
inline std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
inline std::string hex64(std::uint64_t h) {
  char buf[17];
  for (int i = 15; i >= 0; --i, h >>= 4) buf[i] = "0123456789abcdef"[h & 15];
  buf[16] = '\0';
  return buf;
}
inline std::string errno_text(int e) { return std::strerror(e); }

/// A file written with checked write(2) calls, fsynced and closed: any failure (disk full, a
/// size limit, a read-only file system) is a CheckpointError naming the file and the reason.
class SyncedFile {
 public:
  explicit SyncedFile(std::filesystem::path p) : path_(std::move(p)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  SyncedFile(const SyncedFile&) = delete;
  SyncedFile& operator=(const SyncedFile&) = delete;
  ~SyncedFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("cannot write");
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  /// fsync and close; the file is durable when this returns.
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot fsync");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot close");
  }

 private:
  [[noreturn]] void fail(std::string_view what) {
    const int e = errno;
    throw CheckpointError(cat("checkpoint: ", what, " ", path_.string(), ": ", errno_text(e == 0 ? EIO : e)));
  }
  std::filesystem::path path_;
  int fd_ = -1;
};

/// fsync a directory, so that the names created in it (files, a renamed link) are durable.
inline void sync_directory(const std::filesystem::path& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(cat("checkpoint: cannot open directory ", d.string(), ": ", errno_text(errno)));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(cat("checkpoint: cannot fsync directory ", d.string(), ": ", errno_text(e)));
}

inline std::string random_nonce() {
  std::random_device rd;
  return hex64((std::uint64_t(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()));
}

/// meta.json's hash: over its compact dump without the field that holds the hash.
inline std::uint64_t meta_hash(nlohmann::json meta) {
  meta.erase("meta_fnv1a64");
  const std::string s = meta.dump();
  return fnv1a64(s.data(), s.size());
}

/// The bytes of a tensor as stored: row-major float64.
inline std::vector<double> row_major(const Eigen::MatrixXd& m) {
  std::vector<double> out(static_cast<std::size_t>(m.size()));
  for (Index r = 0; r < m.rows(); ++r)
    for (Index c = 0; c < m.cols(); ++c) out[static_cast<std::size_t>(r * m.cols() + c)] = m(r, c);
  return out;
}

/// Removes what a crashed save of `ck` left: versions the link does not name, stray links.
inline void remove_leftovers(const std::filesystem::path& ck, const std::string& keep) {
  namespace fs = std::filesystem;
  const std::string base = ck.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ck.parent_path().empty() ? fs::path(".") : ck.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    const bool version = n.rfind(base + ".v", 0) == 0 && n != keep;
    const bool link = n.rfind("." + base + ".link-", 0) == 0;
    if (version || link) fs::remove_all(e.path(), ec);
  }
}
}  // namespace detail

/// Write meta.json and tensors.bin as a new version of checkpoint `ck` and switch `ck` to it
/// atomically (one process; no communication). The previous version survives any crash before
/// the switch and is removed after it.
inline void write_checkpoint_files(const std::filesystem::path& ck_in, const nlohmann::json& meta_in,
                                   const Masters& tensors) {
  namespace fs = std::filesystem;
  static_assert(std::endian::native == std::endian::little, "checkpoint: tensors.bin is little-endian");
  const fs::path ck = ck_in.has_filename() ? ck_in : ck_in.parent_path();  // "dir/" names "dir"
  const fs::path parent = ck.parent_path().empty() ? fs::path(".") : ck.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw CheckpointError(detail::cat("checkpoint: cannot write ", ck.string(), ": ", parent.string(),
                                      " is not a directory"));
  if (fs::exists(fs::symlink_status(ck)) && !fs::is_symlink(fs::symlink_status(ck)) && !fs::is_directory(ck))
    throw CheckpointError(detail::cat("checkpoint: cannot write ", ck.string(), ": it is a file, not a checkpoint"));

  const std::string version = ck.filename().string() + ".v" + detail::random_nonce();
  const fs::path dir = parent / version;
  if (!fs::create_directory(dir, ec) || ec)
    throw CheckpointError(detail::cat("checkpoint: cannot create ", dir.string(), ": ", ec.message()));

  nlohmann::json meta = meta_in;
  meta["format"] = "shardalg-gpt-checkpoint";
  meta["version"] = 2;
  meta["tensors"] = nlohmann::json::array();
  std::uint64_t offset = 0, file_hash = 0xcbf29ce484222325ull;
  {
    detail::SyncedFile bin(dir / "tensors.bin");
    for (const auto& [name, m] : tensors) {
      const auto bytes = detail::row_major(m);
      const std::size_t n = bytes.size() * sizeof(double);
      bin.write(bytes.data(), n);
      file_hash = detail::fnv1a64(bytes.data(), n, file_hash);
      meta["tensors"].push_back({{"name", name},
                                 {"rows", m.rows()},
                                 {"cols", m.cols()},
                                 {"offset", offset},
                                 {"fnv1a64", detail::hex64(detail::fnv1a64(bytes.data(), n))}});
      offset += n;
    }
    bin.commit();
  }
  meta["tensors_bin"] = {{"bytes", offset}, {"fnv1a64", detail::hex64(file_hash)}};
  meta["meta_fnv1a64"] = detail::hex64(detail::meta_hash(meta));
  {
    detail::SyncedFile mf(dir / "meta.json");
    const std::string text = meta.dump(2) + "\n";
    mf.write(text.data(), text.size());
    mf.commit();
  }
  detail::sync_directory(dir);

  // The switch: a new link, renamed over `ck` in one step. A version-1 checkpoint (a plain
  // directory at `ck`) is first moved aside: the one step that is not atomic, once per path.
  const bool old_plain_dir = fs::is_directory(fs::symlink_status(ck));
  if (old_plain_dir) fs::rename(ck, parent / (ck.filename().string() + ".v1-" + detail::random_nonce()));
  const fs::path link = parent / ("." + ck.filename().string() + ".link-" + detail::random_nonce());
  if (::symlink(version.c_str(), link.c_str()) != 0)
    throw CheckpointError(detail::cat("checkpoint: cannot create link ", link.string(), ": ", detail::errno_text(errno)));
  if (::rename(link.c_str(), ck.c_str()) != 0) {
    const int e = errno;
    fs::remove(link, ec);
    throw CheckpointError(detail::cat("checkpoint: cannot switch ", ck.string(), " to ", version, ": ", detail::errno_text(e)));
  }
  detail::sync_directory(parent);
  detail::remove_leftovers(ck, version);
}

namespace detail {
/// The directory holding the files of the version `ck` names now: the target of its link,
/// followed to the end (each hop relative to its link's directory), or `ck` itself when it is a
/// directory (a copy). One readlink(2) per hop, each atomic: never a version being written.
inline std::filesystem::path resolve_version(const std::filesystem::path& ck) {
  namespace fs = std::filesystem;
  fs::path p = ck;
  for (int hop = 0; hop < 40; ++hop) {  // past 40 (a loop), opening p reports it
    std::error_code ec;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return p;  // not a link: a directory, or nothing (opening it reports which)
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p;
}

/// The two files of one version, open. A save removes the previous version after switching the
/// link, but an open file outlives its name, so what is read here stays that version's.
struct OpenVersion {
  std::string meta_text;  // meta.json, read whole when opened
  std::ifstream bin;
  std::uint64_t bin_bytes = 0;
};

/// Opens the files of version directory `dir` (messages name the user's path `ck`); "" when
/// both are open, else the error.
inline std::string open_version(const std::filesystem::path& dir, const std::filesystem::path& ck, OpenVersion& out) {
  std::ifstream mf(dir / "meta.json", std::ios::binary);
  if (!mf) return cat("checkpoint: cannot read ", (ck / "meta.json").string());
  out.bin.open(dir / "tensors.bin", std::ios::binary | std::ios::ate);
  if (!out.bin) return cat("checkpoint: cannot read ", (ck / "tensors.bin").string());
  const auto end = out.bin.tellg();
  out.bin.seekg(0);
  if (end < 0 || !out.bin) return cat("checkpoint: cannot read ", (ck / "tensors.bin").string());
  out.bin_bytes = static_cast<std::uint64_t>(end);
  out.meta_text.assign(std::istreambuf_iterator<char>(mf), {});
  if (mf.bad()) return cat("checkpoint: cannot read ", (ck / "meta.json").string());
  return "";
}

/// Parses and verifies the open files of `ck`: meta.json's types, its own hash, the size and
/// hash of tensors.bin, and every tensor's hash. Throws a CheckpointError naming the file.
inline std::pair<nlohmann::json, Masters> read_version(OpenVersion& f, const std::filesystem::path& ck) {
  const std::string meta_path = (ck / "meta.json").string(), bin_path = (ck / "tensors.bin").string();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(f.meta_text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(cat("checkpoint: ", meta_path, " is not valid JSON: ", e.what()));
  }
  const MetaReader r(meta_path);
  if (!meta.is_object()) r.fail("the file", &meta, "a JSON object");
  // The format and version first: they say how the rest is read. Version 1 had no hashes and is
  // refused rather than read unverified (an edited "version" must not switch the checks off).
  const nlohmann::json& format = r.member(meta, "", "format", "\"shardalg-gpt-checkpoint\"");
  if (format != "shardalg-gpt-checkpoint") r.fail("format", &format, "\"shardalg-gpt-checkpoint\"");
  const nlohmann::json& version = r.member(meta, "", "version", "2");
  if (!version.is_number_integer() || version != 2)
    r.fail("version", &version,
           version == 1 ? "2 (version 1 has no hashes; it is not loaded unverified)" : "2");
  const std::string stored = r.hash(meta, "", "meta_fnv1a64");
  const std::string computed = hex64(meta_hash(meta));
  if (stored != computed)
    throw CheckpointError(cat("checkpoint: ", meta_path, ": content hash ", computed, " differs from the stored ",
                              stored, " (the file was changed after it was written)"));

  const auto& bin_meta = r.object(meta, "", "tensors_bin");
  const std::uint64_t want = r.unsigned_integer(bin_meta, "tensors_bin", "bytes");
  const std::string want_hash = r.hash(bin_meta, "tensors_bin", "fnv1a64");
  if (f.bin_bytes != want)
    throw CheckpointError(cat("checkpoint: ", bin_path, " is ", f.bin_bytes, " bytes, ", meta_path, " expects ", want,
                              " (the two files are not from one save)"));
  Masters out;
  std::vector<double> buf;
  std::uint64_t offset = 0, file_hash = 0xcbf29ce484222325ull;
  const auto& list = r.array(meta, "", "tensors");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = cat("tensors[", i, "]");
    if (!list[i].is_object()) r.fail(at, &list[i], "an object");
    const auto& t = list[i];
    const std::string name = r.string(t, at, "name");
    if (out.count(name)) r.fail(at + ".name", &t.at("name"), "a name no other tensor has");
    // Each dimension at most the file's size in doubles, and the tensor within what is left of it
    // (rows · cols · 8 bytes computed only once it cannot overflow).
    const auto limit = static_cast<std::int64_t>(std::min<std::uint64_t>(want / sizeof(double), MetaReader::int_max));
    const std::int64_t rows = r.integer(t, at, "rows", 0, limit), cols = r.integer(t, at, "cols", 0, limit);
    if (r.unsigned_integer(t, at, "offset") != offset)
      r.fail(at + ".offset", &t.at("offset"), cat(offset, " (tensors are stored back to back)"));
    const std::uint64_t left = (want - offset) / sizeof(double);
    if (rows != 0 && static_cast<std::uint64_t>(cols) > left / static_cast<std::uint64_t>(rows))
      throw CheckpointError(cat("checkpoint: ", meta_path, ": tensor ", name, " is ", rows, "x", cols, " at byte ",
                                offset, ", past the end of the ", want, " bytes of ", bin_path));
    const std::string tensor_hash = r.hash(t, at, "fnv1a64");
    buf.resize(static_cast<std::size_t>(rows * cols));
    const std::size_t n = buf.size() * sizeof(double);
    f.bin.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n));
    if (!f.bin) throw CheckpointError(cat("checkpoint: ", bin_path, " is truncated at tensor ", name));
    const std::string got = hex64(fnv1a64(buf.data(), n));
    if (got != tensor_hash)
      throw CheckpointError(cat("checkpoint: ", bin_path, ": tensor ", name, " has hash ", got, ", ", meta_path,
                                " says ", tensor_hash, " (the data is corrupt)"));
    file_hash = fnv1a64(buf.data(), n, file_hash);
    offset += n;
    Eigen::MatrixXd m(rows, cols);
    for (Index rr = 0; rr < rows; ++rr)
      for (Index c = 0; c < cols; ++c) m(rr, c) = buf[static_cast<std::size_t>(rr * cols + c)];
    out.emplace(name, std::move(m));
  }
  if (offset != want)
    throw CheckpointError(cat("checkpoint: ", meta_path, ": the tensors end at byte ", offset, ", ", bin_path, " has ",
                              want, " (bytes no tensor covers)"));
  if (hex64(file_hash) != want_hash)
    throw CheckpointError(cat("checkpoint: ", bin_path, " has hash ", hex64(file_hash), ", ", meta_path, " says ", want_hash));
  return {std::move(meta), std::move(out)};
}

/// Every rank of `g` learns the first error (lowest rank with a non-empty `error`; "" when none):
/// one all-reduce, and two broadcasts when some rank failed.
inline std::string first_error(Group& g, const std::string& error) {
  std::int32_t first = error.empty() ? g.size() : g.rank();
  g.all_reduce(&first, 1, ReduceOp::min);
  if (first == g.size()) return "";
  std::int64_t n = static_cast<std::int64_t>(error.size());
  g.broadcast(&n, 1, first);
  std::vector<std::int64_t> words(static_cast<std::size_t>(n + 7) / 8);
  if (g.rank() == first) std::memcpy(words.data(), error.data(), error.size());
  if (!words.empty()) g.broadcast(words.data(), words.size(), first);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(n));
}

/// `s` on `root`, on every rank of `g`.
inline std::string broadcast_string(Group& g, const std::string& s, int root) {
  std::int64_t n = static_cast<std::int64_t>(s.size());
  g.broadcast(&n, 1, root);
  std::vector<std::int64_t> words(static_cast<std::size_t>(n + 7) / 8);
  if (g.rank() == root) std::memcpy(words.data(), s.data(), s.size());
  if (!words.empty()) g.broadcast(words.data(), words.size(), root);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(n));
}
}  // namespace detail

/// Read meta.json and tensors.bin of checkpoint `ck` on every rank of `group` (collective),
/// verifying every hash. Every rank reads the same save, also while another process saves
/// over `ck`:
///   1. rank 0 resolves the link once (the version `ck` names at that instant) and broadcasts
///      the version's path; every rank opens both of its files;
///   2. if some rank could not (the writer removed that version after switching the link to a
///      newer one), rank 0 resolves the link again: a different version → all retry with it;
///      the same one → the files are missing, an error;
///   3. once every rank holds both files open, removing the version does not change what they
///      read (an unlinked file stays readable while open, POSIX), so each rank reads and
///      verifies one complete version — never two halves of two saves.
/// Every rank throws the same CheckpointError (the lowest failing rank's) or none.
/// The guarantee needs POSIX unlink semantics on every reader; NFS gives them to the client that
/// removes a file, not to other hosts (a reader there may fail with an error while reading a
/// version removed under it, never load a wrong model).
inline std::pair<nlohmann::json, Masters> read_checkpoint_files(const std::filesystem::path& ck_in, const Group& group) {
  using detail::cat;
  constexpr int max_attempts = 100;
  Group g = group;
  const std::filesystem::path ck = ck_in.has_filename() ? ck_in : ck_in.parent_path();  // "dir/" names "dir"
  detail::OpenVersion files;
  for (int attempt = 1;; ++attempt) {
    const std::string version = detail::broadcast_string(g, g.rank() == 0 ? detail::resolve_version(ck).string() : "", 0);
    files = detail::OpenVersion{};
    const std::string error = detail::first_error(g, detail::open_version(version, ck, files));
    if (error.empty()) break;
    std::int32_t moved = g.rank() == 0 && detail::resolve_version(ck).string() != version;
    g.broadcast(&moved, 1, 0);
    if (!moved) throw CheckpointError(error);
    if (attempt == max_attempts)
      throw CheckpointError(cat("checkpoint: ", ck.string(), " was replaced ", max_attempts,
                                " times while it was being opened (", error, ")"));
  }
  std::pair<nlohmann::json, Masters> out;
  std::string error;
  try {
    out = detail::read_version(files, ck);
  } catch (const CheckpointError& e) {
    error = e.what();
  } catch (const std::exception& e) {  // e.g. bad_alloc: still one error on every rank, no rank left waiting
    error = cat("checkpoint: reading ", ck.string(), ": ", e.what());
  }
  error = detail::first_error(g, error);
  if (!error.empty()) throw CheckpointError(error);
  return out;
}

/// read_checkpoint_files on this process alone.
inline std::pair<nlohmann::json, Masters> read_checkpoint_files(const std::filesystem::path& ck) {
  return read_checkpoint_files(ck, Group{SelfComm{}});
}

}  // namespace shardalg::nn
