// SPDX-License-Identifier: MIT
/// @file train/overlap_head.hpp
/// @brief Starting the pair head's overlap features (nn::TextClassifierConfig::pair_overlap)
/// where a logistic regression on them alone ends: their standardization from the training
/// split and, for the classifier's rows that read them, the regression's coefficients.
///
/// Why (docs/results.md, "MRPC: lexical overlap"): on a small paraphrase corpus the overlap of
/// the two sentences' words is the strongest signal there is, and a logistic regression on the
/// six overlap features alone beats the Transformer. Fed to the pair head with the classifier's
/// random initialization, those six inputs get little weight in the few epochs before the
/// encoder's 4·d pooled features overfit (AdamW moves each weight by about the learning rate
/// per step). Starting the classifier from the regression's solution, with the encoder's
/// weights as they are, lets Phase B learn what the encoder adds to it.
///
/// The regression: for the standardized features z_i (with a constant 1 appended) of the n
/// training pairs and labels y_i ∈ [0, C), θ ∈ R^{(K+1)×C} minimizes
///   (1/n) Σ_i −log softmax(z_i θ)_{y_i} + (λ/2)‖θ‖²_F,
/// a strictly convex problem solved by Newton's method with step halving. Its first K rows go
/// to the classifier's rows of the overlap features, its last row to the classifier's bias.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"
#include "../text/overlap.hpp"

namespace coulomb::train {

/// Options of fit_overlap_head.
struct OverlapHeadOptions {
  double l2 = 1e-3;           ///< λ of the regression (> 0, so the solution is unique)
  int max_newton_steps = 50;  ///< most Newton steps (≥ 1)
  /// Stop once the largest entry of the gradient is below this (≥ 0).
  double tolerance = 1e-10;
};

/// What fit_overlap_head found.
struct OverlapHeadFit {
  PairOverlapMoments moments;   ///< the standardization set on the model
  Matrix<double> coefficients;  ///< θ, (K+1) × C: K feature rows, then the bias row
  double loss = 0.0;            ///< the regression's objective at θ on the training split
  double accuracy = 0.0;        ///< the regression's accuracy on the training split
  int newton_steps = 0;         ///< Newton steps taken
};

namespace detail {

// Objective, gradient (vec θ, column-major) and Hessian of the regularized multinomial logistic
// regression; Z is n × (K+1), labels in [0, C).
inline double overlap_objective(const Matrix<double>& Z, const std::vector<int>& labels,
                                const Matrix<double>& theta, double l2, Vector<double>* grad,
                                Matrix<double>* hess, double* accuracy) {
  const Index n = Z.rows();
  const Index P = Z.cols();
  const Index C = theta.cols();
  const Matrix<double> logits = Z * theta;
  double loss = 0.0;
  Index correct = 0;
  Matrix<double> G = Matrix<double>::Zero(P, C);
  if (hess != nullptr) hess->setZero(P * C, P * C);
  Vector<double> p(C);
  for (Index i = 0; i < n; ++i) {
    const double top = logits.row(i).maxCoeff();
    p = (logits.row(i).array() - top).exp().transpose();
    const double total = p.sum();
    p /= total;
    const int y = labels[static_cast<std::size_t>(i)];
    loss -= std::log(p(y));
    Index arg = 0;
    logits.row(i).maxCoeff(&arg);
    if (arg == y) ++correct;
    if (grad != nullptr) {
      Vector<double> r = p;
      r(y) -= 1.0;
      G.noalias() += Z.row(i).transpose() * r.transpose();
    }
    if (hess != nullptr) {
      const Matrix<double> zz = Z.row(i).transpose() * Z.row(i);
      for (Index c = 0; c < C; ++c)
        for (Index e = 0; e < C; ++e) {
          const double w = (c == e ? p(c) : 0.0) - p(c) * p(e);
          hess->block(c * P, e * P, P, P).noalias() += w * zz;
        }
    }
  }
  const double inv_n = 1.0 / static_cast<double>(n);
  if (grad != nullptr) {
    G = G * inv_n + l2 * theta;
    *grad = Eigen::Map<const Vector<double>>(G.data(), P * C);
  }
  if (hess != nullptr) {
    *hess *= inv_n;
    hess->diagonal().array() += l2;
  }
  if (accuracy != nullptr) *accuracy = static_cast<double>(correct) * inv_n;
  return loss * inv_n + 0.5 * l2 * theta.squaredNorm();
}

}  // namespace detail

/// Standardizes `model`'s overlap features by their moments on `train`
/// (TextClassifier::set_overlap_standardization), fits the regression of the file comment on
/// `train`'s standardized overlap features and labels, and writes its coefficients into the
/// classifier: the rows of classifier.weight that read the overlap features (its last K rows)
/// and classifier.bias. Every other parameter is left as it is. Deterministic. Throws
/// invalid_argument when the model has no overlap features or has a pair-head hidden layer
/// (config.pair_hidden > 0: the classifier does not read the features directly), when `train`
/// is not a labelled dataset of pairs with word keys, its labels are outside
/// [0, config.num_classes), or for bad options.
template <RealScalar S, FeatureMap Map>
OverlapHeadFit fit_overlap_head(nn::TextClassifier<S, Map>& model, const EncodedDataset& train,
                                const OverlapHeadOptions& options = {}) {
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
  coulomb::detail::require(std::isfinite(options.l2) && options.l2 > 0.0, where,
                           "argument 'options.l2' must be finite and > 0");
  coulomb::detail::require(options.max_newton_steps >= 1, where,
                           "argument 'options.max_newton_steps' must be at least 1");
  coulomb::detail::require(std::isfinite(options.tolerance) && options.tolerance >= 0.0, where,
                           "argument 'options.tolerance' must be finite and >= 0");
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
  model.set_overlap_standardization(fit.moments.mean, fit.moments.sd);

  const Index K = pair_overlap_features;
  const Index n = train.size();
  Matrix<double> Z(n, K + 1);
  for (Index i = 0; i < n; ++i) {
    for (Index k = 0; k < K; ++k) {
      const double sd = fit.moments.sd(k);
      const double centred = raw(i, k) - fit.moments.mean(k);
      Z(i, k) = sd > 0.0 ? centred / sd : centred;
    }
    Z(i, K) = 1.0;
  }
  Matrix<double> theta = Matrix<double>::Zero(K + 1, C);
  Vector<double> grad;
  Matrix<double> hess;
  double loss =
      detail::overlap_objective(Z, train.labels, theta, options.l2, &grad, &hess, nullptr);
  int steps = 0;
  while (steps < options.max_newton_steps && grad.cwiseAbs().maxCoeff() > options.tolerance) {
    const Vector<double> step = hess.ldlt().solve(grad);
    const Eigen::Map<const Matrix<double>> delta(step.data(), K + 1, C);
    double t = 1.0;
    Matrix<double> next = theta - t * delta;
    double next_loss =
        detail::overlap_objective(Z, train.labels, next, options.l2, nullptr, nullptr, nullptr);
    while (!(next_loss <= loss) && t > 1e-12) {
      t *= 0.5;
      next = theta - t * delta;
      next_loss =
          detail::overlap_objective(Z, train.labels, next, options.l2, nullptr, nullptr, nullptr);
    }
    ++steps;
    if (!(next_loss <= loss)) break;  // no decrease along the Newton direction: at the optimum
    theta = next;
    loss = detail::overlap_objective(Z, train.labels, theta, options.l2, &grad, &hess, nullptr);
  }
  fit.loss = detail::overlap_objective(Z, train.labels, theta, options.l2, nullptr, nullptr,
                                       &fit.accuracy);
  fit.coefficients = theta;
  fit.newton_steps = steps;

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
