// SPDX-License-Identifier: MIT
/// @file core/atomic_file.hpp
/// @brief Crash-safe replacement of a file: write a temporary file in the same directory, flush
/// it to the disk, then rename it over the target.
///
/// rename(2) within one file system is atomic: a reader (or the file system after a crash) sees
/// either the complete old file or the complete new one, never a mixture or a truncated file.
/// The protocol, on POSIX systems:
///   1. create `<dir>/.<name>.tmp.<pid>.<n>` with O_CREAT | O_EXCL (never an existing file);
///   2. write every byte (retrying short writes and EINTR), then fsync(2) the temporary file, so
///      that its data is on the disk before it gets the target's name;
///   3. rename(2) it over the target, then fsync(2) the directory so that the rename itself is
///      durable (best effort: some file systems refuse to sync a directory);
///   4. on any error before the rename, close and remove the temporary file, then throw
///      coulomb::io_error; the target is untouched.
/// A file replaced this way keeps the permission bits of the file it replaces. A symbolic link
/// at the target is followed (a chain of links too): the file it names is replaced, the link
/// stays. Only regular files are ever replaced: a target that is (or whose link names) a
/// directory, a device, a FIFO or a socket is refused with io_error before anything is written,
/// so a save run as root never turns /dev/null or a named pipe into a regular file.
/// check_output_path() makes the same checks, and proves the directory writable, before a long
/// computation whose result is to be saved.
/// Without POSIX (Windows) the same steps use the standard library: the data are flushed to the
/// operating system but not forced to the disk, and std::filesystem::rename replaces the target.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#define COULOMB_IO_POSIX 1
#endif

#include "error.hpp"

namespace coulomb {

namespace detail {

/// "where: 'path': what" as an io_error.
[[noreturn]] inline void throw_file_error(std::string_view where, std::string_view path,
                                          const std::string& what) {
  std::string msg(where);
  msg += ": '";
  msg += path;
  msg += "': ";
  msg += what;
  throw io_error(msg);
}

/// " (strerror(err))", or nothing for err = 0.
inline std::string errno_text(int err) {
  return err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string();
}

#ifdef COULOMB_IO_POSIX
/// Writes all `size` bytes at `data` to the descriptor `fd`, retrying short writes and
/// interrupted calls. Returns 0, or the errno of the failing write.
inline int write_fully(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ::ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}
#endif

/// What kind of file `status` describes, for messages ("a character device").
inline std::string file_kind_name(const std::filesystem::file_status& status) {
  namespace fs = std::filesystem;
  switch (status.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a FIFO (named pipe)";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::regular:
      return "a regular file";
    default:
      return "not a regular file";
  }
}

/// `path` with its symbolic links followed to the file they name (which need not exist: a
/// dangling link names where the file will be created). At most 40 links, as POSIX allows.
inline std::filesystem::path follow_links(const std::filesystem::path& path,
                                          std::string_view where) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0;; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    if (hops == 40) throw_file_error(where, path.string(), "too many levels of symbolic links");
    fs::path next = fs::read_symlink(p, ec);
    if (ec)
      throw_file_error(where, path.string(),
                       "cannot read the symbolic link '" + p.string() + "' (" + ec.message() + ")");
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
}

}  // namespace detail

/// 1 when the existing file at `path` (links followed) is where this process's standard output
/// goes, 2 for standard error, 0 otherwise (or without POSIX). /dev/stdout of a process whose
/// output is redirected to a file names that file.
inline int standard_stream_of(const std::string& path) {
#ifdef COULOMB_IO_POSIX
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  for (const int fd : {1, 2}) {
    struct stat stream {};
    if (::fstat(fd, &stream) == 0 && stream.st_dev == st.st_dev && stream.st_ino == st.st_ino)
      return fd;
  }
#else
  (void)path;
#endif
  return 0;
}

/// Where a write to `path` goes: `path` itself, or, when it is a symbolic link, the file the
/// link names (followed through a chain of links). That file must be a regular file or absent;
/// anything else is refused with io_error "where: 'path': is a character device, not a regular
/// file: it is never replaced" (a directory, a device, a FIFO, a socket), as is a path that
/// names no file ("dir/").
inline std::string resolve_output_path(const std::string& path,
                                       std::string_view where = "coulomb::resolve_output_path") {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).filename().empty())
    detail::throw_file_error(where, path, "the path names no file");
  // The kernel follows the links for the type (this also handles /proc's magic links, such as
  // /dev/stdout on a pipe); follow_links gives the path to replace.
  std::error_code ec;
  const fs::file_status status = fs::status(fs::path(path), ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    std::string what = "is " + detail::file_kind_name(status);
    if (fs::is_symlink(fs::symlink_status(fs::path(path), ec)))
      what = "is a symbolic link to " + detail::file_kind_name(status);
    detail::throw_file_error(where, path, what + ", not a regular file: it is never replaced");
  }
  const fs::path target = detail::follow_links(fs::path(path), where);
  // Replacing the file stdout goes to would destroy what was printed: write to the stream.
  if (const int fd = fs::exists(status) ? standard_stream_of(target.string()) : 0)
    detail::throw_file_error(where, path,
                             std::string("is the same file as the standard ") +
                                 (fd == 1 ? "output" : "error") +
                                 " of this process: it is never replaced");
  return target.string();
}

namespace detail {

/// A name for the temporary file beside `target` that no other writer of this process uses.
inline std::filesystem::path temporary_path_for(const std::filesystem::path& target) {
  static std::atomic<unsigned long long> counter{0};
  unsigned long long pid = 0;
#ifdef COULOMB_IO_POSIX
  pid = static_cast<unsigned long long>(::getpid());
#endif
  std::string name = "." + target.filename().string() + ".tmp." + std::to_string(pid) + "." +
                     std::to_string(counter.fetch_add(1));
  return target.parent_path() / name;
}

#ifdef COULOMB_IO_POSIX

/// The temporary file of one atomic write: closed and removed on destruction unless committed.
class TemporaryFile {
 public:
  TemporaryFile(std::string_view where, std::string target)
      : where_(where), target_(target), resolved_(resolve_output_path(target_, where_)) {
    const std::filesystem::path tpath(resolved_);
    // Keep the mode of the file being replaced; new files get 0666 minus the umask.
    mode_t mode = 0666;
    struct stat st {};
    if (::stat(resolved_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = temporary_path_for(tpath).string();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd_ >= 0) break;
      if (errno != EEXIST) {
        const int err = errno;
        throw_file_error(where_, target_,
                         "cannot create the temporary file '" + path_ + "'" + errno_text(err));
      }
    }
    if (fd_ < 0) {
      throw_file_error(where_, target_, "cannot find a free temporary file name beside it");
    }
    if (S_ISREG(st.st_mode) && ::fchmod(fd_, mode) != 0) {
      // Not fatal: the data are what matters; the file keeps the default mode.
    }
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  /// Writes all of `bytes`, retrying short writes and interrupted calls.
  void write(std::span<const std::byte> bytes) {
    if (const int err = write_fully(fd_, bytes.data(), bytes.size()))
      throw_file_error(where_, target_,
                       "write error on the temporary file '" + path_ + "'" + errno_text(err) +
                           "; the previous file is untouched");
  }

  /// fsync, close, rename over the target, fsync the directory.
  void commit() {
    if (::fsync(fd_) != 0) {
      const int err = errno;
      throw_file_error(where_, target_,
                       "cannot flush the temporary file '" + path_ + "' to the disk" +
                           errno_text(err) + "; the previous file is untouched");
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int err = errno;
      throw_file_error(where_, target_,
                       "cannot close the temporary file '" + path_ + "'" + errno_text(err) +
                           "; the previous file is untouched");
    }
    if (::rename(path_.c_str(), resolved_.c_str()) != 0) {
      const int err = errno;
      throw_file_error(where_, target_,
                       "cannot rename the temporary file over it" + errno_text(err) +
                           "; the previous file is untouched");
    }
    committed_ = true;
    // Make the new directory entry durable. Best effort: a failure here leaves the new file in
    // place and complete; only its survival across a power loss is not guaranteed.
    std::string dir = std::filesystem::path(resolved_).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string where_;
  std::string target_;    // as given (in messages)
  std::string resolved_;  // where the bytes go (resolve_output_path)
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

#else  // !COULOMB_IO_POSIX

/// The temporary file of one atomic write (standard-library version): removed on destruction
/// unless committed.
class TemporaryFile {
 public:
  TemporaryFile(std::string_view where, std::string target)
      : where_(where),
        target_(target),
        resolved_(resolve_output_path(target_, where_)),
        path_(temporary_path_for(resolved_)) {
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) {
      throw_file_error(where_, target_,
                       "cannot create the temporary file '" + path_.string() + "'");
    }
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (out_.is_open()) out_.close();
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
  }

  /// Writes all of `bytes`.
  void write(std::span<const std::byte> bytes) {
    out_.write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    if (!out_) {
      throw_file_error(where_, target_,
                       "write error on the temporary file '" + path_.string() +
                           "'; the previous file is untouched");
    }
  }

  /// Flush, close, rename over the target.
  void commit() {
    out_.flush();
    out_.close();
    if (!out_) {
      throw_file_error(where_, target_,
                       "cannot flush the temporary file '" + path_.string() +
                           "'; the previous file is untouched");
    }
    std::error_code ec;
    std::filesystem::rename(path_, resolved_, ec);
    if (ec) {
      throw_file_error(where_, target_,
                       "cannot rename the temporary file over it (" + ec.message() +
                           "); the previous file is untouched");
    }
    committed_ = true;
  }

 private:
  std::string where_;
  std::string target_;    // as given (in messages)
  std::string resolved_;  // where the bytes go (resolve_output_path)
  std::filesystem::path path_;
  std::ofstream out_;
  bool committed_ = false;
};

#endif  // COULOMB_IO_POSIX

}  // namespace detail

/// Replaces the file at `path` atomically with the bytes that `produce` writes.
///
/// `produce` is called once with a sink, a callable taking `std::span<const std::byte>`; it
/// may call the sink any number of times. The bytes go to a temporary file in the directory of
/// `path`, which is flushed to the disk and renamed over `path` (see the file comment). If
/// `produce` throws, or any step fails, the temporary file is removed, `path` keeps its previous
/// contents (or stays absent), and the exception propagates; failures of the file system are
/// reported as coulomb::io_error "where: 'path': what", with the reason from the system.
template <typename Producer>
requires(!std::convertible_to<Producer, std::span<const std::byte>>) void write_file_atomically(
    const std::string& path, Producer&& produce,
    std::string_view where = "coulomb::write_file_atomically") {
  detail::TemporaryFile file(where, path);
  auto sink = [&file](std::span<const std::byte> bytes) { file.write(bytes); };
  produce(sink);
  file.commit();
}

/// Replaces the file at `path` atomically with `bytes` (see the overload taking a producer).
inline void write_file_atomically(const std::string& path, std::span<const std::byte> bytes,
                                  std::string_view where = "coulomb::write_file_atomically") {
  write_file_atomically(
      path, [bytes](auto& sink) { sink(bytes); }, where);
}

/// Checks, before a computation whose result is to be written to `path`, that
/// write_file_atomically(path, …) can succeed: `path` resolves to a regular file or to nothing
/// (resolve_output_path), its directory exists, and a file can be created in it, written
/// (`probe_bytes`, at least 1) and flushed to the disk; the probe file is removed again. With
/// `expected_bytes` > 0, the file system must also have that many bytes available (statvfs).
/// Throws io_error "where: 'path': what" naming the reason (a missing directory, a read-only
/// folder, a full disk). This proves the conditions at the time of the call only; the write
/// itself still reports any later failure and keeps the previous file.
inline void check_output_path(const std::string& path,
                              std::string_view where = "coulomb::check_output_path",
                              std::uintmax_t expected_bytes = 0, std::size_t probe_bytes = 4096) {
  namespace fs = std::filesystem;
  const fs::path target(resolve_output_path(path, where));
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  const fs::file_status dir_status = fs::status(dir, ec);
  if (!fs::exists(dir_status))
    detail::throw_file_error(where, path, "the directory '" + dir.string() + "' does not exist");
  if (!fs::is_directory(dir_status))
    detail::throw_file_error(where, path, "'" + dir.string() + "' is not a directory");
  const std::string probe = detail::temporary_path_for(target).string();
  const std::string zeros(std::max<std::size_t>(probe_bytes, 1), '\0');
#ifdef COULOMB_IO_POSIX
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    detail::throw_file_error(
        where, path,
        "cannot create a file in the directory '" + dir.string() + "'" + detail::errno_text(err));
  }
  int err = detail::write_fully(fd, zeros.data(), zeros.size());
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (err != 0)
    detail::throw_file_error(
        where, path,
        "cannot write a file in the directory '" + dir.string() + "'" + detail::errno_text(err));
  if (expected_bytes > 0) {
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) == 0) {
      const std::uintmax_t available =
          static_cast<std::uintmax_t>(vfs.f_bavail) * static_cast<std::uintmax_t>(vfs.f_frsize);
      if (available < expected_bytes)
        detail::throw_file_error(where, path,
                                 "the file system of '" + dir.string() + "' has " +
                                     std::to_string(available) + " bytes free, the file needs " +
                                     std::to_string(expected_bytes));
    }
  }
#else
  {
    std::ofstream out(probe, std::ios::binary | std::ios::trunc);
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    out.flush();
    const bool ok = static_cast<bool>(out);
    out.close();
    fs::remove(probe, ec);
    if (!ok)
      detail::throw_file_error(where, path,
                               "cannot write a file in the directory '" + dir.string() + "'");
  }
  if (expected_bytes > 0) {
    const fs::space_info space = fs::space(dir, ec);
    if (!ec && space.available < expected_bytes)
      detail::throw_file_error(where, path,
                               "the file system of '" + dir.string() + "' has " +
                                   std::to_string(space.available) +
                                   " bytes free, the file needs " + std::to_string(expected_bytes));
  }
#endif
}

/// Reads the whole file at `path`. Throws io_error "where: 'path': what" when it cannot be
/// opened or read, or is a directory.
inline std::string read_file(const std::string& path,
                             std::string_view where = "coulomb::read_file") {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    detail::throw_file_error(where, path, "is a directory, not a file");
  }
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    detail::throw_file_error(where, path,
                             "cannot open the file for reading" + detail::errno_text(err));
  }
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buffer, 1, sizeof buffer, f);
    try {
      bytes.append(buffer, got);
    } catch (...) {
      std::fclose(f);
      throw;
    }
    if (got < sizeof buffer) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) detail::throw_file_error(where, path, "read error");
  return bytes;
}

}  // namespace coulomb
