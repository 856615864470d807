// SPDX-License-Identifier: MIT
// bench_peak: the machine's arithmetic limit (bench/peak_kernels.hpp), measured in the same run
// as what is compared with it.
//
//   build/bench/bench_peak [--benchmark_filter=Peak/]
#include <benchmark/benchmark.h>

#include "peak_kernels.hpp"

namespace {

using coulomb_bench::BM_PeakDpbf16;
using coulomb_bench::BM_PeakFmaFp32Avx2;
using coulomb_bench::BM_PeakFmaFp32Avx512;

BENCHMARK(BM_PeakFmaFp32Avx512)->Name("Peak/fma_fp32_avx512")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PeakFmaFp32Avx2)->Name("Peak/fma_fp32_avx2")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PeakDpbf16)->Name("Peak/dpbf16")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
