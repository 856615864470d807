// SPDX-License-Identifier: MIT
/// @file tests/fifo_support.hpp
/// @brief A named pipe (FIFO) fed by a thread, for the tests that check that a loader reads its
/// file exactly once (POSIX only): a pipe, a FIFO or /dev/stdin cannot be read twice.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#define COULOMB_TEST_HAVE_FIFO 1

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coulomb_test {

/// A FIFO at `path` (created by the constructor; the caller removes it) whose reader gets
/// `bytes`, then the end of the stream. The feeding thread never blocks for good: it opens the
/// FIFO without blocking as soon as a reader has opened it, and once the bytes are written and
/// its end closed, it keeps opening and closing the FIFO (without data) until finish(), so that
/// a reader that opens the path a second time sees an empty stream at once. A loader that reads
/// twice then fails (wrong bytes) instead of hanging the test.
class FifoFeeder {
 public:
  /// Creates the FIFO and starts the thread; created() tells whether mkfifo succeeded.
  FifoFeeder(std::string path, std::string bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {
    created_ = ::mkfifo(path_.c_str(), 0600) == 0;
    if (created_) thread_ = std::thread([this] { feed(); });
  }
  ~FifoFeeder() { finish(); }
  FifoFeeder(const FifoFeeder&) = delete;
  FifoFeeder& operator=(const FifoFeeder&) = delete;

  /// Whether the FIFO was created.
  bool created() const noexcept { return created_; }

  /// Stops the thread (call it once the reader is done).
  void finish() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  /// A write end, opened without blocking once a reader has the FIFO open; -1 after finish().
  int open_writer() {
    for (;;) {
      const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) return fd;
      if (done_) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void feed() {
    // A reader that closes early makes write() fail with EPIPE; the SIGPIPE it raises stays
    // blocked (and pending) in this thread instead of killing the test process.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    int fd = open_writer();
    if (fd < 0) return;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::size_t written = 0;
    while (written < bytes_.size()) {
      const ::ssize_t n = ::write(fd, bytes_.data() + written, bytes_.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    ::close(fd);
    while ((fd = open_writer()) >= 0) {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::string path_;
  std::string bytes_;
  bool created_ = false;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace coulomb_test

#endif
