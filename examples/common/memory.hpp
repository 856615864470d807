// SPDX-License-Identifier: MIT
// examples/common/memory.hpp: keep freed memory in the process (glibc's malloc), called first
// thing in main by the tools that train.
//
// glibc gives blocks of 128 KiB and more back to the kernel when they are freed (mmap/munmap,
// and trimming the heap), so the model's temporaries of every step are page-faulted in anew,
// which is slow on these virtual machines (about 1.5 GB/s). Keeping them made Phase B of
// text_classification on Rotten Tomatoes about 1.2 times as fast on one process and 1.5 times on
// two (docs/distributed.md, "Cost"). The library leaves malloc alone: that is the program's choice.
#pragma once

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace coulomb_examples {

/// Large blocks from the heap instead of mmap, and a heap that is not trimmed below 2 GiB of
/// free memory at its top. Does nothing on a C library other than glibc.
inline void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace coulomb_examples
