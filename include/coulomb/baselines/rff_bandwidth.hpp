// SPDX-License-Identifier: MIT
/// @file baselines/rff_bandwidth.hpp
/// @brief The "fair" fixed-RFF baseline: random Fourier features whose bandwidth σ (and the
/// ridge penalty of the classifier on them, baselines/ridge.hpp) are chosen by k-fold
/// cross-validation on the training data, and the median pairwise distance that scales the
/// grid of candidate bandwidths.
///
/// Badiei Khuzani et al. (2026), §5 compare learned particles with fixed random features, each
/// followed by a linear classifier; a fixed draw is fair only with its bandwidth tuned.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/rff.hpp"
#include "ridge.hpp"

namespace coulomb {

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
