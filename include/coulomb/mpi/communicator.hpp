// SPDX-License-Identifier: MIT
/// @file mpi/communicator.hpp
/// @brief Data-parallel training over MPI (target coulomb::mpi, the only part of coulomb that
/// includes <mpi.h>): Environment, the RAII owner of MPI_Init_thread / MPI_Finalize, and
/// Communicator, a thin RAII wrapper of an MPI communicator (a duplicate of MPI_COMM_WORLD by
/// default) that implements train::Collective, so that Phase A and Phase B sum their gradients
/// over the processes (MPI_Allreduce with MPI_SUM, in place, one call per fused buffer) and
/// broadcast bytes (MPI_Bcast). Every call's error code is checked: a failure throws
/// mpi::communication_error with MPI's message. Documented in docs/distributed.md.
///
/// Data parallelism (Goyal et al., "Accurate, Large Minibatch SGD", 2017; Sergeev & Del Balso,
/// "Horovod", 2018): P processes hold the same parameters, each computes the gradient of its
/// shard of the global batch, the gradients are summed by an all-reduce, and every process
/// applies the same update, so the parameters stay identical.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../train/collective.hpp"

namespace coulomb::mpi {

/// An MPI call failed (its message is MPI's, after the name of the call).
class communication_error : public coulomb::error {
 public:
  using coulomb::error::error;
};

namespace detail {

/// Throws communication_error "coulomb::mpi: <call> failed: <MPI's message>" unless `code` is
/// MPI_SUCCESS.
inline void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw communication_error(std::string("coulomb::mpi: ") + call +
                            " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

/// The MPI datatype of T.
template <typename T>
MPI_Datatype datatype();
template <>
inline MPI_Datatype datatype<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype datatype<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype datatype<std::byte>() {
  return MPI_BYTE;
}

}  // namespace detail

/// Whether MPI has been initialized and not finalized.
[[nodiscard]] inline bool initialized() {
  int started = 0, finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  return started != 0 && finished == 0;
}

/// Owns the MPI library for the lifetime of a program: initializes it (MPI_Init_thread with
/// MPI_THREAD_FUNNELED: coulomb's worker threads never call MPI) unless it already is, and
/// finalizes what it initialized. When it is destroyed by an exception that is leaving the
/// scope it was made in (a rank failing while the others may be waiting in a collective), it
/// calls MPI_Abort on MPI_COMM_WORLD instead, so that the whole job ends with an error rather
/// than hang. Not copyable or movable; make one, first thing in main().
class Environment {
 public:
  /// Initializes MPI with the program's arguments (either may be nullptr). Throws
  /// communication_error when MPI_Init_thread fails, or when the library cannot provide
  /// MPI_THREAD_FUNNELED.
  Environment(int* argc = nullptr, char*** argv = nullptr)
      : exceptions_(std::uncaught_exceptions()) {
    int started = 0;
    detail::check(MPI_Initialized(&started), "MPI_Initialized");
    if (started) return;
    int provided = MPI_THREAD_SINGLE;
    detail::check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owner_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      owner_ = false;
      throw communication_error(
          "coulomb::mpi::Environment: the MPI library does not provide MPI_THREAD_FUNNELED");
    }
  }

  Environment(const Environment&) = delete;             ///< one per program
  Environment& operator=(const Environment&) = delete;  ///< one per program

  /// MPI_Finalize (when this object initialized MPI), or MPI_Abort(MPI_COMM_WORLD, 1) during
  /// the unwinding of an exception thrown in its scope.
  ~Environment() {
    if (!owner_ || !initialized()) return;
    if (std::uncaught_exceptions() > exceptions_) {
      MPI_Abort(MPI_COMM_WORLD, 1);
      return;
    }
    MPI_Finalize();
  }

  /// Whether this object initialized MPI (and will finalize it).
  [[nodiscard]] bool owner() const noexcept { return owner_; }

 private:
  int exceptions_;
  bool owner_ = false;
};

/// An MPI communicator as a train::Collective: its own duplicate of `MPI_COMM_WORLD` (or of
/// the communicator given), so that coulomb's messages never match the program's, freed on
/// destruction (which must come before MPI_Finalize). Move-only. Counts the time spent in
/// sum() and broadcast() and the bytes they moved, for the communication share of a step.
class Communicator final : public train::Collective {
 public:
  /// A duplicate of `parent` (collective: every process of `parent` must construct one).
  /// Throws communication_error when MPI is not initialized or MPI_Comm_dup fails.
  explicit Communicator(MPI_Comm parent = MPI_COMM_WORLD) {
    if (!initialized())
      throw communication_error(
          "coulomb::mpi::Communicator: MPI is not initialized (make an mpi::Environment first)");
    detail::check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    // Errors come back as codes (check() turns them into exceptions) instead of aborting.
    detail::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  Communicator(const Communicator&) = delete;             ///< owns its MPI_Comm
  Communicator& operator=(const Communicator&) = delete;  ///< owns its MPI_Comm
  /// Takes `other`'s communicator (which is left without one).
  Communicator(Communicator&& other) noexcept
      : Collective(),
        comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        rank_(other.rank_),
        size_(other.size_),
        seconds_(other.seconds_),
        bytes_(other.bytes_),
        calls_(other.calls_) {}
  /// Frees this communicator, then takes `other`'s.
  Communicator& operator=(Communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      rank_ = other.rank_;
      size_ = other.size_;
      seconds_ = other.seconds_;
      bytes_ = other.bytes_;
      calls_ = other.calls_;
    }
    return *this;
  }
  /// MPI_Comm_free (nothing once MPI is finalized).
  ~Communicator() override { release(); }

  /// This process's rank in the communicator.
  [[nodiscard]] int rank() const override { return rank_; }
  /// The number of processes of the communicator.
  [[nodiscard]] int size() const override { return size_; }
  /// The MPI communicator, for the program's own calls.
  [[nodiscard]] MPI_Comm native() const noexcept { return comm_; }

  /// values ← Σ over the processes (MPI_Allreduce, MPI_IN_PLACE, MPI_SUM).
  void sum(std::span<float> values) override { all_reduce(values, MPI_SUM); }
  /// values ← Σ over the processes (MPI_Allreduce, MPI_IN_PLACE, MPI_SUM).
  void sum(std::span<double> values) override { all_reduce(values, MPI_SUM); }
  /// bytes ← the bytes of process `root` (MPI_Bcast).
  void broadcast(std::span<std::byte> bytes, int root) override {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < bytes.size(); at += chunk) {
      const std::size_t n = std::min(chunk, bytes.size() - at);
      detail::check(MPI_Bcast(bytes.data() + at, static_cast<int>(n), MPI_BYTE, root, comm_),
                    "MPI_Bcast");
    }
    count(start, bytes.size());
  }

  /// This process's part ← the sum of that part over the processes (MPI_Reduce_scatter; the
  /// parts as train::Collective::reduce_scatter says).
  void reduce_scatter(std::span<float> values, std::span<const Index> counts) override {
    reduce_scatter_parts(values, counts);
  }
  /// This process's part ← the sum of that part over the processes (MPI_Reduce_scatter).
  void reduce_scatter(std::span<double> values, std::span<const Index> counts) override {
    reduce_scatter_parts(values, counts);
  }
  /// Every part ← its owner's (MPI_Allgatherv, MPI_IN_PLACE).
  void all_gather(std::span<float> values, std::span<const Index> counts) override {
    all_gather_parts(values, counts);
  }
  /// Every part ← its owner's (MPI_Allgatherv, MPI_IN_PLACE).
  void all_gather(std::span<double> values, std::span<const Index> counts) override {
    all_gather_parts(values, counts);
  }

  /// Waits until every process has called barrier() (MPI_Barrier).
  void barrier() { detail::check(MPI_Barrier(comm_), "MPI_Barrier"); }

  /// Seconds spent in sum() and broadcast() so far (waiting for the slowest
  /// process included).
  [[nodiscard]] double seconds() const noexcept { return seconds_; }
  /// Bytes those calls were given so far (each process's own buffers).
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  /// Number of those calls so far.
  [[nodiscard]] std::uint64_t calls() const noexcept { return calls_; }

 private:
  // The largest count of one MPI call (an int).
  static constexpr std::size_t chunk = static_cast<std::size_t>(INT_MAX);

  template <typename T>
  void all_reduce(std::span<T> values, MPI_Op op) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < values.size(); at += chunk) {
      const std::size_t n = std::min(chunk, values.size() - at);
      detail::check(MPI_Allreduce(MPI_IN_PLACE, values.data() + at, static_cast<int>(n),
                                  detail::datatype<T>(), op, comm_),
                    "MPI_Allreduce");
    }
    count(start, values.size_bytes());
  }

  // counts_ ← `counts` as ints, displs_ ← their offsets (each part must fit an int).
  void parts(std::size_t n, std::span<const Index> counts, const char* what) {
    check_parts(n, counts, what);
    counts_.resize(counts.size());
    displs_.resize(counts.size());
    Index at = 0;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      if (counts[q] > INT_MAX || at > INT_MAX)
        throw communication_error(std::string("coulomb::mpi::Communicator::") + what +
                                  ": a part or its offset exceeds INT_MAX entries");
      counts_[q] = static_cast<int>(counts[q]);
      displs_[q] = static_cast<int>(at);
      at += counts[q];
    }
  }

  template <typename T>
  void reduce_scatter_parts(std::span<T> values, std::span<const Index> counts) {
    const auto start = std::chrono::steady_clock::now();
    parts(values.size(), counts, "reduce_scatter");
    // In place, MPI puts this process's part at the start of the buffer: moved to its offset.
    const auto r = static_cast<std::size_t>(rank_);
    detail::check(MPI_Reduce_scatter(MPI_IN_PLACE, values.data(), counts_.data(),
                                     detail::datatype<T>(), MPI_SUM, comm_),
                  "MPI_Reduce_scatter");
    if (displs_[r] > 0 && counts_[r] > 0)
      std::memmove(values.data() + displs_[r], values.data(),
                   static_cast<std::size_t>(counts_[r]) * sizeof(T));
    count(start, values.size_bytes());
  }

  template <typename T>
  void all_gather_parts(std::span<T> values, std::span<const Index> counts) {
    const auto start = std::chrono::steady_clock::now();
    parts(values.size(), counts, "all_gather");
    detail::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values.data(), counts_.data(),
                                 displs_.data(), detail::datatype<T>(), comm_),
                  "MPI_Allgatherv");
    count(start, values.size_bytes());
  }

  void count(std::chrono::steady_clock::time_point start, std::size_t bytes) noexcept {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bytes_ += bytes;
    ++calls_;
  }

  void release() noexcept {
    if (comm_ != MPI_COMM_NULL && initialized()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  double seconds_ = 0.0;
  std::uint64_t bytes_ = 0;
  std::uint64_t calls_ = 0;
  std::vector<int> counts_, displs_;  // the parts of the last reduce_scatter or all_gather
};

}  // namespace coulomb::mpi
