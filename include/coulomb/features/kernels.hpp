// SPDX-License-Identifier: MIT
/// @file features/kernels.hpp
/// @brief Closed-form kernels that random feature maps estimate, evaluated exactly (O(n_x·n_y·d)).
///
/// Used by the tests and examples as ground truth; each returns the n_x × n_y Gram matrix
/// between the rows of X and the rows of Y, computed in the scalar type of X.
/// - Gaussian: k(x, y) = exp(−‖x − y‖² / (2σ²))                      (Rahimi & Recht, 2007)
/// - softmax:  k(x, y) = exp(xᵀy)                                    (Choromanski et al., 2021)
/// - arc-cosine of order 1, as the expectation E_ω[relu(ωᵀx) relu(ωᵀy)], ω ~ N(0, I):
///   k(x, y) = ‖x‖‖y‖ (sin θ + (π − θ) cos θ) / (2π), θ the angle between x and y
///   (Cho & Saul, 2009, whose normalization is twice this).
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb {

/// Gaussian kernel exp(−‖x − y‖²/(2σ²)) between the rows of X and Y.
template <typename DX, typename DY>
Matrix<typename DX::Scalar> gaussian_kernel(const Eigen::MatrixBase<DX>& X,
                                            const Eigen::MatrixBase<DY>& Y, double bandwidth) {
  using Scalar = typename DX::Scalar;
  detail::require_cols(Y, X.cols(), "coulomb::gaussian_kernel", "Y");
  detail::require_positive(bandwidth, "coulomb::gaussian_kernel", "bandwidth");
  Matrix<Scalar> sq = (-2 * X * Y.transpose()).eval();
  sq.colwise() += X.rowwise().squaredNorm();
  sq.rowwise() += Y.rowwise().squaredNorm().transpose();
  const Scalar factor = static_cast<Scalar>(-0.5 / (bandwidth * bandwidth));
  return (sq.array().max(Scalar(0)) * factor).exp().matrix();
}

/// Softmax kernel exp(xᵀy) between the rows of X and Y.
template <typename DX, typename DY>
Matrix<typename DX::Scalar> softmax_kernel(const Eigen::MatrixBase<DX>& X,
                                           const Eigen::MatrixBase<DY>& Y) {
  detail::require_cols(Y, X.cols(), "coulomb::softmax_kernel", "Y");
  return (X * Y.transpose()).array().exp().matrix();
}

/// Arc-cosine kernel of order 1, E[relu(ωᵀx) relu(ωᵀy)] for ω ~ N(0, I), between the rows of
/// X and Y. A zero row gives a zero kernel.
template <typename DX, typename DY>
Matrix<typename DX::Scalar> arccos1_kernel(const Eigen::MatrixBase<DX>& X,
                                           const Eigen::MatrixBase<DY>& Y) {
  using Scalar = typename DX::Scalar;
  detail::require_cols(Y, X.cols(), "coulomb::arccos1_kernel", "Y");
  const Vector<Scalar> nx = X.rowwise().norm();
  const Vector<Scalar> ny = Y.rowwise().norm();
  Matrix<Scalar> k = X * Y.transpose();
  for (Index j = 0; j < k.cols(); ++j) {
    for (Index i = 0; i < k.rows(); ++i) {
      const double norms = static_cast<double>(nx(i)) * static_cast<double>(ny(j));
      if (norms == 0.0) {
        k(i, j) = 0;
        continue;
      }
      const double cosine = std::clamp(static_cast<double>(k(i, j)) / norms, -1.0, 1.0);
      const double theta = std::acos(cosine);
      k(i, j) =
          static_cast<Scalar>(norms * (std::sin(theta) + (std::numbers::pi - theta) * cosine) /
                              (2.0 * std::numbers::pi));
    }
  }
  return k;
}

}  // namespace coulomb
