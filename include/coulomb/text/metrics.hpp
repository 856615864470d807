// SPDX-License-Identifier: MIT
/// @file text/metrics.hpp
/// @brief Classification metrics from predicted probabilities: accuracy, Matthews correlation
/// (MCC), F1, expected calibration error (ECE) with its reliability diagram, log loss and
/// Brier score — the metrics of Badiei Khuzani et al. (2026), §5.
///
/// Probabilities come as an n × C matrix whose row i is the predicted distribution of example
/// i (C ≥ 2, rows sum to 1), or, for binary tasks, as an n × 1 column holding P(y = 1). Labels
/// are integers in [0, C) (in {0, 1} for a column). Definitions (docs/text.md (section "metrics")):
/// - prediction ŷ_i = argmax_c p_ic (the lowest class on a tie; for a column, 1 iff p_i > 0.5);
///   confidence q_i = p_iŷ_i.
/// - accuracy = (1/n) Σ 1[ŷ_i = y_i].
/// - MCC (Matthews 1975; Gorodkin 2004 for C > 2), from the confusion counts with s = n,
///   c = Σ_k C_kk, t_k = Σ_j C_kj (true), p_k = Σ_j C_jk (predicted):
///   (c·s − Σ t_k p_k) / √((s² − Σ p_k²)(s² − Σ t_k²)), 0 when the denominator is 0. For C = 2 it
///   is (TP·TN − FP·FN)/√((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
/// - F1 of class k = 2·TP/(2·TP + FP + FN) (0 when the class is neither true nor predicted);
///   macro F1 = the mean over classes.
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

namespace coulomb {

/// Number of bins of the ECE in the paper.
inline constexpr Index default_calibration_bins = 15;

/// Options of evaluate_classification.
struct MetricOptions {
  /// Equal-width confidence bins of the ECE and the reliability diagram.
  Index num_bins = default_calibration_bins;
  /// The class whose F1 is reported for binary tasks.
  int positive_class = 1;
  /// Probabilities below this are raised to it in the log loss.
  double log_loss_epsilon = 1e-15;
};

/// One bin of a reliability diagram.
struct ReliabilityBin {
  double lower = 0.0;            ///< bin (lower, upper] of confidences
  double upper = 0.0;            ///< upper end
  Index count = 0;               ///< examples whose confidence falls in the bin
  double mean_confidence = 0.0;  ///< mean confidence in the bin (0 when count = 0)
  double accuracy = 0.0;         ///< fraction of correct predictions in the bin (0 when count = 0)
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

namespace detail {

/// Read access to checked probabilities, a column of P(y = 1) seen as two classes.
template <typename Derived>
class ProbabilityView {
 public:
  explicit ProbabilityView(const Eigen::MatrixBase<Derived>& p) : p_(p.derived()) {}
  Index rows() const noexcept { return p_.rows(); }
  Index classes() const noexcept { return p_.cols() == 1 ? 2 : p_.cols(); }
  bool is_column() const noexcept { return p_.cols() == 1; }
  double operator()(Index i, Index c) const {
    if (p_.cols() == 1) {
      const auto p1 = static_cast<double>(p_(i, 0));
      return c == 1 ? p1 : 1.0 - p1;
    }
    return static_cast<double>(p_(i, c));
  }
  /// Predicted class: argmax, lowest index on ties; for a column, 1 iff p > 0.5.
  int predicted(Index i) const {
    if (p_.cols() == 1) return static_cast<double>(p_(i, 0)) > 0.5 ? 1 : 0;
    Index best = 0;
    for (Index c = 1; c < p_.cols(); ++c) {
      if (p_(i, c) > p_(i, best)) best = c;
    }
    return static_cast<int>(best);
  }

 private:
  const Derived& p_;
};

/// Checks probabilities and labels: n ≥ 1 rows, one per label; entries finite and in [0, 1]
/// (to 1e-5); rows of a C ≥ 2 matrix summing to 1 (to 1e-4); labels in [0, C).
template <typename Derived>
void check_probabilities(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels,
                         const char* where) {
  const Index n = probs.rows();
  require(n >= 1, where, "argument 'probs' has no rows");
  require(probs.cols() >= 1, where, "argument 'probs' has no columns");
  require(static_cast<std::size_t>(n) == labels.size(), where,
          "argument 'labels' has " + std::to_string(labels.size()) + " entries, expected " +
              std::to_string(n) + " (the rows of 'probs')");
  require_finite(probs, where, "probs");
  constexpr double entry_tol = 1e-5;
  constexpr double sum_tol = 1e-4;
  const Index classes = probs.cols() == 1 ? 2 : probs.cols();
  for (Index i = 0; i < n; ++i) {
    double sum = 0.0;
    for (Index c = 0; c < probs.cols(); ++c) {
      const auto v = static_cast<double>(probs(i, c));
      require(v >= -entry_tol && v <= 1.0 + entry_tol, where,
              "argument 'probs' has entry " + std::to_string(v) + " at (" + std::to_string(i) +
                  ", " + std::to_string(c) + "), outside [0, 1]");
      sum += v;
    }
    if (probs.cols() > 1) {
      require(std::abs(sum - 1.0) <= sum_tol, where,
              "row " + std::to_string(i) + " of argument 'probs' sums to " + std::to_string(sum) +
                  ", not 1");
    }
    const int y = labels[static_cast<std::size_t>(i)];
    require(y >= 0 && y < classes, where,
            "argument 'labels' has " + std::to_string(y) + " at " + std::to_string(i) +
                ", outside [0, " + std::to_string(classes) + ")");
  }
}

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

inline double mcc_from_confusion(const Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic>& cm) {
  const Index C = cm.rows();
  double s = 0.0;
  double c = 0.0;
  double tp = 0.0;
  double pp = 0.0;
  double tt = 0.0;
  for (Index k = 0; k < C; ++k) {
    const auto t_k = static_cast<double>(cm.row(k).sum());
    const auto p_k = static_cast<double>(cm.col(k).sum());
    c += static_cast<double>(cm(k, k));
    s += t_k;
    tp += t_k * p_k;
    pp += p_k * p_k;
    tt += t_k * t_k;
  }
  const double denom = std::sqrt(s * s - pp) * std::sqrt(s * s - tt);
  if (!(denom > 0.0)) return 0.0;
  return (c * s - tp) / denom;
}

inline double f1_from_confusion(const Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic>& cm,
                                Index k) {
  const auto tp = static_cast<double>(cm(k, k));
  const auto fn = static_cast<double>(cm.row(k).sum()) - tp;
  const auto fp = static_cast<double>(cm.col(k).sum()) - tp;
  const double denom = 2.0 * tp + fp + fn;
  return denom > 0.0 ? 2.0 * tp / denom : 0.0;
}

}  // namespace detail

/// Predicted classes (argmax of each row, lowest class on ties; for a column, 1 iff p > 0.5).
template <typename Derived>
std::vector<int> predicted_classes(const Eigen::MatrixBase<Derived>& probs) {
  detail::ProbabilityView<Derived> p(probs);
  std::vector<int> out(static_cast<std::size_t>(probs.rows()));
  for (Index i = 0; i < probs.rows(); ++i) out[static_cast<std::size_t>(i)] = p.predicted(i);
  return out;
}

/// C × C confusion counts: entry (k, j) counts examples of true class k predicted as j.
template <typename Derived>
Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic> confusion_matrix(
    const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels) {
  detail::check_probabilities(probs, labels, "coulomb::confusion_matrix");
  detail::ProbabilityView<Derived> p(probs);
  Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic> cm =
      Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic>::Zero(p.classes(), p.classes());
  for (Index i = 0; i < p.rows(); ++i) ++cm(labels[static_cast<std::size_t>(i)], p.predicted(i));
  return cm;
}

/// Fraction of examples whose predicted class is the label.
template <typename Derived>
double accuracy(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels) {
  detail::check_probabilities(probs, labels, "coulomb::accuracy");
  detail::ProbabilityView<Derived> p(probs);
  Index correct = 0;
  for (Index i = 0; i < p.rows(); ++i)
    correct += p.predicted(i) == labels[static_cast<std::size_t>(i)];
  return static_cast<double>(correct) / static_cast<double>(p.rows());
}

/// Matthews correlation coefficient (multi-class R_K of Gorodkin for C > 2); 0 when undefined.
template <typename Derived>
double matthews_corrcoef(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels) {
  return detail::mcc_from_confusion(confusion_matrix(probs, labels));
}

/// F1 score of class `positive_class` (one against the rest). Throws invalid_argument when the
/// class is outside [0, C).
template <typename Derived>
double f1_score(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels,
                int positive_class = 1) {
  const auto cm = confusion_matrix(probs, labels);
  detail::require(positive_class >= 0 && positive_class < cm.rows(), "coulomb::f1_score",
                  "argument 'positive_class' = " + std::to_string(positive_class) +
                      " is outside [0, " + std::to_string(cm.rows()) + ")");
  return detail::f1_from_confusion(cm, positive_class);
}

/// Mean of the per-class F1 scores.
template <typename Derived>
double macro_f1(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels) {
  const auto cm = confusion_matrix(probs, labels);
  double sum = 0.0;
  for (Index k = 0; k < cm.rows(); ++k) sum += detail::f1_from_confusion(cm, k);
  return sum / static_cast<double>(cm.rows());
}

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
