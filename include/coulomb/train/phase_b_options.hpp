// SPDX-License-Identifier: MIT
/// @file train/phase_b_options.hpp
/// @brief The options of Phase B (run_phase_b, train/phase_b.hpp), nested as the parts of the
/// loop they configure (the optimizer of train/adamw.hpp, the learning-rate schedule, early
/// stopping, checkpoints); what it returns (one EpochRecord per epoch, the PhaseBHistory) and
/// what its callbacks see after every step (PhaseBStep). Each record lists its fields once
/// (RecordLayout), for the checkpoints and the run's fingerprint (train/resume.hpp). Documented in
/// docs/training.md (section "Phase B").
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "adamw.hpp"
#include "collective.hpp"
#include "detail_record_codec.hpp"
#include "evaluation.hpp"
#include "progress.hpp"
#include "resume.hpp"
#include "schedule.hpp"

namespace coulomb::train {

/// The learning-rate schedule of Phase B: linear warm-up to `learning_rate`, then `decay` to
/// `final_learning_rate` at the last step of the run (train/schedule.hpp).
struct PhaseBSchedule {
  double learning_rate = 1e-3;       ///< peak rate η of AdamW (> 0)
  double final_learning_rate = 0.0;  ///< rate at the end of the decay, in [0, learning_rate]
  double warmup_fraction = 0.1;      ///< warm-up length as a fraction of the total steps, [0, 1]
  Index warmup_steps = -1;           ///< warm-up length in steps; ≥ 0 overrides warmup_fraction
  Decay decay = Decay::linear;       ///< decay after the warm-up, over the total steps
};

/// Early stopping of Phase B on the validation set (the rule of core/early_stopping.hpp; its
/// goal follows from the metric: minimize the log loss, maximize the others).
struct PhaseBEarlyStopping {
  Index patience = 2;                                    ///< epochs without improvement (0: never)
  double min_delta = 0.0;                                ///< least improvement that counts (≥ 0)
  ValidationMetric metric = ValidationMetric::accuracy;  ///< what is watched
  bool restore_best = true;  ///< end with the parameters of the best validation epoch
};

/// Options of Phase B (run_phase_b), nested as the parts of the loop they configure.
struct PhaseBOptions {
  Index epochs = 10;      ///< passes over the training set (≥ 1)
  Index batch_size = 32;  ///< sequences per step (≥ 1)
  Index max_steps = 0;    ///< stop after this many steps in all (0: no limit)
  Index pad_to = 0;       ///< pad every batch to this length (0: longest in batch)
  /// AdamW's β₁, β₂, ε and decoupled weight decay λ (weights and embeddings). Phase B checks
  /// every step itself, so optimizer.check_finite is not used.
  AdamWOptions optimizer{};
  double clip_norm = 1.0;                ///< global gradient-norm bound c (0: no clipping)
  PhaseBSchedule schedule{};             ///< warm-up and decay of the learning rate
  PhaseBEarlyStopping early_stopping{};  ///< early stopping on the validation set
  Index eval_batch_size = 128;           ///< sequences per evaluation forward (≥ 1)
  std::uint64_t seed = 0;                ///< seeds the batch order and the dropout masks
  ProgressReporter* progress = nullptr;  ///< step progress (not owned; finished at the end)
  /// What the progress messages call the `validation` set of run_phase_b (for example
  /// "development" when it is held out from the training split).
  std::string validation_name = "validation";
  CheckpointOptions checkpoint{};  ///< checkpoints and resuming (default: none)
  /// The processes of a data-parallel run (not owned; docs/distributed.md): each takes its
  /// shard_range of every global batch of batch_size sequences, and the gradients are summed
  /// over the processes before the same clipping and AdamW step on each; rank 0 writes the
  /// checkpoints, and every process resumes from the same file (train/resume.hpp). nullptr (or a
  /// Collective of one process): this process alone, bit for bit as without it.
  Collective* collective = nullptr;
  /// With a collective of P > 1 processes: shard the AdamW state and update over the processes
  /// (train/sharded_adamw.hpp: reduce-scatter, each process updates its slice, all-gather of
  /// the parameters) instead of summing the whole gradient and repeating the full AdamW step on
  /// every process. The same results up to the last bits of the clipping factor; not part of a
  /// checkpoint's fingerprint (both write the same state). Sharding gathers every parameter at
  /// every step: on one host that is cheaper than the AdamW work it saves, across hosts a model
  /// with a large token table (a sparse sum) may be faster with false (docs/distributed.md).
  bool shard_optimizer = true;

  /// Throws invalid_argument, naming the field, unless every field is valid.
  void validate() const {
    const char* where = "coulomb::train::PhaseBOptions";
    checkpoint.validate();
    using coulomb::detail::require;
    require(epochs >= 1, where,
            "argument 'epochs' must be at least 1, got " + std::to_string(epochs));
    require(batch_size >= 1, where,
            "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
    require(max_steps >= 0, where,
            "argument 'max_steps' must be >= 0 (0: no limit), got " + std::to_string(max_steps));
    require(pad_to >= 0, where,
            "argument 'pad_to' must be >= 0 (0: longest in batch), got " + std::to_string(pad_to));
    require(optimizer.beta1 >= 0.0 && optimizer.beta1 < 1.0, where,
            "argument 'optimizer.beta1' must be in [0, 1), got " + std::to_string(optimizer.beta1));
    require(optimizer.beta2 >= 0.0 && optimizer.beta2 < 1.0, where,
            "argument 'optimizer.beta2' must be in [0, 1), got " + std::to_string(optimizer.beta2));
    coulomb::detail::require_positive(optimizer.epsilon, where, "optimizer.epsilon");
    require(optimizer.weight_decay >= 0.0 && std::isfinite(optimizer.weight_decay), where,
            "argument 'optimizer.weight_decay' must be finite and >= 0, got " +
                std::to_string(optimizer.weight_decay));
    require(clip_norm >= 0.0 && std::isfinite(clip_norm), where,
            "argument 'clip_norm' must be finite and >= 0 (0: no clipping), got " +
                std::to_string(clip_norm));
    coulomb::detail::require_positive(schedule.learning_rate, where, "schedule.learning_rate");
    require(schedule.final_learning_rate >= 0.0 &&
                schedule.final_learning_rate <= schedule.learning_rate,
            where,
            "argument 'schedule.final_learning_rate' must be in [0, schedule.learning_rate], got " +
                std::to_string(schedule.final_learning_rate));
    require(schedule.warmup_fraction >= 0.0 && schedule.warmup_fraction <= 1.0, where,
            "argument 'schedule.warmup_fraction' must be in [0, 1], got " +
                std::to_string(schedule.warmup_fraction));
    require(early_stopping.patience >= 0, where,
            "argument 'early_stopping.patience' must be >= 0 (0: no early stopping), got " +
                std::to_string(early_stopping.patience));
    require(early_stopping.min_delta >= 0.0 && std::isfinite(early_stopping.min_delta), where,
            "argument 'early_stopping.min_delta' must be finite and >= 0, got " +
                std::to_string(early_stopping.min_delta));
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

/// What run_phase_b's callbacks see after every optimizer step (see run_phase_b).
struct PhaseBStep {
  Index step = 0;              ///< optimizer steps so far, this one included
  Index epoch = 0;             ///< 0-based epoch of the step
  double loss = 0.0;           ///< the step's training loss
  double epoch_loss = 0.0;     ///< mean training loss of the epoch's steps so far
  double learning_rate = 0.0;  ///< the step's rate
  Index tokens = 0;            ///< training tokens so far, over every epoch (padding excluded)
};

namespace detail {

/// The options that change the result of Phase B, for the run's fingerprint (not the progress
/// reporter, the validation set's name or the checkpoint options), under the names of the
/// first layout (flat then), so that its checkpoints still resume. Options added since are
/// recorded only when they differ from what those runs used.
template <>
struct RecordLayout<PhaseBOptions> {
  using O = PhaseBOptions;  ///< the record
  /// The fields.
  static constexpr auto fields = std::make_tuple(
      field("epochs", &O::epochs), field("batch_size", &O::batch_size),
      field(
          "learning_rate", [](auto& o) -> auto& { return o.schedule.learning_rate; }),
      field(
          "final_learning_rate", [](auto& o) -> auto& { return o.schedule.final_learning_rate; }),
      field(
          "weight_decay", [](auto& o) -> auto& { return o.optimizer.weight_decay; }),
      field(
          "beta1", [](auto& o) -> auto& { return o.optimizer.beta1; }),
      field(
          "beta2", [](auto& o) -> auto& { return o.optimizer.beta2; }),
      field(
          "warmup_fraction", [](auto& o) -> auto& { return o.schedule.warmup_fraction; }),
      field(
          "warmup_steps", [](auto& o) -> auto& { return o.schedule.warmup_steps; }),
      field(
          "decay", [](auto& o) -> auto& { return o.schedule.decay; },
          FieldFlags::as_integer),  // a number since the first layout
      field("clip_norm", &O::clip_norm),
      field(
          "patience", [](auto& o) -> auto& { return o.early_stopping.patience; }),
      field(
          "min_delta", [](auto& o) -> auto& { return o.early_stopping.min_delta; }),
      field(
          "metric", [](auto& o) -> auto& { return o.early_stopping.metric; }),
      field(
          "restore_best", [](auto& o) -> auto& { return o.early_stopping.restore_best; }),
      field("max_steps", &O::max_steps), field("pad_to", &O::pad_to),
      field("eval_batch_size", &O::eval_batch_size), field("seed", &O::seed),
      field(
          "optimizer.epsilon", [](auto& o) -> auto& { return o.optimizer.epsilon; },
          FieldFlags::none,
          [](const O& o) { return o.optimizer.epsilon != AdamWOptions{}.epsilon; }));
};

/// An epoch as one line of the checkpoint blob "phase_b.history".
template <>
struct RecordLayout<EpochRecord> {
  using R = EpochRecord;  ///< the record
  /// The fields.
  static constexpr auto fields = std::make_tuple(
      field("epoch", &R::epoch), field("steps", &R::steps), field("train_loss", &R::train_loss),
      field("learning_rate", &R::learning_rate),
      field("validation_accuracy", &R::validation_accuracy),
      field("validation_loss", &R::validation_loss),
      field("validation_metric", &R::validation_metric), field("improved", &R::improved),
      field("tokens_per_second", &R::tokens_per_second), field("seconds", &R::seconds));
};

/// The totals of a history (its epochs go in a blob of their own).
template <>
struct RecordLayout<PhaseBHistory> {
  using H = PhaseBHistory;  ///< the record
  /// The fields.
  static constexpr auto fields = std::make_tuple(
      field("steps", &H::steps), field("tokens", &H::tokens),
      field("train_seconds", &H::train_seconds), field("seconds", &H::seconds),
      field("stopped_early", &H::stopped_early), field("reached_max_steps", &H::reached_max_steps),
      field("best_epoch", &H::best_epoch), field("best_metric", &H::best_metric));
};

}  // namespace detail

}  // namespace coulomb::train
