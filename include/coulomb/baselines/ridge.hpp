// SPDX-License-Identifier: MIT
/// @file baselines/ridge.hpp
/// @brief The linear classifier downstream of random features: ridge regression on ±1 labels
/// (the classifier of the synthetic experiment), Sinha & Duchi's reference form of it, and
/// k-fold cross-validation of its penalty.
///
/// Badiei Khuzani et al. (2026), §5 compare learned particles with fixed random features and
/// with Sinha & Duchi's importance sampling (particles/importance_sampling.hpp), each followed
/// by a linear classifier. The classifier here is ridge regression on ±1 targets with an
/// unpenalized intercept,
///   minimize (1/n) Σ_i (y_i − φ(x_i)ᵀw − b)² + α‖w‖²,
/// solved in closed form, (Φ_cᵀΦ_c + nαI) w = Φ_cᵀ(y − ȳ), b = ȳ − μᵀw, with Φ_c the
/// column-centred features and μ their means, by a Cholesky factorization (D×D, D the number of
/// features). Everything is computed in double whatever the features' scalar type.
///
/// ReferenceRidgeClassifier is the classifier of Sinha & Duchi's example (Learning Kernels with
/// Random Features, NIPS 2016; example_script.m of their code): uncentred features, the
/// intercept fixed at the mean training label ȳ, and the penalty λ in absolute units,
///   w = (ΦᵀΦ + λI)⁻¹ Φᵀ(y − ȳ),   decision φ(x)ᵀw + ȳ.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"

namespace coulomb {

namespace detail {

/// ±1 targets from labels in {0, 1} or {−1, 1} (1 ↦ +1, 0 and −1 ↦ −1).
template <typename D>
Vector<double> signed_labels(const Eigen::MatrixBase<D>& labels, std::string_view where) {
  require(labels.size() > 0, where, "argument 'labels' is empty");
  Vector<double> y(labels.size());
  for (Index i = 0; i < labels.size(); ++i) {
    const double v = static_cast<double>(labels.derived().reshaped()(i));
    if (v == 1.0)
      y(i) = 1.0;
    else if (v == 0.0 || v == -1.0)
      y(i) = -1.0;
    else
      throw_invalid(where, "argument 'labels' has value " + std::to_string(v) + " at index " +
                               std::to_string(i) + ", expected 0, 1 or -1");
  }
  return y;
}

/// Solves (G + nαI) w = r by Cholesky; throws numerical_error if G + nαI is not positive
/// definite to working precision.
inline Vector<double> ridge_solve(const Matrix<double>& gram, const Vector<double>& rhs,
                                  double n_alpha, std::string_view where) {
  Matrix<double> a = gram;
  a.diagonal().array() += n_alpha;
  Eigen::LLT<Matrix<double>> llt(a);
  if (llt.info() != Eigen::Success)
    throw numerical_error(std::string(where) +
                          ": the regularized Gram matrix is not positive definite; increase "
                          "'alpha'");
  return llt.solve(rhs);
}

/// The ±1 targets of `labels` for a fit on Φ, after checking Φ: one row per label, at least one
/// column, finite entries.
template <typename DP, typename DL>
Vector<double> fit_targets(const Eigen::MatrixBase<DP>& Phi, const Eigen::MatrixBase<DL>& labels,
                           std::string_view where) {
  Vector<double> y = signed_labels(labels, where);
  require(Phi.rows() == y.size(), where,
          "argument 'Phi' has " + std::to_string(Phi.rows()) + " rows, expected " +
              std::to_string(y.size()) + " (one per label)");
  require(Phi.cols() >= 1, where, "argument 'Phi' has no columns");
  require_finite(Phi, where, "Phi");
  return y;
}

/// ΦᵀΦ, both triangles.
inline Matrix<double> gram_matrix(const Matrix<double>& phi) {
  Matrix<double> gram = Matrix<double>::Zero(phi.cols(), phi.cols());
  gram.selfadjointView<Eigen::Lower>().rankUpdate(phi.transpose());
  gram.triangularView<Eigen::StrictlyUpper>() = gram.transpose();
  return gram;
}

}  // namespace detail

/// A fitted linear classifier on features: decision φ(x)ᵀw + b, label 1 when it is > 0. What
/// RidgeClassifier and ReferenceRidgeClassifier share; their fit() sets w and b.
class LinearClassifier {
 public:
  /// The fitted weights w (one per feature; empty before fit).
  const Vector<double>& weights() const noexcept { return weights_; }
  /// The fitted intercept b.
  double intercept() const noexcept { return intercept_; }

  /// φ(x_i)ᵀw + b for every row of Φ. Throws invalid_argument before fit or when Φ does not
  /// have one column per weight.
  template <typename DP>
  Vector<double> decision_function(const Eigen::MatrixBase<DP>& Phi) const {
    const std::string where = std::string(name_) + "::decision_function";
    detail::require(weights_.size() > 0, where, "the classifier is not fitted");
    detail::require_cols(Phi, weights_.size(), where, "Phi");
    return (Phi.template cast<double>() * weights_).array() + intercept_;
  }

  /// Fraction of rows of Φ whose predicted label (1 when the decision is > 0) matches `labels`
  /// (in {0, 1} or {−1, 1}); the labels and Φ's rows are checked first.
  template <typename DP, typename DL>
  double accuracy(const Eigen::MatrixBase<DP>& Phi, const Eigen::MatrixBase<DL>& labels) const {
    const std::string where = std::string(name_) + "::accuracy";
    const Vector<double> y = detail::signed_labels(labels, where);
    detail::require(Phi.rows() == y.size(), where,
                    "argument 'Phi' has " + std::to_string(Phi.rows()) + " rows, expected " +
                        std::to_string(y.size()) + " (one per label)");
    const Vector<double> f = decision_function(Phi);
    Index correct = 0;
    for (Index i = 0; i < y.size(); ++i) correct += (f(i) > 0.0) == (y(i) > 0.0);
    return static_cast<double>(correct) / static_cast<double>(y.size());
  }

 protected:
  /// An unfitted classifier; `name` ("coulomb::RidgeClassifier") prefixes messages.
  explicit LinearClassifier(const char* name) noexcept : name_(name) {}

  Vector<double> weights_;  ///< w
  double intercept_ = 0.0;  ///< b

 private:
  const char* name_;
};

/// Ridge-regression classifier on features: decision φ(x)ᵀw + b, label 1 when it is > 0.
class RidgeClassifier : public LinearClassifier {
 public:
  /// α > 0: the penalty per sample (the objective is (1/n)‖y − Φw − b‖² + α‖w‖²).
  explicit RidgeClassifier(double alpha = 1e-3)
      : LinearClassifier("coulomb::RidgeClassifier"), alpha_(alpha) {
    detail::require_positive(alpha, "coulomb::RidgeClassifier", "alpha");
  }

  /// The penalty α.
  double alpha() const noexcept { return alpha_; }

  /// Fits on features Φ (n×D) and labels (n entries in {0, 1} or {−1, 1}).
  template <typename DP, typename DL>
  RidgeClassifier& fit(const Eigen::MatrixBase<DP>& Phi, const Eigen::MatrixBase<DL>& labels) {
    const char* where = "coulomb::RidgeClassifier::fit";
    const Vector<double> y = detail::fit_targets(Phi, labels, where);
    Matrix<double> centred = Phi.template cast<double>();
    const RowVector<double> mean = centred.colwise().mean();
    centred.rowwise() -= mean;
    const double y_mean = y.mean();
    const Vector<double> rhs = centred.transpose() * (y.array() - y_mean).matrix();
    weights_ = detail::ridge_solve(detail::gram_matrix(centred), rhs,
                                   static_cast<double>(y.size()) * alpha_, where);
    intercept_ = y_mean - mean.dot(weights_);
    return *this;
  }

 private:
  double alpha_;
};

/// Sinha & Duchi's reference classifier: w = (ΦᵀΦ + λI)⁻¹ Φᵀ(y − ȳ) on uncentred features,
/// decision φ(x)ᵀw + ȳ (label 1 when > 0), λ in absolute units (their example uses 0.05).
class ReferenceRidgeClassifier : public LinearClassifier {
 public:
  /// λ > 0, added to the diagonal of ΦᵀΦ as it is (not multiplied by n).
  explicit ReferenceRidgeClassifier(double lambda = 0.05)
      : LinearClassifier("coulomb::ReferenceRidgeClassifier"), lambda_(lambda) {
    detail::require_positive(lambda, "coulomb::ReferenceRidgeClassifier", "lambda");
  }

  /// The penalty λ. (intercept() is ȳ, the mean of the ±1 training labels.)
  double lambda() const noexcept { return lambda_; }

  /// Fits on features Φ (n×D) and labels (n entries in {0, 1} or {−1, 1}). Throws
  /// invalid_argument for mismatched or non-finite input, numerical_error when ΦᵀΦ + λI is not
  /// positive definite to working precision.
  template <typename DP, typename DL>
  ReferenceRidgeClassifier& fit(const Eigen::MatrixBase<DP>& Phi,
                                const Eigen::MatrixBase<DL>& labels) {
    const char* where = "coulomb::ReferenceRidgeClassifier::fit";
    const Vector<double> y = detail::fit_targets(Phi, labels, where);
    const Matrix<double> phi = Phi.template cast<double>();
    const double y_mean = y.mean();
    const Vector<double> rhs = phi.transpose() * (y.array() - y_mean).matrix();
    weights_ = detail::ridge_solve(detail::gram_matrix(phi), rhs, lambda_, where);
    intercept_ = y_mean;
    return *this;
  }

 private:
  double lambda_;
};

/// A random assignment of n samples to k folds of sizes differing by at most one: entry i is
/// the fold of sample i. Throws invalid_argument unless 2 ≤ k ≤ n.
template <std::uniform_random_bit_generator G>
std::vector<Index> k_fold_assignment(Index n, Index folds, G& rng) {
  detail::require(folds >= 2 && folds <= n, "coulomb::k_fold_assignment",
                  "argument 'folds' must be in [2, n = " + std::to_string(n) + "], got " +
                      std::to_string(folds));
  std::vector<Index> order(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  shuffle(std::span<Index>(order), rng);
  std::vector<Index> fold(static_cast<std::size_t>(n));
  for (Index r = 0; r < n; ++r)
    fold[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])] = r % folds;
  return fold;
}

/// Result of a cross-validation over ridge penalties.
struct RidgeCrossValidation {
  double alpha = 0.0;              ///< the penalty with the best mean held-out accuracy
  double accuracy = 0.0;           ///< its mean held-out accuracy
  std::vector<double> accuracies;  ///< mean held-out accuracy of every candidate penalty
};

/// k-fold cross-validated accuracy of RidgeClassifier for each penalty in `alphas`, on
/// features Φ and labels, with folds from k_fold_assignment. One Gram matrix per fold and one
/// Cholesky factorization per penalty. Ties go to the larger penalty (the simpler model).
template <typename DP, typename DL>
RidgeCrossValidation cross_validate_ridge(const Eigen::MatrixBase<DP>& Phi,
                                          const Eigen::MatrixBase<DL>& labels,
                                          const std::vector<double>& alphas,
                                          const std::vector<Index>& folds) {
  const char* where = "coulomb::cross_validate_ridge";
  const Vector<double> y = detail::signed_labels(labels, where);
  const Index n = y.size();
  detail::require(Phi.rows() == n, where,
                  "argument 'Phi' has " + std::to_string(Phi.rows()) + " rows, expected " +
                      std::to_string(n) + " (one per label)");
  detail::require(static_cast<Index>(folds.size()) == n, where,
                  "argument 'folds' has " + std::to_string(folds.size()) + " entries, expected " +
                      std::to_string(n));
  detail::require(!alphas.empty(), where, "argument 'alphas' is empty");
  for (double a : alphas) detail::require_positive(a, where, "alphas");
  detail::require_finite(Phi, where, "Phi");
  const Index k = *std::max_element(folds.begin(), folds.end()) + 1;
  const Matrix<double> phi = Phi.template cast<double>();

  std::vector<double> correct(alphas.size(), 0.0);
  Matrix<double> train, test, gram;
  for (Index f = 0; f < k; ++f) {
    std::vector<Index> in, out;
    for (Index i = 0; i < n; ++i) (folds[static_cast<std::size_t>(i)] == f ? out : in).push_back(i);
    detail::require(!in.empty() && !out.empty(), where,
                    "fold " + std::to_string(f) + " leaves no training or no held-out samples");
    train = phi(in, Eigen::all);
    test = phi(out, Eigen::all);
    const Vector<double> y_train = y(in);
    const Vector<double> y_test = y(out);
    const RowVector<double> mean = train.colwise().mean();
    train.rowwise() -= mean;
    test.rowwise() -= mean;
    const double y_mean = y_train.mean();
    gram = detail::gram_matrix(train);
    const Vector<double> rhs = train.transpose() * (y_train.array() - y_mean).matrix();
    for (std::size_t a = 0; a < alphas.size(); ++a) {
      const Vector<double> w =
          detail::ridge_solve(gram, rhs, static_cast<double>(in.size()) * alphas[a], where);
      const Vector<double> decision = (test * w).array() + y_mean;
      for (Index i = 0; i < decision.size(); ++i)
        correct[a] += (decision(i) > 0.0) == (y_test(i) > 0.0);
    }
  }
  RidgeCrossValidation result;
  result.accuracies.resize(alphas.size());
  result.accuracy = -1.0;
  for (std::size_t a = 0; a < alphas.size(); ++a) {
    result.accuracies[a] = correct[a] / static_cast<double>(n);
    if (result.accuracies[a] > result.accuracy ||
        (result.accuracies[a] == result.accuracy && alphas[a] > result.alpha)) {
      result.accuracy = result.accuracies[a];
      result.alpha = alphas[a];
    }
  }
  return result;
}

/// A RidgeClassifier fitted on all of Φ with the penalty chosen by cross_validate_ridge.
template <typename DP, typename DL>
RidgeClassifier fit_ridge_cross_validated(const Eigen::MatrixBase<DP>& Phi,
                                          const Eigen::MatrixBase<DL>& labels,
                                          const std::vector<double>& alphas,
                                          const std::vector<Index>& folds) {
  const RidgeCrossValidation cv = cross_validate_ridge(Phi, labels, alphas, folds);
  RidgeClassifier classifier(cv.alpha);
  classifier.fit(Phi, labels);
  return classifier;
}

}  // namespace coulomb
