// SPDX-License-Identifier: MIT
/// @file train/phase_b.hpp
/// @brief Phase B of the paper's text experiments (Badiei Khuzani et al., 2026, §4): with the
/// feature parameters Ω frozen, every other parameter of a TextClassifier is trained with
/// cross-entropy by AdamW, a warm-up + decay schedule and gradient clipping; the model is
/// evaluated on a validation set after every epoch, training stops early when the validation
/// metric stops improving, and the parameters of the best epoch are restored. Also the batched
/// evaluation of a model on an EncodedDataset (class probabilities and the metrics of
/// metrics/evaluation.hpp). Documented in docs/training.md (sections "Evaluation" and "Phase B").
///
/// One optimization step on a batch of B sequences with labels y_b:
///
///     logits = model(batch, dropout on)             loss = −(1/B) Σ_b log softmax(logits_b)[y_b]
///     g = ∂loss/∂θ for every trainable θ            (a frozen Ω gets no gradient)
///     g ← g · min(1, c/‖g‖)                         (global-norm clipping, c = clip_norm)
///     θ ← AdamW(θ, g, η_t)                          (η_t: linear warm-up, then linear/cosine
///     decay)
///
/// Reproducible: the batches are shuffled by Batcher with a seed drawn from Rng(options.seed),
/// the dropout masks come from another sub-stream of it, and nothing else is random, so the
/// same model, data, options and thread count give the same bits.
///
/// Checkpoints (options.checkpoint, train/resume.hpp): every N steps and/or at the end of every
/// epoch, the parameters, the AdamW state, the early-stopping state, the history, the position
/// in the epoch's batch order and the dropout generator are written atomically; a run resumed
/// from any checkpoint ends with the bits of the uninterrupted run (docs/training.md, section
/// "Checkpoints and resuming").
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../io/model_file.hpp"
#include "../io/parameters.hpp"
#include "../metrics/evaluation.hpp"
#include "../nn/loss.hpp"
#include "../nn/parameter.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"
#include "adamw.hpp"
#include "checkpoint.hpp"
#include "early_stopping.hpp"
#include "gradients.hpp"
#include "progress.hpp"
#include "resume.hpp"
#include "schedule.hpp"

namespace coulomb::train {

// ---- evaluation -------------------------------------------------------------------------------

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
  const Matrix<S>& probabilities(nn::TextClassifier<S, Map>& model, const EncodedDataset& data) {
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
  Evaluation evaluate(nn::TextClassifier<S, Map>& model, const EncodedDataset& data) {
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
template <RealScalar S, FeatureMap Map>
Matrix<S> predict_probabilities(nn::TextClassifier<S, Map>& model, const EncodedDataset& data,
                                const EvaluationOptions& options = {}) {
  Evaluator<S> evaluator(options);
  return evaluator.probabilities(model, data);
}

/// The metrics of `model` on the labelled dataset `data` (see Evaluator::evaluate).
template <RealScalar S, FeatureMap Map>
Evaluation evaluate_model(nn::TextClassifier<S, Map>& model, const EncodedDataset& data,
                          const EvaluationOptions& options = {}) {
  Evaluator<S> evaluator(options);
  return evaluator.evaluate(model, data);
}

// ---- Phase B ----------------------------------------------------------------------------------

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

/// Options of Phase B (train_phase_b).
struct PhaseBOptions {
  Index epochs = 10;                 ///< passes over the training set (≥ 1)
  Index batch_size = 32;             ///< sequences per step (≥ 1)
  double learning_rate = 1e-3;       ///< peak rate η of AdamW (> 0)
  double final_learning_rate = 0.0;  ///< rate at the end of the decay, in [0, learning_rate]
  double weight_decay = 0.01;        ///< decoupled weight decay λ ≥ 0 (weights and embeddings)
  double beta1 = 0.9;                ///< AdamW β₁ ∈ [0, 1)
  double beta2 = 0.999;              ///< AdamW β₂ ∈ [0, 1)
  double warmup_fraction = 0.1;      ///< warm-up length as a fraction of the total steps, [0, 1]
  Index warmup_steps = -1;           ///< warm-up length in steps; ≥ 0 overrides warmup_fraction
  Decay decay = Decay::linear;       ///< decay after the warm-up, over the total steps
  double clip_norm = 1.0;            ///< global gradient-norm bound c (0: no clipping)
  Index patience = 2;                ///< epochs without improvement before stopping (0: never)
  double min_delta = 0.0;            ///< least improvement of the metric that counts (≥ 0)
  ValidationMetric metric = ValidationMetric::accuracy;  ///< what early stopping watches
  bool restore_best = true;              ///< end with the parameters of the best validation epoch
  Index max_steps = 0;                   ///< stop after this many steps in all (0: no limit)
  Index pad_to = 0;                      ///< pad every batch to this length (0: longest in batch)
  Index eval_batch_size = 128;           ///< sequences per evaluation forward (≥ 1)
  std::uint64_t seed = 0;                ///< seeds the batch order and the dropout masks
  ProgressReporter* progress = nullptr;  ///< step progress (not owned; finished at the end)
  /// What the progress messages call the `validation` set of train_phase_b (for example
  /// "development" when it is held out from the training split).
  std::string validation_name = "validation";
  CheckpointOptions checkpoint{};  ///< checkpoints and resuming (default: none)

  /// Throws invalid_argument, naming the field, unless every field is valid.
  void validate() const {
    const char* where = "coulomb::train::PhaseBOptions";
    checkpoint.validate();
    using coulomb::detail::require;
    require(epochs >= 1, where,
            "argument 'epochs' must be at least 1, got " + std::to_string(epochs));
    require(batch_size >= 1, where,
            "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
    coulomb::detail::require_positive(learning_rate, where, "learning_rate");
    require(final_learning_rate >= 0.0 && final_learning_rate <= learning_rate, where,
            "argument 'final_learning_rate' must be in [0, learning_rate], got " +
                std::to_string(final_learning_rate));
    require(weight_decay >= 0.0 && std::isfinite(weight_decay), where,
            "argument 'weight_decay' must be finite and >= 0, got " + std::to_string(weight_decay));
    require(beta1 >= 0.0 && beta1 < 1.0, where,
            "argument 'beta1' must be in [0, 1), got " + std::to_string(beta1));
    require(beta2 >= 0.0 && beta2 < 1.0, where,
            "argument 'beta2' must be in [0, 1), got " + std::to_string(beta2));
    require(warmup_fraction >= 0.0 && warmup_fraction <= 1.0, where,
            "argument 'warmup_fraction' must be in [0, 1], got " + std::to_string(warmup_fraction));
    require(clip_norm >= 0.0 && std::isfinite(clip_norm), where,
            "argument 'clip_norm' must be finite and >= 0 (0: no clipping), got " +
                std::to_string(clip_norm));
    require(
        patience >= 0, where,
        "argument 'patience' must be >= 0 (0: no early stopping), got " + std::to_string(patience));
    require(min_delta >= 0.0 && std::isfinite(min_delta), where,
            "argument 'min_delta' must be finite and >= 0, got " + std::to_string(min_delta));
    require(max_steps >= 0, where,
            "argument 'max_steps' must be >= 0 (0: no limit), got " + std::to_string(max_steps));
    require(pad_to >= 0, where,
            "argument 'pad_to' must be >= 0 (0: longest in batch), got " + std::to_string(pad_to));
    require(
        eval_batch_size >= 1, where,
        "argument 'eval_batch_size' must be at least 1, got " + std::to_string(eval_batch_size));
  }
};

/// What one epoch of Phase B did.
struct EpochRecord {
  Index epoch = 0;             ///< 0-based
  Index steps = 0;             ///< optimizer steps in this epoch
  double train_loss = 0.0;     ///< mean training loss of its steps
  double learning_rate = 0.0;  ///< rate of its last step
  double validation_accuracy = std::numeric_limits<double>::quiet_NaN();  ///< NaN: none
  double validation_loss = std::numeric_limits<double>::quiet_NaN();      ///< log loss
  double validation_metric = std::numeric_limits<double>::quiet_NaN();    ///< early stopping's
  bool improved = false;  ///< the epoch became the best so far
  /// Training tokens of the epoch (padding excluded) per second of its optimizer steps. An
  /// epoch resumed from a checkpoint adds the time its earlier sessions took up to that
  /// checkpoint, so its tokens and its seconds cover the same steps.
  double tokens_per_second = 0.0;
  double seconds = 0.0;  ///< wall time of the epoch, evaluation included (every session)
};

/// What Phase B did: one record per epoch and the totals.
struct PhaseBHistory {
  std::vector<EpochRecord> epochs{};  ///< in order
  Index best_epoch = -1;              ///< epoch whose parameters the model holds (−1: the last)
  double best_metric = std::numeric_limits<double>::quiet_NaN();  ///< its validation metric
  Index steps = 0;                                                ///< optimizer steps in all
  Index tokens = 0;      ///< training tokens processed (padding excluded)
  double seconds = 0.0;  ///< wall time (every session of a resumed run)
  /// Wall time of the optimizer steps alone: the sum of the epochs' tokens / tokens_per_second.
  double train_seconds = 0.0;
  bool stopped_early = false;      ///< early stopping ended the run
  bool reached_max_steps = false;  ///< options.max_steps ended the run

  /// Training tokens per second over the optimizer steps (0 before any step).
  double tokens_per_second() const noexcept {
    return train_seconds > 0.0 ? static_cast<double>(tokens) / train_seconds : 0.0;
  }
};

namespace detail {

/// One Phase B optimizer step after another on a model: forward with dropout, cross-entropy,
/// backward, finiteness check, clipping, AdamW. Holds the optimizer, the schedule, the parameter
/// list and the buffers; the model must outlive it and keep its parameter list.
template <RealScalar S, FeatureMap Map>
class PhaseBStepper {
 public:
  PhaseBStepper(nn::TextClassifier<S, Map>& model, const PhaseBOptions& options, Index total_steps,
                Rng dropout_rng)
      : model_(&model),
        params_(model.parameters()),
        adamw_(AdamWOptions{options.beta1, options.beta2, 1e-8, options.weight_decay, false}),
        clip_norm_(options.clip_norm),
        dropout_rng_(dropout_rng) {
    const Index total = std::max<Index>(total_steps, 1);
    const Index warmup = options.warmup_steps >= 0
                             ? std::min(options.warmup_steps, total)
                             : static_cast<Index>(std::llround(options.warmup_fraction *
                                                               static_cast<double>(total)));
    schedule_ = LearningRateSchedule{options.learning_rate, options.final_learning_rate, warmup,
                                     total, options.decay};
    schedule_.validate();
  }

  /// Optimizer steps taken.
  Index steps() const noexcept { return static_cast<Index>(adamw_.step_count()); }
  /// The rate of the next step.
  double next_learning_rate() const { return schedule_(steps()); }
  /// The parameter list (as of construction).
  const nn::ParameterList<S>& parameters() const noexcept { return params_; }
  /// The optimizer (its state goes into checkpoints).
  AdamW<S>& optimizer() noexcept { return adamw_; }
  /// The generator of the dropout masks (its state goes into checkpoints).
  Rng& dropout_rng() noexcept { return dropout_rng_; }

  /// One step on `batch`; returns its loss. Throws numerical_error naming the step and, when
  /// one is to blame, the parameter, leaving the parameters as they were before the step.
  double step(const TokenBatch& batch) {
    const char* where = "coulomb::train::train_phase_b";
    const std::int64_t t = adamw_.step_count() + 1;
    try {
      model_->forward(batch, logits_, true, dropout_rng_);
    } catch (const coulomb::invalid_argument& e) {
      // The attention refuses non-finite queries, keys or values: report it as a divergence.
      if (std::string_view(e.what()).find("non-finite") == std::string_view::npos) throw;
      overflow(t, where, e.what());
    }
    if (!coulomb::detail::all_finite(logits_)) overflow(t, where, "the logits are not finite");
    const S loss = nn::softmax_cross_entropy(logits_, std::span<const int>(batch.labels), dlogits_);
    if (!std::isfinite(static_cast<double>(loss))) overflow(t, where, "the loss is not finite");
    model_->zero_grad();
    model_->backward(dlogits_);
    if (clip_norm_ > 0.0) {
      // The global norm is accumulated in double, where the squares of float gradients cannot
      // overflow: it is finite exactly when every gradient is, so it also serves as their
      // finiteness check (one pass over the gradients instead of two). When it is not finite,
      // require_finite_parameters names the parameter; finite gradients whose squares overflow
      // (double only) make clip_gradient_norm throw as before.
      const double norm = global_gradient_norm(params_);
      if (!std::isfinite(norm)) {
        require_finite_parameters(params_, t, FiniteCheck::gradients);
        clip_gradient_norm(params_, clip_norm_);
      }
      detail::scale_gradients_to(params_, norm, clip_norm_);
    } else {
      require_finite_parameters(params_, t, FiniteCheck::gradients);
    }
    adamw_.step(params_, schedule_(steps()));
    return static_cast<double>(loss);
  }

 private:
  /// Names a non-finite parameter value if there is one (numerical_error from
  /// require_finite_parameters), else reports `what` at step t.
  [[noreturn]] void overflow(std::int64_t t, const char* where, const std::string& what) {
    require_finite_parameters(params_, t, FiniteCheck::values);
    std::ostringstream os;
    os << where << ": step " << t << ": " << what
       << " although every parameter is finite (the values grew too large: lower the learning "
          "rate or clip the gradients)";
    throw numerical_error(os.str());
  }

  nn::TextClassifier<S, Map>* model_;
  nn::ParameterList<S> params_;
  AdamW<S> adamw_;
  LearningRateSchedule schedule_;
  double clip_norm_;
  Rng dropout_rng_;
  Matrix<S> logits_, dlogits_;
};

/// Sum of the lengths of a batch's sequences.
inline Index batch_tokens(const TokenBatch& batch) {
  Index n = 0;
  for (const Index len : batch.lengths) n += len;
  return n;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- checkpoints (train/resume.hpp)
// --------------------------------------------------------------

/// The run a Phase B run is part of (Phase A's warm-up), for its checkpoints: the kind and
/// stage written, and what the outer run adds to every checkpoint (its stage and fingerprint).
template <RealScalar S>
struct PhaseBCheckpointContext {
  std::string_view kind = "phase_b";   ///< "checkpoint.kind" written and required
  std::string_view stage = "running";  ///< the stage reported to the observer while training
  std::function<void(io::ModelFile<S>&)> add{};  ///< adds the outer run's state
};

/// Adds every option of `o` that changes the result to `f` under `prefix` (not the progress
/// reporter, not the checkpoint options).
inline void add_phase_b_fingerprint(RunFingerprint& f, const PhaseBOptions& o,
                                    const std::string& prefix) {
  f.add_integer(prefix + "epochs", o.epochs);
  f.add_integer(prefix + "batch_size", o.batch_size);
  f.add_double(prefix + "learning_rate", o.learning_rate);
  f.add_double(prefix + "final_learning_rate", o.final_learning_rate);
  f.add_double(prefix + "weight_decay", o.weight_decay);
  f.add_double(prefix + "beta1", o.beta1);
  f.add_double(prefix + "beta2", o.beta2);
  f.add_double(prefix + "warmup_fraction", o.warmup_fraction);
  f.add_integer(prefix + "warmup_steps", o.warmup_steps);
  f.add_integer(prefix + "decay", static_cast<std::int64_t>(o.decay));
  f.add_double(prefix + "clip_norm", o.clip_norm);
  f.add_integer(prefix + "patience", o.patience);
  f.add_double(prefix + "min_delta", o.min_delta);
  f.add(prefix + "metric", to_string(o.metric));
  f.add_bool(prefix + "restore_best", o.restore_best);
  f.add_integer(prefix + "max_steps", o.max_steps);
  f.add_integer(prefix + "pad_to", o.pad_to);
  f.add_integer(prefix + "eval_batch_size", o.eval_batch_size);
  f.add(prefix + "seed", std::to_string(o.seed));
}

/// Fields of an EpochRecord line in the "phase_b.history" blob.
inline constexpr std::size_t epoch_record_fields = 10;

/// The epoch records as text, one line per epoch (see epoch_record_fields; exact decimals).
inline std::string epoch_records_text(const std::vector<EpochRecord>& epochs) {
  std::string out;
  for (const EpochRecord& r : epochs) {
    const std::array<double, epoch_record_fields> v = {static_cast<double>(r.epoch),
                                                       static_cast<double>(r.steps),
                                                       r.train_loss,
                                                       r.learning_rate,
                                                       r.validation_accuracy,
                                                       r.validation_loss,
                                                       r.validation_metric,
                                                       r.improved ? 1.0 : 0.0,
                                                       r.tokens_per_second,
                                                       r.seconds};
    out += numbers_text(v);
    out += '\n';
  }
  return out;
}

/// Parses epoch_records_text's output; io_error naming the file otherwise.
template <RealScalar S>
std::vector<EpochRecord> parse_epoch_records(const io::ModelFile<S>& file, const char* where) {
  const std::string& text = file.blob("phase_b.history");
  std::vector<EpochRecord> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    std::array<double, epoch_record_fields> v{};
    if (end == std::string::npos ||
        !parse_numbers(std::string_view(text).substr(start, end - start), v) ||
        !(v[0] >= 0.0 && v[1] >= 0.0 && v[0] == std::floor(v[0]) && v[1] == std::floor(v[1]))) {
      throw io_error(std::string(where) + ": '" + file.source() +
                     "': blob 'phase_b.history' has a malformed line " +
                     std::to_string(out.size() + 1));
    }
    EpochRecord r;
    r.epoch = static_cast<Index>(v[0]);
    r.steps = static_cast<Index>(v[1]);
    r.train_loss = v[2];
    r.learning_rate = v[3];
    r.validation_accuracy = v[4];
    r.validation_loss = v[5];
    r.validation_metric = v[6];
    r.improved = v[7] != 0.0;
    r.tokens_per_second = v[8];
    r.seconds = v[9];
    out.push_back(r);
    start = end + 1;
  }
  return out;
}

/// Where a Phase B run stands: the epoch to run next (or in progress), and with mid_epoch, what
/// its first record.steps batches did.
struct PhaseBPosition {
  Index epoch = 0;         ///< epoch to run, or in progress
  bool mid_epoch = false;  ///< record.steps batches of `epoch` are done
  EpochRecord record{};    ///< the epoch's record so far (steps, learning_rate)
  double loss_sum = 0.0;   ///< sum of its step losses so far
  Index epoch_tokens = 0;  ///< its training tokens so far
  /// Wall time of its batches so far, over every session (all of it training time: the
  /// evaluation comes after the last batch), so that a resumed epoch's times cover the epoch.
  double epoch_seconds = 0.0;
};

/// Phase B (see train_phase_b), writing checkpoints of kind context->kind (Phase A's warm-up)
/// or "phase_b" (context = nullptr).
template <RealScalar S, FeatureMap Map>
PhaseBHistory run_phase_b(nn::TextClassifier<S, Map>& model, const EncodedDataset& train,
                          const EncodedDataset& validation, const PhaseBOptions& options,
                          const PhaseBCheckpointContext<S>* context) {
  const char* where = "coulomb::train::train_phase_b";
  options.validate();
  coulomb::detail::require(train.size() > 0, where, "argument 'train' is empty");
  const auto start = std::chrono::steady_clock::now();

  Rng root(options.seed);
  const std::uint64_t batch_seed = root();
  BatcherOptions batcher_options;
  batcher_options.batch_size = options.batch_size;
  batcher_options.shuffle = true;
  batcher_options.seed = batch_seed;
  batcher_options.pad_to = options.pad_to;
  Batcher batcher(train, batcher_options);
  const Index per_epoch = batcher.num_batches();
  Index total = per_epoch * options.epochs;
  if (options.max_steps > 0) total = std::min(total, options.max_steps);

  PhaseBStepper<S, Map> stepper(model, options, total, root.split(1));
  const nn::ParameterList<S>& params = stepper.parameters();
  const bool validate_epochs = validation.size() > 0;
  EarlyStoppingOptions stop_options;
  stop_options.patience =
      options.patience > 0 ? options.patience : std::numeric_limits<Index>::max();
  stop_options.min_delta = options.min_delta;
  stop_options.goal =
      options.metric == ValidationMetric::log_loss ? MetricGoal::minimize : MetricGoal::maximize;
  EarlyStopping<S> stop(stop_options);
  Evaluator<S> evaluator(EvaluationOptions{options.eval_batch_size, {}});

  ProgressReporter* progress = options.progress;
  if (progress) progress->set_total(total);

  PhaseBHistory history;

  // Checkpoints: the fingerprint of the run, the writer, and resuming.
  const CheckpointOptions& ck = options.checkpoint;
  const std::string_view kind = context != nullptr ? context->kind : std::string_view("phase_b");
  const std::string_view running =
      context != nullptr ? context->stage : std::string_view("running");
  RunFingerprint fingerprint;
  if (ck.enabled()) {
    fingerprint.add_model(model);
    fingerprint.add_dataset("data.train", train);
    fingerprint.add_dataset("data.validation", validation);
    add_phase_b_fingerprint(fingerprint, options, "phase_b.");
  }
  double earlier_seconds = 0.0;  // wall time of the sessions before a resume
  auto save = [&](std::string_view status, const PhaseBPosition& at) {
    io::ModelFile<S> file(ck.path);
    begin_checkpoint(file, kind);
    fingerprint.write(file);
    if (context != nullptr && context->add) context->add(file);
    file.set_metadata("phase_b.status", std::string(status));
    file.set_metadata("phase_b.epoch", std::to_string(at.epoch));
    file.set_metadata("phase_b.mid_epoch", at.mid_epoch ? "true" : "false");
    file.set_metadata("phase_b.epoch_steps", std::to_string(at.record.steps));
    file.set_metadata("phase_b.epoch_learning_rate", exact_decimal(at.record.learning_rate));
    file.set_metadata("phase_b.epoch_loss_sum", exact_decimal(at.loss_sum));
    file.set_metadata("phase_b.epoch_tokens", std::to_string(at.epoch_tokens));
    file.set_metadata("phase_b.epoch_seconds", exact_decimal(at.epoch_seconds));
    file.set_metadata("phase_b.steps", std::to_string(history.steps));
    file.set_metadata("phase_b.tokens", std::to_string(history.tokens));
    file.set_metadata("phase_b.train_seconds", exact_decimal(history.train_seconds));
    file.set_metadata("phase_b.seconds", exact_decimal(earlier_seconds + seconds_since(start)));
    file.set_metadata("phase_b.stopped_early", history.stopped_early ? "true" : "false");
    file.set_metadata("phase_b.reached_max_steps", history.reached_max_steps ? "true" : "false");
    file.set_metadata("phase_b.best_epoch", std::to_string(history.best_epoch));
    file.set_metadata("phase_b.best_metric", exact_decimal(history.best_metric));
    file.set_metadata("phase_b.dropout_rng", rng_state_text(stepper.dropout_rng()));
    file.add_blob("phase_b.history", epoch_records_text(history.epochs));
    io::add_parameters(file, params, "model.");
    add_optimizer_state(file, stepper.optimizer());
    if (validate_epochs) add_early_stopping_state(file, stop);
    const std::string_view stage = context != nullptr
                                       ? context->stage
                                       : (status == "done" ? std::string_view("done") : running);
    save_checkpoint(ck, file,
                    CheckpointEvent{CheckpointEventKind::saved, kind, stage, history.steps, -1});
  };
  PhaseBPosition position;
  bool finished = false;
  if (ck.enabled() && ck.resume && checkpoint_exists(ck.path)) {
    const io::ModelFile<S> file = load_checkpoint<S>(ck.path, kind, where);
    fingerprint.check(file, where);
    const std::string& status = file.metadata_value("phase_b.status");
    if (status != "running" && status != "done") {
      throw io_error(std::string(where) + ": '" + ck.path + "': metadata 'phase_b.status' is '" +
                     io::detail::printable_name(status) + "', expected running or done");
    }
    finished = status == "done";
    PhaseBHistory h;
    h.epochs = parse_epoch_records(file, where);
    h.steps = static_cast<Index>(metadata_integer(file, "phase_b.steps", where));
    h.tokens = static_cast<Index>(metadata_integer(file, "phase_b.tokens", where));
    h.train_seconds = metadata_number(file, "phase_b.train_seconds", where);
    h.stopped_early = metadata_bool(file, "phase_b.stopped_early", where);
    h.reached_max_steps = metadata_bool(file, "phase_b.reached_max_steps", where);
    h.best_epoch = static_cast<Index>(metadata_integer(file, "phase_b.best_epoch", where));
    h.best_metric = metadata_number(file, "phase_b.best_metric", where);
    PhaseBPosition at;
    at.epoch = static_cast<Index>(metadata_integer(file, "phase_b.epoch", where));
    at.mid_epoch = metadata_bool(file, "phase_b.mid_epoch", where);
    at.record.epoch = at.epoch;
    at.record.steps = static_cast<Index>(metadata_integer(file, "phase_b.epoch_steps", where));
    at.record.learning_rate = metadata_number(file, "phase_b.epoch_learning_rate", where);
    at.loss_sum = metadata_number(file, "phase_b.epoch_loss_sum", where);
    at.epoch_tokens = static_cast<Index>(metadata_integer(file, "phase_b.epoch_tokens", where));
    at.epoch_seconds = metadata_seconds(file, "phase_b.epoch_seconds", where);
    if (at.epoch < 0 || at.epoch > options.epochs || at.record.steps < 0 ||
        at.record.steps > per_epoch || h.steps < 0 || h.steps > total) {
      throw io_error(std::string(where) + ": '" + ck.path +
                     "': the position in the checkpoint (epoch " + std::to_string(at.epoch) +
                     ", step " + std::to_string(h.steps) + ") is outside this run");
    }
    const auto rng_state = metadata_rng_state(file, "phase_b.dropout_rng", where);
    // The optimizer and the tracker are checked against the names and shapes of the
    // parameters, and load_parameters checks every tensor before it copies any: a checkpoint
    // that does not fit leaves the model unchanged.
    restore_optimizer_state(file, stepper.optimizer(), params);
    if (validate_epochs) restore_early_stopping_state(file, stop);
    io::load_parameters(file, params, "model.");
    if (model.config().attention == nn::AttentionKind::linear) sync_model_omegas(model);
    stepper.dropout_rng().set_state(rng_state);
    earlier_seconds = metadata_number(file, "phase_b.seconds", where);
    history = std::move(h);
    position = at;
  }

  TokenBatch batch;
  std::vector<ProgressValue> values{{"loss", 0.0}, {"lr", 0.0}};
  for (Index epoch = position.epoch; !finished && epoch < options.epochs; ++epoch) {
    const bool resumed_here = position.mid_epoch && epoch == position.epoch;
    if (!resumed_here && options.max_steps > 0 && history.steps >= options.max_steps) break;
    const auto epoch_start = std::chrono::steady_clock::now();
    EpochRecord record;
    record.epoch = epoch;
    batcher.start_epoch(static_cast<std::uint64_t>(epoch));
    double loss_sum = 0.0;
    Index epoch_tokens = 0;
    double earlier_epoch_seconds = 0.0;  // of the sessions before a resume within this epoch
    auto epoch_seconds = [&] { return earlier_epoch_seconds + seconds_since(epoch_start); };
    if (resumed_here) {
      // The epoch's order depends only on (seed, epoch): skip the batches already done.
      record.steps = position.record.steps;
      record.learning_rate = position.record.learning_rate;
      loss_sum = position.loss_sum;
      epoch_tokens = position.epoch_tokens;
      earlier_epoch_seconds = position.epoch_seconds;
      for (Index b = 0; b < record.steps; ++b) batcher.next(batch);
    }
    while (!history.reached_max_steps && batcher.next(batch)) {
      record.learning_rate = stepper.next_learning_rate();
      const double loss = stepper.step(batch);
      loss_sum += loss;
      ++record.steps;
      ++history.steps;
      epoch_tokens += batch_tokens(batch);
      if (progress) {
        values[0].value = loss_sum / static_cast<double>(record.steps);
        values[1].value = record.learning_rate;
        progress->update(history.steps, static_cast<double>(history.tokens + epoch_tokens), values);
      }
      if (options.max_steps > 0 && history.steps >= options.max_steps) {
        history.reached_max_steps = true;
      }
      if (ck.enabled()) {
        notify(ck, CheckpointEvent{CheckpointEventKind::step, kind, running, history.steps, -1});
        if (ck.every_steps > 0 && history.steps % ck.every_steps == 0) {
          save("running",
               PhaseBPosition{epoch, true, record, loss_sum, epoch_tokens, epoch_seconds()});
        }
      }
      if (history.reached_max_steps) break;
    }
    const double train_seconds = epoch_seconds();
    history.train_seconds += train_seconds;
    history.tokens += epoch_tokens;
    record.train_loss = record.steps > 0 ? loss_sum / static_cast<double>(record.steps) : 0.0;
    record.tokens_per_second =
        train_seconds > 0.0 ? static_cast<double>(epoch_tokens) / train_seconds : 0.0;
    if (validate_epochs) {
      const Evaluation e = evaluator.evaluate(model, validation);
      record.validation_accuracy = e.metrics.accuracy;
      record.validation_loss = e.metrics.log_loss;
      record.validation_metric = metric_value(e.metrics, options.metric);
      record.improved = stop.update(epoch, record.validation_metric, params);
    }
    record.seconds = epoch_seconds();
    history.epochs.push_back(record);
    if (progress) {
      std::ostringstream os;
      os << "epoch " << (epoch + 1) << "/" << options.epochs << ": train loss "
         << record.train_loss;
      if (validate_epochs)
        os << ", " << options.validation_name << " accuracy " << record.validation_accuracy
           << ", loss " << record.validation_loss << (record.improved ? " (best)" : "");
      progress->message(os.str());
    }
    if (validate_epochs && stop.should_stop()) {
      history.stopped_early = epoch + 1 < options.epochs;
      break;
    }
    if (ck.enabled() && ck.at_epoch_end && epoch + 1 < options.epochs &&
        !history.reached_max_steps) {
      PhaseBPosition next;
      next.epoch = epoch + 1;
      save("running", next);
    }
  }
  if (!finished) {
    if (validate_epochs && options.restore_best && stop.has_best()) {
      stop.restore_best(params);
      history.best_epoch = stop.best_epoch();
      history.best_metric = stop.best_value();
    } else if (!history.epochs.empty()) {
      history.best_epoch = history.epochs.back().epoch;
      history.best_metric = history.epochs.back().validation_metric;
    }
    require_finite_parameters(params, static_cast<std::int64_t>(history.steps),
                              FiniteCheck::values);
    if (ck.enabled()) {
      PhaseBPosition end;
      end.epoch = options.epochs;
      save("done", end);
    }
  }
  if (progress && !progress->finished()) progress->finish();
  history.seconds = earlier_seconds + seconds_since(start);
  return history;
}

}  // namespace detail

/// Phase B: trains the trainable parameters of `model` (a frozen Ω stays bit for bit as it is)
/// on `train` with cross-entropy, AdamW, the warm-up + decay schedule and gradient clipping of
/// `options`, evaluating on `validation` after every epoch. With a non-empty validation set it
/// stops after options.patience epochs without improvement of options.metric and, with
/// options.restore_best, ends with the parameters of the best epoch; with an empty one it runs
/// every epoch (or options.max_steps) and keeps the last parameters. Returns the history.
///
/// With options.checkpoint.path set, writes checkpoints (every options.checkpoint.every_steps
/// steps, at the end of every epoch but the last, and at the end, with status "done"); with
/// options.checkpoint.resume and an existing checkpoint, continues from it and ends with the
/// bits of the uninterrupted run (same thread count). Resuming a finished run returns its
/// history and final parameters at once.
///
/// Throws invalid_argument for invalid options, an empty training set, or data the model
/// refuses (a sequence longer than config.max_length, an id outside the vocabulary, a label
/// outside [0, C)); numerical_error "step N: the gradient of parameter 'name' has a non-finite
/// entry …" (or "step N: the logits are not finite …" when no parameter is to blame) when
/// training diverges, leaving the model with the parameters of the last finite step; io_error
/// when a checkpoint cannot be written, or cannot be resumed from (damaged, of another kind, or
/// written by a run whose options, model or data differ: every differing field is named).
template <RealScalar S, FeatureMap Map>
PhaseBHistory train_phase_b(nn::TextClassifier<S, Map>& model, const EncodedDataset& train,
                            const EncodedDataset& validation, const PhaseBOptions& options) {
  return detail::run_phase_b<S, Map>(model, train, validation, options, nullptr);
}

}  // namespace coulomb::train
