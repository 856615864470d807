// SPDX-License-Identifier: MIT
/// @file metrics/classification.hpp
/// @brief Metrics of the predicted classes: confusion counts, accuracy, Matthews correlation
/// (MCC) and F1, the quality metrics of Badiei Khuzani, Honnaiah, Islam, Cozzi & Bagherjeiran, *A
/// Coulomb Particle Model for Learning Kernel Attention in Transformers*, 2026, §5.
///
/// Probabilities come as an n × C matrix whose row i is the predicted distribution of example
/// i (C ≥ 2, rows sum to 1), or, for binary tasks, as an n × 1 column holding P(y = 1). Labels
/// are integers in [0, C) (in {0, 1} for a column). Definitions (docs/text.md, section
/// "metrics"):
/// - prediction ŷ_i = argmax_c p_ic (the lowest class on a tie; for a column, 1 iff p_i > 0.5).
/// - accuracy = (1/n) Σ 1[ŷ_i = y_i].
/// - MCC (Matthews 1975; Gorodkin 2004 for C > 2), from the confusion counts with s = n,
///   c = Σ_k C_kk, t_k = Σ_j C_kj (true), p_k = Σ_j C_jk (predicted):
///   (c·s − Σ t_k p_k) / √((s² − Σ p_k²)(s² − Σ t_k²)), 0 when the denominator is 0. For C = 2 it
///   is (TP·TN − FP·FN)/√((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
/// - F1 of class k = 2·TP/(2·TP + FP + FN) (0 when the class is neither true nor predicted);
///   macro F1 = the mean over classes.
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_probabilities.hpp"

namespace coulomb {

namespace detail {

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

}  // namespace coulomb
