// SPDX-License-Identifier: MIT
/// @file nn/pooling.hpp
/// @brief Masked mean pooling over the positions of each sequence, with its backward.
/// Documented in docs/model.md.
///
/// For B sequences of length L stored as (B·L) × d rows (row b·L + t is position t of
/// sequence b) and a padding mask M (L × B, true at tokens):
///   p_b = (1/n_b) Σ_{t : M(t,b)} x_{b·L+t},  n_b = Σ_t M(t, b),
/// so padding never enters the result. A sequence without any token (n_b = 0) pools to the
/// zero vector, and its rows get zero gradients.
#pragma once

#include <string>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb::nn {

/// Masked mean pooling (see the file comment). Keeps 1/n_b of the last forward for backward.
template <RealScalar Scalar>
class MaskedMeanPool {
 public:
  using MatrixType = Matrix<Scalar>;              ///< dense column-major matrix
  using VectorType = Vector<Scalar>;              ///< dense column vector
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how inputs are taken (no copy)

  /// P (resized to B × d) from X ((B·L) × d) and the mask (L × B). Throws invalid_argument if
  /// X does not have mask.size() rows.
  void forward(const ConstRef& X, const PaddingMask& mask, MatrixType& P) {
    const char* where = "coulomb::nn::MaskedMeanPool::forward";
    const Index L = mask.rows();
    const Index B = mask.cols();
    if (!(B >= 1 && L >= 1))
      detail::throw_invalid(where, "argument 'mask' is " + std::to_string(L) + "x" +
                                       std::to_string(B) + ", expected at least 1x1");
    if (!(X.rows() == L * B))
      detail::throw_invalid(where, "argument 'X' has " + std::to_string(X.rows()) +
                                       " rows, expected L x B = " + std::to_string(L * B) +
                                       " (the size of 'mask')");
    inv_count_.resize(B);
    for (Index b = 0; b < B; ++b) {
      const Index n = mask.col(b).count();
      inv_count_(b) = n > 0 ? Scalar(1) / static_cast<Scalar>(n) : Scalar(0);
    }
    P.setZero(B, X.cols());
    for (Index j = 0; j < X.cols(); ++j) {
      for (Index b = 0; b < B; ++b) {
        Scalar sum = 0;
        for (Index t = 0; t < L; ++t)
          if (mask(t, b)) sum += X(b * L + t, j);
        P(b, j) = sum * inv_count_(b);
      }
    }
  }

  /// dX (resized to (B·L) × d) from dP = ∂L/∂P: dx_{b·L+t} = M(t,b) dp_b / n_b. Needs the
  /// forward of the same mask; throws invalid_argument if dP is not B × d for that forward.
  void backward(const ConstRef& dP, const PaddingMask& mask, MatrixType& dX) const {
    const char* where = "coulomb::nn::MaskedMeanPool::backward";
    const Index L = mask.rows();
    const Index B = mask.cols();
    if (!(B == inv_count_.size()))
      detail::throw_invalid(where, "argument 'mask' has " + std::to_string(B) +
                                       " columns, but the last forward had " +
                                       std::to_string(inv_count_.size()));
    if (!(dP.rows() == B))
      detail::throw_invalid(where, "argument 'dP' has " + std::to_string(dP.rows()) +
                                       " rows, expected " + std::to_string(B) +
                                       " (the sequences of 'mask')");
    dX.resize(L * B, dP.cols());
    for (Index j = 0; j < dP.cols(); ++j) {
      for (Index b = 0; b < B; ++b) {
        const Scalar g = dP(b, j) * inv_count_(b);
        for (Index t = 0; t < L; ++t) dX(b * L + t, j) = mask(t, b) ? g : Scalar(0);
      }
    }
  }

 private:
  VectorType inv_count_;
};

}  // namespace coulomb::nn
