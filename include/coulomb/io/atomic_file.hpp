// SPDX-License-Identifier: MIT
/// @file io/atomic_file.hpp
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
/// at the target is replaced by the new file (the link's destination is not written).
/// Without POSIX (Windows) the same steps use the standard library: the data are flushed to the
/// operating system but not forced to the disk, and std::filesystem::rename replaces the target.
#pragma once

#include <atomic>
#include <cerrno>
#include <concepts>
#include <cstddef>
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
#include <unistd.h>
#define COULOMB_IO_POSIX 1
#endif

#include "../core/error.hpp"

namespace coulomb::io {

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
  TemporaryFile(std::string_view where, std::string target) : where_(where), target_(target) {
    const std::filesystem::path tpath(target_);
    if (tpath.filename().empty()) throw_file_error(where_, target_, "the path names no file");
    // Keep the mode of the file being replaced; new files get 0666 minus the umask.
    mode_t mode = 0666;
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
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
    const std::byte* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      const ::ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        throw_file_error(where_, target_,
                         "write error on the temporary file '" + path_ + "'" + errno_text(err) +
                             "; the previous file is untouched");
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
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
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      throw_file_error(where_, target_,
                       "cannot rename the temporary file over it" + errno_text(err) +
                           "; the previous file is untouched");
    }
    committed_ = true;
    // Make the new directory entry durable. Best effort: a failure here leaves the new file in
    // place and complete; only its survival across a power loss is not guaranteed.
    std::string dir = std::filesystem::path(target_).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string where_;
  std::string target_;
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
      : where_(where), target_(target), path_(temporary_path_for(target_)) {
    if (std::filesystem::path(target_).filename().empty()) {
      throw_file_error(where_, target_, "the path names no file");
    }
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
    std::filesystem::rename(path_, target_, ec);
    if (ec) {
      throw_file_error(where_, target_,
                       "cannot rename the temporary file over it (" + ec.message() +
                           "); the previous file is untouched");
    }
    committed_ = true;
  }

 private:
  std::string where_;
  std::string target_;
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
    std::string_view where = "coulomb::io::write_file_atomically") {
  detail::TemporaryFile file(where, path);
  auto sink = [&file](std::span<const std::byte> bytes) { file.write(bytes); };
  produce(sink);
  file.commit();
}

/// Replaces the file at `path` atomically with `bytes` (see the overload taking a producer).
inline void write_file_atomically(const std::string& path, std::span<const std::byte> bytes,
                                  std::string_view where = "coulomb::io::write_file_atomically") {
  write_file_atomically(
      path, [bytes](auto& sink) { sink(bytes); }, where);
}

/// Reads the whole file at `path`. Throws io_error "where: 'path': what" when it cannot be
/// opened or read, or is a directory.
inline std::string read_file(const std::string& path,
                             std::string_view where = "coulomb::io::read_file") {
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

}  // namespace coulomb::io
