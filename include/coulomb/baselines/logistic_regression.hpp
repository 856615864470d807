// SPDX-License-Identifier: MIT
/// @file baselines/logistic_regression.hpp
/// @brief Multinomial logistic regression with an L2 penalty, solved by Newton's method: a
/// linear classifier on fixed features (for example the lexical overlap of sentence pairs,
/// which train::fit_overlap_head uses to start the pair head).
///
/// For the rows z_i ∈ R^P of a design matrix Z (append a constant column for an intercept) and
/// labels y_i ∈ [0, C), θ ∈ R^{P×C} minimizes
///   L(θ) = (1/n) Σ_i −log softmax(z_i θ)_{y_i} + (λ/2)‖θ‖²_F,
/// which is strictly convex for λ > 0. Newton's method with step halving: the gradient is
/// (1/n) Σ_i z_iᵀ(p_i − e_{y_i}) + λθ and the Hessian (1/n) Σ_i (diag p_i − p_i p_iᵀ) ⊗ z_iᵀz_i
/// + λI, with θ flattened column by column (class c's coefficients are entries c·P … c·P + P − 1).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb {

/// Options of fit_logistic_regression.
struct LogisticRegressionOptions {
  double l2 = 1e-3;           ///< λ (> 0, so that the solution is unique)
  int max_newton_steps = 50;  ///< most Newton steps (≥ 1)
  /// Stop once the largest entry of the gradient is below this (≥ 0).
  double tolerance = 1e-10;

  /// Throws invalid_argument, naming the field, unless every field is valid.
  void validate() const {
    const char* where = "coulomb::LogisticRegressionOptions";
    detail::require(std::isfinite(l2) && l2 > 0.0, where,
                    "argument 'l2' must be finite and > 0, got " + std::to_string(l2));
    detail::require(
        max_newton_steps >= 1, where,
        "argument 'max_newton_steps' must be at least 1, got " + std::to_string(max_newton_steps));
    detail::require(
        std::isfinite(tolerance) && tolerance >= 0.0, where,
        "argument 'tolerance' must be finite and >= 0, got " + std::to_string(tolerance));
  }
};

/// What fit_logistic_regression found.
struct LogisticRegressionFit {
  Matrix<double> coefficients;  ///< θ, P × C
  double loss = 0.0;            ///< L(θ) on the training rows
  double accuracy = 0.0;        ///< fraction of training rows whose largest logit is their label
  int newton_steps = 0;         ///< Newton steps taken
};

/// L(θ) of the file comment for design matrix Z (n × P), labels in [0, C) and θ (P × C); with
/// non-null pointers also its gradient (P·C entries, θ flattened column by column), its Hessian
/// (P·C × P·C) and the training accuracy of θ. The labels are not checked.
inline double logistic_regression_objective(const Matrix<double>& Z, std::span<const int> labels,
                                            const Matrix<double>& theta, double l2,
                                            Vector<double>* grad = nullptr,
                                            Matrix<double>* hess = nullptr,
                                            double* accuracy = nullptr) {
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

/// Fits the regression of the file comment on design matrix Z (n × P, finite) and `labels`
/// (n entries in [0, num_classes)), starting from θ = 0. Deterministic. Throws invalid_argument
/// for invalid options, an empty or non-finite Z, labels that do not match its rows or lie
/// outside [0, num_classes), or num_classes < 2.
inline LogisticRegressionFit fit_logistic_regression(
    const Matrix<double>& Z, std::span<const int> labels, Index num_classes,
    const LogisticRegressionOptions& options = {}) {
  const char* where = "coulomb::fit_logistic_regression";
  options.validate();
  detail::require(num_classes >= 2, where,
                  "argument 'num_classes' must be at least 2, got " + std::to_string(num_classes));
  detail::require(Z.rows() >= 1 && Z.cols() >= 1, where, "argument 'Z' is empty");
  detail::require(static_cast<Index>(labels.size()) == Z.rows(), where,
                  "argument 'labels' has " + std::to_string(labels.size()) +
                      " entries, expected one per row of Z (" + std::to_string(Z.rows()) + ")");
  detail::require_finite(Z, where, "Z");
  for (std::size_t i = 0; i < labels.size(); ++i)
    detail::require(labels[i] >= 0 && labels[i] < num_classes, where,
                    "argument 'labels' has " + std::to_string(labels[i]) + " at index " +
                        std::to_string(i) + ", outside [0, " + std::to_string(num_classes) + ")");

  const Index P = Z.cols();
  const Index C = num_classes;
  Matrix<double> theta = Matrix<double>::Zero(P, C);
  Vector<double> grad;
  Matrix<double> hess;
  double loss = logistic_regression_objective(Z, labels, theta, options.l2, &grad, &hess);
  int steps = 0;
  while (steps < options.max_newton_steps && grad.cwiseAbs().maxCoeff() > options.tolerance) {
    const Vector<double> step = hess.ldlt().solve(grad);
    const Eigen::Map<const Matrix<double>> delta(step.data(), P, C);
    double t = 1.0;
    Matrix<double> next = theta - t * delta;
    double next_loss = logistic_regression_objective(Z, labels, next, options.l2);
    while (!(next_loss <= loss) && t > 1e-12) {
      t *= 0.5;
      next = theta - t * delta;
      next_loss = logistic_regression_objective(Z, labels, next, options.l2);
    }
    ++steps;
    if (!(next_loss <= loss)) break;  // no decrease along the Newton direction: at the optimum
    theta = next;
    loss = logistic_regression_objective(Z, labels, theta, options.l2, &grad, &hess);
  }
  LogisticRegressionFit fit;
  fit.loss =
      logistic_regression_objective(Z, labels, theta, options.l2, nullptr, nullptr, &fit.accuracy);
  fit.coefficients = std::move(theta);
  fit.newton_steps = steps;
  return fit;
}

}  // namespace coulomb
