// SPDX-License-Identifier: MIT
/// @file nn/loss.hpp
/// @brief Softmax probabilities and the softmax cross-entropy loss with its gradient.
/// Documented in docs/model.md.
///
/// For logits Z ∈ R^{B×C} (one row per sequence) and labels y_b ∈ [0, C):
///   p_b = softmax(z_b),  loss = −(1/B) Σ_b log p_b[y_b],  ∂loss/∂z_b = (p_b − e_{y_b}) / B.
/// The log-softmax is computed as z − max z − log Σ exp(z − max z), exact for any finite
/// logits.
#pragma once

#include <cmath>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb {

namespace detail {

/// Checks logits (non-empty, finite) and labels (one per row, in [0, C)).
template <typename D>
void nn_check_logits_labels(const Eigen::MatrixBase<D>& logits, std::span<const int> labels,
                            const char* where) {
  if (!(logits.rows() >= 1 && logits.cols() >= 1))
    detail::throw_invalid(where, "argument 'logits' is " + std::to_string(logits.rows()) + "x" +
                                     std::to_string(logits.cols()) + ", expected at least 1x1");
  detail::require_finite(logits, where, "logits");
  if (!(static_cast<Index>(labels.size()) == logits.rows()))
    detail::throw_invalid(where, "argument 'labels' has " + std::to_string(labels.size()) +
                                     " entries, expected " + std::to_string(logits.rows()) +
                                     " (the rows of 'logits')");
  for (std::size_t b = 0; b < labels.size(); ++b) {
    if (!(labels[b] >= 0 && labels[b] < logits.cols()))
      detail::throw_invalid(where, "argument 'labels' holds " + std::to_string(labels[b]) +
                                       " at index " + std::to_string(b) + ", expected 0.." +
                                       std::to_string(logits.cols() - 1));
  }
}

}  // namespace detail

namespace nn {

/// Row-wise softmax of the logits: probs (resized to B × C) has rows that sum to 1. Throws
/// invalid_argument for an empty or non-finite `logits`.
template <typename D>
void softmax_probabilities(const Eigen::MatrixBase<D>& logits, Matrix<typename D::Scalar>& probs) {
  const char* where = "coulomb::nn::softmax_probabilities";
  if (!(logits.rows() >= 1 && logits.cols() >= 1))
    detail::throw_invalid(where, "argument 'logits' is " + std::to_string(logits.rows()) + "x" +
                                     std::to_string(logits.cols()) + ", expected at least 1x1");
  detail::require_finite(logits, where, "logits");
  using Scalar = typename D::Scalar;
  probs.resize(logits.rows(), logits.cols());
  for (Index b = 0; b < logits.rows(); ++b) {
    const Scalar mx = logits.row(b).maxCoeff();
    probs.row(b) = (logits.row(b).array() - mx).exp();
    probs.row(b) /= probs.row(b).sum();
  }
}

/// Mean softmax cross-entropy −(1/B) Σ_b log softmax(z_b)[y_b], and its gradient
/// dlogits = (softmax(Z) − one_hot(y)) / B (resized to B × C). Throws invalid_argument for an
/// empty or non-finite `logits`, or `labels` of the wrong size or outside [0, C).
template <typename D>
typename D::Scalar softmax_cross_entropy(const Eigen::MatrixBase<D>& logits,
                                         std::span<const int> labels,
                                         Matrix<typename D::Scalar>& dlogits) {
  using Scalar = typename D::Scalar;
  detail::nn_check_logits_labels(logits, labels, "coulomb::nn::softmax_cross_entropy");
  const Index B = logits.rows();
  dlogits.resize(B, logits.cols());
  const Scalar inv_b = Scalar(1) / static_cast<Scalar>(B);
  double total = 0.0;
  for (Index b = 0; b < B; ++b) {
    const Scalar mx = logits.row(b).maxCoeff();
    dlogits.row(b) = (logits.row(b).array() - mx).exp();
    const Scalar sum = dlogits.row(b).sum();
    const auto y = static_cast<Index>(labels[static_cast<std::size_t>(b)]);
    total += static_cast<double>(std::log(sum) - (logits(b, y) - mx));
    dlogits.row(b) *= inv_b / sum;
    dlogits(b, y) -= inv_b;
  }
  return static_cast<Scalar>(total / static_cast<double>(B));
}

/// The mean softmax cross-entropy without its gradient.
template <typename D>
typename D::Scalar softmax_cross_entropy(const Eigen::MatrixBase<D>& logits,
                                         std::span<const int> labels) {
  using Scalar = typename D::Scalar;
  detail::nn_check_logits_labels(logits, labels, "coulomb::nn::softmax_cross_entropy");
  double total = 0.0;
  for (Index b = 0; b < logits.rows(); ++b) {
    const Scalar mx = logits.row(b).maxCoeff();
    const Scalar sum = (logits.row(b).array() - mx).exp().sum();
    const auto y = static_cast<Index>(labels[static_cast<std::size_t>(b)]);
    total += static_cast<double>(std::log(sum) - (logits(b, y) - mx));
  }
  return static_cast<Scalar>(total / static_cast<double>(logits.rows()));
}

}  // namespace nn
}  // namespace coulomb
