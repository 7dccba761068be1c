// tools/verify/trace.cpp — the Chrome trace of a run, with nlohmann-json.
#include "trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "options.hpp"

namespace sv {

using json = nlohmann::json;

namespace {

namespace fs = std::filesystem;
using shardalg::detail::cat;

/// The file `path` names: a symbolic link's target (resolved), else `path`.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_symlink(p, ec)) {
    const fs::path c = fs::weakly_canonical(p, ec);
    if (!ec) return c;
  }
  return p;
}

fs::path directory_of(const fs::path& p) { return p.parent_path().empty() ? fs::path(".") : p.parent_path(); }

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw ConfigError(cat("--trace ", path, ": ", what, " (", std::strerror(err), ")"));
}

/// `text` into trace_temp_path(path), closed, then renamed onto `path`; the temporary file is
/// removed on failure.
void write_replacing(const std::string& path, const std::string& text) {
  const std::string tmp = trace_temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(path, cat("cannot create ", tmp), errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(path, cat("writing ", text.size(), " bytes failed after ", done), err);
    }
    done += static_cast<std::size_t>(w);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, cat("closing ", tmp, " failed"), err);
  }
  if (std::rename(tmp.c_str(), resolved(path).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, cat("cannot replace it with ", tmp), err);
  }
}

}  // namespace

std::string trace_temp_path(const std::string& path) {
  const fs::path target = resolved(path);
  return (directory_of(target) / ("." + target.filename().string() + "." + std::to_string(::getpid()) + ".tmp")).string();
}

void check_trace_writable(const std::string& path) {
  if (path.empty()) return;
  const fs::path p(path);
  const fs::path dir = directory_of(p);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError(cat("--trace ", path, ": directory ", dir.string(), " does not exist"));
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) throw ConfigError(cat("--trace ", path, ": not a regular file"));
  if (::access(dir.c_str(), W_OK) != 0)
    throw ConfigError(cat("--trace ", path, ": directory ", dir.string(), " is not writable"));
  const std::string tmp = trace_temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(path, cat("cannot create a file in ", directory_of(resolved(path)).string()), errno);
  ::close(fd);
  ::unlink(tmp.c_str());
}

std::string trace_events_json(int rank, const shardalg::verify::EventLog& log) {
  json ev = json::array();
  const std::string nmr = "rank " + std::to_string(rank);
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", rank}, {"args", {{"name", nmr}}}});
  for (const auto& x : log.events) {
    json j{{"name", x.name}, {"cat", x.cat}, {"ph", "X"}, {"ts", x.ts_us}, {"dur", x.dur_us}, {"pid", rank}, {"tid", rank}};
    if (x.args) {
      json a{{"elements", x.args->elements}, {"bytes", x.args->bytes}, {"layouts", x.args->layouts}, {"dtype", x.args->dtype}};
      if (x.args->scope) a["scope"] = *x.args->scope;
      j["args"] = std::move(a);
    }
    ev.push_back(std::move(j));
  }
  return ev.dump();
}

std::size_t write_trace(const std::string& path, const std::vector<std::string>& rank_events, int p,
                        const std::string& backend) {
  json events = json::array();
  for (const auto& s : rank_events)
    for (auto& ev : json::parse(s)) events.push_back(std::move(ev));
  const std::size_t n = events.size();
  json tr{{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"tool", "shardalg-verify"}, {"tp", p}, {"backend", backend}}}};
  write_replacing(path, tr.dump() + "\n");
  return n;
}

}  // namespace sv
