// SPDX-License-Identifier: MIT
/// @file core/exp_kernels.hpp
/// @brief Internal: the vectorized elementwise exponential passes shared by the exponential
/// feature maps (features/) and the stabilized sums of linear attention (attention/).
///
/// exp_flushed(x) = exp(x), with results below the smallest normal number set to 0;
/// block_row_max gives the row maxima that the stabilizer's shifts are taken from, and
/// exp_block_rows the rows per block of these passes, so that a block stays in cache
/// between them.
#pragma once

#include <algorithm>
#include <limits>

#include <Eigen/Core>

#include "config.hpp"

namespace coulomb::detail {

/// x, or 0 where x is below the smallest normal number (NaN and ∞ pass through unchanged).
/// Eigen's vectorized exp clamps its argument (near −708 in double, −87 in float without
/// AVX), so exp(−1e30) gives a subnormal instead of 0. A feature that should vanish would then
/// leave a denominator just above attention's zero-denominator guard, whose inverse overflows
/// in the backward pass. Vectorized: a compare and an and-not.
template <typename Scalar>
struct FlushSubnormal {
  Scalar operator()(Scalar x) const {
    return x < std::numeric_limits<Scalar>::min() ? Scalar(0) : x;
  }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    namespace ei = Eigen::internal;
    return ei::pandnot(x, ei::pcmp_lt(x, ei::pset1<Packet>(std::numeric_limits<Scalar>::min())));
  }
};

/// exp(x) elementwise with results below the smallest normal number set to 0 (FlushSubnormal):
/// the exponential of the features and of the attention shifts.
template <typename D>
auto exp_flushed(const Eigen::ArrayBase<D>& x) {
  return x.exp().unaryExpr(FlushSubnormal<typename D::Scalar>{});
}

}  // namespace coulomb::detail

namespace Eigen::internal {
/// FlushSubnormal is vectorized (see coulomb::detail::FlushSubnormal).
template <typename Scalar>
struct functor_traits<coulomb::detail::FlushSubnormal<Scalar>> {
  enum { Cost = 2 * NumTraits<Scalar>::AddCost, PacketAccess = packet_traits<Scalar>::HasCmp };
};
}  // namespace Eigen::internal

namespace coulomb::detail {

/// Rows per block of the elementwise passes, so that one block of Φ (rows × D) stays in a
/// 256 KiB share of the L2 cache between the max pass and the exp pass.
template <typename Scalar>
Index exp_block_rows(Index output_cols) {
  const Index bytes = 256 * 1024;
  const Index rows = bytes / (std::max<Index>(output_cols, 1) * static_cast<Index>(sizeof(Scalar)));
  return std::max<Index>(16, rows - rows % 16);
}

/// out(i) = max_j Z(r0 + i, j) over the first m columns (or max_j |Z| when `absolute`),
/// column by column so that every read is contiguous and vectorized.
template <typename Scalar, typename Out>
void block_row_max(const Matrix<Scalar>& Z, Index r0, Index rows, Index m, bool absolute,
                   Out&& out) {
  if (absolute) {
    out = Z.col(0).segment(r0, rows).cwiseAbs();
    for (Index j = 1; j < m; ++j) out = out.cwiseMax(Z.col(j).segment(r0, rows).cwiseAbs());
  } else {
    out = Z.col(0).segment(r0, rows);
    for (Index j = 1; j < m; ++j) out = out.cwiseMax(Z.col(j).segment(r0, rows));
  }
}

}  // namespace coulomb::detail
