// SPDX-License-Identifier: MIT
/// @file core/detail_products.hpp
/// @brief Internal: the product of a tall matrix and a small one on Eigen's SIMD packets, for
/// nn::Linear (Y = X W + 1 bᵀ, dX = dY Wᵀ), the feature maps (Z = X Ωᵀ, dX = ∂L/∂Z Ω) and
/// linear attention (Φ(Q) S, gradients through the key sums), and the sums over rows Aᵀ B
/// (weight gradients Xᵀ dY, key sums Φ(K)ᵀ [V, 1], ∂L/∂Ω). Documented in docs/model.md ("The
/// products of Linear") and docs/attention.md ("Product kernels").
///
/// Why not Eigen's GEMM: it copies ("packs") every panel of the tall operand and zero-fills the
/// destination of `=` first. Here the tall operand's contiguous columns are read in place: a
/// block of rows of A (a few packets by up to kc columns) stays in the L1 cache while every
/// column block of the small operand, packed once per call, passes over it. Measurements:
/// docs/benchmarks.md ("Linear's own product kernel").
///
/// Rounding is defined, not a by-product of blocking: every entry is one chain of
/// multiply-adds over p = 0, …, k−1 started from its initial value (0, the bias, or the entry
/// itself), each a `pmadd` of Eigen's packets, which is a fused multiply-add where the target
/// has one. So an entry does not depend on how the rows are split between threads, on the tile
/// that computes it, or on the machine's cache sizes, and a scalar loop with the same chain
/// reproduces it bit for bit (tests/nn_layers_test.cpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "config.hpp"

namespace coulomb::detail {

/// Initial value of each entry of a product C = init + A B.
enum class ProductInit {
  zero,       ///< C = A B
  bias,       ///< C = 1 bᵀ + A B, b one value per column of C
  accumulate  ///< C = C + A B
};

/// Sizes of the product kernels for one scalar type on the compiled instruction set.
template <typename Scalar>
struct ProductTraits {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;  ///< one SIMD register
  static constexpr int packet = Eigen::internal::unpacket_traits<Packet>::size;  ///< lanes
  static constexpr int registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;
  /// Tile of tall_small_product: mr packets of rows by nr columns of accumulators, with mr
  /// packets of A and one broadcast of B live beside them (3 × 8 + 4 of 32 registers with
  /// AVX-512, 3 × 4 + 4 of 16 with SSE or AVX).
  static constexpr int mr = 3;
  static constexpr int nr = registers >= 32 ? 8 : 4;
  /// Depth block: the mr·packet × kc block of A that a tile row reads stays in the L1 cache.
  static constexpr Index kc = 256;
};

/// How the small operand B of a product is stored.
enum class OperandLayout {
  packed,        ///< by pack_small_operand (column blocks of nr, depth-major inside)
  column_major,  ///< in place, B(p, c) = b[p + c·ldb]
  row_major      ///< in place, B(p, c) = b[p·ldb + c] (the transpose of a column-major matrix)
};

/// One tile of C = init + A B: MR packets of rows, NC columns. `a` points at the tile's first
/// row of A (column stride lda), `bp` at the packed depth block of B for these columns
/// (bp[p·nr + c] = B(p, c), nr the width of a packed column block, NC <= nr) or at B(0, c0) of
/// a B read in place (leading dimension ldb); `c` at the tile's first entry of C (column
/// stride ldc).
template <int MR, int NC, OperandLayout BL, typename Scalar>
inline void product_tile(const Scalar* a, Index lda, const Scalar* bp, Index ldb, Index k,
                         Scalar* c, Index ldc, ProductInit init, const Scalar* bias) {
  namespace ei = Eigen::internal;
  using Packet = typename ProductTraits<Scalar>::Packet;
  constexpr int P = ProductTraits<Scalar>::packet;
  Packet acc[MR][NC];
  for (int j = 0; j < NC; ++j)
    for (int i = 0; i < MR; ++i) {
      if (init == ProductInit::accumulate)
        acc[i][j] = ei::ploadu<Packet>(c + j * ldc + i * P);
      else
        acc[i][j] = ei::pset1<Packet>(init == ProductInit::bias ? bias[j] : Scalar(0));
    }
  for (Index p = 0; p < k; ++p) {
    Packet x[MR];
    for (int i = 0; i < MR; ++i) x[i] = ei::ploadu<Packet>(a + p * lda + i * P);
    for (int j = 0; j < NC; ++j) {
      constexpr int NR = ProductTraits<Scalar>::nr;
      const Packet w = ei::pset1<Packet>(BL == OperandLayout::packed         ? bp[p * NR + j]
                                         : BL == OperandLayout::column_major ? bp[p + j * ldb]
                                                                             : bp[p * ldb + j]);
      for (int i = 0; i < MR; ++i) acc[i][j] = ei::pmadd(x[i], w, acc[i][j]);
    }
  }
  for (int j = 0; j < NC; ++j)
    for (int i = 0; i < MR; ++i) ei::pstoreu(c + j * ldc + i * P, acc[i][j]);
}

/// The tile of the last `rest` (< NC) columns: product_tile with NC = rest.
template <int MR, int NC, OperandLayout BL, typename Scalar>
inline void product_tile_rest(int rest, const Scalar* a, Index lda, const Scalar* bp, Index ldb,
                              Index k, Scalar* c, Index ldc, ProductInit init, const Scalar* bias) {
  if constexpr (NC > 1) {
    if (rest == NC - 1)
      product_tile<MR, NC - 1, BL>(a, lda, bp, ldb, k, c, ldc, init, bias);
    else
      product_tile_rest<MR, NC - 1, BL>(rest, a, lda, bp, ldb, k, c, ldc, init, bias);
  }
}

/// The tiles of MR packets of rows over every column block of C, for one depth block.
/// `bpack` holds the depth block of B packed by column blocks (nr columns each, the last one
/// padded with zeros), column block jb at bpack + jb·k·nr; or is B read in place with leading
/// dimension ldb (OperandLayout).
template <int MR, OperandLayout BL = OperandLayout::packed, typename Scalar>
inline void product_row_block(const Scalar* a, Index lda, const Scalar* bpack, Index ldb, Index k,
                              Index m, Scalar* c, Index ldc, ProductInit init, const Scalar* bias) {
  constexpr int NR = ProductTraits<Scalar>::nr;
  const bool has_bias = init == ProductInit::bias;
  // From one column of B to the next: k floats packed, ldb column-major, 1 row-major.
  const Index block_stride = BL == OperandLayout::packed         ? k
                             : BL == OperandLayout::column_major ? ldb
                                                                 : Index{1};
  Index j = 0;
  for (; j + NR <= m; j += NR)
    product_tile<MR, NR, BL>(a, lda, bpack + j * block_stride, ldb, k, c + j * ldc, ldc, init,
                             has_bias ? bias + j : nullptr);
  if (j < m)
    product_tile_rest<MR, NR, BL>(static_cast<int>(m - j), a, lda, bpack + j * block_stride, ldb, k,
                                  c + j * ldc, ldc, init, has_bias ? bias + j : nullptr);
}

/// Packs rows [p0, p0 + k) of B into `out` by column blocks of nr (see product_row_block);
/// B(p, j) = b[p · bs_p + j · bs_j].
template <typename Scalar>
inline void pack_small_operand(const Scalar* b, Index bs_p, Index bs_j, Index p0, Index k, Index m,
                               Scalar* out) {
  constexpr int NR = ProductTraits<Scalar>::nr;
  for (Index j0 = 0; j0 < m; j0 += NR) {
    Scalar* block = out + j0 * k;
    for (Index p = 0; p < k; ++p)
      for (int j = 0; j < NR; ++j)
        block[p * NR + j] = j0 + j < m ? b[(p0 + p) * bs_p + (j0 + j) * bs_j] : Scalar(0);
  }
}

/// Floats of one depth block of a small operand packed for every column: pack_small_operand's
/// layout for m columns and depth k (m rounded up to whole column blocks of nr).
template <typename Scalar>
constexpr Index packed_operand_size(Index k, Index m) {
  constexpr int NR = ProductTraits<Scalar>::nr;
  return k * ((m + NR - 1) / NR * NR);
}

/// C = init + A B for a tall A (n × k, column-major, column stride lda) and a small B (k × m)
/// stored as BL says: packed by pack_small_operand (as one depth block), or in place with
/// leading dimension ldb. The rows go in tiles of mr, then 2 and 1 packets; the rows past the
/// last whole packet are copied to buffers of one packet (zero-padded), so every entry goes
/// through the same chain of pmadds.
template <OperandLayout BL, typename Scalar>
void rows_product(const Scalar* a, Index lda, Index n, Index k, const Scalar* b, Index ldb, Index m,
                  Scalar* c, Index ldc, ProductInit init, const Scalar* bias) {
  using T = ProductTraits<Scalar>;
  constexpr int P = T::packet;
  Index r = 0;
  // Where tiles of mr = 3 would leave a single packet, the last four go as 2 + 2: a tile of one
  // packet runs at about a quarter of the FMA peak, a tile of two near it (docs/benchmarks.md).
  Index wide = n / P / T::mr;
  if (T::mr == 3 && wide > 0 && n / P % T::mr == 1) --wide;
  for (Index i = 0; i < wide; ++i, r += T::mr * P)
    product_row_block<T::mr, BL>(a + r, lda, b, ldb, k, m, c + r, ldc, init, bias);
  if constexpr (T::mr > 2)
    for (; r + 2 * P <= n; r += 2 * P)
      product_row_block<2, BL>(a + r, lda, b, ldb, k, m, c + r, ldc, init, bias);
  for (; r + P <= n; r += P)
    product_row_block<1, BL>(a + r, lda, b, ldb, k, m, c + r, ldc, init, bias);
  const Index rest = n - r;
  if (rest == 0) return;
  static thread_local std::vector<Scalar> a_rows, c_rows;  // reused across calls
  a_rows.assign(static_cast<std::size_t>(P * k), Scalar(0));
  c_rows.assign(static_cast<std::size_t>(P * m), Scalar(0));
  for (Index p = 0; p < k; ++p)
    std::memcpy(a_rows.data() + p * P, a + r + p * lda, sizeof(Scalar) * rest);
  if (init == ProductInit::accumulate)
    for (Index j = 0; j < m; ++j)
      std::memcpy(c_rows.data() + j * P, c + r + j * ldc, sizeof(Scalar) * rest);
  product_row_block<1, BL>(a_rows.data(), Index{P}, b, ldb, k, m, c_rows.data(), Index{P}, init,
                           bias);
  for (Index j = 0; j < m; ++j)
    std::memcpy(c + r + j * ldc, c_rows.data() + j * P, sizeof(Scalar) * rest);
}

/// C = init + A B with B packed by pack_small_operand (depth k, m columns; k <= kc keeps a tile's
/// rows of A in the L1 cache, a deeper k gives the same entries more slowly).
template <typename Scalar>
void packed_product(const Scalar* a, Index lda, Index n, Index k, const Scalar* bpack, Index m,
                    Scalar* c, Index ldc, ProductInit init, const Scalar* bias) {
  rows_product<OperandLayout::packed>(a, lda, n, k, bpack, Index{0}, m, c, ldc, init, bias);
}

/// C = init + A B with a column-major B (k × m, column stride ldb) read in place: for a B
/// that is as large as A (a long depth), or that changes from one product to the next, where
/// packing it would cost as much as the product.
template <typename Scalar>
void direct_product(const Scalar* a, Index lda, Index n, Index k, const Scalar* b, Index ldb,
                    Index m, Scalar* c, Index ldc, ProductInit init) {
  rows_product<OperandLayout::column_major>(a, lda, n, k, b, ldb, m, c, ldc, init,
                                            static_cast<const Scalar*>(nullptr));
}

/// C = init + A B with a row-major B (B(p, j) = b[p·ldb + j]: the transpose Yᵀ of a
/// column-major Y with column stride ldb) read in place.
template <typename Scalar>
void direct_product_transposed(const Scalar* a, Index lda, Index n, Index k, const Scalar* b,
                               Index ldb, Index m, Scalar* c, Index ldc, ProductInit init) {
  rows_product<OperandLayout::row_major>(a, lda, n, k, b, ldb, m, c, ldc, init,
                                         static_cast<const Scalar*>(nullptr));
}

/// A pointer to X and its column stride for the product kernels: X in place when it is stored
/// column-major with unit inner stride, otherwise X evaluated into `copy` (an expression such
/// as s·X, or a row-major matrix).
template <typename Scalar, typename D>
std::pair<const Scalar*, Index> column_major_operand(const Eigen::MatrixBase<D>& X,
                                                     Matrix<Scalar>& copy) {
  constexpr bool direct = (int(Eigen::internal::traits<D>::Flags) & Eigen::DirectAccessBit) != 0 &&
                          (int(D::Flags) & Eigen::RowMajorBit) == 0;
  if constexpr (direct) {
    if (X.derived().innerStride() == 1) return {X.derived().data(), X.derived().outerStride()};
  }
  copy = X;
  return {copy.data(), copy.rows()};
}

/// A small operand B (k × m) packed once by pack_small_operand, for products C = init + A B
/// with many tall A: the particles of a feature map, the key sums of linear attention.
template <typename Scalar>
class PackedOperand {
 public:
  /// Packs B(p, j) = b[p · bs_p + j · bs_j], p < k, j < m.
  void pack(const Scalar* b, Index bs_p, Index bs_j, Index k, Index m) {
    k_ = k;
    m_ = m;
    data_.resize(static_cast<std::size_t>(packed_operand_size<Scalar>(k, m)));
    if (k > 0 && m > 0) pack_small_operand(b, bs_p, bs_j, Index{0}, k, m, data_.data());
  }
  /// Packs a column-major matrix B.
  void pack(const Matrix<Scalar>& b) { pack(b.data(), Index{1}, b.rows(), b.rows(), b.cols()); }
  /// Packs the transpose of a column-major matrix B.
  void pack_transposed(const Matrix<Scalar>& b) {
    pack(b.data(), b.rows(), Index{1}, b.cols(), b.rows());
  }

  Index cols() const noexcept { return m_; }  ///< m

  /// C = init + A B for a tall A (A.cols() == k) into C (A.rows() × m, column-major with unit
  /// inner stride: a matrix, or a block of its columns), every entry one chain of pmadds.
  template <typename D, typename Out>
  void product(const Eigen::MatrixBase<D>& A, Out&& C, ProductInit init = ProductInit::zero) const {
    static thread_local Matrix<Scalar> copy;  // for A not stored column-major
    const Index n = A.rows();
    if (n == 0 || m_ == 0) return;
    if (k_ == 0) {
      if (init != ProductInit::accumulate) C.setZero();
      return;
    }
    const auto [a, lda] = column_major_operand<Scalar>(A, copy);
    packed_product(a, lda, n, k_, data_.data(), m_, C.data(), C.outerStride(), init,
                   static_cast<const Scalar*>(nullptr));
  }

 private:
  std::vector<Scalar> data_;
  Index k_ = 0, m_ = 0;
};

/// C = init + A B for a tall A (n × k, column-major, column stride lda) and a small B (k × m)
/// with B(p, j) = b[p · bs_p + j · bs_j] (bs_p = 1, bs_j = k for a column-major B; bs_p = ld,
/// bs_j = 1 for the transpose of a column-major matrix). C is n × m with column stride ldc and
/// must not overlap A or B; `bias` (m values) is read only for ProductInit::bias. Every entry
/// is the chain init, then + A(r, p) B(p, j) for p = 0, …, k−1, each a pmadd.
template <typename Scalar>
void tall_small_product(const Scalar* a, Index lda, Index n, Index k, const Scalar* b, Index bs_p,
                        Index bs_j, Index m, Scalar* c, Index ldc, ProductInit init,
                        const Scalar* bias) {
  using T = ProductTraits<Scalar>;
  if (n <= 0 || m <= 0) return;
  if (k <= 0) {
    if (init == ProductInit::accumulate) return;
    for (Index j = 0; j < m; ++j)
      std::fill_n(c + j * ldc, n, init == ProductInit::bias ? bias[j] : Scalar(0));
    return;
  }
  // One depth block of B, packed, in a buffer of the calling thread reused across calls.
  static thread_local std::vector<Scalar> pack;
  pack.resize(static_cast<std::size_t>(packed_operand_size<Scalar>(std::min(k, T::kc), m)));
  for (Index p0 = 0; p0 < k; p0 += T::kc) {
    const Index kb = std::min(T::kc, k - p0);
    pack_small_operand(b, bs_p, bs_j, p0, kb, m, pack.data());
    // Later depth blocks continue the chains from the entries the earlier ones stored.
    packed_product(a + p0 * lda, lda, n, kb, pack.data(), m, c, ldc,
                   p0 == 0 ? init : ProductInit::accumulate, bias);
  }
}

/// panel[p · wp + r] = A(p, r) for p < k, r < w, and 0 for w <= r < wp: a depth block of w
/// columns of a column-major A (column stride lda) transposed, wp a multiple of the packet.
/// Whole packet × packet squares go through Eigen's in-register transpose.
template <typename Scalar>
void pack_transposed_panel(const Scalar* a, Index lda, Index k, Index w, Index wp, Scalar* panel) {
  namespace ei = Eigen::internal;
  using Packet = typename ProductTraits<Scalar>::Packet;
  constexpr int P = ProductTraits<Scalar>::packet;
  Index p = 0;
  if constexpr (P > 1) {
    const Index whole = w / P * P;
    for (; p + P <= k; p += P) {
      for (Index r = 0; r < whole; r += P) {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // a SIMD type as template argument
#endif
        ei::PacketBlock<Packet, P> square;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
        for (int q = 0; q < P; ++q) square.packet[q] = ei::ploadu<Packet>(a + p + (r + q) * lda);
        ei::ptranspose(square);
        for (int q = 0; q < P; ++q) ei::pstoreu(panel + (p + q) * wp + r, square.packet[q]);
      }
      for (Index q = 0; q < P; ++q)
        for (Index r = whole; r < wp; ++r)
          panel[(p + q) * wp + r] = r < w ? a[p + q + r * lda] : Scalar(0);
    }
  }
  for (; p < k; ++p)
    for (Index r = 0; r < wp; ++r) panel[p * wp + r] = r < w ? a[p + r * lda] : Scalar(0);
}

/// C = init + Aᵀ B for A (n × M) and B (n × N), both column-major (column strides lda, ldb),
/// C M × N (column stride ldc): a sum over n rows, such as the key sums Φ_Kᵀ [V, 1] or a
/// gradient Xᵀ ∂L/∂Z. Panels of up to mr packets of A's columns are transposed into a buffer,
/// kc rows at a time, and go through the tiles of rows_product with B read in place; every entry
/// is one chain of pmadds over the n rows in order, from its initial value.
template <typename Scalar>
void inner_product(const Scalar* a, Index lda, const Scalar* b, Index ldb, Index n, Index M,
                   Index N, Scalar* c, Index ldc, ProductInit init) {
  using T = ProductTraits<Scalar>;
  constexpr int P = T::packet;
  constexpr Index W = T::mr * P;  // columns of A per panel
  if (M <= 0 || N <= 0) return;
  if (n <= 0) {
    if (init != ProductInit::accumulate)
      for (Index j = 0; j < N; ++j) std::fill_n(c + j * ldc, M, Scalar(0));
    return;
  }
  static thread_local std::vector<Scalar> panel, c_rows;  // reused across calls
  panel.resize(static_cast<std::size_t>(W * std::min(n, T::kc)));
  for (Index i0 = 0; i0 < M;) {
    // Panels of mr packets; where that would leave one packet (or less), two of two packets
    // instead, as in rows_product.
    const Index rest = M - i0;
    const Index w = T::mr == 3 && rest > W && rest <= W + P ? 2 * P : std::min(W, rest);
    const Index wp = (w + P - 1) / P * P;
    // Rows of C past the last whole packet go through a buffer of wp rows.
    const bool in_place = w == wp;
    Scalar* dst = c + i0;
    Index ldd = ldc;
    if (!in_place) {
      c_rows.assign(static_cast<std::size_t>(wp * N), Scalar(0));
      if (init == ProductInit::accumulate)
        for (Index j = 0; j < N; ++j)
          std::memcpy(c_rows.data() + j * wp, c + i0 + j * ldc, sizeof(Scalar) * w);
      dst = c_rows.data();
      ldd = wp;
    }
    for (Index p0 = 0; p0 < n; p0 += T::kc) {
      const Index kb = std::min(T::kc, n - p0);
      pack_transposed_panel(a + p0 + i0 * lda, lda, kb, w, wp, panel.data());
      // Later depth blocks continue the chains from the entries the earlier ones stored.
      const ProductInit step = p0 == 0 ? init : ProductInit::accumulate;
      const Scalar* bias = nullptr;
      if (wp == 3 * P)
        product_row_block<3, OperandLayout::column_major>(panel.data(), wp, b + p0, ldb, kb, N, dst,
                                                          ldd, step, bias);
      else if (wp == 2 * P)
        product_row_block<2, OperandLayout::column_major>(panel.data(), wp, b + p0, ldb, kb, N, dst,
                                                          ldd, step, bias);
      else
        product_row_block<1, OperandLayout::column_major>(panel.data(), wp, b + p0, ldb, kb, N, dst,
                                                          ldd, step, bias);
    }
    if (!in_place)
      for (Index j = 0; j < N; ++j)
        std::memcpy(c + i0 + j * ldc, c_rows.data() + j * wp, sizeof(Scalar) * w);
    i0 += w;
  }
}

}  // namespace coulomb::detail
