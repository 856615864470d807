// SPDX-License-Identifier: MIT
/// @file features/detail_exp.hpp
/// @brief Internal: the fused exponential-feature kernel shared by FAVOR+ and PORF-exp.
///
/// Computes, for Z = XΩᵀ and h_i = ‖x_i‖²/2,
///   positive:   Φ_ij        = c · exp( z_ij − h_i − s_i)
///   hyperbolic: Φ_i,j       = c · exp( z_ij − h_i − s_i),
///               Φ_i,m+j     = c · exp(−z_ij − h_i − s_i)
/// with one GEMM and one fused, vectorized elementwise pass per output column (no n×m
/// temporaries). The shift s_i is chosen by the Stabilizer so that no entry overflows:
/// per_row makes the largest exponent of row i zero, global the largest of the whole block.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "feature_map.hpp"

namespace coulomb::detail {

/// x, or 0 where x is below the smallest normal number (NaN and ∞ pass through unchanged).
/// Eigen's vectorized exp clamps its argument (near −708 in double; near −87 in float without
/// AVX), so exp(−1e30) gives a subnormal 5.6e-309 (2.9e-39 in float) instead of 0. A feature
/// that should vanish, times a feature of order 1, then makes a denominator just above the
/// zero-denominator guard of attention, whose inverse overflows in the backward pass (and the
/// value depends on whether the build has FMA). Vectorized: a compare and an and-not.
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

template <typename Scalar, typename D>
void exp_features(const Eigen::MatrixBase<D>& X, const Matrix<Scalar>& omega, bool hyperbolic,
                  Stabilizer stabilizer, Matrix<Scalar>& Phi, Vector<Scalar>* log_scale) {
  const Index n = X.rows();
  const Index m = omega.rows();
  Phi.resize(n, hyperbolic ? 2 * m : m);
  Vector<Scalar> local_scale;
  Vector<Scalar>& shift = log_scale ? *log_scale : local_scale;
  shift.resize(n);
  if (n == 0) return;

  // log c with c = 1/√D, folded into the offsets: Φ_ij = exp(±z_ij − offset_i).
  const Scalar log_c = static_cast<Scalar>(-0.5 * std::log(static_cast<double>(Phi.cols())));
  Vector<Scalar> offsets = Scalar(0.5) * X.rowwise().squaredNorm();  // h_i
  const Index block = exp_block_rows<Scalar>(Phi.cols());
  // Largest exponent of each row before any shift: max_j z_ij (max_j |z_ij| when hyperbolic).
  Vector<Scalar> row_max(stabilizer == Stabilizer::none ? 0 : n);

  // One GEMM for all rows (measured faster than a GEMM per row block here), then the
  // elementwise passes block by block, so that a block stays in cache between them.
  Phi.leftCols(m).noalias() = X * omega.transpose();  // Z
  auto exponentiate = [&](Index r0, Index rows) {
    const auto off = offsets.segment(r0, rows).array();
    for (Index j = 0; j < m; ++j) {
      auto z = Phi.col(j).segment(r0, rows).array();
      if (hyperbolic) Phi.col(m + j).segment(r0, rows).array() = exp_flushed(-z - off);
      z = exp_flushed(z - off);
    }
  };

  if (stabilizer == Stabilizer::global) {
    // One shift for the whole input: every row's maximum is needed before the first
    // exponential, so the projections of all blocks are kept, then exponentiated.
    for (Index r0 = 0; r0 < n; r0 += block) {
      const Index rows = std::min(block, n - r0);
      block_row_max(Phi, r0, rows, m, hyperbolic, row_max.segment(r0, rows));
    }
    const Scalar s = (row_max - offsets).maxCoeff();
    shift.setConstant(s);
    // Each exponent is ((±z − h_i) − s) + log c, in this order: rounding is monotone, so
    // ±z − h_i is at most the rounded row maximum max_j ±z_ij − h_i, hence at most s, and every
    // entry is at most c. Folding s into the offsets, z − (h_i + s − log c), would lose s to the
    // rounding of h_i + s when h_i is huge (‖x‖ ~ 1e6 in float, 1e30 in double) and overflow.
    // A block whose squared norms all overflow has s = −∞: its exponents are NaN, which the
    // map's overflow check (FeatureMapBase) reports.
    for (Index r0 = 0; r0 < n; r0 += block) {
      const Index rows = std::min(block, n - r0);
      const auto off = offsets.segment(r0, rows).array();
      for (Index j = 0; j < m; ++j) {
        auto z = Phi.col(j).segment(r0, rows).array();
        if (hyperbolic)
          Phi.col(m + j).segment(r0, rows).array() = exp_flushed(((-z - off) - s) + log_c);
        z = exp_flushed(((z - off) - s) + log_c);
      }
    }
    return;
  }
  for (Index r0 = 0; r0 < n; r0 += block) {
    const Index rows = std::min(block, n - r0);
    if (stabilizer == Stabilizer::per_row) {
      block_row_max(Phi, r0, rows, m, hyperbolic, row_max.segment(r0, rows));
      // shift_i = max_j ±z_ij − h_i, so offset_i = h_i + shift_i = max_j ±z_ij: the −‖x‖²/2
      // term cancels and the largest entry of the row is c (up to rounding). The offset is
      // the row maximum itself, not h_i + (max − h_i), which would lose the maximum to
      // rounding when h_i is huge.
      shift.segment(r0, rows) = row_max.segment(r0, rows) - offsets.segment(r0, rows);
      offsets.segment(r0, rows) = row_max.segment(r0, rows);
    } else {
      shift.segment(r0, rows).setZero();
    }
    offsets.segment(r0, rows).array() -= log_c;
    exponentiate(r0, rows);
  }
}

/// dZ = ∂L/∂Z for the exponential features: G = dΦ ⊙ Φ, dZ = G (positive) or
/// G_left − G_right (hyperbolic).
template <typename Scalar>
void exp_features_backward(const Matrix<Scalar>& Phi, const Matrix<Scalar>& dPhi, Index m,
                           bool hyperbolic, Matrix<Scalar>& dZ) {
  const Index n = Phi.rows();
  dZ.resize(n, m);
  if (hyperbolic) {
    for (Index j = 0; j < m; ++j)
      dZ.col(j).array() = dPhi.col(j).array() * Phi.col(j).array() -
                          dPhi.col(m + j).array() * Phi.col(m + j).array();
  } else {
    dZ.array() = dPhi.array() * Phi.array();
  }
}

/// The −‖x‖²/2 term's contribution to the input gradient: dX_i −= (Σ_j dΦ_ij Φ_ij) x_i.
template <typename Scalar, typename D>
void exp_features_norm_correction(const Eigen::MatrixBase<D>& X, const Matrix<Scalar>& Phi,
                                  const Matrix<Scalar>& dPhi, Matrix<Scalar>& dX) {
  Vector<Scalar> weight = Vector<Scalar>::Zero(X.rows());
  for (Index j = 0; j < Phi.cols(); ++j) weight.array() += dPhi.col(j).array() * Phi.col(j).array();
  dX.noalias() -= weight.asDiagonal() * X;
}

}  // namespace coulomb::detail
