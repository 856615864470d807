// SPDX-License-Identifier: MIT
/// @file nn/detail_linear_cross_entropy.hpp
/// @brief Internal: a linear layer followed by the softmax cross-entropy, forward and backward
/// in one call without the logits ever held whole (nn::Linear::cross_entropy_backward).
///
/// For X (n × d), W (d × C), b (C), labels y_r and a scale s:
///   Z = X W + 1 bᵀ,  lse_r = log Σ_j exp Z_rj,  loss = (1/n) Σ_r (lse_r − Z_r,y_r),
///   dZ = s (softmax(Z) − onehot(y)) / n,  ∂W += Xᵀ dZ,  ∂b += dZᵀ 1,  dX = dZ Wᵀ.
/// A language-model head has C in the thousands: Z for 2,048 rows and 8,192 words is 64 MiB,
/// which every pass of the unfused path (logits, maximum, exponentials, sums, scaling, two
/// products) streams through memory. Here the rows go in blocks whose Z stays within 16 MiB
/// (512 rows of 8,192 words), and each block's Z is computed once, in chunks of columns small
/// enough for the second-level cache, each folded into a running maximum and sum of
/// exponentials per row (lse by the online log-sum-exp) while it is fresh. A second pass over
/// the block's chunks turns Z into dZ in place and takes dX and ∂b from each chunk; ∂W is one
/// product of the block. W is packed for both of its products once per call, not per block.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "loss.hpp"

namespace coulomb::detail {

/// Columns per chunk: a chunk of Z for a block of rows (256 KiB in float at 512 rows) stays in
/// the second-level cache between its product and its use.
inline constexpr Index cross_entropy_chunk_cols = 128;
/// The most rows per block, and the most bytes of a block's stored logits.
inline constexpr Index cross_entropy_max_block_rows = 512;
inline constexpr std::size_t cross_entropy_block_bytes = std::size_t{16} << 20;

/// Rows per block for C outputs: 512, or fewer (down to one tile of the products) when 512
/// rows of Z would pass cross_entropy_block_bytes.
template <typename Scalar>
Index cross_entropy_block_rows(Index C) {
  constexpr Index tile = ProductTraits<Scalar>::mr * ProductTraits<Scalar>::packet;
  const auto fit =
      static_cast<Index>(cross_entropy_block_bytes / (sizeof(Scalar) * std::max<Index>(C, 1)));
  return std::clamp(fit, tile, cross_entropy_max_block_rows);
}

/// W packed once per call for its two products with every block (shared by the threads): for
/// chunk c, the block W[:, c·w .. c·w + m) (d × m) for Z = X W, and its transpose (m × d) for
/// dX = dZ Wᵀ, each as one depth block (a product's chains do not depend on its depth blocks).
template <typename Scalar>
struct CrossEntropyPacks {
  std::vector<Scalar> w, wt;
  Index w_stride = 0, wt_stride = 0;  // floats per chunk
};

/// Packs W (d × C, column-major) for cross_entropy_block.
template <typename Scalar>
void pack_cross_entropy_weight(const Scalar* w, Index d, Index C,
                               CrossEntropyPacks<Scalar>& packs) {
  const Index cw = cross_entropy_chunk_cols;
  const Index chunks = (C + cw - 1) / cw;
  packs.w_stride = packed_operand_size<Scalar>(d, cw);
  packs.wt_stride = packed_operand_size<Scalar>(cw, d);
  packs.w.resize(static_cast<std::size_t>(chunks * packs.w_stride));
  packs.wt.resize(static_cast<std::size_t>(chunks * packs.wt_stride));
  for (Index c = 0; c < chunks; ++c) {
    const Index j0 = c * cw, m = std::min(cw, C - j0);
    pack_small_operand(w + j0 * d, Index{1}, d, Index{0}, d, m,
                       packs.w.data() + c * packs.w_stride);
    pack_small_operand(w + j0 * d, d, Index{1}, Index{0}, m, d,
                       packs.wt.data() + c * packs.wt_stride);
  }
}

/// Workspace of cross_entropy_block (one per thread), reused across calls.
template <typename Scalar>
struct CrossEntropyWorkspace {
  // Flat buffers, so that a shorter last block reuses them instead of reallocating 16 MiB.
  Vector<Scalar> z;                                    // the block's Z (n × C), then its dZ
  Vector<Scalar> xt;                                   // the block's Xᵀ (d × n)
  Eigen::Array<Scalar, Eigen::Dynamic, 1> mx, sum, t;  // per row of the block
};

/// One block of n rows of X (column stride ldx) with their labels, W packed in `packs`: lse
/// and z_y (the label's logit) per row; then, with dZ = coefficient · (softmax − onehot):
/// dW += Xᵀ dZ (d × C, column-major), db += dZᵀ 1 (C), dX = dZ Wᵀ (n × d, column stride lddx,
/// overwritten). Returns false, and stops, at a non-finite logit.
template <typename Scalar>
bool cross_entropy_block(const Scalar* x, Index ldx, Index n, Index d, const Scalar* b, Index C,
                         std::span<const int> labels, const CrossEntropyPacks<Scalar>& packs,
                         Scalar coefficient, Scalar* lse, Scalar* zy, Scalar* dw, Scalar* db,
                         Scalar* dx, Index lddx, CrossEntropyWorkspace<Scalar>& ws) {
  using Array = Eigen::Array<Scalar, Eigen::Dynamic, 1>;
  using ConstMap = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  const Index cw = cross_entropy_chunk_cols;
  if (ws.z.size() < n * C) ws.z.resize(n * C);
  if (ws.xt.size() < d * n) ws.xt.resize(d * n);
  Eigen::Map<Matrix<Scalar>> Zall(ws.z.data(), n, C);
  Eigen::Map<Matrix<Scalar>> Xt(ws.xt.data(), d, n);
  ws.mx.setConstant(n, -std::numeric_limits<Scalar>::infinity());
  ws.sum.setZero(n);
  for (Index j0 = 0; j0 < C; j0 += cw) {
    const Index m = std::min(cw, C - j0);
    auto Z = Zall.middleCols(j0, m);
    packed_product(x, ldx, n, d, packs.w.data() + (j0 / cw) * packs.w_stride, m, Z.data(), n,
                   ProductInit::bias, b + j0);
    if (!all_finite(Z)) return false;
    ws.t = Z.col(0).array();
    for (Index j = 1; j < m; ++j) ws.t = ws.t.max(Z.col(j).array());
    // Online log-sum-exp: rescale the running sum to the new maximum, then add the chunk.
    const Array next = ws.mx.max(ws.t);
    ws.sum *= (ws.mx - next).exp();
    for (Index j = 0; j < m; ++j) ws.sum += (Z.col(j).array() - next).exp();
    ws.mx = next;
  }
  for (Index r = 0; r < n; ++r) {
    lse[r] = ws.mx(r) + std::log(ws.sum(r));
    zy[r] = Zall(r, labels[static_cast<std::size_t>(r)]);
  }
  Xt = ConstMap(x, n, d, Eigen::OuterStride<>(ldx)).transpose();
  const Eigen::Map<const Array> shift(lse, n);
  for (Index j0 = 0; j0 < C; j0 += cw) {
    const Index m = std::min(cw, C - j0);
    auto Z = Zall.middleCols(j0, m);
    for (Index j = 0; j < m; ++j) Z.col(j).array() = (Z.col(j).array() - shift).exp() * coefficient;
    for (Index r = 0; r < n; ++r) {
      const Index y = labels[static_cast<std::size_t>(r)];
      if (y >= j0 && y < j0 + m) Z(r, y - j0) -= coefficient;
    }
    Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, 1>>(db + j0, m).noalias() +=
        Z.colwise().sum().transpose();
    // dW[:, chunk] += Xᵀ dZ[:, chunk]: Xᵀ is the tall operand (d rows, depth n), the chunk of
    // dZ, in the second-level cache, is read in place.
    direct_product(Xt.data(), d, d, n, Z.data(), n, m, dw + j0 * d, d, ProductInit::accumulate);
    packed_product(Z.data(), n, n, m, packs.wt.data() + (j0 / cw) * packs.wt_stride, d, dx, lddx,
                   j0 == 0 ? ProductInit::zero : ProductInit::accumulate,
                   static_cast<const Scalar*>(nullptr));
  }
  return true;
}

}  // namespace coulomb::detail
