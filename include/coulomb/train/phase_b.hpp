// SPDX-License-Identifier: MIT
/// @file train/phase_b.hpp
/// @brief Phase B of the paper's text experiments (Badiei Khuzani et al., 2026, §4): with the
/// feature parameters Ω frozen, every other parameter of a TextClassifier is trained with
/// cross-entropy by AdamW, a warm-up + decay schedule and gradient clipping
/// (train/detail_phase_b_step.hpp); the model is evaluated on a validation set after every
/// epoch, training stops early when the validation metric stops improving, and the parameters
/// of the best epoch are restored. Documented in docs/training.md (section "Phase B").
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
///
/// Data-parallel (options.collective, docs/distributed.md): the processes share every global
/// batch and sum their gradients (train/detail_phase_b_step.hpp) and the validation batches
/// (train/evaluation.hpp); at the end of every epoch they check that their parameters are the
/// same (parameter_hash).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"
#include "callbacks.hpp"
#include "collective.hpp"
#include "detail_phase_b_checkpoint.hpp"
#include "detail_phase_b_step.hpp"
#include "early_stopping.hpp"
#include "evaluation.hpp"
#include "gradients.hpp"
#include "phase_b_options.hpp"
#include "resume.hpp"

namespace coulomb::train {

namespace detail {

/// The rule of early stopping that `o` asks for (patience 0: never).
inline EarlyStoppingOptions early_stopping_rule(const PhaseBEarlyStopping& o) {
  EarlyStoppingOptions e;
  e.patience = o.patience > 0 ? o.patience : std::numeric_limits<Index>::max();
  e.min_delta = o.min_delta;
  e.goal = o.metric == ValidationMetric::log_loss ? MetricGoal::minimize : MetricGoal::maximize;
  return e;
}

/// Phase B (see run_phase_b), writing checkpoints of kind context->kind (Phase A's warm-up)
/// or "phase_b" (context = nullptr).
template <FeatureMap Map, typename... Callbacks>
PhaseBHistory run_phase_b_in(const PhaseBCheckpointContext<typename Map::Scalar>* context,
                             nn::TextClassifier<Map>& model, const EncodedDataset& train,
                             const EncodedDataset& validation, const PhaseBOptions& options,
                             Callbacks&... callbacks) {
  using S = typename Map::Scalar;
  const char* where = "coulomb::train::run_phase_b";
  options.validate();
  coulomb::detail::require(train.size() > 0, where, "argument 'train' is empty");
  const auto start = std::chrono::steady_clock::now();

  // The batch order and the dropout masks come from two sub-streams of the seed.
  Rng root(options.seed);
  const std::uint64_t batch_seed = root();
  Batcher batcher(train, BatcherOptions{.batch_size = options.batch_size,
                                        .shuffle = true,
                                        .seed = batch_seed,
                                        .drop_last = false,
                                        .pad_to = options.pad_to});
  const Index per_epoch = batcher.num_batches();
  const Index all_epochs = per_epoch * options.epochs;
  const Index total = options.max_steps > 0 ? std::min(all_epochs, options.max_steps) : all_epochs;
  PhaseBStepper<S, Map> stepper(model, options, total, root.split(1));
  const bool validating = validation.size() > 0;
  EarlyStopping<S> stop(early_stopping_rule(options.early_stopping));
  Evaluator<S> evaluator(EvaluationOptions{options.eval_batch_size, {}, options.collective});
  PhaseBProgress progress(options.progress, options.epochs, options.validation_name);
  begin_training(total, progress, callbacks...);

  PhaseBCheckpoints<S, Map> checkpoints(context, options, model, train, validation, stepper,
                                        validating ? &stop : nullptr);
  ResumedPhaseB run =
      checkpoints.resume(options.epochs, per_epoch, total, where).value_or(ResumedPhaseB{});
  PhaseBHistory& history = run.history;
  PhaseBPosition& at = run.position;
  const double earlier_seconds = history.seconds;  // of the sessions before a resume
  auto seconds = [&] { return earlier_seconds + seconds_since(start); };

  TokenBatch batch;
  for (Index epoch = at.epoch; !run.finished && epoch < options.epochs; ++epoch) {
    const bool resumed_here = at.mid_epoch && epoch == at.epoch;
    if (!resumed_here && options.max_steps > 0 && history.steps >= options.max_steps) break;
    if (!resumed_here) at = PhaseBPosition{.epoch = epoch};
    const auto epoch_start = std::chrono::steady_clock::now();
    const double earlier_epoch_seconds = at.seconds;
    auto epoch_seconds = [&] { return earlier_epoch_seconds + seconds_since(epoch_start); };
    batcher.start_epoch(static_cast<std::uint64_t>(epoch));
    // The epoch's order depends only on (seed, epoch): a resumed epoch skips the batches done.
    for (Index b = 0; b < at.steps; ++b) batcher.next(batch);

    while (!history.reached_max_steps && batcher.next(batch)) {
      at.learning_rate = stepper.next_learning_rate();
      const double loss = stepper.step(batch);
      at.mid_epoch = true;
      at.loss_sum += loss;
      ++at.steps;
      at.tokens += batch_tokens(batch);
      ++history.steps;
      history.reached_max_steps = options.max_steps > 0 && history.steps >= options.max_steps;
      step_taken(PhaseBStep{history.steps, epoch, loss, at.loss_sum / static_cast<double>(at.steps),
                            at.learning_rate, history.tokens + at.tokens},
                 progress, callbacks...);
      if (checkpoints.enabled() && checkpoints.step_taken(history.steps)) {
        PhaseBPosition now = at;
        now.seconds = epoch_seconds();
        history.seconds = seconds();
        checkpoints.save("running", now, history);
      }
    }

    // Data-parallel: every process must hold the same parameters (the same summed gradient and
    // AdamW step); checked once per epoch, the same answer on every process.
    if (is_distributed(options.collective) &&
        !same_on_all(*options.collective, parameter_hash(stepper.parameters())))
      throw numerical_error(std::string(where) + ": epoch " + std::to_string(epoch) +
                            ": the parameters differ between the processes (their hashes)");
    const double train_seconds = epoch_seconds();
    history.train_seconds += train_seconds;
    history.tokens += at.tokens;
    EpochRecord record;
    record.epoch = epoch;
    record.steps = at.steps;
    record.train_loss = at.steps > 0 ? at.loss_sum / static_cast<double>(at.steps) : 0.0;
    record.learning_rate = at.learning_rate;
    record.tokens_per_second =
        train_seconds > 0.0 ? static_cast<double>(at.tokens) / train_seconds : 0.0;
    if (validating) {
      const Evaluation e = evaluator.evaluate(model, validation);
      record.validation_accuracy = e.metrics.accuracy;
      record.validation_loss = e.metrics.log_loss;
      record.validation_metric = metric_value(e.metrics, options.early_stopping.metric);
      record.improved = stop.update(epoch, record.validation_metric, stepper.parameters());
    }
    record.seconds = epoch_seconds();
    history.epochs.push_back(record);
    epoch_finished(record, progress, callbacks...);

    if (validating && stop.should_stop()) {
      history.stopped_early = epoch + 1 < options.epochs;
      break;
    }
    if (checkpoints.at_epoch_end() && epoch + 1 < options.epochs && !history.reached_max_steps) {
      history.seconds = seconds();
      checkpoints.save("running", PhaseBPosition{.epoch = epoch + 1}, history);
    }
  }

  if (!run.finished) {
    if (validating && options.early_stopping.restore_best && stop.has_best()) {
      stop.restore_best(stepper.parameters());
      history.best_epoch = stop.best_epoch();
      history.best_metric = stop.best_value();
    } else if (!history.epochs.empty()) {
      history.best_epoch = history.epochs.back().epoch;
      history.best_metric = history.epochs.back().validation_metric;
    }
    require_finite_parameters(stepper.parameters(), static_cast<std::int64_t>(history.steps),
                              FiniteCheck::values);
    if (checkpoints.enabled()) {
      history.seconds = seconds();
      checkpoints.save("done", PhaseBPosition{.epoch = options.epochs}, history);
    }
  }
  end_training(history, progress, callbacks...);
  history.seconds = seconds();
  return history;
}

}  // namespace detail

/// Phase B: trains the trainable parameters of `model` (a frozen Ω stays bit for bit as it is)
/// on `train` with cross-entropy, AdamW, the warm-up + decay schedule and gradient clipping of
/// `options`, evaluating on `validation` after every epoch. With a non-empty validation set it
/// stops after options.early_stopping.patience epochs without improvement of its metric and,
/// with early_stopping.restore_best, ends with the parameters of the best epoch; with an empty one
/// it runs every epoch (or options.max_steps) and keeps the last parameters. Returns the history.
/// `callbacks` see the steps and epochs (train/callbacks.hpp); options.progress is reported to
/// through a PhaseBProgress.
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
template <FeatureMap Map, RealScalar S = typename Map::Scalar, typename... Callbacks>
PhaseBHistory run_phase_b(nn::TextClassifier<Map>& model, const EncodedDataset& train,
                          const EncodedDataset& validation, const PhaseBOptions& options,
                          Callbacks&&... callbacks) {
  return detail::run_phase_b_in<Map>(nullptr, model, train, validation, options, callbacks...);
}

}  // namespace coulomb::train
