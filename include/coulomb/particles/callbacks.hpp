// SPDX-License-Identifier: MIT
/// @file particles/callbacks.hpp
/// @brief Ready-made callbacks for ProjectedLangevin::optimize and TiltedLangevin::optimize:
/// energy logging, particle snapshots, early stopping on a validation metric
/// (ParticleEarlyStopping), the convergence report (energy plateau), and progress lines.
///
/// A callback is any object with some of `begin_optimization`, `step_taken` (return true to
/// stop) and `end_optimization` (see particles/langevin.hpp); these are examples of each.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <vector>

#include "../core/config.hpp"
#include "../core/early_stopping.hpp"
#include "langevin.hpp"

namespace coulomb {

/// Records, for every step, the energy and, when the objective reports them through
/// `terms()` (as Hamiltonian does), the alignment and repulsion terms.
struct EnergyLog {
  std::vector<Index> iteration{};   ///< index of each step
  std::vector<double> energy{};     ///< objective value before each step
  std::vector<double> alignment{};  ///< empty unless the objective has terms()
  std::vector<double> repulsion{};  ///< empty unless the objective has terms()
  std::vector<double> step_size{};  ///< η_t of each step

  /// Appends the step's values; never stops the run.
  template <typename Opt, typename F, typename M>
  bool step_taken(const Opt&, F& objective, const M&, const LangevinStep& step) {
    iteration.push_back(step.iteration);
    energy.push_back(step.energy);
    step_size.push_back(step.step_size);
    if constexpr (requires { objective.terms().alignment; }) {
      alignment.push_back(objective.terms().alignment);
      repulsion.push_back(objective.terms().repulsion);
    }
    return false;
  }
};

/// Keeps a copy of the particles before the first step and every `every` steps after it.
template <typename Scalar>
struct ParticleSnapshots {
  Index every = 100;                        ///< snapshot period in steps (≤ 0: only the start)
  std::vector<Index> iteration{};           ///< steps taken when each snapshot was made
  std::vector<Matrix<Scalar>> particles{};  ///< the snapshots

  /// Keeps the particles before the first step.
  template <typename Opt, typename F>
  void begin_optimization(const Opt&, F&, const Matrix<Scalar>& current) {
    iteration.push_back(0);
    particles.push_back(current);
  }
  /// Keeps the particles after every `every`-th step; never stops the run.
  template <typename Opt, typename F>
  bool step_taken(const Opt&, F&, const Matrix<Scalar>& current, const LangevinStep& step) {
    if (every > 0 && (step.iteration + 1) % every == 0) {
      iteration.push_back(step.iteration + 1);
      particles.push_back(current);
    }
    return false;
  }
};

/// Early stopping of the particle dynamics (the rule of core/early_stopping.hpp): evaluates
/// `metric(particles)` (for example a validation accuracy, or the normalized alignment on
/// held-out data) every `every` steps, keeps a copy of the particles of the best evaluation in
/// `best`, and stops after `stopping.patience` evaluations without improvement. Throws
/// numerical_error for a metric that is NaN or infinite, and invalid_argument for invalid
/// `stopping` options (at the start of the run).
template <typename Scalar>
struct ParticleEarlyStopping {
  std::function<double(const Matrix<Scalar>&)> metric{};  ///< evaluated on the particles
  Index every = 50;                                       ///< evaluation period in steps
  /// Patience (evaluations), min_delta and whether larger or smaller metrics are better.
  EarlyStoppingOptions stopping{.patience = 5};
  Matrix<Scalar> best{};  ///< the particles of the best evaluation

  /// The best metric so far (NaN before the first evaluation).
  double best_value() const noexcept { return rule_.best_value(); }
  /// Steps taken at the best evaluation (−1: none yet).
  Index best_iteration() const noexcept { return rule_.best_epoch(); }

  /// Starts the rule afresh with `stopping` (checked).
  template <typename Opt, typename F>
  void begin_optimization(const Opt&, F&, const Matrix<Scalar>&) {
    rule_ = EarlyStoppingRule(stopping);
  }

  /// Evaluates the metric every `every` steps; returns true (stop) after `stopping.patience`
  /// evaluations without improvement.
  template <typename Opt, typename F>
  bool step_taken(const Opt&, F&, const Matrix<Scalar>& current, const LangevinStep& step) {
    if (every <= 0 || (step.iteration + 1) % every != 0) return false;
    rule_.update(
        step.iteration + 1, metric(current), [&] { best = current; },
        "coulomb::ParticleEarlyStopping::step_taken");
    return rule_.should_stop();
  }

  /// The rule's counters (public so that the struct stays an aggregate; internal).
  EarlyStoppingRule rule_{};
};

/// Convergence report: the energy averaged over windows of `window` steps, and a plateau test
/// that can stop the run. With m_j the mean of window j and se_j its standard error (window sd
/// over √window), window j ≥ 2 is flat when
///   |m_j − m_{j−1}| ≤ max( tolerance · |m_j − m_0|,  z · √(se_j² + se_{j−1}²) ):
/// its change is a small fraction of the progress since the first window, or indistinguishable
/// from the step-to-step fluctuation (minibatches, Langevin noise). After `patience` flat
/// windows in a row the run has converged; it stops there when `stop` is true.
struct EnergyPlateau {
  Index window = 25;        ///< steps per window (≥ 2)
  double tolerance = 0.01;  ///< relative change allowed, in units of the progress so far
  double z = 2.0;           ///< multiple of the standard error treated as noise
  Index patience = 2;       ///< consecutive flat windows needed
  bool stop = true;         ///< stop the run once converged
  bool converged = false;   ///< whether the plateau was reached
  Index converged_at = -1;  ///< steps taken when it was reached (−1: not reached)
  double last_change =
      std::numeric_limits<double>::quiet_NaN();  ///< |m_j − m_{j−1}| of the last window
  std::vector<double> window_means{};            ///< m_0, m_1, … of the completed windows
  std::vector<double> window_errors{};           ///< se_0, se_1, …

  /// Accumulates the step's energy; at the end of a window applies the plateau test. Returns
  /// true (stop) when converged and `stop`.
  template <typename Opt, typename F, typename M>
  bool step_taken(const Opt&, F&, const M&, const LangevinStep& step) {
    const Index w = window < 2 ? 2 : window;
    sum_ += step.energy;
    sum_sq_ += step.energy * step.energy;
    if (++count_ < w) return false;
    const double mean = sum_ / static_cast<double>(w);
    const double var = std::max(
        0.0, (sum_sq_ - static_cast<double>(w) * mean * mean) / static_cast<double>(w - 1));
    window_means.push_back(mean);
    window_errors.push_back(std::sqrt(var / static_cast<double>(w)));
    sum_ = sum_sq_ = 0.0;
    count_ = 0;
    const std::size_t j = window_means.size() - 1;
    if (j == 0) return false;
    last_change = std::abs(window_means[j] - window_means[j - 1]);
    const double progress = std::abs(window_means[j] - window_means[0]);
    const double noise = z * std::hypot(window_errors[j], window_errors[j - 1]);
    flat_ = last_change <= std::max(tolerance * progress, noise) ? flat_ + 1 : 0;
    if (!converged && flat_ >= patience) {
      converged = true;
      converged_at = step.iteration + 1;
    }
    return converged && stop;
  }

  // Running state (public so that the struct stays an aggregate for designated initializers).
  double sum_ = 0.0;     ///< Σ energy over the current window (internal)
  double sum_sq_ = 0.0;  ///< Σ energy² over the current window (internal)
  Index count_ = 0;      ///< steps in the current window (internal)
  Index flat_ = 0;       ///< consecutive flat windows (internal)
};

/// Prints "step t/T  energy E  eta η" every `every` steps to `out`.
struct ProgressPrinter {
  std::ostream* out = nullptr;  ///< where to print (nullptr: nowhere)
  Index every = 100;            ///< print period in steps

  /// Prints every `every` steps; never stops the run.
  template <typename Opt, typename F, typename M>
  bool step_taken(const Opt& optimizer, F&, const M&, const LangevinStep& step) {
    if (out && every > 0 && (step.iteration + 1) % every == 0) {
      *out << "step " << (step.iteration + 1) << "/" << optimizer.options().max_iterations
           << "  energy " << step.energy << "  eta " << step.step_size << "  |grad| "
           << step.gradient_norm << "\n";
    }
    return false;
  }
};

}  // namespace coulomb
