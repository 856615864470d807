// SPDX-License-Identifier: MIT
// examples/common/processes.hpp: the processes of one run of a tool: this process alone, or P
// data-parallel processes started by mpirun (docs/distributed.md) when the tool is built with
// MPI (COULOMB_EXAMPLES_MPI, which examples/CMakeLists.txt defines for the tools that link
// coulomb::mpi, when MPI is found).
//
// A process started without an MPI launcher never initializes MPI: a plain run is the run of a
// build without MPI. Under mpirun (the launcher's variables OMPI_COMM_WORLD_SIZE, PMIX_RANK,
// PMI_RANK or PMI_SIZE are set), Processes owns the mpi::Environment and a Communicator of all
// the processes, which the tool passes to the training (collective()). Then:
//
//   - Only rank 0 prints: on the other ranks std::cout is discarded and std::cerr kept in a
//     buffer, which is shown only when that rank fails alone (agree, fail).
//   - agree(stop), after the checks that come before any work (the command line, the data, the
//     output paths), which every process runs: the processes stop together when any of them
//     stops, with one message (rank 0's; another rank's, prefixed "process r of P", when rank 0
//     had no objection), and the same kind of exit status. One sum over the processes.
//   - fail(e), for an exception thrown during the work: when every process fails at the same
//     point (a numerical failure is collective in the library: every process throws the same
//     numerical_error at the same step), rank 0 prints the message and every process returns
//     1, so the job ends normally with status 1. A process that fails alone (the others wait
//     in a sum) prints its message, prefixed "process r of P", and calls MPI_Abort: mpirun
//     ends every process and exits with a non-zero status. The two are told apart by a
//     non-blocking barrier on a communicator of their own, waited for a few seconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <coulomb/train/collective.hpp>

#ifdef COULOMB_EXAMPLES_MPI
#include <coulomb/mpi/communicator.hpp>
#endif

namespace coulomb_examples {

/// Whether an MPI launcher started this process (mpirun or mpiexec of Open MPI, MPICH or Intel
/// MPI; srun with PMI or PMIx): one of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE is set.
inline bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

/// Whether this build of the tools can run as several MPI processes.
inline constexpr bool built_with_mpi() {
#ifdef COULOMB_EXAMPLES_MPI
  return true;
#else
  return false;
#endif
}

/// The processes of a run (see the file comment). Make one first thing in main(), before any
/// output; not copyable.
class Processes {
 public:
  /// `name` prefixes the messages ("<name>: …"); `argc` and `argv` go to MPI_Init_thread. Throws
  /// coulomb::mpi::communication_error when MPI cannot be initialized under a launcher.
  Processes(std::string name, [[maybe_unused]] int* argc, [[maybe_unused]] char*** argv)
      : name_(std::move(name)) {
#ifdef COULOMB_EXAMPLES_MPI
    if (!started_by_mpi_launcher()) return;
#ifndef _WIN32
    // Open MPI between processes of one host: copies through its shared-memory buffers instead
    // of the kernel's cross-process copy (CMA), which pins the other process's pages at every
    // sum; Phase B with 2 processes was about 6 % faster (noisy; docs/distributed.md, "Cost").
    // Only when the user has not chosen (an MCA variable in the environment or `--mca` on
    // mpirun's line).
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
#endif
    environment_.emplace(argc, argv);
    world_.emplace();
    control_.emplace();
    rank_ = world_->rank();
    size_ = world_->size();
    if (rank_ != 0) {
      cout_ = std::cout.rdbuf(&discarded_);
      cerr_ = std::cerr.rdbuf(&kept_);
      clog_ = std::clog.rdbuf(&kept_);
    }
#endif
  }

  Processes(const Processes&) = delete;             ///< owns MPI
  Processes& operator=(const Processes&) = delete;  ///< owns MPI

  /// Gives the standard streams back; then frees the communicators and finalizes MPI.
  ~Processes() {
    if (cout_ != nullptr) std::cout.rdbuf(cout_);
    if (cerr_ != nullptr) std::cerr.rdbuf(cerr_);
    if (clog_ != nullptr) std::clog.rdbuf(clog_);
  }

  /// This process's rank (0 without MPI).
  int rank() const noexcept {
    return rank_;
  }
  /// The number of processes (1 without MPI).
  int size() const noexcept {
    return size_;
  }
  /// Whether this process prints and writes the files (rank 0).
  bool root() const noexcept {
    return rank_ == 0;
  }

  /// The processes for the training's `collective` options: nullptr without MPI (this process
  /// alone), else the communicator of all of them (one process under `mpirun -np 1` runs the
  /// single-process code bit for bit).
  coulomb::train::Collective* collective() noexcept {
#ifdef COULOMB_EXAMPLES_MPI
    if (world_) return &*world_;
#endif
    return nullptr;
  }

  /// The decision of every process after the checks before the work: `stop` is this process's
  /// exit status when it must stop now (after --help, or a problem it has printed), nothing
  /// when it may go on. Returns the exit status when the processes stop (some of them did: this
  /// process's own status, else the largest of theirs), nothing when they all go on. Every
  /// process must call it.
  std::optional<int> agree(std::optional<int> stop) {
    if (size_ == 1) return stop;
    const auto P = static_cast<std::size_t>(size_);
    const auto r = static_cast<std::size_t>(rank_);
    // Slot r: whether rank r stops; slot P + r: its status.
    std::vector<double> votes(2 * P, 0.0);
    votes[r] = stop ? 1.0 : 0.0;
    votes[P + r] = stop ? static_cast<double>(*stop) : 0.0;
    collective()->sum(std::span<double>(votes));
    bool any = false;
    int status = 0;
    for (std::size_t k = 0; k < P; ++k) {
      if (votes[k] == 0.0) continue;
      any = true;
      status = std::max(status, static_cast<int>(votes[P + k]));
    }
    if (!any) return std::nullopt;
    // Rank 0 has printed its own message; another rank's is shown when rank 0 saw no problem.
    if (stop && !root() && votes[0] == 0.0) show_kept("");
    return stop ? *stop : status;
  }

  /// The exit status after `e` was thrown during the work, with its message printed once (see
  /// the file comment); a process that failed alone ends the whole job (MPI_Abort) instead.
  int fail(const std::exception& e) {
    if (size_ == 1) {
      std::cerr << name_ << ": " << e.what() << "\n";
      return 1;
    }
#ifdef COULOMB_EXAMPLES_MPI
    if (all_arrive(std::chrono::seconds(5))) {
      if (root()) std::cerr << name_ << ": " << e.what() << "\n";
      return 1;
    }
    std::ostringstream text;
    text << name_ << ": process " << rank_ << " of " << size_ << ": " << e.what() << "\n";
    if (root()) {
      std::cerr << text.str();
      std::cerr.flush();
    } else {
      show_kept(text.str());
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    return 1;
  }

 private:
  /// Discards what it is given.
  class Discard : public std::streambuf {
   protected:
    int_type overflow(int_type c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char_type*, std::streamsize n) override { return n; }
  };

  /// Writes this rank's kept standard error (the message it printed), "<name>: process r of P: "
  /// before it, then `more`, to the real standard error.
  void show_kept(const std::string& more) {
    if (cerr_ == nullptr) return;
    std::ostream real(cerr_);
    const std::string kept = kept_.str();
    if (!kept.empty())
      real << name_ << ": process " << rank_ << " of " << size_ << ": " << kept
           << (kept.back() == '\n' ? "" : "\n");
    real << more;
    real.flush();
  }

#ifdef COULOMB_EXAMPLES_MPI
  /// Whether every process reaches this call within `wait` (a non-blocking barrier on a
  /// communicator that the training never uses).
  bool all_arrive(std::chrono::milliseconds wait) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(control_->native(), &request) != MPI_SUCCESS) return false;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      int done = 0;
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
      if (done) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::optional<coulomb::mpi::Environment> environment_{};
  std::optional<coulomb::mpi::Communicator> world_{};    // the training's
  std::optional<coulomb::mpi::Communicator> control_{};  // fail()'s barrier
#endif
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  Discard discarded_{};
  std::stringbuf kept_{};
  std::streambuf* cout_ = nullptr;
  std::streambuf* cerr_ = nullptr;
  std::streambuf* clog_ = nullptr;
};

/// The body of a tool's main(): starts the processes (a failure there: one message naming the
/// tool, status 1) and returns run(argc, argv, processes), with the arguments MPI left.
template <typename Run>
int run_as_processes(const char* name, int argc, char** argv, Run run) {
  std::optional<Processes> processes;
  try {
    processes.emplace(name, &argc, &argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return run(argc, argv, *processes);
}

}  // namespace coulomb_examples
