// SPDX-License-Identifier: MIT
/// @file particles/baselines.hpp
/// @brief What the particle model is compared with downstream: a ridge-regression classifier on
/// random features (the linear classifier of the synthetic experiment), k-fold
/// cross-validation of its penalty, and the cross-validated bandwidth of fixed random Fourier
/// features (the "fair" fixed-RFF baseline).
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
#include <vector>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/rff.hpp"

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

/// φ(x_i)ᵀw + b for every row of Φ (a fitted linear classifier).
template <typename DP>
Vector<double> linear_decision(const Eigen::MatrixBase<DP>& Phi, const Vector<double>& weights,
                               double intercept, std::string_view where) {
  require(weights.size() > 0, where, "the classifier is not fitted");
  require_cols(Phi, weights.size(), where, "Phi");
  return (Phi.template cast<double>() * weights).array() + intercept;
}

/// Fraction of the rows of Φ whose predicted label (1 when `classifier`'s decision is > 0)
/// matches `labels`; the labels and Φ's rows are checked first.
template <typename C, typename DP, typename DL>
double decision_accuracy(const C& classifier, const Eigen::MatrixBase<DP>& Phi,
                         const Eigen::MatrixBase<DL>& labels, std::string_view where) {
  const Vector<double> y = signed_labels(labels, where);
  require(Phi.rows() == y.size(), where,
          "argument 'Phi' has " + std::to_string(Phi.rows()) + " rows, expected " +
              std::to_string(y.size()) + " (one per label)");
  const Vector<double> f = classifier.decision_function(Phi);
  Index correct = 0;
  for (Index i = 0; i < y.size(); ++i) correct += (f(i) > 0.0) == (y(i) > 0.0);
  return static_cast<double>(correct) / static_cast<double>(y.size());
}

}  // namespace detail

/// Ridge-regression classifier on features: decision φ(x)ᵀw + b, label 1 when it is > 0.
class RidgeClassifier {
 public:
  /// α > 0: the penalty per sample (the objective is (1/n)‖y − Φw − b‖² + α‖w‖²).
  explicit RidgeClassifier(double alpha = 1e-3) : alpha_(alpha) {
    detail::require_positive(alpha, "coulomb::RidgeClassifier", "alpha");
  }

  /// The penalty α.
  double alpha() const noexcept { return alpha_; }
  /// The fitted weights w (one per feature; empty before fit).
  const Vector<double>& weights() const noexcept { return weights_; }
  /// The fitted intercept b.
  double intercept() const noexcept { return intercept_; }

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

  /// φ(x_i)ᵀw + b for every row of Φ.
  template <typename DP>
  Vector<double> decision_function(const Eigen::MatrixBase<DP>& Phi) const {
    return detail::linear_decision(Phi, weights_, intercept_,
                                   "coulomb::RidgeClassifier::decision_function");
  }

  /// Fraction of rows of Φ whose predicted label (1 when the decision is > 0) matches `labels`
  /// (in {0, 1} or {−1, 1}).
  template <typename DP, typename DL>
  double accuracy(const Eigen::MatrixBase<DP>& Phi, const Eigen::MatrixBase<DL>& labels) const {
    return detail::decision_accuracy(*this, Phi, labels, "coulomb::RidgeClassifier::accuracy");
  }

 private:
  double alpha_;
  Vector<double> weights_;
  double intercept_ = 0.0;
};

/// Sinha & Duchi's reference classifier: w = (ΦᵀΦ + λI)⁻¹ Φᵀ(y − ȳ) on uncentred features,
/// decision φ(x)ᵀw + ȳ (label 1 when > 0), λ in absolute units (their example uses 0.05).
class ReferenceRidgeClassifier {
 public:
  /// λ > 0, added to the diagonal of ΦᵀΦ as it is (not multiplied by n).
  explicit ReferenceRidgeClassifier(double lambda = 0.05) : lambda_(lambda) {
    detail::require_positive(lambda, "coulomb::ReferenceRidgeClassifier", "lambda");
  }

  /// The penalty λ.
  double lambda() const noexcept { return lambda_; }
  /// The fitted weights w (empty before fit).
  const Vector<double>& weights() const noexcept { return weights_; }
  /// The intercept ȳ, the mean of the ±1 training labels.
  double intercept() const noexcept { return intercept_; }

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

  /// φ(x_i)ᵀw + ȳ for every row of Φ.
  template <typename DP>
  Vector<double> decision_function(const Eigen::MatrixBase<DP>& Phi) const {
    return detail::linear_decision(Phi, weights_, intercept_,
                                   "coulomb::ReferenceRidgeClassifier::decision_function");
  }

  /// Fraction of rows of Φ whose predicted label (1 when the decision is > 0) matches `labels`.
  template <typename DP, typename DL>
  double accuracy(const Eigen::MatrixBase<DP>& Phi, const Eigen::MatrixBase<DL>& labels) const {
    return detail::decision_accuracy(*this, Phi, labels,
                                     "coulomb::ReferenceRidgeClassifier::accuracy");
  }

 private:
  double lambda_;
  Vector<double> weights_;
  double intercept_ = 0.0;
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
  const Index dim = phi.cols();

  std::vector<double> correct(alphas.size(), 0.0);
  Matrix<double> train, test, gram(dim, dim);
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
    gram.setZero();
    gram.selfadjointView<Eigen::Lower>().rankUpdate(train.transpose());
    gram.triangularView<Eigen::StrictlyUpper>() = gram.transpose();
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

/// Median Euclidean distance between rows of X over at most `max_pairs` random pairs of
/// distinct rows: the usual scale for a grid of Gaussian bandwidths.
template <typename D, std::uniform_random_bit_generator G>
double median_pairwise_distance(const Eigen::MatrixBase<D>& X, Index max_pairs, G& rng) {
  const char* where = "coulomb::median_pairwise_distance";
  detail::require(X.rows() >= 2, where, "argument 'X' needs at least 2 rows");
  detail::require(max_pairs >= 1, where, "argument 'max_pairs' must be at least 1");
  std::vector<double> distances(static_cast<std::size_t>(max_pairs));
  const auto n = static_cast<std::uint64_t>(X.rows());
  for (auto& dist : distances) {
    const auto i = static_cast<Index>(uniform_index(n, rng));
    auto j = static_cast<Index>(uniform_index(n - 1, rng));
    if (j >= i) ++j;
    dist = (X.row(i) - X.row(j)).template cast<double>().norm();
  }
  auto mid = distances.begin() + static_cast<std::ptrdiff_t>(distances.size() / 2);
  std::nth_element(distances.begin(), mid, distances.end());
  return *mid;
}

/// Random Fourier features (1/√m)[cos Ωx, sin Ωx] for given frequencies Ω (m×d), in the scalar
/// type of Ω (X is cast to it): the features every method of the synthetic experiment hands to
/// the classifier. Float is much faster (Eigen 3.4 vectorizes sin and cos for float only) and
/// accurate enough for a classifier.
template <typename DO, typename DX>
Matrix<typename DO::Scalar> fourier_features(const Eigen::MatrixBase<DO>& omega,
                                             const Eigen::MatrixBase<DX>& X) {
  using Scalar = typename DO::Scalar;
  const RffCosSin<Scalar> map(omega.derived().eval(), Vector<Scalar>());
  return map.map(X.template cast<Scalar>());
}

/// Result of select_rff_bandwidth.
struct BandwidthSelection {
  double bandwidth = 0.0;     ///< σ with the best cross-validated accuracy
  double alpha = 0.0;         ///< the ridge penalty chosen with it
  double accuracy = 0.0;      ///< its mean held-out accuracy
  Matrix<double> accuracies;  ///< mean held-out accuracy, bandwidths × alphas
};

/// Chooses the bandwidth σ of fixed random Fourier features (and the ridge penalty) by k-fold
/// cross-validation of RidgeClassifier on the training data: one standard Gaussian draw Ω₀ of
/// `num_particles` frequencies (common to all candidates, so that they differ only by σ), the
/// features of Ω₀/σ for each candidate σ (in the scalar type of X), and cross_validate_ridge over
/// `alphas`. Ties go to the first candidate.
template <typename DX, typename DL, std::uniform_random_bit_generator G>
BandwidthSelection select_rff_bandwidth(const Eigen::MatrixBase<DX>& X,
                                        const Eigen::MatrixBase<DL>& labels,
                                        const std::vector<double>& bandwidths,
                                        const std::vector<double>& alphas, Index num_particles,
                                        const std::vector<Index>& folds, G& rng) {
  const char* where = "coulomb::select_rff_bandwidth";
  detail::require(!bandwidths.empty(), where, "argument 'bandwidths' is empty");
  for (double b : bandwidths) detail::require_positive(b, where, "bandwidths");
  detail::require(num_particles >= 1, where, "argument 'num_particles' must be at least 1");
  using Scalar = typename DX::Scalar;
  Matrix<Scalar> standard(num_particles, X.cols());
  fill_standard_normal(standard, rng);
  BandwidthSelection best;
  best.accuracy = -1.0;
  best.accuracies.resize(static_cast<Index>(bandwidths.size()), static_cast<Index>(alphas.size()));
  for (std::size_t b = 0; b < bandwidths.size(); ++b) {
    const Matrix<Scalar> phi =
        fourier_features((standard / static_cast<Scalar>(bandwidths[b])).eval(), X);
    const RidgeCrossValidation cv = cross_validate_ridge(phi, labels, alphas, folds);
    for (std::size_t a = 0; a < alphas.size(); ++a)
      best.accuracies(static_cast<Index>(b), static_cast<Index>(a)) = cv.accuracies[a];
    if (cv.accuracy > best.accuracy) {
      best.accuracy = cv.accuracy;
      best.bandwidth = bandwidths[b];
      best.alpha = cv.alpha;
    }
  }
  return best;
}

}  // namespace coulomb
