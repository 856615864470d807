// SPDX-License-Identifier: MIT
/// @file train/early_stopping.hpp
/// @brief Early stopping on a validation metric: remember the best epoch and a copy of its
/// parameters, stop after `patience` epochs without improvement, restore the best parameters.
#pragma once

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "parameter_snapshot.hpp"

namespace coulomb::train {

/// Whether a larger or a smaller metric is better.
enum class MetricGoal {
  maximize,  ///< accuracy, MCC, F1, …
  minimize,  ///< loss, ECE, Brier score, …
};

/// Options of EarlyStopping.
struct EarlyStoppingOptions {
  /// Stop once this many consecutive epochs brought no improvement (≥ 1).
  Index patience = 3;
  /// An epoch improves only if it beats the best value by more than this (≥ 0): metric > best +
  /// min_delta when maximizing, metric < best − min_delta when minimizing.
  double min_delta = 0.0;
  MetricGoal goal = MetricGoal::maximize;  ///< direction of improvement

  /// Throws invalid_argument unless patience ≥ 1 and min_delta ≥ 0 is finite.
  void validate() const {
    const char* where = "coulomb::train::EarlyStoppingOptions";
    coulomb::detail::require(
        patience >= 1, where,
        "argument 'patience' must be at least 1, got " + std::to_string(patience));
    coulomb::detail::require(
        min_delta >= 0.0 && std::isfinite(min_delta), where,
        "argument 'min_delta' must be finite and non-negative, got " + std::to_string(min_delta));
  }
};

/// The state of an EarlyStopping tracker besides its copy of the best parameters.
struct EarlyStoppingState {
  double best_value = std::numeric_limits<double>::quiet_NaN();  ///< NaN before the first epoch
  Index best_epoch = -1;                                         ///< −1 before the first epoch
  Index last_epoch = -1;                                         ///< −1 before the first epoch
  Index epochs_without_improvement = 0;                          ///< since the best epoch
};

/// Tracks a validation metric over epochs (see the file comment). Typical use:
///
///     EarlyStopping<float> stop({.patience = 3, .goal = MetricGoal::maximize});
///     for (Index epoch = 0; epoch < max_epochs && !stop.should_stop(); ++epoch) {
///       train_one_epoch(model);
///       stop.update(epoch, validation_accuracy(model), model.parameters());
///     }
///     stop.restore_best(model.parameters());
template <RealScalar S>
class EarlyStopping {
 public:
  /// A tracker with the given options. Throws invalid_argument for invalid ones.
  explicit EarlyStopping(const EarlyStoppingOptions& options = {}) : options_(options) {
    options_.validate();
  }

  /// The options.
  const EarlyStoppingOptions& options() const noexcept { return options_; }

  /// Records the metric of `epoch`. When it improves on the best so far (always, for the first
  /// epoch), copies the values of `params` (trainable or not), makes this the best epoch and
  /// returns true; otherwise counts one more epoch without improvement and returns false.
  /// Throws numerical_error naming the epoch for a NaN or infinite metric (a diverged model must
  /// not be compared, nor silently skipped), and invalid_argument for a negative epoch, epochs
  /// that do not increase or a parameter without a name or value; nothing changes then.
  bool update(Index epoch, double metric, const nn::ParameterList<S>& params) {
    const char* where = "coulomb::train::EarlyStopping::update";
    if (!std::isfinite(metric)) {
      std::ostringstream os;
      os << where << ": epoch " << epoch << ": the validation metric is " << metric;
      throw numerical_error(os.str());
    }
    coulomb::detail::require(epoch >= 0, where,
                             "argument 'epoch' must be non-negative, got " + std::to_string(epoch));
    coulomb::detail::require(last_epoch_ < 0 || epoch > last_epoch_, where,
                             "argument 'epoch' = " + std::to_string(epoch) +
                                 " does not follow the previous epoch " +
                                 std::to_string(last_epoch_));
    const bool better = !has_best() || (options_.goal == MetricGoal::maximize
                                            ? metric > best_value_ + options_.min_delta
                                            : metric < best_value_ - options_.min_delta);
    if (better) {
      best_.capture(params);  // may throw; nothing has changed yet
      best_value_ = metric;
      best_epoch_ = epoch;
      stale_ = 0;
    } else {
      ++stale_;
    }
    last_epoch_ = epoch;
    return better;
  }

  /// True once `patience` consecutive epochs brought no improvement.
  bool should_stop() const noexcept { return stale_ >= options_.patience; }

  /// True once an epoch was recorded.
  bool has_best() const noexcept { return best_epoch_ >= 0; }

  /// The best metric so far (NaN before the first update).
  double best_value() const noexcept { return best_value_; }

  /// The epoch of the best metric (−1 before the first update).
  Index best_epoch() const noexcept { return best_epoch_; }

  /// The last epoch recorded (−1 before the first update).
  Index last_epoch() const noexcept { return last_epoch_; }

  /// Consecutive epochs without improvement since the best one.
  Index epochs_without_improvement() const noexcept { return stale_; }

  /// The copy of the parameters of the best epoch.
  const ParameterSnapshot<S>& best_parameters() const noexcept { return best_; }

  /// Copies the parameters of the best epoch back into `params`. Throws invalid_argument,
  /// changing nothing, before the first update or when `params` does not have the names and
  /// shapes of the recorded list.
  void restore_best(const nn::ParameterList<S>& params) const {
    coulomb::detail::require(has_best(), "coulomb::train::EarlyStopping::restore_best",
                             "no epoch has been recorded yet");
    best_.restore(params);
  }

  /// The counters and best value (what a checkpoint records besides the best parameters).
  EarlyStoppingState state() const noexcept {
    return {best_value_, best_epoch_, last_epoch_, stale_};
  }

  /// Restores a tracker saved in a checkpoint: its counters and the best parameters. Throws
  /// invalid_argument for inconsistent values (a best epoch after the last one, a negative
  /// count, a non-finite best value, no tensors for a recorded best epoch).
  void resume(const EarlyStoppingState& state, std::vector<StateTensor<S>> best_parameters) {
    const char* where = "coulomb::train::EarlyStopping::resume";
    const bool none = state.best_epoch < 0;
    coulomb::detail::require(
        none ? (state.last_epoch < 0 && state.epochs_without_improvement == 0 &&
                best_parameters.empty())
             : (std::isfinite(state.best_value) && state.best_epoch <= state.last_epoch &&
                state.epochs_without_improvement >= 0 &&
                state.epochs_without_improvement <= state.last_epoch - state.best_epoch),
        where, "inconsistent early-stopping state");
    ParameterSnapshot<S> snapshot;
    snapshot.assign(std::move(best_parameters));
    best_ = std::move(snapshot);
    best_value_ = none ? std::numeric_limits<double>::quiet_NaN() : state.best_value;
    best_epoch_ = none ? -1 : state.best_epoch;
    last_epoch_ = none ? -1 : state.last_epoch;
    stale_ = none ? 0 : state.epochs_without_improvement;
  }

 private:
  EarlyStoppingOptions options_;
  ParameterSnapshot<S> best_;
  double best_value_ = std::numeric_limits<double>::quiet_NaN();
  Index best_epoch_ = -1;
  Index last_epoch_ = -1;
  Index stale_ = 0;
};

}  // namespace coulomb::train
