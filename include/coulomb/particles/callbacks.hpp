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
  std::vector<Index> iteration{};
  std::vector<double> energy{};
  std::vector<double> alignment{};  ///< empty unless the objective has terms()
  std::vector<double> repulsion{};  ///< empty unless the objective has terms()
  std::vector<double> step_size{};

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
  Index every = 100;
  std::vector<Index> iteration{};
  std::vector<Matrix<Scalar>> particles{};

  template <typename Opt, typename F>
  void begin_optimization(const Opt&, F&, const Matrix<Scalar>& current) {
    iteration.push_back(0);
    particles.push_back(current);
  }
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
  std::function<double(const Matrix<Scalar>&)> metric{};
  Index every = 50;
  Index patience = 5;
  double best_value = -std::numeric_limits<double>::infinity();
  Index best_iteration = -1;
  Matrix<Scalar> best{};
  Index evaluations_without_improvement = 0;

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
  std::ostream* out = nullptr;
  Index every = 100;

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
