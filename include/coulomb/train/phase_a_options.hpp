// SPDX-License-Identifier: MIT
/// @file train/phase_a_options.hpp
/// @brief The options of Phase A (run_phase_a, train/phase_a.hpp), nested as the parts of the
/// method they configure: the warm-up (a short Phase B), the Langevin dynamics
/// (particles/langevin.hpp: LangevinOptions, CosineStep), the Riesz repulsion
/// (particles/riesz.hpp: RieszOptions) and the ball of the projection; and what Phase A returns
/// (PhaseAReport, one PhaseAOmegaReport per Ω). Each record lists its fields once
/// (RecordLayout), for the checkpoints and the run's fingerprint (train/resume.hpp).
/// Documented in docs/training.md (section "Phase A").
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../particles/langevin.hpp"
#include "../particles/riesz.hpp"
#include "detail_record_codec.hpp"
#include "phase_b_options.hpp"
#include "progress.hpp"
#include "resume.hpp"

namespace coulomb::train {

/// Which model state the Phase A representations are taken from.
enum class PhaseARepresentation {
  initial,  ///< the model as given (at initialization for a fresh model)
  warmup,   ///< after a short Phase B of the model with Ω frozen (the vanilla model)
};

/// The name of a representation: "initial" or "warmup".
inline const char* to_string(PhaseARepresentation r) noexcept {
  return r == PhaseARepresentation::initial ? "initial" : "warmup";
}

/// The representation named "initial" or "warmup". Throws invalid_argument for another name.
inline PhaseARepresentation phase_a_representation_from_string(std::string_view name) {
  if (name == "initial") return PhaseARepresentation::initial;
  if (name == "warmup") return PhaseARepresentation::warmup;
  coulomb::detail::throw_invalid(
      "coulomb::train::phase_a_representation_from_string",
      "argument 'name' must be initial or warmup, got '" + std::string(name) + "'");
}

/// The warm-up of Phase A (representation = warmup): a short Phase B of the model with Ω
/// frozen at its random draw.
struct PhaseAWarmup {
  Index steps = 200;  ///< Phase B steps (≥ 1)
  /// The optimizer, schedule and seed. Phase A sets the rest: `steps` steps (epochs and
  /// max_steps), no validation, no progress, its own checkpoints.
  PhaseBOptions training{};
  bool keep_weights = true;  ///< keep the warmed-up weights (false: restore the given ones)
};

/// The ball ‖ω_k‖ ≤ R that the particles are projected on.
struct PhaseAProjection {
  /// Radius R; 0: radius_factor × the largest ‖ω_k‖ of the starting Ω (so that the start is
  /// inside).
  double radius = 0.0;
  double radius_factor = 1.0;  ///< see `radius` (≥ 1)
};

/// Options of Phase A (run_phase_a).
struct PhaseAOptions {
  PhaseARepresentation representation = PhaseARepresentation::initial;  ///< see run_phase_a
  Index num_sequences = 2048;  ///< training sequences whose representations are used (0: all)
  Index batch_size = 128;      ///< sequences per forward pass when collecting them (≥ 1)
  PhaseAWarmup warmup{};       ///< the warm-up (representation = warmup)
  /// The dynamics of every Ω: max_iterations steps (≥ 0), inverse temperature beta (∞: no
  /// noise), rows per minibatch batch_size (0: all). The seed of each Ω's run is drawn from
  /// `seed` (langevin.seed is not used).
  LangevinOptions langevin{.max_iterations = 300};
  /// The cosine step schedule η₀ = step_size (> 0) → final_step_size ∈ [0, step_size] over
  /// the run (its horizon is langevin.max_iterations; schedule.horizon is not used).
  CosineStep schedule{.step_size = 1.0, .final_step_size = 0.0};
  double repulsion = 1e-3;  ///< λ, the weight of the Riesz energy (≥ 0)
  /// The Riesz energy: s ≥ 0, or < 0 for Coulomb s = d_head − 2; softening ε > 0.
  RieszOptions riesz{.s = -1.0, .softening = 0.1};
  PhaseAProjection projection{};         ///< the ball of the projection
  std::uint64_t seed = 0;                ///< seeds the subsample, the Langevin noise, minibatches
  ProgressReporter* progress = nullptr;  ///< Langevin progress (not owned; finished at the end)
  /// Checkpoints and resuming (default: none; see run_phase_a). The path must differ from
  /// Phase B's; warmup.training.checkpoint is ignored (the warm-up writes Phase A checkpoints).
  CheckpointOptions checkpoint{};
  /// The processes of a data-parallel run (not owned; docs/distributed.md): the warm-up is a
  /// data-parallel Phase B, and each process sums the alignment energy and its gradient over
  /// its share of the rows, the sums taken over the processes at every Langevin step; the
  /// noise comes from the same seed on every process, so Ω is the same bit for bit on each.
  /// Rank 0 writes the checkpoints, and every process resumes from the same file. nullptr (or
  /// one process): this process alone, bit for bit as without it.
  Collective* collective = nullptr;

  /// Throws invalid_argument, naming the field, unless every field is valid (and the warm-up's
  /// training options too).
  void validate() const {
    const char* where = "coulomb::train::PhaseAOptions";
    using coulomb::detail::require;
    checkpoint.validate();
    require(!(langevin.batch_size > 0 && is_distributed(collective)), where,
            "argument 'langevin.batch_size' must be 0 (full batch) with a 'collective' of "
            "several processes, got " +
                std::to_string(langevin.batch_size));
    require(representation == PhaseARepresentation::initial ||
                representation == PhaseARepresentation::warmup,
            where, "argument 'representation' is neither initial nor warmup");
    require(num_sequences >= 0, where,
            "argument 'num_sequences' must be >= 0 (0: all), got " + std::to_string(num_sequences));
    require(batch_size >= 1, where,
            "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
    if (representation == PhaseARepresentation::warmup) {
      require(warmup.steps >= 1, where,
              "argument 'warmup.steps' must be at least 1, got " + std::to_string(warmup.steps));
      warmup.training.validate();
    }
    require(langevin.max_iterations >= 0, where,
            "argument 'langevin.max_iterations' must be >= 0, got " +
                std::to_string(langevin.max_iterations));
    require(
        langevin.beta > 0.0 && !std::isnan(langevin.beta), where,
        "argument 'langevin.beta' must be > 0 (or infinity), got " + std::to_string(langevin.beta));
    require(langevin.batch_size >= 0, where,
            "argument 'langevin.batch_size' must be >= 0 (0: full batch), got " +
                std::to_string(langevin.batch_size));
    coulomb::detail::require_positive(schedule.step_size, where, "schedule.step_size");
    require(schedule.final_step_size >= 0.0 && schedule.final_step_size <= schedule.step_size,
            where,
            "argument 'schedule.final_step_size' must be in [0, schedule.step_size], got " +
                std::to_string(schedule.final_step_size));
    require(repulsion >= 0.0 && std::isfinite(repulsion), where,
            "argument 'repulsion' must be finite and >= 0, got " + std::to_string(repulsion));
    require(std::isfinite(riesz.s), where,
            "argument 'riesz.s' must be finite, got " + std::to_string(riesz.s));
    coulomb::detail::require_positive(riesz.softening, where, "riesz.softening");
    require(
        riesz.tile_rows >= 1, where,
        "argument 'riesz.tile_rows' must be at least 1, got " + std::to_string(riesz.tile_rows));
    require(riesz.columns >= 0, where,
            "argument 'riesz.columns' must be >= 0 (0: all), got " + std::to_string(riesz.columns));
    require(projection.radius >= 0.0 && std::isfinite(projection.radius), where,
            "argument 'projection.radius' must be finite and >= 0 (0: automatic), got " +
                std::to_string(projection.radius));
    require(projection.radius_factor >= 1.0 && std::isfinite(projection.radius_factor), where,
            "argument 'projection.radius_factor' must be finite and >= 1, got " +
                std::to_string(projection.radius_factor));
  }
};

/// What Phase A did to one Ω.
struct PhaseAOmegaReport {
  Index omega = 0;                           ///< index of the Ω in the model
  Index samples = 0;                         ///< rows of the representations it was learned on
  double radius = 0.0;                       ///< radius R of the ball projection used
  double energy_before = 0.0;                ///< H_N at the starting Ω (all rows)
  double energy_after = 0.0;                 ///< H_N at the learned Ω (all rows)
  double alignment_before = 0.0;             ///< E at the start
  double alignment_after = 0.0;              ///< E at the end
  double repulsion_before = 0.0;             ///< W_{N,s} at the start (before the factor λ)
  double repulsion_after = 0.0;              ///< W_{N,s} at the end
  double normalized_alignment_before = 0.0;  ///< Cortes et al.'s alignment A ∈ [0, 1], start
  double normalized_alignment_after = 0.0;   ///< and end
  double relative_change = 0.0;              ///< ‖Ω_after − Ω_before‖_F / ‖Ω_before‖_F
};

/// What Phase A did.
struct PhaseAReport {
  PhaseARepresentation representation = PhaseARepresentation::initial;  ///< where x came from
  Index sequences = 0;                      ///< training sequences whose representations were used
  Index warmup_steps = 0;                   ///< Phase B steps of the warm-up (0 for initial)
  double warmup_seconds = 0.0;              ///< wall time of the warm-up (every session)
  Index langevin_steps = 0;                 ///< Langevin steps per Ω
  std::vector<PhaseAOmegaReport> omegas{};  ///< one per Ω of the model
  double energy_before = 0.0;               ///< Σ over the Ω of H_N at the start
  double energy_after = 0.0;                ///< Σ over the Ω of H_N at the end
  double alignment_before = 0.0;            ///< Σ of E at the start
  double alignment_after = 0.0;             ///< Σ of E at the end
  double repulsion_before = 0.0;            ///< Σ of W at the start
  double repulsion_after = 0.0;             ///< Σ of W at the end
  double seconds = 0.0;  ///< wall time of Phase A, warm-up included (every session)

  /// Appends the report of one Ω and adds its terms to the sums.
  void add(const PhaseAOmegaReport& r) {
    energy_before += r.energy_before;
    energy_after += r.energy_after;
    alignment_before += r.alignment_before;
    alignment_after += r.alignment_after;
    repulsion_before += r.repulsion_before;
    repulsion_after += r.repulsion_after;
    omegas.push_back(r);
  }
};

namespace detail {

/// The warm-up's options in a fingerprint, under the names of the first layout.
template <>
struct RecordLayout<PhaseAWarmup> {
  using W = PhaseAWarmup;  ///< the record
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("warmup_steps", &W::steps), field("warmup.", &W::training),
                      field("keep_warmup_weights", &W::keep_weights));
};

/// The options that change the result of Phase A, for the run's fingerprint, under the names
/// of the first layout (flat then), so that its checkpoints still resume. Options added since
/// are recorded only when they differ from what those runs used.
template <>
struct RecordLayout<PhaseAOptions> {
  using O = PhaseAOptions;  ///< the record
  /// The fields.
  static constexpr auto fields = std::make_tuple(
      field("representation", &O::representation), field("num_sequences", &O::num_sequences),
      field("batch_size", &O::batch_size),
      field("", &O::warmup, FieldFlags::none,
            [](const O& o) { return o.representation == PhaseARepresentation::warmup; }),
      field(
          "steps", [](auto& o) -> auto& { return o.langevin.max_iterations; }),
      field(
          "step_size", [](auto& o) -> auto& { return o.schedule.step_size; }),
      field(
          "final_step_size", [](auto& o) -> auto& { return o.schedule.final_step_size; }),
      field(
          "beta", [](auto& o) -> auto& { return o.langevin.beta; }),
      field(
          "langevin_batch_size", [](auto& o) -> auto& { return o.langevin.batch_size; }),
      field("repulsion", &O::repulsion),
      field(
          "riesz_exponent", [](auto& o) -> auto& { return o.riesz.s; }),
      field(
          "softening", [](auto& o) -> auto& { return o.riesz.softening; }),
      field(
          "radius", [](auto& o) -> auto& { return o.projection.radius; }),
      field(
          "radius_factor", [](auto& o) -> auto& { return o.projection.radius_factor; }),
      field("seed", &O::seed),
      field(
          "langevin.scale_by_particles",
          [](auto& o) -> auto& { return o.langevin.scale_by_particles; }, FieldFlags::none,
          [](const O& o) { return !o.langevin.scale_by_particles; }),
      field(
          "riesz.tile_rows", [](auto& o) -> auto& { return o.riesz.tile_rows; }, FieldFlags::none,
          [](const O& o) { return o.riesz.tile_rows != RieszOptions{}.tile_rows; }),
      field(
          "riesz.columns", [](auto& o) -> auto& { return o.riesz.columns; }, FieldFlags::none,
          [](const O& o) { return o.riesz.columns != 0; }));
};

/// A PhaseAOmegaReport as one line of numbers (metadata "phase_a.report.omega.<k>").
template <>
struct RecordLayout<PhaseAOmegaReport> {
  using R = PhaseAOmegaReport;  ///< the record
  /// The fields.
  static constexpr auto fields = std::make_tuple(
      field("omega", &R::omega), field("samples", &R::samples), field("radius", &R::radius),
      field("energy_before", &R::energy_before), field("energy_after", &R::energy_after),
      field("alignment_before", &R::alignment_before),
      field("alignment_after", &R::alignment_after),
      field("repulsion_before", &R::repulsion_before),
      field("repulsion_after", &R::repulsion_after),
      field("normalized_alignment_before", &R::normalized_alignment_before),
      field("normalized_alignment_after", &R::normalized_alignment_after),
      field("relative_change", &R::relative_change));
};

/// What a Phase A checkpoint records of the report under "phase_a." (the Ω's lines apart).
template <>
struct RecordLayout<PhaseAReport> {
  using R = PhaseAReport;  ///< the record
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("sequences", &R::sequences), field("warmup_steps", &R::warmup_steps),
                      field("warmup_seconds", &R::warmup_seconds));
};

}  // namespace detail

}  // namespace coulomb::train
