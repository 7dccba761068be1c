// shardalg/nn/train/checkpoint_meta.hpp — the fields of a checkpoint's meta.json, read with their
// types and ranges checked. Needs nlohmann-json.
//
// Every failure is a CheckpointError naming the file, the key (dotted: config.hidden,
// tensors[3].rows) and what was expected:
//   checkpoint: <file>: <key> is <the value as JSON>, expected <what>
//   checkpoint: <file>: <key> is missing, expected <what>
// Nothing converts silently: a float is not truncated to an integer, a negative number does not
// wrap to an unsigned one, a number past the target type's range is refused before the
// conversion (so 1e300 never reaches a double → integer cast), and an unknown name is not read
// as some default.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "shardalg/base/errors.hpp"

namespace shardalg::nn {

/// A checkpoint that cannot be written, or read as what it claims to be: the message names the
/// file, the entry and what differs.
struct CheckpointError : Error {
  using Error::Error;
};

/// Typed access to the fields of one meta.json (`file`: its path, for the messages).
class MetaReader {
 public:
  using json = nlohmann::json;
  static constexpr std::int64_t int_max = std::numeric_limits<std::int64_t>::max();

  explicit MetaReader(std::string file) : file_(std::move(file)) {}
  [[nodiscard]] const std::string& file() const { return file_; }

  /// The key's full name: `prefix.key` (`key` alone at the top level).
  static std::string name(std::string_view prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : shardalg::detail::cat(prefix, ".", key);
  }

  [[noreturn]] void fail(const std::string& key, const json* value, std::string_view expected) const {
    std::string shown = "missing";
    if (value) {
      shown = value->dump();
      if (shown.size() > 60) shown = shown.substr(0, 57) + "...";  // a value may be a whole array
    }
    throw CheckpointError(shardalg::detail::cat("checkpoint: ", file_, ": ", key, " is ", shown, ", expected ", expected));
  }

  /// obj[key] (obj is an object); missing: an error that says what was expected there.
  const json& member(const json& obj, std::string_view prefix, const std::string& key, std::string_view expected) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(name(prefix, key), nullptr, expected);
    return *it;
  }
  const json& object(const json& obj, std::string_view prefix, const std::string& key) const {
    const json& v = member(obj, prefix, key, "an object");
    if (!v.is_object()) fail(name(prefix, key), &v, "an object");
    return v;
  }
  const json& array(const json& obj, std::string_view prefix, const std::string& key) const {
    const json& v = member(obj, prefix, key, "an array");
    if (!v.is_array()) fail(name(prefix, key), &v, "an array");
    return v;
  }

  /// A JSON integer in [lo, hi] (not 2.0, not "2").
  std::int64_t integer(const json& obj, std::string_view prefix, const std::string& key, std::int64_t lo = 0,
                       std::int64_t hi = int_max) const {
    const std::string what =
        hi == int_max ? shardalg::detail::cat("an integer >= ", lo) : shardalg::detail::cat("an integer in [", lo, ", ", hi, "]");
    const json& v = member(obj, prefix, key, what);
    if (!v.is_number_integer()) fail(name(prefix, key), &v, what);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) fail(name(prefix, key), &v, what);
    const auto x = v.get<std::int64_t>();
    if (x < lo || x > hi) fail(name(prefix, key), &v, what);
    return x;
  }
  /// A JSON integer in [0, 2^64 − 1] (a seed, a byte count).
  std::uint64_t unsigned_integer(const json& obj, std::string_view prefix, const std::string& key) const {
    constexpr std::string_view what = "an integer in [0, 18446744073709551615]";
    const json& v = member(obj, prefix, key, what);
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
      fail(name(prefix, key), &v, what);
    return v.get<std::uint64_t>();
  }
  /// A finite JSON number (an integer is one too).
  double number(const json& obj, std::string_view prefix, const std::string& key) const {
    const json& v = member(obj, prefix, key, "a finite number");
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(name(prefix, key), &v, "a finite number");
    return v.get<double>();
  }
  bool boolean(const json& obj, std::string_view prefix, const std::string& key) const {
    const json& v = member(obj, prefix, key, "true or false");
    if (!v.is_boolean()) fail(name(prefix, key), &v, "true or false");
    return v.get<bool>();
  }
  std::string string(const json& obj, std::string_view prefix, const std::string& key) const {
    const json& v = member(obj, prefix, key, "a string");
    if (!v.is_string()) fail(name(prefix, key), &v, "a string");
    return v.get<std::string>();
  }
  /// One of the strings `names` (an unknown one is not read as a default).
  std::string one_of(const json& obj, std::string_view prefix, const std::string& key,
                     std::initializer_list<std::string_view> names) const {
    std::string what = "one of";
    for (const auto n : names) what += shardalg::detail::cat(what.size() > 6 ? ", \"" : " \"", n, "\"");
    const json& v = member(obj, prefix, key, what);
    if (v.is_string())
      for (const auto n : names)
        if (v.get<std::string>() == n) return std::string(n);
    fail(name(prefix, key), &v, what);
  }
  /// A 64-bit hash as written: 16 lowercase hexadecimal digits.
  std::string hash(const json& obj, std::string_view prefix, const std::string& key) const {
    constexpr std::string_view what = "16 hexadecimal digits";
    const json& v = member(obj, prefix, key, what);
    bool ok = v.is_string() && v.get<std::string>().size() == 16;
    if (ok)
      for (const char c : v.get<std::string>()) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!ok) fail(name(prefix, key), &v, what);
    return v.get<std::string>();
  }

 private:
  std::string file_;
};

}  // namespace shardalg::nn
