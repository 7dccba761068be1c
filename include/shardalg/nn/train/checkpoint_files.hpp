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
// Verification on read: the hash of meta.json's own content (meta_fnv1a64, over the JSON without
// that field), the size and hash of tensors.bin as meta.json states them (so a meta.json beside
// another run's tensors.bin is refused), and each tensor's hash. Every failure is a
// CheckpointError naming the file, the entry and what differs. Version-1 checkpoints (a plain
// directory, no hashes) are still read, unverified.
#pragma once

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shardalg/nn/models/gpt.hpp"

namespace shardalg::nn {

struct CheckpointError : Error {
  using Error::Error;
};

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

/// Read meta.json and tensors.bin of checkpoint `ck`, verifying every hash (version 2).
inline std::pair<nlohmann::json, Masters> read_checkpoint_files(const std::filesystem::path& ck) {
  using detail::cat;
  const auto meta_path = ck / "meta.json", bin_path = ck / "tensors.bin";
  std::ifstream mf(meta_path);
  if (!mf) throw CheckpointError(cat("checkpoint: cannot read ", meta_path.string()));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(mf);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(cat("checkpoint: ", meta_path.string(), " is not valid JSON: ", e.what()));
  }
  const int version = meta.is_object() ? meta.value("version", 0) : 0;
  if (!meta.is_object() || meta.value("format", "") != "shardalg-gpt-checkpoint" || (version != 1 && version != 2))
    throw CheckpointError(cat("checkpoint: ", meta_path.string(), " is not a version-1 or -2 shardalg GPT checkpoint"));
  try {
    if (version == 2) {
      const std::string stored = meta.at("meta_fnv1a64");
      const std::string computed = detail::hex64(detail::meta_hash(meta));
      if (stored != computed)
        throw CheckpointError(cat("checkpoint: ", meta_path.string(), ": content hash ", computed,
                                  " differs from the stored ", stored, " (the file was changed after it was written)"));
    }
    std::ifstream bin(bin_path, std::ios::binary);
    if (!bin) throw CheckpointError(cat("checkpoint: cannot read ", bin_path.string()));
    if (version == 2) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(bin_path, ec);
      const std::uint64_t want = meta.at("tensors_bin").at("bytes");
      if (ec || size != want)
        throw CheckpointError(cat("checkpoint: ", bin_path.string(), " is ", size, " bytes, ", meta_path.string(),
                                  " expects ", want, " (the two files are not from one save)"));
    }
    Masters out;
    std::vector<double> buf;
    std::uint64_t file_hash = 0xcbf29ce484222325ull;
    for (const auto& t : meta.at("tensors")) {
      const std::string name = t.at("name");
      const Index rows = t.at("rows"), cols = t.at("cols");
      const std::uint64_t offset = t.at("offset");
      if (rows < 0 || cols < 0)
        throw CheckpointError(cat("checkpoint: ", meta_path.string(), ": tensor ", name, " has shape ", rows, "x", cols));
      buf.resize(static_cast<std::size_t>(rows * cols));
      const std::size_t n = buf.size() * sizeof(double);
      bin.seekg(static_cast<std::streamoff>(offset));
      bin.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n));
      if (!bin) throw CheckpointError(cat("checkpoint: ", bin_path.string(), " is truncated at tensor ", name));
      if (version == 2) {
        const std::string stored = t.at("fnv1a64");
        const std::string computed = detail::hex64(detail::fnv1a64(buf.data(), n));
        if (stored != computed)
          throw CheckpointError(cat("checkpoint: ", bin_path.string(), ": tensor ", name, " has hash ", computed,
                                    ", ", meta_path.string(), " says ", stored, " (the data is corrupt)"));
        file_hash = detail::fnv1a64(buf.data(), n, file_hash);
      }
      Eigen::MatrixXd m(rows, cols);
      for (Index r = 0; r < rows; ++r)
        for (Index c = 0; c < cols; ++c) m(r, c) = buf[static_cast<std::size_t>(r * cols + c)];
      out.emplace(name, std::move(m));
    }
    if (version == 2 && detail::hex64(file_hash) != meta.at("tensors_bin").at("fnv1a64").get<std::string>())
      throw CheckpointError(cat("checkpoint: ", bin_path.string(), " has hash ", detail::hex64(file_hash), ", ",
                                meta_path.string(), " says ", meta.at("tensors_bin").at("fnv1a64").get<std::string>()));
    return {meta, std::move(out)};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(cat("checkpoint: ", meta_path.string(), ": ", e.what()));
  }
}

}  // namespace shardalg::nn
