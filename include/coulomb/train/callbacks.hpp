// SPDX-License-Identifier: MIT
/// @file train/callbacks.hpp
/// @brief Callbacks of the phase runners, which take `callbacks...` as
/// coulomb::ProjectedLangevin::optimize does (particles/langevin.hpp): run_phase_a hands them
/// to the Langevin run of every Ω; run_phase_b calls, on each callback that has them,
///
///     void begin_training(Index total_steps)
///     void step_taken(const PhaseBStep&)          after every optimizer step
///     void epoch_finished(const EpochRecord&)     after every epoch's validation
///     void end_training(const PhaseBHistory&)
///
/// Missing members cost nothing. LangevinProgress and PhaseBProgress show the steps of either
/// phase on a ProgressReporter (train/progress.hpp).
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "phase_b_options.hpp"
#include "progress.hpp"

namespace coulomb::train {

/// A callback for coulomb::ProjectedLangevin::optimize that reports every step to a
/// ProgressReporter: the energy H_N before the step, the step size η_t, ‖∇H‖ and, when the
/// objective has `terms()` (as coulomb::Hamiltonian does), the alignment and repulsion terms.
/// Step t of the run is reported as first_step + t + 1, so that several runs (Phase A's Ω)
/// count on from one another. If the reporter's total is unknown (0), begin_optimization sets
/// it to first_step + the optimizer's `options().max_iterations`. With `finish_at_end`,
/// end_optimization calls finish(). It never stops the run. Use:
///
///     ProgressReporter progress(std::cout, 0, {.label = "phase A"});
///     langevin.optimize(hamiltonian, omega, LangevinProgress{progress});
struct LangevinProgress {
  ProgressReporter* reporter = nullptr;  ///< where to report (not owned; nullptr: nowhere)
  bool finish_at_end = true;             ///< call reporter->finish() at the end of the run
  Index first_step = 0;                  ///< steps reported before this run

  /// Reports to `r`; `finish` as finish_at_end.
  explicit LangevinProgress(ProgressReporter& r, bool finish = true)
      : reporter(&r), finish_at_end(finish) {}

  /// Reports to `r` when it is not null; `finish` as finish_at_end.
  explicit LangevinProgress(ProgressReporter* r, bool finish = true)
      : reporter(r), finish_at_end(finish) {}

  /// Sets the reporter's total from the optimizer when it is unknown.
  template <typename Opt, typename F, typename M>
  void begin_optimization(const Opt& optimizer, F&, const M&) {
    if constexpr (requires { optimizer.options().max_iterations; }) {
      if (reporter && reporter->total() == 0)
        reporter->set_total(first_step + static_cast<Index>(optimizer.options().max_iterations));
    }
  }

  /// Reports step `first_step + step.iteration + 1`; never stops the run.
  template <typename Opt, typename F, typename M, typename Step>
  bool step_taken(const Opt&, F& objective, const M&, const Step& step) {
    if (!reporter) return false;
    constexpr bool has_terms = requires {
      objective.terms().alignment;
    };
    if (values_.empty()) {  // the names, once; later steps only change the numbers
      values_.resize(has_terms ? 5 : 3);
      std::size_t k = 0;
      values_[k++].name = "energy";
      if constexpr (has_terms) {
        values_[k++].name = "alignment";
        values_[k++].name = "repulsion";
      }
      values_[k++].name = "eta";
      values_[k].name = "|grad|";
    }
    std::size_t k = 0;
    values_[k++].value = static_cast<double>(step.energy);
    if constexpr (has_terms) {
      values_[k++].value = static_cast<double>(objective.terms().alignment);
      values_[k++].value = static_cast<double>(objective.terms().repulsion);
    }
    values_[k++].value = static_cast<double>(step.step_size);
    values_[k].value = static_cast<double>(step.gradient_norm);
    reporter->update(first_step + static_cast<Index>(step.iteration) + 1, values_);
    return false;
  }

  /// Calls finish() on the reporter when finish_at_end is set.
  template <typename Opt, typename F, typename M>
  void end_optimization(const Opt&, F&, const M&) {
    if (reporter && finish_at_end) reporter->finish();
  }

 private:
  std::vector<ProgressValue> values_{};
};

/// A callback of run_phase_b that reports to a ProgressReporter: every step with the epoch's
/// mean loss and the rate (the throughput counts training tokens), a line per epoch ("epoch
/// 2/10: train loss 0.41, validation accuracy 0.83, loss 0.39 (best)") through message(), and
/// finish() at the end. Sets the reporter's total to the run's steps.
struct PhaseBProgress {
  ProgressReporter* reporter = nullptr;        ///< where to report (not owned; nullptr: nowhere)
  Index epochs = 0;                            ///< the run's epochs, for the epoch lines
  std::string validation_name = "validation";  ///< what the epoch lines call the validation set

  /// Reports to `r` (nullptr: nowhere) on a run of `epochs` epochs.
  explicit PhaseBProgress(ProgressReporter* r, Index num_epochs = 0,
                          std::string validation = "validation")
      : reporter(r), epochs(num_epochs), validation_name(std::move(validation)) {}

  /// Sets the reporter's total.
  void begin_training(Index total_steps) {
    if (reporter) reporter->set_total(total_steps);
  }

  /// Reports the step, its tokens, the epoch's mean loss and the rate.
  void step_taken(const PhaseBStep& step) {
    if (!reporter) return;
    values_[0].value = step.epoch_loss;
    values_[1].value = step.learning_rate;
    reporter->update(step.step, static_cast<double>(step.tokens), values_);
  }

  /// Prints the epoch's line (its validation figures when it has them).
  void epoch_finished(const EpochRecord& record) {
    if (!reporter) return;
    std::ostringstream os;
    os << "epoch " << (record.epoch + 1) << "/" << epochs << ": train loss " << record.train_loss;
    if (!std::isnan(record.validation_accuracy))
      os << ", " << validation_name << " accuracy " << record.validation_accuracy << ", loss "
         << record.validation_loss << (record.improved ? " (best)" : "");
    reporter->message(os.str());
  }

  /// Finishes the report.
  void end_training(const PhaseBHistory&) {
    if (reporter && !reporter->finished()) reporter->finish();
  }

 private:
  std::vector<ProgressValue> values_{{"loss", 0.0}, {"lr", 0.0}};
};

namespace detail {

/// Calls begin_training(total_steps) on every callback that has it.
template <typename... C>
void begin_training(Index total_steps, C&... callbacks) {
  auto one = [&](auto& c) {
    if constexpr (requires { c.begin_training(total_steps); }) c.begin_training(total_steps);
  };
  (one(callbacks), ...);
}

/// Calls step_taken(step) on every callback that has it.
template <typename... C>
void step_taken(const PhaseBStep& step, C&... callbacks) {
  auto one = [&](auto& c) {
    if constexpr (requires { c.step_taken(step); }) c.step_taken(step);
  };
  (one(callbacks), ...);
}

/// Calls epoch_finished(record) on every callback that has it.
template <typename... C>
void epoch_finished(const EpochRecord& record, C&... callbacks) {
  auto one = [&](auto& c) {
    if constexpr (requires { c.epoch_finished(record); }) c.epoch_finished(record);
  };
  (one(callbacks), ...);
}

/// Calls end_training(history) on every callback that has it.
template <typename... C>
void end_training(const PhaseBHistory& history, C&... callbacks) {
  auto one = [&](auto& c) {
    if constexpr (requires { c.end_training(history); }) c.end_training(history);
  };
  (one(callbacks), ...);
}

}  // namespace detail

}  // namespace coulomb::train
