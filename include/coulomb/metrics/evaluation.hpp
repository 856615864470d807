// SPDX-License-Identifier: MIT
/// @file metrics/evaluation.hpp
/// @brief Every classification metric at once: accuracy, MCC and F1
/// (metrics/classification.hpp), ECE, log loss and Brier score (metrics/calibration.hpp), as
/// Badiei Khuzani, Honnaiah, Islam, Cozzi & Bagherjeiran, *A Coulomb Particle Model for Learning
/// Kernel Attention in Transformers*, 2026, §5, reports them.
#pragma once

#include <span>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "calibration.hpp"
#include "classification.hpp"

namespace coulomb {

/// Options of evaluate_classification.
struct MetricOptions {
  /// Equal-width confidence bins of the ECE and the reliability diagram.
  Index num_bins = default_calibration_bins;
  /// The class whose F1 is reported for binary tasks.
  int positive_class = 1;
  /// Probabilities below this are raised to it in the log loss.
  double log_loss_epsilon = 1e-15;
};

/// All metrics of one evaluation.
struct ClassificationMetrics {
  Index count = 0;        ///< examples
  double accuracy = 0.0;  ///< fraction correct
  double mcc = 0.0;       ///< Matthews correlation coefficient
  double f1 = 0.0;        ///< F1 of the positive class (binary) or macro F1 (C > 2)
  double ece = 0.0;       ///< expected calibration error
  double log_loss = 0.0;  ///< mean negative log-likelihood
  double brier = 0.0;     ///< Brier score
};

/// Every metric at once: accuracy, MCC, F1 (of options.positive_class for binary tasks, macro
/// for C > 2), ECE, log loss and Brier score.
template <typename Derived>
ClassificationMetrics evaluate_classification(const Eigen::MatrixBase<Derived>& probs,
                                              std::span<const int> labels,
                                              const MetricOptions& options = {}) {
  ClassificationMetrics m;
  const auto cm = confusion_matrix(probs, labels);
  m.count = probs.rows();
  m.accuracy = static_cast<double>(cm.trace()) / static_cast<double>(m.count);
  m.mcc = detail::mcc_from_confusion(cm);
  if (cm.rows() == 2) {
    detail::require(options.positive_class == 0 || options.positive_class == 1,
                    "coulomb::evaluate_classification",
                    "argument 'options.positive_class' must be 0 or 1 for a binary task, got " +
                        std::to_string(options.positive_class));
    m.f1 = detail::f1_from_confusion(cm, options.positive_class);
  } else {
    m.f1 = macro_f1(probs, labels);
  }
  m.ece = expected_calibration_error(probs, labels, options.num_bins);
  m.log_loss = log_loss(probs, labels, options.log_loss_epsilon);
  m.brier = brier_score(probs, labels);
  return m;
}

}  // namespace coulomb
