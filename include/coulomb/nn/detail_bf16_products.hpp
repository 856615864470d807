// SPDX-License-Identifier: MIT
/// @file nn/detail_bf16_products.hpp
/// @brief Internal: nn::Linear's forward with bf16 weights and inputs and fp32 accumulation,
/// Y = 1 bᵀ + bf16(X) bf16(W), on AVX512-BF16 (`VDPBF16PS`). Documented in docs/model.md
/// ("bf16 inference"); selected at run time (core/precision.hpp).
///
/// The kernel functions carry `__attribute__((target(...)))`, so they compile without `-march`
/// and are only called after the CPU was found to have AVX512-BF16. Layout: VDPBF16PS adds to
/// each of 16 fp32 lanes the two products of a pair of bf16 values, so the pairs run along the
/// depth p: W is packed once per call as pairs (W(2q, j), W(2q+1, j)) by column blocks of
/// bf16_nr columns, and each block of bf16_mr × 16 rows of X is converted once (round to
/// nearest even, `VCVTNE2PS2BF16`) into pairs (X(r, 2q), X(r, 2q+1)) for 16 rows r per
/// register, which every column block then reads from the L1 cache. An odd depth is padded
/// with a zero. Each entry is b_j plus the k products of bf16-rounded inputs, added in fp32
/// two at a time: bf16 products are exact in fp32, so the only roundings are those of the
/// inputs and of the k/2 fp32 additions (inputs below FLT_MIN are read as zero).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../core/config.hpp"
#include "../core/precision.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/// Defined where the bf16 kernel is compiled (x86-64 with GCC or Clang).
#define COULOMB_HAS_BF16_KERNEL 1
/// The instruction sets of the bf16 kernel's functions, enabled for them alone (no -march).
#define COULOMB_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define COULOMB_HAS_BF16_KERNEL 0
#endif

namespace coulomb::detail {

/// The bf16 bits of `x` rounded to nearest, ties to even (a NaN stays a quiet NaN).
inline std::uint16_t bf16_bits(float x) noexcept {
  auto u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// The float whose bits are bf16 `b` followed by 16 zero bits.
inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// `x` rounded to bf16, as a float.
inline float round_to_bf16(float x) noexcept {
  return bf16_to_float(bf16_bits(x));
}

/// Columns per block of packed weights (accumulators: bf16_mr × bf16_nr of the 32 registers).
inline constexpr int bf16_nr = 8;
/// Registers of 16 rows per block of rows.
inline constexpr int bf16_mr = 3;

/// Packs W (k × m, W(p, j) = w[p + j · ldw]) into `out` as bf16 pairs: 32-bit word
/// [jb · kq + q] · bf16_nr + c holds W(2q, j) in its low half and W(2q + 1, j) in its high half
/// for j = jb · bf16_nr + c, kq = ⌈k/2⌉; pairs past k or m are zero.
inline void pack_bf16_pairs(const float* w, Index ldw, Index k, Index m,
                            std::vector<std::uint32_t>& out) {
  const Index kq = (k + 1) / 2;
  const Index blocks = (m + bf16_nr - 1) / bf16_nr;
  out.assign(static_cast<std::size_t>(blocks * kq * bf16_nr), 0u);
  for (Index j = 0; j < m; ++j) {
    std::uint32_t* dst = out.data() + (j / bf16_nr) * kq * bf16_nr + j % bf16_nr;
    const float* col = w + j * ldw;
    for (Index q = 0; q < kq; ++q) {
      const std::uint32_t lo = bf16_bits(col[2 * q]);
      const std::uint32_t hi = 2 * q + 1 < k ? bf16_bits(col[2 * q + 1]) : 0u;
      dst[q * bf16_nr] = lo | (hi << 16);
    }
  }
}

#if COULOMB_HAS_BF16_KERNEL

/// Converts rows [0, rows) (rows <= bf16_mr · 16) of X (k columns, column stride lda) into
/// `out`: register [q · bf16_mr + i] holds the pairs (X(16i + l, 2q), X(16i + l, 2q + 1)) of
/// its 16 rows l; rows past `rows` and the column past an odd k are zero.
COULOMB_TARGET_BF16 inline void convert_bf16_rows(const float* a, Index lda, Index rows, Index k,
                                                  std::uint32_t* out) {
  // Interleaves the low 16 values (column 2q) with the high 16 (column 2q + 1).
  alignas(64) static constexpr std::uint16_t order[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(order);
  __mmask16 mask[bf16_mr];
  for (int i = 0; i < bf16_mr; ++i) {
    const Index live = std::clamp<Index>(rows - 16 * i, 0, 16);
    mask[i] = static_cast<__mmask16>((1u << live) - 1u);
  }
  const Index kq = (k + 1) / 2;
  for (Index q = 0; q < kq; ++q) {
    const float* c0 = a + 2 * q * lda;
    const bool has_c1 = 2 * q + 1 < k;
    for (int i = 0; i < bf16_mr; ++i) {
      const __m512 x0 = _mm512_maskz_loadu_ps(mask[i], c0 + 16 * i);
      const __m512 x1 =
          has_c1 ? _mm512_maskz_loadu_ps(mask[i], c0 + lda + 16 * i) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
      _mm512_storeu_si512(out + (q * bf16_mr + i) * 16, _mm512_permutexvar_epi16(idx, both));
    }
  }
}

/// One tile: Y rows of the converted block `ab` (bf16_mr registers per pair q) times the packed
/// column block `wb` (bf16_nr pairs per q), kq pairs deep, plus the bias (nullptr: 0), into the
/// first `cols` columns of `c` (column stride ldc); row register i is stored under `mask[i]`.
COULOMB_TARGET_BF16 inline void bf16_tile(const std::uint32_t* ab, const std::uint32_t* wb,
                                          Index kq, const float* bias, int cols, float* c,
                                          Index ldc, const __mmask16* mask) {
  __m512 acc[bf16_mr][bf16_nr];
  for (int j = 0; j < bf16_nr; ++j) {
    const __m512 b0 = _mm512_set1_ps(bias != nullptr && j < cols ? bias[j] : 0.0f);
    for (int i = 0; i < bf16_mr; ++i) acc[i][j] = b0;
  }
  for (Index q = 0; q < kq; ++q) {
    __m512bh x[bf16_mr];
    for (int i = 0; i < bf16_mr; ++i)
      x[i] = (__m512bh)_mm512_loadu_si512(ab + (q * bf16_mr + i) * 16);
    for (int j = 0; j < bf16_nr; ++j) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(wb[q * bf16_nr + j]));
      for (int i = 0; i < bf16_mr; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], x[i], w);
    }
  }
  // A loop over every column with a test, not up to `cols`: constant indices keep acc in
  // registers.
  for (int j = 0; j < bf16_nr; ++j)
    if (j < cols)
      for (int i = 0; i < bf16_mr; ++i)
        _mm512_mask_storeu_ps(c + j * ldc + 16 * i, mask[i], acc[i][j]);
}

/// C = 1 bᵀ + bf16(A) bf16(W) for A (n × k, column stride lda) and W packed by
/// pack_bf16_pairs (k × m); C is n × m with column stride ldc, `bias` m values or nullptr (0).
/// Only call where cpu_has_avx512_bf16() (core/precision.hpp).
COULOMB_TARGET_BF16 inline void bf16_tall_small_product(const float* a, Index lda, Index n, Index k,
                                                        const std::uint32_t* packed, Index m,
                                                        float* c, Index ldc, const float* bias) {
  constexpr Index rows_per_block = bf16_mr * 16;
  const Index kq = (k + 1) / 2;
  // The converted rows of the calling thread, reused across calls.
  static thread_local std::vector<std::uint32_t> converted;
  converted.resize(static_cast<std::size_t>(kq * rows_per_block));
  for (Index r = 0; r < n; r += rows_per_block) {
    const Index rows = std::min(rows_per_block, n - r);
    __mmask16 mask[bf16_mr];
    for (int i = 0; i < bf16_mr; ++i) {
      const Index live = std::clamp<Index>(rows - 16 * i, 0, 16);
      mask[i] = static_cast<__mmask16>((1u << live) - 1u);
    }
    convert_bf16_rows(a + r, lda, rows, k, converted.data());
    for (Index j = 0; j < m; j += bf16_nr) {
      const int cols = static_cast<int>(std::min<Index>(bf16_nr, m - j));
      bf16_tile(converted.data(), packed + j * kq, kq, bias != nullptr ? bias + j : nullptr, cols,
                c + r + j * ldc, ldc, mask);
    }
  }
}

#else

/// Never called: bf16_kernel_usable() is false where the kernel is not compiled.
inline void bf16_tall_small_product(const float*, Index, Index, Index, const std::uint32_t*, Index,
                                    float*, Index, const float*) {}

#endif  // COULOMB_HAS_BF16_KERNEL

/// Whether bf16_tall_small_product can run here: compiled in, and the CPU has AVX512-BF16.
inline bool bf16_kernel_usable() noexcept {
  return COULOMB_HAS_BF16_KERNEL != 0 && cpu_has_avx512_bf16();
}

}  // namespace coulomb::detail
