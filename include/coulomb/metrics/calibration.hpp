// SPDX-License-Identifier: MIT
/// @file metrics/calibration.hpp
/// @brief Calibration of predicted probabilities: expected calibration error (ECE) with its
/// reliability diagram, and the proper scoring rules log loss and Brier score, the calibration
/// metrics of Badiei Khuzani, Honnaiah, Islam, Cozzi & Bagherjeiran, *A Coulomb Particle Model for
/// Learning Kernel Attention in Transformers*, 2026, §5.
///
/// Inputs as in metrics/classification.hpp (an n × C matrix of rows summing to 1, or an n × 1
/// column of P(y = 1); labels in [0, C)); ŷ_i the predicted class, q_i = p_iŷ_i its confidence.
/// - ECE (Guo, Pleiss, Sun & Weinberger, ICML 2017) with M equal-width bins B_m = ((m−1)/M, m/M]
///   (the first also holds 0): Σ_m (|B_m|/n) |acc(B_m) − conf(B_m)|, M = 15 by default.
/// - log loss = −(1/n) Σ log max(p_iy_i, ε), ε = 1e-15 by default.
/// - Brier score: binary (one column, or C = 2) (1/n) Σ (P_i(y = 1) − y_i)²; for C > 2
///   (1/n) Σ_i Σ_c (p_ic − 1[y_i = c])² (Brier 1950). The binary value is half the C-class sum
///   at C = 2, and matches scikit-learn's brier_score_loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_probabilities.hpp"

namespace coulomb {

/// Number of bins of the ECE in the paper.
inline constexpr Index default_calibration_bins = 15;

/// One bin of a reliability diagram.
struct ReliabilityBin {
  double lower = 0.0;            ///< bin (lower, upper] of confidences
  double upper = 0.0;            ///< upper end
  Index count = 0;               ///< examples whose confidence falls in the bin
  double mean_confidence = 0.0;  ///< mean confidence in the bin (0 when count = 0)
  double accuracy = 0.0;         ///< fraction of correct predictions in the bin (0 when count = 0)
};

namespace detail {

/// Bin of confidence q among M bins ((m−1)/M, m/M], q ≤ 0 in the first; the boundaries are
/// the doubles m/M, so a confidence equal to a boundary always lands in the bin it closes.
inline Index calibration_bin(double q, Index num_bins) noexcept {
  const auto M = static_cast<double>(num_bins);
  auto m = static_cast<Index>(std::ceil(q * M)) - 1;
  m = std::clamp<Index>(m, 0, num_bins - 1);
  while (m > 0 && q <= static_cast<double>(m) / M) --m;
  while (m < num_bins - 1 && q > static_cast<double>(m + 1) / M) ++m;
  return m;
}

}  // namespace detail

/// Reliability diagram: for each of `num_bins` equal-width confidence bins, its range, count,
/// mean confidence and accuracy. Throws invalid_argument for num_bins < 1.
template <typename Derived>
std::vector<ReliabilityBin> reliability_diagram(const Eigen::MatrixBase<Derived>& probs,
                                                std::span<const int> labels,
                                                Index num_bins = default_calibration_bins) {
  const char* where = "coulomb::reliability_diagram";
  detail::require(num_bins >= 1, where,
                  "argument 'num_bins' must be at least 1, got " + std::to_string(num_bins));
  detail::check_probabilities(probs, labels, where);
  detail::ProbabilityView<Derived> p(probs);
  std::vector<ReliabilityBin> bins(static_cast<std::size_t>(num_bins));
  std::vector<double> conf_sum(bins.size(), 0.0);
  std::vector<Index> correct(bins.size(), 0);
  for (Index i = 0; i < p.rows(); ++i) {
    const int yhat = p.predicted(i);
    const double q = p(i, yhat);
    const auto m = static_cast<std::size_t>(detail::calibration_bin(q, num_bins));
    ++bins[m].count;
    conf_sum[m] += q;
    correct[m] += yhat == labels[static_cast<std::size_t>(i)];
  }
  for (std::size_t m = 0; m < bins.size(); ++m) {
    bins[m].lower = static_cast<double>(m) / static_cast<double>(num_bins);
    bins[m].upper = static_cast<double>(m + 1) / static_cast<double>(num_bins);
    if (bins[m].count > 0) {
      const auto cnt = static_cast<double>(bins[m].count);
      bins[m].mean_confidence = conf_sum[m] / cnt;
      bins[m].accuracy = static_cast<double>(correct[m]) / cnt;
    }
  }
  return bins;
}

/// Expected calibration error with `num_bins` equal-width bins (15 in the paper).
template <typename Derived>
double expected_calibration_error(const Eigen::MatrixBase<Derived>& probs,
                                  std::span<const int> labels,
                                  Index num_bins = default_calibration_bins) {
  const auto bins = reliability_diagram(probs, labels, num_bins);
  double ece = 0.0;
  for (const auto& b : bins) {
    ece += static_cast<double>(b.count) * std::abs(b.accuracy - b.mean_confidence);
  }
  return ece / static_cast<double>(probs.rows());
}

/// Mean negative log-probability of the true class, probabilities below `epsilon` raised to
/// it. Throws invalid_argument unless 0 < epsilon < 1.
template <typename Derived>
double log_loss(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels,
                double epsilon = 1e-15) {
  const char* where = "coulomb::log_loss";
  detail::require(epsilon > 0.0 && epsilon < 1.0, where,
                  "argument 'epsilon' must be in (0, 1), got " + std::to_string(epsilon));
  detail::check_probabilities(probs, labels, where);
  detail::ProbabilityView<Derived> p(probs);
  double sum = 0.0;
  for (Index i = 0; i < p.rows(); ++i) {
    sum -= std::log(std::max(p(i, labels[static_cast<std::size_t>(i)]), epsilon));
  }
  return sum / static_cast<double>(p.rows());
}

/// Brier score: (1/n) Σ (P_i(y = 1) − y_i)² for binary tasks (a column, or C = 2), and
/// (1/n) Σ_i Σ_c (p_ic − 1[y_i = c])² for C > 2.
template <typename Derived>
double brier_score(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels) {
  detail::check_probabilities(probs, labels, "coulomb::brier_score");
  detail::ProbabilityView<Derived> p(probs);
  double sum = 0.0;
  for (Index i = 0; i < p.rows(); ++i) {
    const int y = labels[static_cast<std::size_t>(i)];
    if (p.classes() == 2) {
      const double d = p(i, 1) - static_cast<double>(y);
      sum += d * d;
    } else {
      for (Index c = 0; c < p.classes(); ++c) {
        const double d = p(i, c) - (c == y ? 1.0 : 0.0);
        sum += d * d;
      }
    }
  }
  return sum / static_cast<double>(p.rows());
}

}  // namespace coulomb
