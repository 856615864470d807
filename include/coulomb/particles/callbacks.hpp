// SPDX-License-Identifier: MIT
/// @file particles/callbacks.hpp
/// @brief Ready-made callbacks for ProjectedLangevin::optimize: energy logging, particle
/// snapshots, early stopping on a validation metric, and progress lines.
///
/// A callback is any object with some of `begin_optimization`, `step_taken` (return true to
/// stop) and `end_optimization` (see particles/langevin.hpp); these are examples of each.
#pragma once

#include <functional>
#include <limits>
#include <ostream>
#include <vector>

#include "../core/config.hpp"
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

/// Evaluates `metric(particles)` (larger is better, for example a validation accuracy or the
/// normalized alignment on held-out data) every `every` steps, remembers the best particles,
/// and stops after `patience` evaluations without improvement. On stop the best particles
/// are available in `best`.
template <typename Scalar>
struct EarlyStopping {
  std::function<double(const Matrix<Scalar>&)> metric{};  ///< larger is better
  Index every = 50;                                       ///< evaluation period in steps
  Index patience = 5;  ///< evaluations without improvement before stopping
  double best_value = -std::numeric_limits<double>::infinity();  ///< best metric so far
  Index best_iteration = -1;  ///< steps taken at the best evaluation (−1: none yet)
  Matrix<Scalar> best{};      ///< the particles of the best evaluation
  Index evaluations_without_improvement = 0;  ///< since the best evaluation

  /// Evaluates the metric every `every` steps; returns true (stop) after `patience`
  /// evaluations without improvement.
  template <typename Opt, typename F>
  bool step_taken(const Opt&, F&, const Matrix<Scalar>& current, const LangevinStep& step) {
    if (every <= 0 || (step.iteration + 1) % every != 0) return false;
    const double value = metric(current);
    if (value > best_value) {
      best_value = value;
      best_iteration = step.iteration + 1;
      best = current;
      evaluations_without_improvement = 0;
      return false;
    }
    return ++evaluations_without_improvement >= patience;
  }
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
