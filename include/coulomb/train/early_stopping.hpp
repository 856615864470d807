// SPDX-License-Identifier: MIT
/// @file train/early_stopping.hpp
/// @brief Early stopping over the epochs of training: the rule of core/early_stopping.hpp
/// (patience, min_delta, goal) with a copy of the parameters of the best epoch, restored at
/// the end.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/early_stopping.hpp"
#include "../nn/parameter.hpp"
#include "parameter_snapshot.hpp"

namespace coulomb::train {

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
  explicit EarlyStopping(const EarlyStoppingOptions& options = {}) : rule_(options) {}

  /// The options.
  const EarlyStoppingOptions& options() const noexcept { return rule_.options(); }

  /// Records the metric of `epoch`. When it improves on the best so far (always, for the first
  /// epoch), copies the values of `params` (trainable or not), makes this the best epoch and
  /// returns true; otherwise counts one more epoch without improvement and returns false.
  /// Throws numerical_error naming the epoch for a NaN or infinite metric (a diverged model must
  /// not be compared, nor silently skipped), and invalid_argument for a negative epoch, epochs
  /// that do not increase or a parameter without a name or value; nothing changes then.
  bool update(Index epoch, double metric, const nn::ParameterList<S>& params) {
    return rule_.update(
        epoch, metric, [&] { best_.capture(params); }, "coulomb::train::EarlyStopping::update");
  }

  /// True once `patience` consecutive epochs brought no improvement.
  bool should_stop() const noexcept { return rule_.should_stop(); }

  /// True once an epoch was recorded.
  bool has_best() const noexcept { return rule_.has_best(); }

  /// The best metric so far (NaN before the first update).
  double best_value() const noexcept { return rule_.best_value(); }

  /// The epoch of the best metric (−1 before the first update).
  Index best_epoch() const noexcept { return rule_.best_epoch(); }

  /// The last epoch recorded (−1 before the first update).
  Index last_epoch() const noexcept { return rule_.last_epoch(); }

  /// Consecutive epochs without improvement since the best one.
  Index epochs_without_improvement() const noexcept { return rule_.epochs_without_improvement(); }

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
  EarlyStoppingState state() const noexcept { return rule_.state(); }

  /// Restores a tracker saved in a checkpoint: its counters and the best parameters. Throws
  /// invalid_argument, changing nothing, for inconsistent values (a best epoch after the last
  /// one, a negative count, a non-finite best value, tensors without a recorded best epoch).
  void resume(const EarlyStoppingState& state, std::vector<StateTensor<S>> best_parameters) {
    const char* where = "coulomb::train::EarlyStopping::resume";
    coulomb::detail::require(state.best_epoch >= 0 || best_parameters.empty(), where,
                             "inconsistent early-stopping state");
    ParameterSnapshot<S> snapshot;
    snapshot.assign(std::move(best_parameters));
    rule_.resume(state, where);
    best_ = std::move(snapshot);
  }

 private:
  EarlyStoppingRule rule_;
  ParameterSnapshot<S> best_;
};

}  // namespace coulomb::train
