// SPDX-License-Identifier: MIT
/// @file train/evaluation.hpp
/// @brief Batched evaluation of a TextClassifier on an EncodedDataset without dropout: the class
/// probabilities (softmax of the logits) and the metrics of metrics/evaluation.hpp (accuracy,
/// MCC, F1, ECE, log loss, Brier score); and the validation metric that Phase B's early stopping
/// watches. Documented in docs/training.md (section "Evaluation").
///
/// Sharded (EvaluationOptions::collective of P > 1 processes, docs/distributed.md): the
/// dataset's batches are the single-process ones, process r computes the batches
/// shard_range(number of batches, r, P), and one sum over the processes of the n × C
/// probabilities, zero outside each process's rows, gives every process all of them bit for bit
/// (x + 0 = x); the metrics are then those of one process exactly, counts and ECE bins included.
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
#include "collective.hpp"

namespace coulomb::train {

/// Options of the evaluation of a model on a dataset.
struct EvaluationOptions {
  Index batch_size = 128;   ///< sequences per forward pass (≥ 1)
  MetricOptions metrics{};  ///< ECE bins (15), positive class, log-loss floor
  /// The processes that share the forward passes (not owned; nullptr: this process alone). All
  /// of them must evaluate the same model on the same data.
  Collective* collective = nullptr;

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
  /// vocabulary). With options().collective, every process of it must call this at the same
  /// time with the same model and data.
  template <FeatureMap Map>
  requires std::same_as<typename Map::Scalar, S>
  const Matrix<S>& probabilities(nn::TextClassifier<Map>& model, const EncodedDataset& data) {
    coulomb::detail::require(data.size() > 0, "coulomb::train::Evaluator::probabilities",
                             "argument 'data' is empty");
    const Index n = data.size();
    const Index C = model.config().num_classes;
    const Index size = options_.batch_size;
    const bool shared = is_distributed(options_.collective);
    // This process's batches: all of them, or its shard of them (the other rows stay zero).
    const ShardRange mine = shard_range((n + size - 1) / size, options_.collective);
    if (shared)
      probs_.setZero(n, C);
    else
      probs_.resize(n, C);
    indices_.resize(static_cast<std::size_t>(std::min(size, n)));
    for (Index start = mine.begin * size; start < std::min(n, mine.end * size); start += size) {
      const Index count = std::min(size, n - start);
      indices_.resize(static_cast<std::size_t>(count));
      for (Index b = 0; b < count; ++b) indices_[static_cast<std::size_t>(b)] = start + b;
      make_batch(data, std::span<const Index>(indices_), batch_);
      model.infer(batch_, logits_);
      nn::softmax_probabilities(logits_, batch_probs_);
      probs_.middleRows(start, count) = batch_probs_;
    }
    if (shared)
      options_.collective->sum(
          std::span<S>(probs_.data(), static_cast<std::size_t>(probs_.size())));
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
