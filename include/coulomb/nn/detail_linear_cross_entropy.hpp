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
/// products) streams through memory. Here the rows go in blocks and the columns in chunks small
/// enough for the second-level cache: a first sweep computes each chunk of Z and folds it into
/// a running maximum and sum of exponentials per row (lse by the online log-sum-exp), a second
/// sweep computes the chunk again, turns it into dZ and takes both products from it. One extra
/// product of X W against every pass over a 64 MiB matrix.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_products.hpp"
#include "loss.hpp"

namespace coulomb::detail {

/// Rows per block and columns per chunk: a block × chunk of Z (256 KiB in float) stays in the
/// second-level cache between its product and its use.
inline constexpr Index cross_entropy_block_rows = 512;
inline constexpr Index cross_entropy_chunk_cols = 128;

/// Workspace of linear_cross_entropy_rows (one per thread), reused across calls.
template <typename Scalar>
struct CrossEntropyWorkspace {
  Matrix<Scalar> z;                                    // block × chunk of Z, then of dZ
  Eigen::Array<Scalar, Eigen::Dynamic, 1> mx, sum, t;  // per row of the block
};

/// The first sweep for the rows [r0, r0 + n) of X: lse (n values) and z_y (the label's logit),
/// both in float of the rows' own; returns false (and stops) at a non-finite logit.
template <typename Scalar>
bool cross_entropy_row_stats(const Scalar* x, Index ldx, Index n, Index d, const Scalar* w,
                             const Scalar* b, Index C, std::span<const int> labels,
                             CrossEntropyWorkspace<Scalar>& ws, Scalar* lse, Scalar* zy) {
  using Array = Eigen::Array<Scalar, Eigen::Dynamic, 1>;
  const Index cw = cross_entropy_chunk_cols;
  ws.z.resize(n, std::min(cw, C));
  ws.mx.setConstant(n, -std::numeric_limits<Scalar>::infinity());
  ws.sum.setZero(n);
  for (Index j0 = 0; j0 < C; j0 += cw) {
    const Index m = std::min(cw, C - j0);
    tall_small_product(x, ldx, n, d, w + j0 * d, Index{1}, d, m, ws.z.data(), n, ProductInit::bias,
                       b + j0);
    auto Z = ws.z.leftCols(m);
    if (!all_finite(Z)) return false;
    ws.t = Z.col(0).array();
    for (Index j = 1; j < m; ++j) ws.t = ws.t.max(Z.col(j).array());
    // Online log-sum-exp: rescale the running sum to the new maximum, then add the chunk.
    const Array next = ws.mx.max(ws.t);
    ws.sum *= (ws.mx - next).exp();
    for (Index j = 0; j < m; ++j) ws.sum += (Z.col(j).array() - next).exp();
    ws.mx = next;
    for (Index r = 0; r < n; ++r) {
      const Index y = labels[static_cast<std::size_t>(r)];
      if (y >= j0 && y < j0 + m) zy[r] = Z(r, y - j0);
    }
  }
  for (Index r = 0; r < n; ++r) lse[r] = ws.mx(r) + std::log(ws.sum(r));
  return true;
}

/// The second sweep for the rows [r0, r0 + n): dZ = s (softmax − onehot)/n_total chunk by
/// chunk, dW += Xᵀ dZ, db += dZᵀ 1 (dw: d × C column-major, db: C), dX = dZ Wᵀ (n × d, column
/// stride lddx, overwritten).
template <typename Scalar>
void cross_entropy_gradients(const Scalar* x, Index ldx, Index n, Index d, const Scalar* w,
                             const Scalar* b, Index C, std::span<const int> labels,
                             const Scalar* lse, Scalar coefficient, Scalar* dw, Scalar* db,
                             Scalar* dx, Index lddx, CrossEntropyWorkspace<Scalar>& ws) {
  using ConstMap = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  using MutMap = Eigen::Map<Matrix<Scalar>>;
  const Index cw = cross_entropy_chunk_cols;
  const Eigen::Map<const Eigen::Array<Scalar, Eigen::Dynamic, 1>> shift(lse, n);
  const ConstMap X(x, n, d, Eigen::OuterStride<>(ldx));
  ws.z.resize(n, std::min(cw, C));
  for (Index j0 = 0; j0 < C; j0 += cw) {
    const Index m = std::min(cw, C - j0);
    tall_small_product(x, ldx, n, d, w + j0 * d, Index{1}, d, m, ws.z.data(), n, ProductInit::bias,
                       b + j0);
    auto Z = ws.z.leftCols(m);
    for (Index j = 0; j < m; ++j) Z.col(j).array() = (Z.col(j).array() - shift).exp() * coefficient;
    for (Index r = 0; r < n; ++r) {
      const Index y = labels[static_cast<std::size_t>(r)];
      if (y >= j0 && y < j0 + m) Z(r, y - j0) -= coefficient;
    }
    MutMap(dw + j0 * d, d, m).noalias() += X.transpose() * Z;
    Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, 1>>(db + j0, m).noalias() +=
        Z.colwise().sum().transpose();
    tall_small_product(ws.z.data(), n, n, m, w + j0 * d, d, Index{1}, d, dx, lddx,
                       j0 == 0 ? ProductInit::zero : ProductInit::accumulate,
                       static_cast<const Scalar*>(nullptr));
  }
}

}  // namespace coulomb::detail
