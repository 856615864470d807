// SPDX-License-Identifier: MIT
/// @file particles/langevin.hpp
/// @brief Projected Langevin dynamics on the particles (Algorithm 1 of Badiei Khuzani et al.,
/// 2026):
///   ω_k ← Π_K( ω_k − η_t · N ∇_{ω_k} H_N(Ω) + √(2η_t/β) ξ_k ),   ξ_k ~ N(0, I),
/// with a step-size schedule η_t, inverse temperature β (β = ∞: projected gradient descent),
/// Π_K the Euclidean projection on a compact convex set, and minibatch drifts. The interface
/// follows ensmallen: `optimize(objective, particles, callbacks...)`.
///
/// An objective provides `evaluate_with_gradient(Ω, grad)`; for minibatches also
/// `evaluate_with_gradient(Ω, begin, size, grad)`, `num_samples()` and `shuffle(rng)`.
/// A callback is any object with some of
///   `void begin_optimization(const Optimizer&, Objective&, const Matrix&)`,
///   `bool step_taken(const Optimizer&, Objective&, const Matrix&, const LangevinStep&)`
///       (return true to stop), `void end_optimization(const Optimizer&, Objective&, const
///   Matrix&)`; missing members cost nothing.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"

namespace coulomb {

/// An objective with value and gradient: `evaluate_with_gradient(Ω, grad)`.
template <typename F, typename Scalar>
concept DifferentiableObjective = requires(F& f, const Matrix<Scalar>& omega, Matrix<Scalar>& g) {
  { f.evaluate_with_gradient(omega, g) } -> std::convertible_to<double>;
};

/// An objective that can also be evaluated on minibatches of its samples.
template <typename F, typename Scalar>
concept MinibatchObjective = DifferentiableObjective<F, Scalar> &&
    requires(F& f, const Matrix<Scalar>& omega, Matrix<Scalar>& g, Index i, Rng& rng) {
  { f.evaluate_with_gradient(omega, i, i, g) } -> std::convertible_to<double>;
  { f.num_samples() } -> std::convertible_to<Index>;
  f.shuffle(rng);
};

/// Π_K for K = the product of balls ‖ω_k‖ ≤ R (each particle projected on its own ball).
struct BallProjection {
  double radius = 10.0;  ///< R > 0
  /// Throws invalid_argument unless R > 0 is finite.
  void validate() const { detail::require_positive(radius, "coulomb::BallProjection", "radius"); }
  /// Scales every particle (row) with ‖ω_k‖ > R back onto the sphere of radius R.
  template <typename Scalar>
  void project(Matrix<Scalar>& particles) const {
    const Scalar r = static_cast<Scalar>(radius);
    for (Index k = 0; k < particles.rows(); ++k) {
      const Scalar norm = particles.row(k).norm();
      if (norm > r) particles.row(k) *= r / norm;
    }
  }
  /// Whether every particle has ‖ω_k‖ ≤ R(1 + tolerance).
  template <typename Scalar>
  bool contains(const Matrix<Scalar>& particles, double tolerance = 1e-6) const {
    return (particles.rowwise().norm().array().template cast<double>() <=
            radius * (1.0 + tolerance))
        .all();
  }
};

/// Π_K for K = the box [lower, upper]^d (entrywise clamp).
struct BoxProjection {
  double lower = -10.0;  ///< lower bound of every coordinate
  double upper = 10.0;   ///< upper bound of every coordinate
  /// Throws invalid_argument unless both bounds are finite and lower < upper.
  void validate() const {
    detail::require(std::isfinite(lower) && std::isfinite(upper) && lower < upper,
                    "coulomb::BoxProjection",
                    "arguments 'lower' and 'upper' must be finite with lower < upper, got [" +
                        std::to_string(lower) + ", " + std::to_string(upper) + "]");
  }
  /// Clamps every entry to [lower, upper].
  template <typename Scalar>
  void project(Matrix<Scalar>& particles) const {
    particles = particles.cwiseMax(static_cast<Scalar>(lower)).cwiseMin(static_cast<Scalar>(upper));
  }
  /// Whether every entry is in [lower, upper], widened by tolerance·max(|lower|, |upper|).
  template <typename Scalar>
  bool contains(const Matrix<Scalar>& particles, double tolerance = 1e-6) const {
    const double slack = tolerance * std::max(std::abs(lower), std::abs(upper));
    return particles.minCoeff() >= lower - slack && particles.maxCoeff() <= upper + slack;
  }
};

/// η_t = η.
struct ConstantStep {
  double step_size = 1e-2;  ///< η
  /// Throws invalid_argument unless η > 0 is finite.
  void validate() const {
    detail::require_positive(step_size, "coulomb::ConstantStep", "step_size");
  }
  /// η_t for step t.
  double operator()(Index) const { return step_size; }
};

/// η_t = η / (1 + t/τ).
struct InverseTimeStep {
  double step_size = 1e-2;    ///< η
  double time_scale = 100.0;  ///< τ
  /// Throws invalid_argument unless η > 0 and τ > 0 are finite.
  void validate() const {
    detail::require_positive(step_size, "coulomb::InverseTimeStep", "step_size");
    detail::require_positive(time_scale, "coulomb::InverseTimeStep", "time_scale");
  }
  /// η_t for step t.
  double operator()(Index t) const {
    return step_size / (1.0 + static_cast<double>(t) / time_scale);
  }
};

/// η_t = η_min + (η − η_min)(1 + cos(π t/T))/2 over T = max_iterations.
struct CosineStep {
  double step_size = 1e-2;       ///< η, at t = 0
  double final_step_size = 0.0;  ///< η_min, at t ≥ T
  Index horizon = 1000;          ///< T
  /// Throws invalid_argument unless η > 0 is finite, 0 ≤ η_min ≤ η and T ≥ 1. (η_min = 0 is
  /// allowed: steps at t ≥ T then move nothing.)
  void validate() const {
    const char* where = "coulomb::CosineStep";
    detail::require_positive(step_size, where, "step_size");
    detail::require(final_step_size >= 0.0 && final_step_size <= step_size, where,
                    "argument 'final_step_size' must be in [0, step_size], got " +
                        std::to_string(final_step_size));
    detail::require(horizon >= 1, where,
                    "argument 'horizon' must be at least 1, got " + std::to_string(horizon));
  }
  /// η_t for step t.
  double operator()(Index t) const {
    const double phase = std::min(1.0, static_cast<double>(t) / static_cast<double>(horizon));
    return final_step_size +
           (step_size - final_step_size) * 0.5 * (1.0 + std::cos(std::numbers::pi * phase));
  }
};

/// Options of ProjectedLangevin.
struct LangevinOptions {
  Index max_iterations = 1000;                            ///< number of steps
  double beta = std::numeric_limits<double>::infinity();  ///< inverse temperature (∞: no noise)
  Index batch_size = 0;                                   ///< minibatch size; 0 = full batch
  std::uint64_t seed = 0;          ///< seeds the noise and the minibatch order
  bool scale_by_particles = true;  ///< drift N ∇_{ω_k} H (true, as in Algorithm 1) or ∇ H
};

/// What a callback sees after each step.
struct LangevinStep {
  Index iteration = 0;         ///< 0-based index of the step just taken
  double energy = 0.0;         ///< objective value at the particles before the step
  double step_size = 0.0;      ///< η_t used
  double gradient_norm = 0.0;  ///< ‖∇H‖_F at the particles before the step
};

namespace detail {

// The optional hooks of an optimizer's callbacks (particles/callbacks.hpp), called when present:
// begin_optimization(optimizer, objective, particles), step_taken(…, LangevinStep) → stop?,
// end_optimization(optimizer, objective, particles).
template <typename C, typename... A>
void callback_begin(C& callback, A&... args) {
  if constexpr (requires { callback.begin_optimization(args...); })
    callback.begin_optimization(args...);
}
template <typename C, typename O, typename F, typename M>
bool callback_step(C& callback, const O& opt, F& f, const M& particles, const LangevinStep& info) {
  if constexpr (requires { callback.step_taken(opt, f, particles, info); })
    return static_cast<bool>(callback.step_taken(opt, f, particles, info));
  else
    return false;
}
// step_taken of every callback (each is called, even after one asks to stop): whether any
// asked to stop.
template <typename O, typename F, typename M, typename... C>
bool callbacks_step(const O& opt, F& f, const M& particles, const LangevinStep& info,
                    C&... callbacks) {
  bool stop = false;
  ((stop = callback_step(callbacks, opt, f, particles, info) || stop), ...);
  return stop;
}
template <typename C, typename... A>
void callback_end(C& callback, A&... args) {
  if constexpr (requires { callback.end_optimization(args...); })
    callback.end_optimization(args...);
}

// The energy and gradient of `objective` at `particles` (on the `batch` samples from `cursor`
// when batch > 0 and the objective takes minibatches). A numerical_error of the objective, or a
// non-finite energy or gradient, puts the particles back to `last_finite` and throws
// numerical_error naming `where` and step `t`.
template <typename Objective, typename S>
double guarded_evaluation(Objective& objective, Matrix<S>& particles, const Matrix<S>& last_finite,
                          [[maybe_unused]] Index cursor, [[maybe_unused]] Index batch,
                          Matrix<S>& gradient, const char* where, Index t) {
  double energy = 0.0;
  try {
    if constexpr (MinibatchObjective<Objective, S>) {
      energy = static_cast<double>(
          batch > 0 ? objective.evaluate_with_gradient(particles, cursor, batch, gradient)
                    : objective.evaluate_with_gradient(particles, gradient));
    } else {
      energy = static_cast<double>(objective.evaluate_with_gradient(particles, gradient));
    }
  } catch (const numerical_error& e) {
    particles = last_finite;
    throw numerical_error(std::string(where) + ": the energy is not finite at step " +
                          std::to_string(t) + " (" + e.what() +
                          "); the particles are those of the last finite step");
  }
  if (!std::isfinite(energy) || !coulomb::detail::all_finite(gradient)) {
    particles = last_finite;
    throw numerical_error(std::string(where) +
                          ": the energy or its gradient is not finite at step " +
                          std::to_string(t) + " (energy " + std::to_string(energy) +
                          "); the particles are those of the last finite step");
  }
  return energy;
}

/// The minibatch size of an optimize call: `requested` (options.batch_size) capped at the
/// objective's num_samples(), which `samples` receives; 0 (full batch) leaves `samples` at 0.
/// Throws invalid_argument for requested > 0 with an objective that has no minibatch evaluation.
template <typename Objective, typename S>
Index minibatch_size(const Objective& objective, Index requested, Index& samples,
                     const char* where) {
  samples = 0;
  if constexpr (MinibatchObjective<Objective, S>) {
    if (requested > 0) {
      samples = objective.num_samples();
      return std::min(requested, samples);
    }
  } else {
    (void)objective;
    require(requested == 0, where,
            "options.batch_size > 0 needs an objective with minibatch evaluation "
            "(evaluate_with_gradient(particles, begin, size, gradient), num_samples(), "
            "shuffle(rng))");
  }
  return requested;
}

}  // namespace detail

/// Projected Langevin dynamics.
template <typename Projection = BallProjection, typename Schedule = ConstantStep>
class ProjectedLangevin {
 public:
  /// Validates the options, the projection and (when it has `validate()`) the schedule.
  explicit ProjectedLangevin(LangevinOptions options = {}, Projection projection = {},
                             Schedule schedule = {})
      : options_(options), projection_(projection), schedule_(schedule) {
    const char* where = "coulomb::ProjectedLangevin";
    detail::require(options.max_iterations >= 0, where,
                    "argument 'options.max_iterations' must be >= 0");
    detail::require(options.batch_size >= 0, where, "argument 'options.batch_size' must be >= 0");
    detail::require(options.beta > 0.0 && !std::isnan(options.beta), where,
                    "argument 'options.beta' must be positive (or infinity), got " +
                        std::to_string(options.beta));
    projection_.validate();
    if constexpr (requires { schedule_.validate(); }) schedule_.validate();
  }

  /// The options given to the constructor.
  const LangevinOptions& options() const noexcept { return options_; }
  /// The projection Π_K.
  const Projection& projection() const noexcept { return projection_; }
  /// The step-size schedule.
  const Schedule& schedule() const noexcept { return schedule_; }

  /// Runs the dynamics from `particles` (N×d, N >= 2), which are projected on K first and
  /// hold the final particles on return. Returns the energy at the last evaluated step.
  /// Throws numerical_error, naming the step, if the energy or its gradient stops being
  /// finite; the particles are then those of the last step whose energy was finite.
  template <typename Objective, typename Scalar, typename... Callbacks>
  double optimize(Objective& objective, Matrix<Scalar>& particles, Callbacks&&... callbacks) {
    const char* where = "coulomb::ProjectedLangevin::optimize";
    detail::require(particles.rows() >= 2, where,
                    "argument 'particles' needs at least 2 rows (N >= 2), got " +
                        std::to_string(particles.rows()));
    detail::require_finite(particles, where, "particles");
    const Index n_particles = particles.rows();
    static_assert(DifferentiableObjective<Objective, Scalar>,
                  "ProjectedLangevin::optimize: the objective needs "
                  "evaluate_with_gradient(particles, gradient); see docs/particles.md");
    Index samples = 0;
    const Index batch =
        detail::minibatch_size<Objective, Scalar>(objective, options_.batch_size, samples, where);
    Rng rng(options_.seed);
    Rng noise_rng = rng.split(1);
    [[maybe_unused]] Rng batch_rng = rng.split(2);

    projection_.project(particles);
    (detail::callback_begin(callbacks, *this, objective, particles), ...);

    Matrix<Scalar> gradient;
    Matrix<Scalar> noise(particles.rows(), particles.cols());
    Matrix<Scalar> last_finite = particles;
    const bool noisy = std::isfinite(options_.beta);
    const double drift_scale = options_.scale_by_particles ? static_cast<double>(n_particles) : 1.0;
    double energy = std::numeric_limits<double>::quiet_NaN();
    Index cursor = samples;  // forces a shuffle on the first minibatch
    for (Index t = 0; t < options_.max_iterations; ++t) {
      if constexpr (MinibatchObjective<Objective, Scalar>) {
        if (batch > 0 && cursor + batch > samples) {
          objective.shuffle(batch_rng);
          cursor = 0;
        }
      }
      energy = detail::guarded_evaluation(objective, particles, last_finite, cursor, batch,
                                          gradient, where, t);
      if (batch > 0) cursor += batch;
      last_finite = particles;
      const double eta = schedule_(t);
      detail::require(eta >= 0.0 && std::isfinite(eta), where,
                      "the step size schedule returned " + std::to_string(eta) + " at step " +
                          std::to_string(t) + "; it must be finite and >= 0");
      [[maybe_unused]] const LangevinStep info{t, energy, eta,
                                               static_cast<double>(gradient.norm())};
      particles -= static_cast<Scalar>(eta * drift_scale) * gradient;
      if (noisy) {
        fill_standard_normal(noise, noise_rng);
        particles += static_cast<Scalar>(std::sqrt(2.0 * eta / options_.beta)) * noise;
      }
      projection_.project(particles);
      if (detail::callbacks_step(*this, objective, particles, info, callbacks...)) break;
    }
    (detail::callback_end(callbacks, *this, objective, particles), ...);
    return energy;
  }

 private:
  LangevinOptions options_;
  Projection projection_;
  Schedule schedule_;
};

}  // namespace coulomb
