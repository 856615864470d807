// SPDX-License-Identifier: MIT
/// @file train/overlap_head.hpp
/// @brief Starts the pair head's overlap features (nn::TextClassifierConfig::pair_overlap)
/// where a logistic regression on them alone ends (baselines/logistic_regression.hpp): their
/// standardization from the training split and, for the classifier's rows that read them, the
/// regression's coefficients, so that Phase B learns what the encoder adds to that baseline.
/// Why, and what it changes on MRPC: docs/training.md (section "The overlap head").
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../baselines/logistic_regression.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"
#include "../text/overlap.hpp"

namespace coulomb::train {

/// What fit_overlap_head found.
struct OverlapHeadFit {
  PairOverlapMoments moments;        ///< the standardization set on the model
  LogisticRegressionFit regression;  ///< θ, (K+1) × C: K feature rows, then the bias row
};

/// Standardizes `model`'s overlap features by their moments on `train`
/// (TextClassifier::set_overlap_standardization), fits fit_logistic_regression on `train`'s
/// standardized overlap features (and a constant) and labels, and writes its coefficients into the
/// classifier: the rows of classifier.weight that read the overlap features (its last K rows)
/// and classifier.bias. Every other parameter is left as it is. Deterministic. Throws
/// invalid_argument when the model has no overlap features or has a pair-head hidden layer
/// (config.pair_hidden > 0: the classifier does not read the features directly), when `train`
/// is not a labelled dataset of pairs with word keys, its labels are outside
/// [0, config.num_classes), or for bad options.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
OverlapHeadFit fit_overlap_head(nn::TextClassifier<Map>& model, const EncodedDataset& train,
                                const LogisticRegressionOptions& options = {}) {
  const char* where = "coulomb::train::fit_overlap_head";
  const nn::TextClassifierConfig& config = model.config();
  if (!config.pair_overlap)
    coulomb::detail::throw_invalid(where,
                                   "the model has no overlap features (config.pair_overlap)");
  if (config.pair_hidden != 0)
    coulomb::detail::throw_invalid(
        where, "the model's pair head has a hidden layer (config.pair_hidden = " +
                   std::to_string(config.pair_hidden) +
                   "), so its classifier does not read the overlap features directly");
  options.validate();
  const Index C = config.num_classes;
  for (Index i = 0; i < train.size(); ++i) {
    const int y = train.labels[static_cast<std::size_t>(i)];
    if (!(y >= 0 && y < C))
      coulomb::detail::throw_invalid(where, "sequence " + std::to_string(i) + " has label " +
                                                std::to_string(y) + ", outside [0, " +
                                                std::to_string(C) + ")");
  }
  // The features of every pair, computed once for the moments and the design matrix (the
  // table's checks: pairs, keys, non-empty).
  const Eigen::ArrayXXd raw = coulomb::detail::pair_overlap_table(train, where);
  OverlapHeadFit fit;
  fit.moments = coulomb::detail::column_moments(raw);

  const Index K = pair_overlap_features;
  const Index n = train.size();
  Matrix<double> Z(n, K + 1);  // the standardized features and a constant
  for (Index i = 0; i < n; ++i) {
    for (Index k = 0; k < K; ++k) {
      const double sd = fit.moments.sd(k);
      const double centred = raw(i, k) - fit.moments.mean(k);
      Z(i, k) = sd > 0.0 ? centred / sd : centred;
    }
    Z(i, K) = 1.0;
  }
  fit.regression = fit_logistic_regression(Z, std::span<const int>(train.labels), C, options);
  model.set_overlap_standardization(fit.moments.mean, fit.moments.sd);
  const Matrix<double>& theta = fit.regression.coefficients;
  for (auto& p : model.parameters()) {
    if (p.name == "classifier.weight") {
      p.value->bottomRows(K) = theta.topRows(K).template cast<S>();
    } else if (p.name == "classifier.bias") {
      *p.value = theta.row(K).transpose().template cast<S>();
    }
  }
  return fit;
}

}  // namespace coulomb::train
