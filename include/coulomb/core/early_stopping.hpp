// SPDX-License-Identifier: MIT
/// @file core/early_stopping.hpp
/// @brief The rule of early stopping, once for every loop that uses it: a metric is evaluated at
/// increasing points (the epochs of Phase B, the steps of the particle dynamics); a point
/// improves when its metric beats the best so far by more than min_delta in the direction of
/// the goal (the first point always improves); the loop stops after `patience` consecutive
/// points without improvement.
///
/// EarlyStoppingRule keeps the counters; what is kept of the best point is the caller's:
/// train::EarlyStopping copies a model's parameters (train/early_stopping.hpp),
/// ParticleEarlyStopping the particles (particles/callbacks.hpp).
#pragma once

#include <cmath>
#include <concepts>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "check.hpp"
#include "config.hpp"
#include "error.hpp"

namespace coulomb {

/// Whether a larger or a smaller metric is better.
enum class MetricGoal {
  maximize,  ///< accuracy, MCC, F1, …
  minimize,  ///< loss, ECE, Brier score, …
};

/// Options of early stopping (EarlyStoppingRule, train::EarlyStopping, ParticleEarlyStopping).
struct EarlyStoppingOptions {
  /// Stop once this many consecutive evaluations brought no improvement (≥ 1).
  Index patience = 3;
  /// An evaluation improves only if it beats the best value by more than this (≥ 0): metric >
  /// best + min_delta when maximizing, metric < best − min_delta when minimizing.
  double min_delta = 0.0;
  MetricGoal goal = MetricGoal::maximize;  ///< direction of improvement

  /// Throws invalid_argument unless patience ≥ 1 and min_delta ≥ 0 is finite.
  void validate() const {
    const char* where = "coulomb::EarlyStoppingOptions";
    detail::require(patience >= 1, where,
                    "argument 'patience' must be at least 1, got " + std::to_string(patience));
    detail::require(
        min_delta >= 0.0 && std::isfinite(min_delta), where,
        "argument 'min_delta' must be finite and non-negative, got " + std::to_string(min_delta));
  }
};

/// The counters of early stopping (what a checkpoint records besides the copy of the best
/// point). An "epoch" is the index of an evaluation: an epoch of Phase B, a step count of the
/// particle dynamics.
struct EarlyStoppingState {
  double best_value = std::numeric_limits<double>::quiet_NaN();  ///< NaN before the first epoch
  Index best_epoch = -1;                                         ///< −1 before the first epoch
  Index last_epoch = -1;                                         ///< −1 before the first epoch
  Index epochs_without_improvement = 0;                          ///< since the best epoch
};

/// The counters of early stopping (see the file comment).
class EarlyStoppingRule {
 public:
  /// A rule with the given options. Throws invalid_argument for invalid ones.
  explicit EarlyStoppingRule(const EarlyStoppingOptions& options = {}) : options_(options) {
    options_.validate();
  }

  /// The options.
  const EarlyStoppingOptions& options() const noexcept { return options_; }

  /// Records `metric` at `epoch`. When it improves on the best so far, calls `keep_best()`
  /// first (to copy the best point; if it throws, nothing changes), makes this the best epoch
  /// and returns true; otherwise counts one more epoch without improvement and returns false.
  /// Throws numerical_error naming the epoch for a NaN or infinite metric (a diverged model
  /// must not be compared, nor silently skipped), and invalid_argument for a negative epoch or
  /// epochs that do not increase; nothing changes then. `where` names the caller in messages.
  template <std::invocable KeepBest>
  bool update(Index epoch, double metric, KeepBest&& keep_best, std::string_view where) {
    if (!std::isfinite(metric)) {
      std::ostringstream os;
      os << where << ": epoch " << epoch << ": the validation metric is " << metric;
      throw numerical_error(os.str());
    }
    detail::require(epoch >= 0, where,
                    "argument 'epoch' must be non-negative, got " + std::to_string(epoch));
    detail::require(state_.last_epoch < 0 || epoch > state_.last_epoch, where,
                    "argument 'epoch' = " + std::to_string(epoch) +
                        " does not follow the previous epoch " + std::to_string(state_.last_epoch));
    const bool better = !has_best() || (options_.goal == MetricGoal::maximize
                                            ? metric > state_.best_value + options_.min_delta
                                            : metric < state_.best_value - options_.min_delta);
    if (better) {
      keep_best();
      state_.best_value = metric;
      state_.best_epoch = epoch;
      state_.epochs_without_improvement = 0;
    } else {
      ++state_.epochs_without_improvement;
    }
    state_.last_epoch = epoch;
    return better;
  }

  /// True once `patience` consecutive epochs brought no improvement.
  bool should_stop() const noexcept {
    return state_.epochs_without_improvement >= options_.patience;
  }

  /// True once an epoch was recorded.
  bool has_best() const noexcept { return state_.best_epoch >= 0; }

  /// The best metric so far (NaN before the first update).
  double best_value() const noexcept { return state_.best_value; }

  /// The epoch of the best metric (−1 before the first update).
  Index best_epoch() const noexcept { return state_.best_epoch; }

  /// The last epoch recorded (−1 before the first update).
  Index last_epoch() const noexcept { return state_.last_epoch; }

  /// Consecutive epochs without improvement since the best one.
  Index epochs_without_improvement() const noexcept { return state_.epochs_without_improvement; }

  /// The counters and the best value.
  const EarlyStoppingState& state() const noexcept { return state_; }

  /// Continues from counters saved in a checkpoint (a state with best_epoch < 0 starts afresh).
  /// Throws invalid_argument, changing nothing, for inconsistent values: a best epoch after
  /// the last one, a negative count or one longer than the epochs since the best, a non-finite
  /// best value, or counters without a best epoch.
  void resume(const EarlyStoppingState& state, std::string_view where) {
    const bool none = state.best_epoch < 0;
    detail::require(
        none ? (state.last_epoch < 0 && state.epochs_without_improvement == 0)
             : (std::isfinite(state.best_value) && state.best_epoch <= state.last_epoch &&
                state.epochs_without_improvement >= 0 &&
                state.epochs_without_improvement <= state.last_epoch - state.best_epoch),
        where, "inconsistent early-stopping state");
    state_ = none ? EarlyStoppingState{} : state;
  }

 private:
  EarlyStoppingOptions options_;
  EarlyStoppingState state_{};
};

}  // namespace coulomb
