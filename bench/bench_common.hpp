// SPDX-License-Identifier: MIT
// bench/bench_common.hpp: what the multi-threaded benchmarks share (bench_attention, bench_model,
// bench_sequence): the thread count of OpenMP and Eigen, and the process's memory figures.
#pragma once

#include <Eigen/Core>

#include <cstring>
#include <fstream>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace coulomb_bench {

/// Threads of the library's OpenMP loops and of Eigen's products.
inline void set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

/// A field of /proc/self/status in KiB (VmRSS, VmHWM), or −1 where there is none.
inline long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::stol(line.substr(n + 1));
  return -1;
}

}  // namespace coulomb_bench
