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

#include <cmath>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "feature_map.hpp"

namespace coulomb::detail {

template <typename Scalar, typename D>
void exp_features(const Eigen::MatrixBase<D>& X, const Matrix<Scalar>& omega, bool hyperbolic,
                  Stabilizer stabilizer, Matrix<Scalar>& Phi, Vector<Scalar>* log_scale) {
  const Index n = X.rows();
  const Index m = omega.rows();
  Phi.resize(n, hyperbolic ? 2 * m : m);
  if (n == 0) {
    if (log_scale) log_scale->resize(0);
    return;
  }
  auto Z = Phi.leftCols(m);
  Z.noalias() = X * omega.transpose();

  // log c with c = 1/√D, folded into the offsets.
  const Scalar log_c = static_cast<Scalar>(-0.5 * std::log(static_cast<double>(Phi.cols())));
  Vector<Scalar> offsets = Scalar(0.5) * X.rowwise().squaredNorm();  // h_i
  Vector<Scalar> local_scale;
  Vector<Scalar>& shift = log_scale ? *log_scale : local_scale;
  switch (stabilizer) {
    case Stabilizer::none:
      shift.setZero(n);
      break;
    case Stabilizer::per_row: {
      Vector<Scalar> row_max;
      if (hyperbolic)
        rowwise_max<Scalar>(Z.cwiseAbs(), row_max);
      else
        rowwise_max<Scalar>(Z, row_max);
      shift = row_max - offsets;  // largest exponent of the row
      offsets = row_max;          // h_i + s_i
      break;
    }
    case Stabilizer::global: {
      Vector<Scalar> row_max;
      if (hyperbolic)
        rowwise_max<Scalar>(Z.cwiseAbs(), row_max);
      else
        rowwise_max<Scalar>(Z, row_max);
      const Scalar s = (row_max - offsets).maxCoeff();
      shift.setConstant(n, s);
      offsets.array() += s;
      break;
    }
  }
  offsets.array() -= log_c;
  if (hyperbolic) {
    for (Index j = 0; j < m; ++j) {
      Phi.col(m + j).array() = (-Phi.col(j).array() - offsets.array()).exp();
      Phi.col(j).array() = (Phi.col(j).array() - offsets.array()).exp();
    }
  } else {
    for (Index j = 0; j < m; ++j) Phi.col(j).array() = (Phi.col(j).array() - offsets.array()).exp();
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
  for (Index j = 0; j < Phi.cols(); ++j)
    weight.array() += dPhi.col(j).array() * Phi.col(j).array();
  dX.noalias() -= weight.asDiagonal() * X;
}

}  // namespace coulomb::detail
