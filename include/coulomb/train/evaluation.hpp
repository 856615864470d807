// SPDX-License-Identifier: MIT
/// @file train/evaluation.hpp
/// @brief Batched evaluation of a TextClassifier on an EncodedDataset without dropout: the class
/// probabilities (softmax of the logits) and the metrics of metrics/evaluation.hpp (accuracy,
/// MCC, F1, ECE, log loss, Brier score); and the validation metric that Phase B's early stopping
/// watches. Documented in docs/training.md (section "Evaluation").
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "../metrics/evaluation.hpp"
#include "../nn/loss.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"

namespace coulomb::train {

/// Options of the evaluation of a model on a dataset.
struct EvaluationOptions {
  Index batch_size = 128;   ///< sequences per forward pass (≥ 1)
  MetricOptions metrics{};  ///< ECE bins (15), positive class, log-loss floor

  /// Throws invalid_argument unless batch_size ≥ 1 and metrics.num_bins ≥ 1.
  void validate() const {
    const char* where = "coulomb::train::EvaluationOptions";
    coulomb::detail::require(
        batch_size >= 1, where,
        "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
    coulomb::detail::require(
        metrics.num_bins >= 1, where,
        "argument 'metrics.num_bins' must be at least 1, got " + std::to_string(metrics.num_bins));
  }
};

/// The result of evaluating a model on a labelled dataset.
struct Evaluation {
  ClassificationMetrics metrics{};  ///< accuracy, MCC, F1, ECE, log loss, Brier score
  double seconds = 0.0;             ///< wall time of the forward passes and the metrics
  Index tokens = 0;                 ///< tokens of the dataset (padding excluded)
};

/// Batched evaluation of a TextClassifier without dropout. Keeps its buffers (batch, logits,
/// probabilities) between calls, so evaluating every epoch allocates little. One evaluator per
/// thread of control.
template <RealScalar S>
class Evaluator {
 public:
  /// An evaluator with the given options. Throws invalid_argument for invalid ones.
  explicit Evaluator(EvaluationOptions options = {}) : options_(options) { options_.validate(); }

  /// The options.
  const EvaluationOptions& options() const noexcept { return options_; }

  /// The predicted class probabilities of `model` for every sequence of `data`: an n × C
  /// matrix whose row i is the softmax of the logits of sequence i (dataset order). The
  /// reference stays valid until the next call. Runs evaluation forwards (no dropout), which
  /// replace the state a backward would use. Throws invalid_argument for an empty dataset and
  /// as the model's forward (a sequence longer than config.max_length, an id outside the
  /// vocabulary).
  template <FeatureMap Map>
  requires std::same_as<typename Map::Scalar, S>
  const Matrix<S>& probabilities(nn::TextClassifier<Map>& model, const EncodedDataset& data) {
    coulomb::detail::require(data.size() > 0, "coulomb::train::Evaluator::probabilities",
                             "argument 'data' is empty");
    const Index n = data.size();
    const Index C = model.config().num_classes;
    probs_.resize(n, C);
    indices_.resize(static_cast<std::size_t>(std::min(options_.batch_size, n)));
    for (Index start = 0; start < n; start += options_.batch_size) {
      const Index count = std::min(options_.batch_size, n - start);
      indices_.resize(static_cast<std::size_t>(count));
      for (Index b = 0; b < count; ++b) indices_[static_cast<std::size_t>(b)] = start + b;
      make_batch(data, std::span<const Index>(indices_), batch_);
      model.forward(batch_, logits_);
      nn::softmax_probabilities(logits_, batch_probs_);
      probs_.middleRows(start, count) = batch_probs_;
    }
    return probs_;
  }

  /// The metrics of `model` on the labelled dataset `data` (see probabilities()). Throws
  /// invalid_argument also when a label is outside [0, C) (an unlabelled dataset).
  template <FeatureMap Map>
  requires std::same_as<typename Map::Scalar, S> Evaluation evaluate(nn::TextClassifier<Map>& model,
                                                                     const EncodedDataset& data) {
    const auto start = std::chrono::steady_clock::now();
    const Matrix<S>& p = probabilities(model, data);
    Evaluation e;
    e.metrics = evaluate_classification(p, std::span<const int>(data.labels), options_.metrics);
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    e.tokens = static_cast<Index>(data.ids.size());
    return e;
  }

 private:
  EvaluationOptions options_;
  TokenBatch batch_;
  std::vector<Index> indices_;
  Matrix<S> logits_, batch_probs_, probs_;
};

/// The class probabilities of `model` on `data` (see Evaluator::probabilities), as a new matrix.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
Matrix<S> predict_probabilities(nn::TextClassifier<Map>& model, const EncodedDataset& data,
                                const EvaluationOptions& options = {}) {
  Evaluator<S> evaluator(options);
  return evaluator.probabilities(model, data);
}

/// The metrics of `model` on the labelled dataset `data` (see Evaluator::evaluate).
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
Evaluation evaluate_model(nn::TextClassifier<Map>& model, const EncodedDataset& data,
                          const EvaluationOptions& options = {}) {
  Evaluator<S> evaluator(options);
  return evaluator.evaluate(model, data);
}

/// The validation metric that early stopping watches.
enum class ValidationMetric {
  accuracy,  ///< larger is better
  mcc,       ///< Matthews correlation, larger is better
  f1,        ///< F1 of the positive class (macro F1 for C > 2), larger is better
  log_loss,  ///< mean negative log-likelihood, smaller is better
};

/// The name of a validation metric: "accuracy", "mcc", "f1" or "log_loss".
inline const char* to_string(ValidationMetric metric) noexcept {
  switch (metric) {
    case ValidationMetric::accuracy:
      return "accuracy";
    case ValidationMetric::mcc:
      return "mcc";
    case ValidationMetric::f1:
      return "f1";
    case ValidationMetric::log_loss:
      return "log_loss";
  }
  return "unknown";
}

/// The value of `metric` in `m`.
inline double metric_value(const ClassificationMetrics& m, ValidationMetric metric) noexcept {
  switch (metric) {
    case ValidationMetric::accuracy:
      return m.accuracy;
    case ValidationMetric::mcc:
      return m.mcc;
    case ValidationMetric::f1:
      return m.f1;
    case ValidationMetric::log_loss:
      return m.log_loss;
  }
  return m.accuracy;
}

}  // namespace coulomb::train
