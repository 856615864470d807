// SPDX-License-Identifier: MIT
// examples/common/output.hpp: the one output layer of coulomb's command-line tools.
//
// Every tool registers, before any work, the files it will read and write in an OutputPlan and
// calls check(). The plan then guarantees (docs/tools.md, "Files"):
//   - every output directory exists (it is created now when missing) and is writable;
//   - every output path is a regular file or absent, and its directory exists and takes a file
//     (a probe file is created, written, flushed and removed: a read-only folder or a full disk
//     is found now, not after the training);
//   - no output is the same file as an input, and no two outputs are the same file;
//   - a stream output (evaluate --json, --progress-json, …) may also be "-" (standard output),
//     a FIFO, a character device such as /dev/null, or the file standard output or standard
//     error already goes to (/dev/stdout when stdout is redirected): those are written as a
//     stream, never renamed over.
// A problem is reported as "<flag>: <what>" and exit status 105, like an invalid value.
//
// write_output() then writes a file atomically (io/atomic_file.hpp: a temporary file in the same
// directory, fsync, rename; symbolic links are followed, the previous file survives any failure)
// or streams it, and throws coulomb::io_error naming the path when it cannot.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <coulomb/core/error.hpp>
#include <coulomb/io/atomic_file.hpp>

namespace coulomb_examples {

/// A problem found by OutputPlan::check: the flag it concerns and what is wrong.
struct PathProblem {
  std::string flag;  ///< "--model", "--out", …
  std::string what;  ///< "'x' is the same file as the input of --data ('y')"
};

namespace detail {

/// (device, inode) of the file at `path` (links followed), if it exists.
inline std::optional<std::pair<std::uint64_t, std::uint64_t>> file_identity(
    const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair<std::uint64_t, std::uint64_t>{static_cast<std::uint64_t>(st.st_dev),
                                                 static_cast<std::uint64_t>(st.st_ino)};
}

/// Whether `path` names something written as a stream: "-", a FIFO, a character device, or
/// the file standard output or standard error goes to.
inline bool is_stream_target(const std::string& path) {
  if (path == "-") return true;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_fifo(status) || std::filesystem::is_character_file(status)) return true;
  return std::filesystem::is_regular_file(status) && coulomb::standard_stream_of(path) != 0;
}

/// The absolute path with symbolic links resolved as far as the path exists, for comparing
/// outputs that do not exist yet. An empty path (the parent of a bare file name) is the current
/// directory.
inline std::string normal_form(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path given = path.empty() ? std::filesystem::path(".") : path;
  const std::filesystem::path absolute = std::filesystem::absolute(given, ec);
  if (ec) return given.lexically_normal().string();
  std::filesystem::path p = std::filesystem::weakly_canonical(absolute, ec);
  if (ec) p = absolute.lexically_normal();
  return p.string();
}

}  // namespace detail

/// Writes `text` to the output `path` (see the file comment): "-" and a file that standard
/// output or error goes to are written into that stream; a FIFO or character device is opened
/// and written (no rename, no truncation); anything else is replaced atomically. Throws
/// coulomb::io_error "<flag> '<path>': <what>" when the write fails; the previous file is then
/// intact.
inline void write_output(const std::string& flag, const std::string& path, std::string_view text) {
  const std::string where = flag.empty() ? std::string("output") : flag;
  auto fail = [&](const std::string& what, int err) {
    throw coulomb::io_error(where + " '" + path + "': " + what + " (" + std::strerror(err) + ")");
  };
  if (const int fd = path == "-" ? 1 : coulomb::standard_stream_of(path)) {
    (fd == 1 ? std::cout : std::cerr).flush();
    if (const int err = coulomb::detail::write_fully(fd, text.data(), text.size()))
      fail("write error", err);
    return;
  }
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_fifo(status) || std::filesystem::is_character_file(status)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) fail("cannot open it for writing", errno);
    const int err = coulomb::detail::write_fully(fd, text.data(), text.size());
    ::close(fd);
    if (err != 0) fail("write error", err);
    return;
  }
  coulomb::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())), where);
}

/// The files one run of a tool reads and writes, checked together before any work (see the file
/// comment).
class OutputPlan {
 public:
  /// A file the run reads (`flag` names it in messages).
  void input(const std::string& flag, const std::filesystem::path& path) {
    inputs_.push_back({flag, path.string(), false, 0});
  }

  /// A file the run writes. `stream` also allows "-", a FIFO, a character device and the file
  /// standard output goes to; `expected_bytes` (when known) is checked against the free space.
  void output(const std::string& flag, const std::filesystem::path& path, bool stream = false,
              std::uintmax_t expected_bytes = 0) {
    outputs_.push_back({flag, path.string(), stream, expected_bytes});
  }

  /// A directory the run writes into: created by check() when missing.
  void directory(const std::string& flag, const std::filesystem::path& dir) {
    directories_.push_back({flag, dir.string(), false, 0});
  }

  /// Checks everything registered (creating the directories); returns the first problem, or
  /// nothing when the run may start.
  std::optional<PathProblem> check() const {
    namespace fs = std::filesystem;
    std::set<std::string> probed;  // directories proved writable: one probe file each
    for (const auto& d : directories_) {
      std::error_code ec;
      if (!fs::is_directory(d.path, ec)) {
        fs::create_directories(d.path, ec);
        if (ec)
          return PathProblem{d.flag,
                             "cannot create the directory '" + d.path + "' (" + ec.message() + ")"};
      }
      try {
        coulomb::check_output_path((fs::path(d.path) / ".coulomb-probe").string(), d.flag);
      } catch (const coulomb::io_error& e) {
        return PathProblem{
            d.flag, "cannot write into the directory '" + d.path + "'" + system_reason(e.what())};
      }
      probed.insert(detail::normal_form(d.path));
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      const Entry& o = outputs_[i];
      if (o.path.empty()) return PathProblem{o.flag, "the path is empty"};
      if (o.path == "-") {
        if (!o.stream) return PathProblem{o.flag, "'-' (standard output) is not allowed here"};
      } else if (o.stream && detail::is_stream_target(o.path)) {
        // written as a stream: nothing is created or replaced
      } else {
        try {
          // The target's type always; the probe and the free space once per directory.
          const std::string dir =
              detail::normal_form(fs::path(coulomb::resolve_output_path(o.path, "")).parent_path());
          if (o.expected_bytes > 0 || probed.insert(dir).second)
            coulomb::check_output_path(o.path, "", o.expected_bytes);
        } catch (const coulomb::io_error& e) {
          return PathProblem{o.flag, strip_where(e.what())};
        }
      }
      for (const Entry& in : inputs_)
        if (same_file(o, in))
          return PathProblem{o.flag, "'" + o.path + "' is the same file as the input of " +
                                         in.flag + " ('" + in.path + "'): it would be overwritten"};
      for (std::size_t j = 0; j < i; ++j)
        if (same_file(o, outputs_[j]))
          return PathProblem{o.flag, "'" + o.path + "' is the same file as the output of " +
                                         outputs_[j].flag + " ('" + outputs_[j].path + "')"};
    }
    return std::nullopt;
  }

 private:
  struct Entry {
    std::string flag, path;
    bool stream = false;
    std::uintmax_t expected_bytes = 0;
  };

  /// Whether two entries name the same file: "-" twice, the same (device, inode), or the same
  /// resolved path (for files that do not exist yet). FIFOs and devices shared by two outputs
  /// (two logs to /dev/null) are allowed.
  static bool same_file(const Entry& a, const Entry& b) {
    if (a.path == "-" || b.path == "-") return a.path == b.path;
    std::error_code ec;
    const auto status = std::filesystem::status(a.path, ec);
    if (std::filesystem::is_character_file(status)) return false;
    const auto ia = detail::file_identity(a.path), ib = detail::file_identity(b.path);
    if (ia && ib) return *ia == *ib;
    return detail::normal_form(a.path) == detail::normal_form(b.path);
  }

  /// "what" of an io_error "where: 'path': what" (the flag and the path are said by the caller).
  static std::string strip_where(const std::string& message) {
    const auto at = message.find('\'');
    return at == std::string::npos ? message : message.substr(at);
  }

  /// The system's reason at the end of a message, " (Permission denied)", or nothing.
  static std::string system_reason(const std::string& message) {
    const auto open = message.rfind(" (");
    return open != std::string::npos && message.back() == ')' ? message.substr(open)
                                                              : std::string();
  }

  std::vector<Entry> inputs_, outputs_, directories_;
};

}  // namespace coulomb_examples
