// SPDX-License-Identifier: MIT
// The machine's arithmetic limit for the benchmarks: Peak/fma_fp32_* runs independent chains of
// fused multiply-adds on registers (no memory traffic), Peak/dpbf16 the AVX512-BF16 dot product
// VDPBF16PS (two bf16 products summed into each fp32 lane). Each ISA is chosen at run time (the
// binary needs no -march); a row whose instructions this CPU lacks is skipped with a message.
// Counter GFLOPs: 2 per multiply-add. Registered by bench_peak, and by bench_attention so that
// its rows and the peak interleave in one run (--benchmark_enable_random_interleaving).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COULOMB_PEAK_X86 1
#endif

namespace coulomb_bench {

// Independent accumulators per call: enough to cover the FMA latency (4 cycles) on two ports,
// and few enough to stay in registers (32 zmm with AVX-512; 16 ymm with AVX2, two for a and b).
inline constexpr int kChains = 16;
inline constexpr int kChainsAvx2 = 12;
inline constexpr std::int64_t kRounds =
    1 << 14;  // iterations of the inner loop per benchmark iteration

#ifdef COULOMB_PEAK_X86

// The lanes' sum through memory (GCC 12's _mm512_reduce_add_ps warns under -Werror).
__attribute__((target("avx512f"))) inline float sum_lanes(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

__attribute__((target("avx512f"))) inline float fma_avx512(std::int64_t rounds) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (std::int64_t r = 0; r < rounds; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return sum_lanes(sum);
}

__attribute__((target("avx2,fma"))) inline float fma_avx2(std::int64_t rounds) {
  __m256 acc[kChainsAvx2];
  for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (std::int64_t r = 0; r < rounds; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 sum = acc[0];
  for (int c = 1; c < kChainsAvx2; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx512f,avx512bf16"))) inline float dpbf16(std::int64_t rounds) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  // bf16 pairs of small values, so that the sums stay finite over every round.
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-6f), _mm512_set1_ps(1e-6f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  for (std::int64_t r = 0; r < rounds; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return sum_lanes(sum);
}

#endif

/// Runs `kernel` and reports GFLOPs = flops_per_round · rounds per second.
template <typename Kernel>
void run(benchmark::State& state, Kernel kernel, double flops_per_round) {
  for (auto _ : state) benchmark::DoNotOptimize(kernel(kRounds));
  state.counters["GFLOPs"] = benchmark::Counter(flops_per_round * static_cast<double>(kRounds) *
                                                    static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}

inline void BM_PeakFmaFp32Avx512(benchmark::State& state) {
#ifdef COULOMB_PEAK_X86
  if (__builtin_cpu_supports("avx512f")) {
    run(state, fma_avx512, 2.0 * 16 * kChains);
    return;
  }
#endif
  state.SkipWithError("this CPU has no AVX-512F");
}

inline void BM_PeakFmaFp32Avx2(benchmark::State& state) {
#ifdef COULOMB_PEAK_X86
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    run(state, fma_avx2, 2.0 * 8 * kChainsAvx2);
    return;
  }
#endif
  state.SkipWithError("this CPU has no AVX2 with FMA");
}

inline void BM_PeakDpbf16(benchmark::State& state) {
#ifdef COULOMB_PEAK_X86
  if (__builtin_cpu_supports("avx512bf16")) {
    // 32 bf16 products per instruction, each a multiply and an add.
    run(state, dpbf16, 2.0 * 32 * kChains);
    return;
  }
#endif
  state.SkipWithError("this CPU has no AVX512-BF16");
}

}  // namespace coulomb_bench
