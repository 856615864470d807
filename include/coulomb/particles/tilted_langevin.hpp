// SPDX-License-Identifier: MIT
/// @file particles/tilted_langevin.hpp
/// @brief Scale-free Langevin dynamics on the particles whose stationary law is the base draw
/// of the random features tilted by the Hamiltonian: coulomb's default particle learner.
///
/// Badiei Khuzani et al. (2026), §3 minimise the free energy
///   F(ρ) = ∫V dρ + λ∫∫W dρ dρ + β⁻¹ ∫ρ log ρ
/// over measures on a compact set K (Algorithm 1, particles/langevin.hpp). In dimension d the
/// entropy of Lebesgue measure on K outweighs the alignment unless β is tuned to the data's
/// scale and d (the issue-20 reproduction of Sinha & Duchi's example made the particles worse
/// than their start at β ≤ 300). TiltedLangevin takes the entropy relative to the base draw P₀
/// of the map instead (Gaussian frequencies of scale σ_ω, uniform phases), so that the N-particle
/// law it samples is
///   π(Θ) ∝ exp(−β_eff N H_N(Θ)) Π_k P₀(θ_k),
/// whose mean-field limit minimises F(ρ) = ∫V dρ + λ∫∫W dρ dρ + β_eff⁻¹ KL(ρ ‖ P₀): an
/// exponential tilt of the random-feature distribution, where Sinha & Duchi (NIPS 2016) tilt the
/// same P₀ inside a χ² ball (particles/importance_sampling.hpp). A particle θ_k is a row of Θ:
/// its first d_ω columns are the frequency ω_k, its last `phase_columns` columns are phases
/// (uniform on the circle under P₀, wrapped into [−π, π) after each step).
///
/// Scale-free units. The temperature is relative to the energy's scale at the start,
///   β_eff = β / s,   s = σ_ω · RMS_k ‖N ∇_{ω_k} H_N(Θ₀)‖   (full batch),
/// the change of the per-particle potential when one particle moves by one standard deviation of
/// the base draw: rescaling H, the data or the frequencies leaves the dynamics unchanged. The
/// step is in the coordinates u = P^{−1/2}θ with P = diag(σ_ω² for frequencies, 1 for phases),
/// where the base measure has unit curvature; the drift is tamed (Brosse, Durmus, Moulines &
/// Sabanis, *The tamed unadjusted Langevin algorithm*, Stochastic Processes and their
/// Applications 2019) so that a stiff alignment cannot make a step diverge:
///   a_k = −β_eff N P^{1/2} ∇_{θ_k} H_N(Θ) − (ω_k/σ_ω, 0)
///   θ_k ← θ_k + P^{1/2} ( h a_k / (1 + h ‖a_k‖) + √(2h) ξ_k ),   ξ_k ~ N(0, I).
/// With `noise = false` (the "no noise" ablation, β = ∞ in Algorithm 1) both the Brownian term
/// and the entropy's drift −(ω_k/σ_ω, 0) are dropped: tamed gradient descent on H_N with the same
/// step. The interface is ProjectedLangevin's: `optimize(objective, particles, callbacks...)`.
///
/// Exact moves (objectives whose H is a sum of one-particle energies e_k, `separable()`: the
/// alignment of Rff or RffCosSin without repulsion; full batch; with noise):
/// - `metropolis`: each step is a per-particle Metropolis-adjusted Langevin (MALA) proposal
///   with the tamed drift above, accepted with probability
///     min(1, π_k(θ'_k) q(θ_k | θ'_k) / (π_k(θ_k) q(θ'_k | θ_k))),  π_k ∝ exp(−β_eff N e_k) P₀,
///   so the chain samples π exactly whatever h (the tamed drift alone overshoots narrow modes);
/// - `jump_period` = J > 0: every J steps each particle is offered a fresh draw θ' ~ P₀ (an
///   independence proposal), accepted with probability min(1, exp(−β_eff N (e_k(θ') − e_k(θ)))):
///   particles can reach modes that the local moves would take exponentially long to find.
/// Both leave π invariant; elsewhere (repulsion, minibatches, no noise) they are skipped and the
/// report says so.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "langevin.hpp"

namespace coulomb {

/// Options of TiltedLangevin. The defaults were chosen on development splits cut from the
/// training data of the synthetic tasks and of Sinha & Duchi's example (docs/particles.md).
struct TiltedLangevinOptions {
  /// Largest number of steps (a callback such as EnergyPlateau may stop the run earlier).
  Index max_iterations = 1000;
  double beta = 16.0;       ///< relative inverse temperature β: β_eff = β / s
  double step = 0.05;       ///< h, the step in units of the base measure (u = P^{−1/2}θ)
  double base_scale = 1.0;  ///< σ_ω, the standard deviation of the base draw's frequencies
  Index phase_columns = 0;  ///< trailing columns of the particles that are phases
  Index batch_size = 0;     ///< minibatch size; 0 = full batch
  /// Steps that reuse one minibatch before the next is drawn (≥ 1). Above 1, the drift is the
  /// exact gradient of one subsample's energy for that long: a slowly changing landscape instead
  /// of an independent gradient error at every step, which β_eff N h would turn into a kick.
  Index batch_period = 1;
  std::uint64_t seed = 0;  ///< seeds the noise and the minibatch order
  bool noise = true;       ///< false: no Brownian term and no entropy drift (ablation)
  /// Metropolis-adjusted steps (MALA) where the objective allows them (see the file's notes).
  bool metropolis = false;
  /// Steps between independence jumps to the base draw (0: none), where allowed.
  Index jump_period = 0;
};

/// What TiltedLangevin::optimize measured: the energy scale s and the temperature it set.
struct TiltedLangevinReport {
  double energy_scale = 0.0;    ///< s = σ_ω · RMS_k ‖N ∇_{ω_k} H(Θ₀)‖
  double beta_effective = 0.0;  ///< β_eff = β / s
  Index iterations = 0;         ///< steps taken
  double energy = 0.0;          ///< objective value before the last step
  bool metropolis = false;      ///< whether the steps were Metropolis-adjusted
  Index moves_offered = 0;      ///< MALA proposals (particles × steps)
  Index moves_accepted = 0;     ///< MALA proposals accepted
  Index jumps_offered = 0;      ///< independence jumps offered (particles × jump steps)
  Index jumps_accepted = 0;     ///< independence jumps accepted
};

/// An objective whose value may be a sum of one-particle energies (`separable()`), with the
/// energies and the gradient in one pass: what TiltedLangevin's exact moves need.
template <typename F, typename Scalar>
concept ParticleObjective = DifferentiableObjective<F, Scalar> &&
    requires(F& f, const Matrix<Scalar>& theta, Vector<Scalar>& e, Matrix<Scalar>& g) {
  { f.separable() } -> std::convertible_to<bool>;
  f.particle_energies(theta, e);
  { f.evaluate_particles(theta, e, g) } -> std::convertible_to<double>;
};

/// Tamed Langevin dynamics on the base-tilted law π ∝ exp(−β_eff N H) Π_k P₀ (see the file's
/// description). Deterministic for a given seed.
class TiltedLangevin {
 public:
  /// Validates the options: max_iterations, batch_size, phase_columns ≥ 0; β, h, σ_ω > 0 and
  /// finite.
  explicit TiltedLangevin(TiltedLangevinOptions options = {}) : options_(options) {
    const char* where = "coulomb::TiltedLangevin";
    detail::require(options.max_iterations >= 0, where,
                    "argument 'options.max_iterations' must be >= 0");
    detail::require(options.batch_size >= 0, where, "argument 'options.batch_size' must be >= 0");
    detail::require(options.phase_columns >= 0, where,
                    "argument 'options.phase_columns' must be >= 0");
    detail::require(options.batch_period >= 1, where,
                    "argument 'options.batch_period' must be >= 1");
    detail::require(options.jump_period >= 0, where, "argument 'options.jump_period' must be >= 0");
    detail::require_positive(options.beta, where, "options.beta");
    detail::require_positive(options.step, where, "options.step");
    detail::require_positive(options.base_scale, where, "options.base_scale");
  }

  /// The options given to the constructor.
  const TiltedLangevinOptions& options() const noexcept { return options_; }
  /// The scale and temperature of the last call of optimize.
  const TiltedLangevinReport& report() const noexcept { return report_; }

  /// Runs the dynamics from `particles` (N×(d_ω + phase_columns), N ≥ 2), which hold the final
  /// particles on return. Returns the energy before the last step. Throws numerical_error,
  /// naming the step, if the energy or its gradient stops being finite (the particles are then
  /// those of the last finite step), and invalid_argument for bad particles or a batch size on an
  /// objective without minibatches.
  template <typename Objective, typename Scalar, typename... Callbacks>
  double optimize(Objective& objective, Matrix<Scalar>& particles, Callbacks&&... callbacks) {
    const char* where = "coulomb::TiltedLangevin::optimize";
    static_assert(DifferentiableObjective<Objective, Scalar>,
                  "TiltedLangevin::optimize: the objective needs "
                  "evaluate_with_gradient(particles, gradient); see docs/particles.md");
    detail::require(particles.rows() >= 2, where,
                    "argument 'particles' needs at least 2 rows (N >= 2), got " +
                        std::to_string(particles.rows()));
    detail::require(particles.cols() > options_.phase_columns, where,
                    "argument 'particles' has " + std::to_string(particles.cols()) +
                        " columns, expected more than options.phase_columns = " +
                        std::to_string(options_.phase_columns));
    detail::require_finite(particles, where, "particles");
    Index samples = 0;
    const Index batch =
        detail::minibatch_size<Objective, Scalar>(objective, options_.batch_size, samples, where);
    const Index n_particles = particles.rows();
    const Index d_omega = particles.cols() - options_.phase_columns;
    const double sigma = options_.base_scale;
    const auto dn = static_cast<double>(n_particles);

    Matrix<Scalar> gradient;
    Matrix<Scalar> last_finite = particles;
    wrap_phases(particles);
    // s = σ_ω · RMS_k ‖N ∇_{ω_k} H(Θ₀)‖ on all samples.
    const double energy0 =
        static_cast<double>(objective.evaluate_with_gradient(particles, gradient));
    detail::require(std::isfinite(energy0) && coulomb::detail::all_finite(gradient), where,
                    "the energy or its gradient is not finite at the initial particles");
    const double rms = std::sqrt(
        gradient.leftCols(d_omega).template cast<double>().rowwise().squaredNorm().mean());
    report_ = {sigma * dn * rms, 0.0, 0, energy0};
    // A zero gradient (constant energy) leaves only the base measure: β_eff is then irrelevant.
    report_.beta_effective = report_.energy_scale > 0 ? options_.beta / report_.energy_scale : 0.0;
    const double drift_scale = report_.beta_effective * dn;

    Rng rng(options_.seed);
    Rng noise_rng = rng.split(1);
    [[maybe_unused]] Rng batch_rng = rng.split(2);
    [[maybe_unused]] Rng jump_rng = rng.split(3);
    (detail::callback_begin(callbacks, *this, objective, particles), ...);

    bool exact_moves = false;
    if constexpr (ParticleObjective<Objective, Scalar>)
      exact_moves = options_.noise && batch == 0 && objective.separable();
    const bool jumps = exact_moves && options_.jump_period > 0;
    if constexpr (ParticleObjective<Objective, Scalar>) {
      if (exact_moves && options_.metropolis) {
        report_.metropolis = true;
        const double e =
            run_metropolis(objective, particles, drift_scale, noise_rng, jump_rng, callbacks...);
        (detail::callback_end(callbacks, *this, objective, particles), ...);
        return e;
      }
    }

    Matrix<Scalar> drift(particles.rows(), particles.cols());
    Matrix<Scalar> noise(particles.rows(), particles.cols());
    Vector<Scalar> norms(particles.rows());
    // P^{1/2}: σ_ω on the frequency columns, 1 on the phases.
    RowVector<Scalar> root_p = RowVector<Scalar>::Ones(particles.cols());
    root_p.head(d_omega).setConstant(static_cast<Scalar>(sigma));
    const auto h = static_cast<Scalar>(options_.step);
    const auto noise_amplitude = static_cast<Scalar>(std::sqrt(2.0 * options_.step));
    double energy = energy0;
    Index cursor = samples;  // forces a shuffle on the first minibatch
    for (Index t = 0; t < options_.max_iterations; ++t) {
      if constexpr (MinibatchObjective<Objective, Scalar>) {
        if (batch > 0) {
          if (t % options_.batch_period == 0 && t > 0) cursor += batch;  // the next minibatch
          if (cursor + batch > samples) {
            objective.shuffle(batch_rng);
            cursor = 0;
          }
        }
      }
      energy = detail::guarded_evaluation(objective, particles, last_finite, cursor, batch,
                                          gradient, where, t);
      last_finite = particles;
      [[maybe_unused]] const LangevinStep info{t, energy, options_.step,
                                               static_cast<double>(gradient.norm())};
      // a_k = −β_eff N P^{1/2} ∇_k H − (ω_k/σ_ω, 0), tamed per particle.
      drift.noalias() = static_cast<Scalar>(-drift_scale) * gradient;
      drift.array().rowwise() *= root_p.array();
      if (options_.noise)
        drift.leftCols(d_omega) -= particles.leftCols(d_omega) / static_cast<Scalar>(sigma);
      norms.noalias() = drift.rowwise().norm();
      drift.array().colwise() *= (Scalar(1) + h * norms.array()).inverse();
      drift *= h;
      if (options_.noise) {
        fill_standard_normal(noise, noise_rng);
        drift += noise_amplitude * noise;
      }
      drift.array().rowwise() *= root_p.array();
      particles += drift;
      wrap_phases(particles);
      if constexpr (ParticleObjective<Objective, Scalar>) {
        if (jumps && (t + 1) % options_.jump_period == 0) {
          Vector<Scalar> current, proposed;
          objective.particle_energies(particles, current);
          draw_base(noise, jump_rng);
          objective.particle_energies(noise, proposed);
          for (Index k = 0; k < n_particles; ++k)
            if (accept(-drift_scale * static_cast<double>(proposed(k) - current(k)), jump_rng)) {
              particles.row(k) = noise.row(k);
              ++report_.jumps_accepted;
            }
          report_.jumps_offered += n_particles;
        }
      }
      report_.iterations = t + 1;
      report_.energy = energy;
      if (detail::callbacks_step(*this, objective, particles, info, callbacks...)) break;
    }
    (detail::callback_end(callbacks, *this, objective, particles), ...);
    return energy;
  }

 private:
  /// Metropolis acceptance of a move whose log ratio is `log_ratio`.
  static bool accept(double log_ratio, Rng& rng) {
    return log_ratio >= 0.0 || uniform01(rng) < std::exp(log_ratio);
  }

  /// θ ~ P₀: frequencies N(0, σ_ω²), phases uniform on [−π, π).
  template <typename Scalar>
  void draw_base(Matrix<Scalar>& theta, Rng& rng) const {
    const Index d_omega = theta.cols() - options_.phase_columns;
    fill_standard_normal(theta, rng);
    theta.leftCols(d_omega) *= static_cast<Scalar>(options_.base_scale);
    for (Index c = d_omega; c < theta.cols(); ++c)
      for (Index k = 0; k < theta.rows(); ++k)
        theta(k, c) = static_cast<Scalar>(std::numbers::pi * (2.0 * uniform01(rng) - 1.0));
  }

  /// The tamed drift h·a/(1 + h‖a‖) in u-coordinates, a = −β_eff N P^{1/2} g − (ω/σ_ω, 0),
  /// for every particle (row) of `theta` with gradient rows `gradient`.
  template <typename Scalar>
  void tamed_drift(const Matrix<Scalar>& theta, const Matrix<Scalar>& gradient, double drift_scale,
                   Matrix<Scalar>& drift) const {
    const Index d_omega = theta.cols() - options_.phase_columns;
    const auto sigma = static_cast<Scalar>(options_.base_scale);
    const auto h = static_cast<Scalar>(options_.step);
    drift.noalias() = static_cast<Scalar>(-drift_scale) * gradient;
    drift.leftCols(d_omega) *= sigma;
    drift.leftCols(d_omega) -= theta.leftCols(d_omega) / sigma;
    for (Index k = 0; k < drift.rows(); ++k)
      drift.row(k) *= h / (Scalar(1) + h * drift.row(k).norm());
  }

  /// The MALA chain of `metropolis` (with the jumps of `jump_period`) on a separable objective.
  template <typename Objective, typename Scalar, typename... Callbacks>
  double run_metropolis(Objective& objective, Matrix<Scalar>& particles, double drift_scale,
                        Rng& noise_rng, Rng& jump_rng, Callbacks&... callbacks) {
    const char* where = "coulomb::TiltedLangevin::optimize";
    const Index n = particles.rows();
    const Index cols = particles.cols();
    const Index d_omega = cols - options_.phase_columns;
    const double sigma = options_.base_scale;
    const double h = options_.step;
    const auto amplitude = static_cast<Scalar>(std::sqrt(2.0 * h));
    Vector<Scalar> energies, new_energies;
    Matrix<Scalar> gradient, new_gradient, drift, new_drift, proposal(n, cols), noise(n, cols);
    auto check = [&](double value, const Matrix<Scalar>& g, Index t) {
      if (!std::isfinite(value) || !coulomb::detail::all_finite(g))
        throw numerical_error(std::string(where) +
                              ": the energy or its gradient is not finite at step " +
                              std::to_string(t) + " (energy " + std::to_string(value) + ")");
    };
    double energy =
        static_cast<double>(objective.evaluate_particles(particles, energies, gradient));
    check(energy, gradient, 0);
    tamed_drift(particles, gradient, drift_scale, drift);
    // log π_k up to a constant: −β_eff N e_k − ‖ω_k/σ_ω‖²/2.
    auto log_target = [&](const Matrix<Scalar>& theta, const Vector<Scalar>& e, Index k) {
      const double u2 =
          static_cast<double>(theta.row(k).head(d_omega).squaredNorm()) / (sigma * sigma);
      return -drift_scale * static_cast<double>(e(k)) - 0.5 * u2;
    };
    // ‖u_to − u_from − drift_from‖² with the phase differences wrapped onto the circle.
    auto gap = [&](const Matrix<Scalar>& to, const Matrix<Scalar>& from,
                   const Matrix<Scalar>& drift_from, Index k) {
      double sum = 0.0;
      for (Index c = 0; c < cols; ++c) {
        double delta = static_cast<double>(to(k, c)) - static_cast<double>(from(k, c));
        if (c < d_omega) {
          delta /= sigma;
        } else {
          delta = delta - 2.0 * std::numbers::pi *
                              std::floor((delta + std::numbers::pi) / (2.0 * std::numbers::pi));
        }
        delta -= static_cast<double>(drift_from(k, c));
        sum += delta * delta;
      }
      return sum;
    };
    // The energies, gradients and drifts of `proposal`; particle k taking its proposal.
    auto evaluate_proposal = [&](Index t) {
      const double value =
          static_cast<double>(objective.evaluate_particles(proposal, new_energies, new_gradient));
      check(value, new_gradient, t);
      tamed_drift(proposal, new_gradient, drift_scale, new_drift);
    };
    auto take = [&](Index k, Index& accepted) {
      particles.row(k) = proposal.row(k);
      energies(k) = new_energies(k);
      gradient.row(k) = new_gradient.row(k);
      drift.row(k) = new_drift.row(k);
      ++accepted;
    };
    RowVector<Scalar> root_p = RowVector<Scalar>::Ones(cols);
    root_p.head(d_omega).setConstant(static_cast<Scalar>(sigma));
    for (Index t = 0; t < options_.max_iterations; ++t) {
      [[maybe_unused]] const LangevinStep info{t, energy, h, static_cast<double>(gradient.norm())};
      fill_standard_normal(noise, noise_rng);
      proposal = drift + amplitude * noise;
      proposal.array().rowwise() *= root_p.array();
      proposal += particles;
      wrap_phases(proposal);
      evaluate_proposal(t);
      for (Index k = 0; k < n; ++k) {
        const double log_ratio =
            log_target(proposal, new_energies, k) - log_target(particles, energies, k) -
            (gap(particles, proposal, new_drift, k) - gap(proposal, particles, drift, k)) /
                (4.0 * h);
        if (accept(log_ratio, noise_rng)) take(k, report_.moves_accepted);
      }
      report_.moves_offered += n;
      if (options_.jump_period > 0 && (t + 1) % options_.jump_period == 0) {
        draw_base(proposal, jump_rng);
        evaluate_proposal(t);
        for (Index k = 0; k < n; ++k)
          if (accept(-drift_scale * static_cast<double>(new_energies(k) - energies(k)), jump_rng))
            take(k, report_.jumps_accepted);
        report_.jumps_offered += n;
      }
      energy = static_cast<double>(energies.template cast<double>().sum());
      report_.iterations = t + 1;
      report_.energy = energy;
      if (detail::callbacks_step(*this, objective, particles, info, callbacks...)) break;
    }
    return energy;
  }

  /// Phases into [−π, π): the features are 2π-periodic in them.
  template <typename Scalar>
  void wrap_phases(Matrix<Scalar>& particles) const {
    const Index first = particles.cols() - options_.phase_columns;
    for (Index c = first; c < particles.cols(); ++c)
      for (Index k = 0; k < particles.rows(); ++k) {
        const double b = static_cast<double>(particles(k, c));
        particles(k, c) = static_cast<Scalar>(
            b -
            2.0 * std::numbers::pi * std::floor((b + std::numbers::pi) / (2.0 * std::numbers::pi)));
      }
  }

  TiltedLangevinOptions options_;
  TiltedLangevinReport report_;
};

}  // namespace coulomb
