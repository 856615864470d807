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
#include "../core/detail_products.hpp"
#include "../core/exp_kernels.hpp"
#include "feature_map.hpp"

namespace coulomb::detail {

/// Phi = the exponential features of X (positive, or hyperbolic [e^{Z}, e^{−Z}]) under the
/// stabilizer, Z = XΩᵀ with Ωᵀ packed in `omega_t`; log_scale (if given) receives the shifts s_i.
template <typename Scalar, typename D>
void exp_features(const Eigen::MatrixBase<D>& X, const PackedOperand<Scalar>& omega_t,
                  bool hyperbolic, Stabilizer stabilizer, Matrix<Scalar>& Phi,
                  Vector<Scalar>* log_scale) {
  const Index n = X.rows();
  const Index m = omega_t.cols();
  Phi.resize(n, hyperbolic ? 2 * m : m);
  // Buffers of the calling thread, reused across calls (the attention maps small blocks).
  static thread_local Vector<Scalar> local_scale, offsets, row_max;
  Vector<Scalar>& shift = log_scale ? *log_scale : local_scale;
  shift.resize(n);
  if (n == 0) return;

  // log c with c = 1/√D, folded into the offsets: Φ_ij = exp(±z_ij − offset_i).
  const Scalar log_c = static_cast<Scalar>(-0.5 * std::log(static_cast<double>(Phi.cols())));
  offsets = Scalar(0.5) * X.rowwise().squaredNorm();  // h_i
  const Index block = exp_block_rows<Scalar>(Phi.cols());
  // Largest exponent of each row before any shift: max_j z_ij (max_j |z_ij| when hyperbolic).
  row_max.resize(stabilizer == Stabilizer::none ? 0 : n);

  // One GEMM for all rows (faster than one per row block), then the elementwise passes block
  // by block, so that a block stays in cache between them.
  omega_t.product(X, Phi.leftCols(m));  // Z
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
