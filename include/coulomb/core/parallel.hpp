// SPDX-License-Identifier: MIT
/// @file core/parallel.hpp
/// @brief Internal: the optional OpenMP loop shared by attention/ and nn/. Without OpenMP (no
/// `_OPENMP`) every loop runs on the calling thread and nothing here needs OpenMP.
///
/// Iterations are assigned statically, so that reductions over per-thread buffers give the
/// same bits for the same inputs and thread count.
#pragma once

#include <exception>

#include "config.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace coulomb::detail {

/// Threads to use for a requested count (0 = all OpenMP threads); 1 without OpenMP.
inline int resolve_threads(int requested) noexcept {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

/// Runs body(i, thread) for i in [0, n) on up to `threads` threads, thread ∈ [0, threads).
/// Iterations are assigned statically (the same i always runs on the same thread for given n
/// and threads). The first exception thrown by a body is rethrown after the loop.
template <typename Body>
void parallel_for(Index n, int threads, Body&& body) {
#ifdef _OPENMP
  if (threads > 1 && n > 1) {
    std::exception_ptr error;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index i = 0; i < n; ++i) {
      try {
        body(i, omp_get_thread_num());
      } catch (...) {
#pragma omp critical(coulomb_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#else
  (void)threads;
#endif
  for (Index i = 0; i < n; ++i) body(i, 0);
}

}  // namespace coulomb::detail
