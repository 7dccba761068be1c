// shardalg/verify/safetensors.hpp — read and write the safetensors format: the tensors another
// framework dumped (every rank's shards, a one-rank reference), and shardalg's own dumps.
//
// The format: 8 bytes, a little-endian u64 N; N bytes of JSON, an object whose keys are tensor
// names, each {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets into the
// bytes after the header), and an optional "__metadata__" object of strings; then the data,
// row-major, little-endian, the tensors back to back.
//
// Reading maps the file (mmap, read-only) and hands out views into it: no copy until a tensor is
// converted (`to_double`). Everything the header claims is checked before a byte of data is
// used — the header's length against the file's, the JSON, each entry's fields and types, each
// tensor's byte count against its shape and dtype, the offsets against the data's length, and that
// the tensors tile the data with no overlap and no gap — and every failure is a SafetensorsError
// naming the file and what is wrong. Read: F64, F32, BF16, F16, I64, I32; any other dtype is
// refused by name. The header is parsed with nlohmann-json (like the checkpoints, this floor is
// above the dependency-free core).
//
// Writing is atomic: a temporary file in the same directory, written with checked write(2) calls,
// fsynced, renamed over the target, and the directory fsynced; a failure leaves the old file (or
// none) and removes the temporary. Values are given as double and rounded to the dtype
// (round-to-nearest-even for BF16/F16 through Eigen's types).
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "shardalg/base/errors.hpp"

namespace shardalg::verify {

/// A safetensors file that cannot be read or written as asked (the text names the file).
struct SafetensorsError : Error {
  using Error::Error;
};

/// The element types read and written.
enum class StDtype { F64, F32, BF16, F16, I64, I32 };

inline std::string_view dtype_name(StDtype d) {
  switch (d) {
    case StDtype::F64: return "F64";
    case StDtype::F32: return "F32";
    case StDtype::BF16: return "BF16";
    case StDtype::F16: return "F16";
    case StDtype::I64: return "I64";
    case StDtype::I32: return "I32";
  }
  return "?";
}
inline std::size_t dtype_bytes(StDtype d) {
  switch (d) {
    case StDtype::F64: case StDtype::I64: return 8;
    case StDtype::F32: case StDtype::I32: return 4;
    case StDtype::BF16: case StDtype::F16: return 2;
  }
  return 0;
}
inline std::optional<StDtype> parse_dtype(std::string_view s) {
  for (StDtype d : {StDtype::F64, StDtype::F32, StDtype::BF16, StDtype::F16, StDtype::I64, StDtype::I32})
    if (dtype_name(d) == s) return d;
  return std::nullopt;
}
/// The unit roundoff's order for a floating dtype (integers: exact).
inline bool dtype_is_float(StDtype d) { return d != StDtype::I64 && d != StDtype::I32; }

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// One tensor of a mapped file: its header entry and a view of its bytes (valid while the file is).
struct TensorView {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
  std::size_t begin = 0;  // data_offsets[0]: the order the tensors were written in

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  /// Element i converted to double (BF16, F16 and F32 exactly; I64 past 2^53 rounded).
  double at(std::int64_t i) const {
    const std::byte* p = bytes.data() + static_cast<std::size_t>(i) * dtype_bytes(dtype);
    switch (dtype) {
      case StDtype::F64: { double v; std::memcpy(&v, p, 8); return v; }
      case StDtype::F32: { float v; std::memcpy(&v, p, 4); return v; }
      case StDtype::BF16: { std::uint16_t b; std::memcpy(&b, p, 2); return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b)); }
      case StDtype::F16: { std::uint16_t b; std::memcpy(&b, p, 2); return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(b)); }
      case StDtype::I64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
      case StDtype::I32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    }
    return 0;
  }
  std::vector<double> to_double() const {
    std::vector<double> v(static_cast<std::size_t>(numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = at(static_cast<std::int64_t>(i));
    return v;
  }
};

namespace detail {
using shardalg::detail::cat;
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

inline constexpr std::uint64_t kMaxHeader = 100'000'000;  // as the reference implementation

// A JSON value as a non-negative integer that fits `limit`, or nothing.
inline std::optional<std::uint64_t> as_count(const nlohmann::json& j, std::uint64_t limit) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v <= limit) return v;
  } else if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (v >= 0 && static_cast<std::uint64_t>(v) <= limit) return static_cast<std::uint64_t>(v);
  }
  return std::nullopt;
}
}  // namespace detail

/// A safetensors file, mapped read-only and checked (see the file comment).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
    using detail::cat;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(cat("cannot open: ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      fail(cat("cannot stat: ", std::strerror(e)));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int e = errno;
      ::close(fd);
      if (m == MAP_FAILED) fail(cat("cannot map ", size_, " bytes: ", std::strerror(e)));
      map_ = static_cast<const std::byte*>(m);
    } else {
      ::close(fd);
    }
    try {
      parse();
    } catch (...) {
      unmap();
      throw;
    }
  }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& o) noexcept
      : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), size_(std::exchange(o.size_, 0)),
        tensors_(std::move(o.tensors_)), metadata_(std::move(o.metadata_)) {}
  ~SafetensorsFile() { unmap(); }

  const std::filesystem::path& path() const { return path_; }
  /// The tensors in the order of their data (the order they were written in).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  const TensorView& at(std::string_view name) const {
    if (const auto* t = find(name)) return *t;
    fail(detail::cat("has no tensor '", name, "'"));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw SafetensorsError(detail::cat("safetensors: ", path_.string(), ": ", what));
  }
  void unmap() {
    if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
    map_ = nullptr;
  }

  void parse() {
    using detail::cat;
    if (size_ < 8) fail(cat(size_, " bytes, shorter than the 8-byte header length (truncated?)"));
    std::uint64_t n = 0;
    std::memcpy(&n, map_, 8);
    if (n > detail::kMaxHeader) fail(cat("header length ", n, " is more than ", detail::kMaxHeader, " bytes (not a safetensors file?)"));
    if (n > size_ - 8) fail(cat("header of ", n, " bytes runs past the end of the file (", size_, " bytes: truncated?)"));
    const auto* h = reinterpret_cast<const char*>(map_ + 8);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(h, h + n);
    } catch (const nlohmann::json::parse_error& e) {
      fail(cat("the header is not valid JSON (at byte ", std::min<std::uint64_t>(e.byte, n), " of ", n, ")"));  // the end: n
    }
    if (!j.is_object()) fail("the header is not a JSON object");
    const std::size_t data_size = size_ - 8 - static_cast<std::size_t>(n);
    const std::byte* data = map_ + 8 + n;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& name = it.key();
      const auto& e = it.value();
      if (name == "__metadata__") {
        if (!e.is_object()) fail("__metadata__ is not an object");
        for (auto m = e.begin(); m != e.end(); ++m) {
          if (!m.value().is_string()) fail(cat("__metadata__ '", m.key(), "' is not a string"));
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string t = cat("tensor '", name, "': ");
      if (!e.is_object()) fail(cat(t, "its entry is not an object"));
      for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!e.contains(key)) fail(cat(t, "no '", key, "'"));
      if (!e["dtype"].is_string()) fail(cat(t, "'dtype' is not a string"));
      const std::string dt = e["dtype"].get<std::string>();
      const auto dtype = parse_dtype(dt);
      if (!dtype) fail(cat(t, "dtype ", dt, " is not read (F64, F32, BF16, F16, I64, I32)"));
      TensorView v;
      v.name = name;
      v.dtype = *dtype;
      if (!e["shape"].is_array()) fail(cat(t, "'shape' is not a list"));
      std::uint64_t numel = 1;
      bool overflow = false;
      for (const auto& d : e["shape"]) {
        const auto c = detail::as_count(d, std::uint64_t{1} << 62);
        if (!c) fail(cat(t, "'shape' ", e["shape"].dump(), " is not a list of non-negative integers"));
        v.shape.push_back(static_cast<std::int64_t>(*c));
        if (*c != 0 && numel > (std::uint64_t{1} << 62) / *c) overflow = true;
        numel *= *c;
      }
      const auto& off = e["data_offsets"];
      std::optional<std::uint64_t> b, en;
      if (off.is_array() && off.size() == 2) {
        b = detail::as_count(off[0], std::numeric_limits<std::uint64_t>::max());
        en = detail::as_count(off[1], std::numeric_limits<std::uint64_t>::max());
      }
      if (!b || !en || *b > *en) fail(cat(t, "'data_offsets' ", off.dump(), " is not [begin, end] with begin ≤ end"));
      if (*en > data_size) fail(cat(t, "data_offsets [", *b, ", ", *en, "] run past the end of the data (", data_size, " bytes: truncated?)"));
      const std::uint64_t need = numel * dtype_bytes(*dtype);
      if (overflow || need != *en - *b)
        fail(cat(t, "data_offsets [", *b, ", ", *en, "] hold ", *en - *b, " bytes; shape ", shape_text(v.shape), " of ", dt,
                 overflow ? " overflows 64-bit sizes" : cat(" needs ", need)));
      v.begin = static_cast<std::size_t>(*b);
      v.bytes = std::span<const std::byte>(data + *b, static_cast<std::size_t>(*en - *b));
      tensors_.push_back(std::move(v));
    }
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorView& a, const TensorView& c) {
      return a.begin != c.begin ? a.begin < c.begin : a.bytes.size() < c.bytes.size();
    });
    // The tensors tile the data: each begins where the previous one ended, the last ends at the end.
    std::size_t at = 0;
    const TensorView* prev = nullptr;
    for (const auto& v : tensors_) {
      if (v.begin < at) fail(cat("tensors '", prev->name, "' and '", v.name, "' overlap (bytes ", v.begin, "..", at, ")"));
      if (v.begin > at) fail(cat("bytes ", at, "..", v.begin, " of the data belong to no tensor"));
      at = v.begin + v.bytes.size();
      prev = &v;
    }
    if (at != data_size) fail(cat("bytes ", at, "..", data_size, " of the data belong to no tensor"));
  }

  std::filesystem::path path_;
  const std::byte* map_ = nullptr;
  std::size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A tensor to write: its values as double, rounded to `dtype` on the way out.
struct TensorOut {
  std::string name;
  StDtype dtype = StDtype::F64;
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

namespace detail {
inline void put_value(std::vector<std::byte>& out, StDtype d, double x) {
  std::byte b[8];
  switch (d) {
    case StDtype::F64: std::memcpy(b, &x, 8); break;
    case StDtype::F32: { const float v = static_cast<float>(x); std::memcpy(b, &v, 4); break; }
    case StDtype::BF16: { const auto v = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(static_cast<float>(x))); std::memcpy(b, &v, 2); break; }
    case StDtype::F16: { const auto v = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(static_cast<float>(x))); std::memcpy(b, &v, 2); break; }
    case StDtype::I64: { const auto v = static_cast<std::int64_t>(x); std::memcpy(b, &v, 8); break; }
    case StDtype::I32: { const auto v = static_cast<std::int32_t>(x); std::memcpy(b, &v, 4); break; }
  }
  out.insert(out.end(), b, b + dtype_bytes(d));
}

/// Writes `path` atomically (temporary + fsync + rename + directory fsync); errors are
/// "<who>: <path>: …".
inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> head,
                                  std::span<const std::byte> body, std::string_view who = "safetensors") {
  namespace fs = std::filesystem;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::random_device rd;
  const fs::path tmp = dir / cat(".", path.filename().string(), ".tmp-", rd(), "-", ::getpid());
  auto fail = [&](std::string_view what, int e) {
    ::unlink(tmp.c_str());
    throw SafetensorsError(cat(who, ": ", path.string(), ": ", what, ": ", std::strerror(e == 0 ? EIO : e)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    throw SafetensorsError(cat(who, ": ", path.string(), ": cannot create a file in ", dir.string(), ": ", std::strerror(e)));
  }
  for (auto part : {head, body}) {
    const std::byte* p = part.data();
    std::size_t n = part.size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = errno;
        ::close(fd);
        fail("cannot write", e);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot fsync", e);
  }
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename the temporary file over it", errno);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}
}  // namespace detail

/// Writes the tensors, in the order given, to `path` (atomically; see the file comment).
inline void write_safetensors(const std::filesystem::path& path, const std::vector<TensorOut>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  using detail::cat;
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<std::byte> body;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || h.contains(t.name))
      throw SafetensorsError(cat("safetensors: ", path.string(), ": tensor name '", t.name, "' is empty, reserved or given twice"));
    std::int64_t numel = 1;
    for (auto d : t.shape) {
      if (d < 0) throw SafetensorsError(cat("safetensors: ", path.string(), ": tensor '", t.name, "': shape ", shape_text(t.shape), " has a negative size"));
      numel *= d;
    }
    if (static_cast<std::size_t>(numel) != t.values.size())
      throw SafetensorsError(cat("safetensors: ", path.string(), ": tensor '", t.name, "': shape ", shape_text(t.shape), " has ", numel,
                                 " elements, ", t.values.size(), " values given"));
    const std::size_t begin = body.size();
    for (double x : t.values) detail::put_value(body, t.dtype, x);
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {begin, body.size()}}};
  }
  std::string hs = h.dump();
  hs.append((8 - (8 + hs.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::vector<std::byte> head(8 + hs.size());
  const std::uint64_t n = hs.size();
  std::memcpy(head.data(), &n, 8);
  std::memcpy(head.data() + 8, hs.data(), hs.size());
  detail::write_file_atomically(path, head, body);
}

}  // namespace shardalg::verify
