// SPDX-License-Identifier: MIT
/// @file train/phase_a.hpp
/// @brief Phase A of the paper's text experiments (Badiei Khuzani et al., 2026, §4): the
/// particles Ω of a TextClassifier's feature maps are learned from the labels by projected
/// Langevin dynamics on the particle Hamiltonian H_N(Ω) = E(Ω) + λ·W_{N,s}(Ω) (kernel-target
/// alignment + Riesz repulsion, particles/), with the model's sequence representations as the
/// inputs x; then Ω is set in the model and frozen for Phase B (train/phase_b.hpp).
/// Documented in docs/training.md (section "Phase A").
///
/// Representations (nn::phase_a_representations): for sequence b and head h of
/// layer l, r_{l,b,h} = d_head^{-1/4} · masked mean of the keys of head h — the inputs the
/// layer's feature map sees, pooled per sequence. Each layer's map is shared by its heads, so
/// the heads are samples of the same kernel: the rows of every head are stacked
/// (nn::split_heads) and the sequence's label is repeated once per head. With one
/// Ω per layer, layer l's Ω is learned on layer l's rows (H·n samples); with one shared Ω, on
/// the rows of every layer stacked (N·H·n samples). Every layer's representations come from one
/// evaluation pass of the model as it is before Phase A.
///
/// Where the representations come from (PhaseARepresentation):
///   - initial: the model as it is (for a fresh model, its random initialization);
///   - warmup:  the model after a short Phase B with Ω frozen at its random draw (the vanilla
///     model), options.warmup_steps steps; the warmed-up weights are kept (Phase B continues
///     from them) unless options.keep_warmup_weights is false.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../io/model_file.hpp"
#include "../io/parameters.hpp"
#include "../nn/phase_a_representations.hpp"
#include "../nn/text_classifier.hpp"
#include "../particles/alignment.hpp"
#include "../particles/hamiltonian.hpp"
#include "../particles/langevin.hpp"
#include "../particles/riesz.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"
#include "callbacks.hpp"
#include "detail_record_codec.hpp"
#include "parameter_snapshot.hpp"
#include "phase_b.hpp"
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

/// Options of Phase A (run_phase_a).
struct PhaseAOptions {
  PhaseARepresentation representation = PhaseARepresentation::initial;  ///< see the file comment
  Index num_sequences = 2048;  ///< training sequences whose representations are used (0: all)
  Index batch_size = 128;      ///< sequences per forward pass when collecting them (≥ 1)
  Index warmup_steps = 200;    ///< Phase B steps of the warm-up (representation = warmup; ≥ 1)
  /// The warm-up's optimizer, schedule and seed (epochs, max_steps, patience and progress are
  /// set by Phase A: warmup_steps steps, no validation).
  PhaseBOptions warmup{};
  bool keep_warmup_weights = true;  ///< keep the warmed-up weights (false: restore the given ones)

  Index steps = 300;             ///< Langevin steps per Ω (≥ 0)
  double step_size = 1.0;        ///< η₀ of the cosine step schedule (> 0)
  double final_step_size = 0.0;  ///< η at the last step, in [0, step_size]
  double beta = std::numeric_limits<double>::infinity();  ///< inverse temperature (∞: no noise)
  Index langevin_batch_size = 0;  ///< rows per Langevin minibatch (0: all rows every step)
  double repulsion = 1e-3;        ///< λ, the weight of the Riesz energy (≥ 0)
  double riesz_exponent = -1.0;   ///< s ≥ 0, or < 0 for Coulomb s = d_head − 2
  double softening = 0.1;         ///< ε > 0 of the Riesz energy
  /// Radius R of the ball projection ‖ω_k‖ ≤ R; 0: radius_factor × the largest ‖ω_k‖ of the
  /// starting Ω (so that the start is inside).
  double radius = 0.0;
  double radius_factor = 1.0;  ///< see `radius` (≥ 1)
  std::uint64_t seed = 0;      ///< seeds the subsample, the Langevin noise and minibatches
  ProgressReporter* progress = nullptr;  ///< Langevin progress (not owned; finished at the end)
  /// Checkpoints and resuming (default: none; see run_phase_a). The path must differ from
  /// Phase B's; warmup.checkpoint is ignored (the warm-up writes Phase A checkpoints).
  CheckpointOptions checkpoint{};

  /// Throws invalid_argument, naming the field, unless every field is valid (and warmup too).
  void validate() const {
    const char* where = "coulomb::train::PhaseAOptions";
    using coulomb::detail::require;
    checkpoint.validate();
    require(representation == PhaseARepresentation::initial ||
                representation == PhaseARepresentation::warmup,
            where, "argument 'representation' is neither initial nor warmup");
    require(num_sequences >= 0, where,
            "argument 'num_sequences' must be >= 0 (0: all), got " + std::to_string(num_sequences));
    require(batch_size >= 1, where,
            "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
    if (representation == PhaseARepresentation::warmup) {
      require(warmup_steps >= 1, where,
              "argument 'warmup_steps' must be at least 1, got " + std::to_string(warmup_steps));
      warmup.validate();
    }
    require(steps >= 0, where, "argument 'steps' must be >= 0, got " + std::to_string(steps));
    coulomb::detail::require_positive(step_size, where, "step_size");
    require(final_step_size >= 0.0 && final_step_size <= step_size, where,
            "argument 'final_step_size' must be in [0, step_size], got " +
                std::to_string(final_step_size));
    require(beta > 0.0 && !std::isnan(beta), where,
            "argument 'beta' must be > 0 (or infinity), got " + std::to_string(beta));
    require(langevin_batch_size >= 0, where,
            "argument 'langevin_batch_size' must be >= 0 (0: full batch), got " +
                std::to_string(langevin_batch_size));
    require(repulsion >= 0.0 && std::isfinite(repulsion), where,
            "argument 'repulsion' must be finite and >= 0, got " + std::to_string(repulsion));
    require(std::isfinite(riesz_exponent), where,
            "argument 'riesz_exponent' must be finite, got " + std::to_string(riesz_exponent));
    coulomb::detail::require_positive(softening, where, "softening");
    require(
        radius >= 0.0 && std::isfinite(radius), where,
        "argument 'radius' must be finite and >= 0 (0: automatic), got " + std::to_string(radius));
    require(
        radius_factor >= 1.0 && std::isfinite(radius_factor), where,
        "argument 'radius_factor' must be finite and >= 1, got " + std::to_string(radius_factor));
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
};

namespace detail {

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

/// `count` distinct indices of [0, n) drawn uniformly from `rng` (all of them when count ≥ n),
/// in increasing order.
inline std::vector<Index> subsample_indices(Index n, Index count, Rng& rng) {
  std::vector<Index> all(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  if (count <= 0 || count >= n) return all;
  partial_shuffle(std::span<Index>(all), static_cast<std::size_t>(count), rng);
  all.resize(static_cast<std::size_t>(count));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace detail

/// The Phase A inputs of `model` on the sequences `indices` of `data`: for every Ω k of the
/// model, X[k] stacks the head rows (split_heads) of every layer that uses Ω k (layer after
/// layer, head after head), and labels[k] holds the matching labels (the sequence labels
/// repeated per head and layer). Runs evaluation forwards (no dropout). Throws invalid_argument
/// for a model with softmax attention, an empty `indices`, or data the model refuses.
template <RealScalar S, FeatureMap Map>
void collect_phase_a_inputs(nn::TextClassifier<S, Map>& model, const EncodedDataset& data,
                            std::span<const Index> indices, Index batch_size,
                            std::vector<Matrix<S>>& X, std::vector<std::vector<int>>& labels) {
  const char* where = "coulomb::train::collect_phase_a_inputs";
  coulomb::detail::require(model.config().attention == nn::AttentionKind::linear, where,
                           "the model uses softmax attention, which has no Omega to learn");
  coulomb::detail::require(!indices.empty(), where, "argument 'indices' is empty");
  coulomb::detail::require(
      batch_size >= 1, where,
      "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
  const Index n = static_cast<Index>(indices.size());
  const Index layers = model.num_layers();
  const Index H = model.config().num_heads;
  const Index dh = model.config().d_model / H;
  const Index K = model.num_omegas();
  // Layer l's heads go to block slot[l] of X[omega_index(l)]: H·n rows per layer, head after
  // head, each batch straight to its rows.
  std::vector<Index> slot(static_cast<std::size_t>(layers));
  std::vector<Index> layers_of(static_cast<std::size_t>(K), 0);
  for (Index l = 0; l < layers; ++l)
    slot[static_cast<std::size_t>(l)] = layers_of[static_cast<std::size_t>(model.omega_index(l))]++;
  X.assign(static_cast<std::size_t>(K), Matrix<S>());
  labels.assign(static_cast<std::size_t>(K), std::vector<int>());
  for (Index k = 0; k < K; ++k)
    X[static_cast<std::size_t>(k)].resize(layers_of[static_cast<std::size_t>(k)] * H * n, dh);
  std::vector<Matrix<S>> reps;
  TokenBatch batch;
  for (Index start = 0; start < n; start += batch_size) {
    const Index count = std::min(batch_size, n - start);
    make_batch(data,
               indices.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(count)),
               batch);
    nn::phase_a_representations(model, batch, reps);
    for (Index l = 0; l < layers; ++l) {
      const auto k = static_cast<std::size_t>(model.omega_index(l));
      nn::split_heads_into(reps[static_cast<std::size_t>(l)], H, X[k],
                           slot[static_cast<std::size_t>(l)] * H * n + start, n);
    }
  }
  for (Index l = 0; l < layers; ++l) {
    auto& y = labels[static_cast<std::size_t>(model.omega_index(l))];
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < n; ++i)
        y.push_back(data.labels[static_cast<std::size_t>(indices[static_cast<std::size_t>(i)])]);
  }
}

namespace detail {

/// Adds every option of `o` that changes the result of Phase A to `f` ("phase_a.<field>", the
/// warm-up's under "phase_a.warmup."; not the progress reporters, not the checkpoint options).
inline void add_phase_a_fingerprint(RunFingerprint& f, const PhaseAOptions& o) {
  f.add("phase_a.representation", to_string(o.representation));
  f.add_integer("phase_a.num_sequences", o.num_sequences);
  f.add_integer("phase_a.batch_size", o.batch_size);
  if (o.representation == PhaseARepresentation::warmup) {
    f.add_integer("phase_a.warmup_steps", o.warmup_steps);
    f.add_record("phase_a.warmup.", o.warmup);
    f.add_bool("phase_a.keep_warmup_weights", o.keep_warmup_weights);
  }
  f.add_integer("phase_a.steps", o.steps);
  f.add_double("phase_a.step_size", o.step_size);
  f.add_double("phase_a.final_step_size", o.final_step_size);
  f.add_double("phase_a.beta", o.beta);
  f.add_integer("phase_a.langevin_batch_size", o.langevin_batch_size);
  f.add_double("phase_a.repulsion", o.repulsion);
  f.add_double("phase_a.riesz_exponent", o.riesz_exponent);
  f.add_double("phase_a.softening", o.softening);
  f.add_double("phase_a.radius", o.radius);
  f.add_double("phase_a.radius_factor", o.radius_factor);
  f.add("phase_a.seed", std::to_string(o.seed));
}

/// The reports of the first `count` Ω, the sequences and the warm-up of a Phase A checkpoint
/// into `report` (the sums accumulated in the same order as the run did); io_error naming the
/// file and the key for a malformed value.
template <RealScalar S>
void restore_phase_a_report(const io::ModelFile<S>& file, Index count, PhaseAReport& report,
                            const char* where) {
  read_record(file, "phase_a.", report, where);
  for (Index k = 0; k < count; ++k) {
    const std::string key = "phase_a.report.omega." + std::to_string(k);
    PhaseAOmegaReport r;
    if (!parse_record_line(file.metadata_value(key), r) || r.omega != k) {
      throw io_error(std::string(where) + ": '" + file.source() + "': metadata '" + key +
                     "' is not the report of Omega " + std::to_string(k));
    }
    report.energy_before += r.energy_before;
    report.energy_after += r.energy_after;
    report.alignment_before += r.alignment_before;
    report.alignment_after += r.alignment_after;
    report.repulsion_before += r.repulsion_before;
    report.repulsion_after += r.repulsion_after;
    report.omegas.push_back(r);
  }
}

/// Tells a checkpoint observer about every Langevin step of Ω number `omega`.
struct LangevinStepObserver {
  const CheckpointOptions* options = nullptr;
  Index omega = 0;

  template <typename Opt, typename F, typename M, typename Step>
  bool step_taken(const Opt&, F&, const M&, const Step& step) {
    if (options != nullptr) {
      notify(*options, CheckpointEvent{CheckpointEventKind::step, "phase_a", "langevin",
                                       static_cast<Index>(step.iteration) + 1, omega});
    }
    return false;
  }
};

}  // namespace detail

/// Phase A on `model` with the training set `train` (see the file comment): takes the
/// representations (after a warm-up when options.representation is warmup), runs projected
/// Langevin dynamics with a cosine step schedule on H_N = alignment + λ·Riesz for every Ω of
/// the model from its current value, sets the learned Ω (set_omega) and freezes it
/// (set_omega_trainable(false)). Returns what it did. Deterministic for a given model, data and
/// options (and thread count).
///
/// With options.checkpoint.path set, writes checkpoints of kind "phase_a": during the warm-up
/// as Phase B does (every options.checkpoint.every_steps steps, at epoch ends), once the
/// warm-up is done, after every Ω's Langevin run, and at the end (stage "done"). A Langevin run
/// is not interrupted by checkpoints: resuming repeats the run of the Ω that was in progress
/// from its start (the representations are recomputed from the saved pre-Langevin model), which
/// gives the same bits. With options.checkpoint.resume and an existing checkpoint, continues
/// from it; the final model is the uninterrupted run's, bit for bit (same thread count).
///
/// Throws invalid_argument for invalid options, a model with softmax attention, an empty
/// training set, labels that are all equal among the sampled sequences (the centred alignment
/// is then zero) or outside [0, C); numerical_error when the warm-up or the dynamics diverge;
/// io_error when a checkpoint cannot be written or resumed from (naming every field of the
/// options, model or data that differs from the run that wrote it).
template <RealScalar S, FeatureMap Map>
PhaseAReport run_phase_a(nn::TextClassifier<S, Map>& model, const EncodedDataset& train,
                         const PhaseAOptions& options) {
  const char* where = "coulomb::train::run_phase_a";
  options.validate();
  coulomb::detail::require(model.config().attention == nn::AttentionKind::linear, where,
                           "the model uses softmax attention, which has no Omega to learn");
  coulomb::detail::require(train.size() > 0, where, "argument 'train' is empty");
  const auto start = std::chrono::steady_clock::now();
  const int C = model.config().num_classes;
  for (Index i = 0; i < train.size(); ++i) {
    const int y = train.labels[static_cast<std::size_t>(i)];
    if (!(y >= 0 && y < C))
      coulomb::detail::throw_invalid(where, "argument 'train' has label " + std::to_string(y) +
                                                " at sequence " + std::to_string(i) +
                                                ", outside [0, " + std::to_string(C) + ")");
  }

  PhaseAReport report;
  report.representation = options.representation;
  report.langevin_steps = options.steps;
  Rng root(options.seed);
  Rng sample_rng = root.split(0);
  Rng langevin_root = root.split(1);

  model.set_omega_trainable(false);
  const Index K = model.num_omegas();

  // Checkpoints: the fingerprint (taken with Ω frozen, as Phase A runs), the stage to resume.
  const CheckpointOptions& ck = options.checkpoint;
  RunFingerprint fingerprint;
  if (ck.enabled()) {
    fingerprint.add_model(model);
    fingerprint.add_dataset("data.train", train);
    detail::add_phase_a_fingerprint(fingerprint, options);
  }
  std::string stage = "start";
  std::optional<io::ModelFile<S>> saved;
  double earlier_seconds = 0.0;
  if (ck.enabled() && ck.resume && detail::checkpoint_exists(ck.path)) {
    saved.emplace(detail::load_checkpoint<S>(ck.path, "phase_a", where));
    fingerprint.check(*saved, where);
    stage = saved->metadata_value("phase_a.stage");
    if (stage != "warmup" && stage != "langevin" && stage != "done") {
      throw io_error(std::string(where) + ": '" + ck.path + "': metadata 'phase_a.stage' is '" +
                     io::detail::printable_name(stage) + "', expected warmup, langevin or done");
    }
    earlier_seconds = detail::read_value<double>(*saved, "phase_a.seconds", where);
  }
  auto begin_stage = [&](io::ModelFile<S>& file, std::string_view name) {
    detail::begin_checkpoint(file, "phase_a");
    fingerprint.write(file);
    file.set_metadata("phase_a.stage", std::string(name));
    file.set_metadata("phase_a.seconds",
                      detail::exact_decimal(earlier_seconds + detail::seconds_since(start)));
  };
  std::vector<Matrix<S>> start_omegas;  // every Ω before its Langevin run
  auto save_stage = [&](std::string_view name, Index next_omega) {
    io::ModelFile<S> file(ck.path);
    begin_stage(file, name);
    file.set_metadata("phase_a.next_omega", std::to_string(next_omega));
    detail::write_record(file, "phase_a.", report);
    for (const PhaseAOmegaReport& r : report.omegas)
      file.set_metadata("phase_a.report.omega." + std::to_string(r.omega), detail::record_line(r));
    io::add_parameters(file, model.parameters(), "model.");
    if (name == "langevin") {
      for (Index k = 0; k < K; ++k)
        file.add_tensor("phase_a.start_omega." + std::to_string(k),
                        start_omegas[static_cast<std::size_t>(k)]);
    }
    detail::save_checkpoint(ck, file,
                            CheckpointEvent{CheckpointEventKind::saved, "phase_a", name, 0,
                                            next_omega < K ? next_omega : -1});
  };

  if (stage == "done") {
    // The run had finished: its final model and report.
    io::load_parameters(*saved, model.parameters(), "model.");
    detail::restore_phase_a_report(*saved, K, report, where);
    report.seconds = earlier_seconds + detail::seconds_since(start);
    return report;
  }

  if (options.representation == PhaseARepresentation::warmup && stage != "langevin") {
    const auto warm_start = std::chrono::steady_clock::now();
    // A warm-up resumed from its checkpoint: the time its Phase B run had taken up to it.
    const double earlier_warmup = stage == "warmup"
                                      ? detail::read_value<double>(*saved, "phase_b.seconds", where,
                                                                   detail::FieldFlags::optional |
                                                                       detail::FieldFlags::duration)
                                      : 0.0;
    ParameterSnapshot<S> before;
    if (!options.keep_warmup_weights) {
      if (stage == "warmup")
        before.assign(detail::tensors_with_prefix(*saved, "phase_a.initial."));
      else
        before.capture(model.parameters());
    }
    PhaseBOptions warm = options.warmup;
    const Index per_epoch = (train.size() + warm.batch_size - 1) / warm.batch_size;
    warm.epochs = (options.warmup_steps + per_epoch - 1) / per_epoch;
    warm.max_steps = options.warmup_steps;
    warm.patience = 0;
    warm.progress = nullptr;
    warm.checkpoint = CheckpointOptions{};
    detail::PhaseBCheckpointContext<S> context;
    if (ck.enabled()) {
      // The warm-up writes Phase A checkpoints (stage "warmup") at ck.path.
      warm.checkpoint.path = ck.path;
      warm.checkpoint.every_steps = ck.every_steps;
      warm.checkpoint.at_epoch_end = ck.at_epoch_end;
      warm.checkpoint.observer = ck.observer;
      warm.checkpoint.resume = stage == "warmup";
      context.kind = "phase_a";
      context.stage = "warmup";
      context.add = [&](io::ModelFile<S>& file) {
        begin_stage(file, "warmup");
        if (!options.keep_warmup_weights) {
          for (const auto& t : before.tensors())
            file.add_tensor("phase_a.initial." + t.name, t.value);
        }
      };
    }
    const EncodedDataset no_validation;
    const PhaseBHistory h = detail::run_phase_b_in<S, Map>(ck.enabled() ? &context : nullptr, model,
                                                           train, no_validation, warm);
    report.warmup_steps = h.steps;
    if (!options.keep_warmup_weights) before.restore(model.parameters());
    report.warmup_seconds = earlier_warmup + detail::seconds_since(warm_start);
  }

  // Resuming the Langevin stage: the model as saved holds the Ω learned so far; the
  // representations come from the model before any Langevin run, so the starting Ω are put
  // back while they are collected.
  Index first_omega = 0;
  std::vector<Matrix<S>> learned;
  if (stage == "langevin") {
    first_omega = detail::read_value<Index>(*saved, "phase_a.next_omega", where);
    if (first_omega < 0 || first_omega > K) {
      throw io_error(std::string(where) + ": '" + ck.path + "': metadata 'phase_a.next_omega' is " +
                     std::to_string(first_omega) + ", outside [0, " + std::to_string(K) + "]");
    }
    io::load_parameters(*saved, model.parameters(), "model.");
    for (Index k = 0; k < K; ++k) {
      const Matrix<S>& s0 = saved->tensor("phase_a.start_omega." + std::to_string(k));
      if (s0.rows() != model.omega(k).rows() || s0.cols() != model.omega(k).cols()) {
        throw io_error(std::string(where) + ": '" + ck.path + "': tensor 'phase_a.start_omega." +
                       std::to_string(k) + "' does not have the shape of Omega");
      }
      if (k < first_omega) learned.push_back(model.omega(k));
      model.set_omega(k, s0);
    }
    detail::restore_phase_a_report(*saved, first_omega, report, where);
  }
  if (ck.enabled())
    for (Index k = 0; k < K; ++k) start_omegas.push_back(model.omega(k));

  const std::vector<Index> indices =
      detail::subsample_indices(train.size(), options.num_sequences, sample_rng);
  report.sequences = static_cast<Index>(indices.size());
  std::vector<Matrix<S>> X;
  std::vector<std::vector<int>> labels;
  collect_phase_a_inputs(model, train, std::span<const Index>(indices), options.batch_size, X,
                         labels);
  for (Index k = 0; k < first_omega; ++k) model.set_omega(k, learned[static_cast<std::size_t>(k)]);
  if (ck.enabled() && stage != "langevin") save_stage("langevin", 0);

  ProgressReporter* progress = options.progress;
  if (progress) progress->set_total(options.steps * K);
  LangevinProgress progress_callback(progress, false);

  // The noise seeds of the Ω already learned are drawn again, so that the next one gets its own.
  for (Index k = 0; k < first_omega && options.steps > 0; ++k)
    (void)langevin_root.split(static_cast<std::uint64_t>(k));

  for (Index k = first_omega; k < K; ++k) {
    const auto ks = static_cast<std::size_t>(k);
    Index first_layer = 0;
    while (model.omega_index(first_layer) != k) ++first_layer;
    const Eigen::Map<const Eigen::VectorXi> y(labels[ks].data(),
                                              static_cast<Index>(labels[ks].size()));
    const Matrix<S> targets =
        C == 2 ? binary_targets<S>(y) : one_hot_targets<S>(y, static_cast<Index>(C));
    AlignmentEnergy<Map> alignment(model.feature_map(first_layer), X[ks], targets);
    RieszOptions riesz;
    riesz.s = options.riesz_exponent;
    riesz.softening = options.softening;
    Hamiltonian<AlignmentEnergy<Map>> hamiltonian(alignment, options.repulsion, riesz);

    const Matrix<S> omega_before = model.omega(k);
    Matrix<S> omega = omega_before;
    PhaseAOmegaReport r;
    r.omega = k;
    r.samples = X[ks].rows();
    const double largest = static_cast<double>(omega_before.rowwise().norm().maxCoeff());
    r.radius =
        options.radius > 0.0 ? options.radius : std::max(options.radius_factor * largest, 1e-12);
    r.energy_before = static_cast<double>(hamiltonian.evaluate(omega));
    r.alignment_before = hamiltonian.terms().alignment;
    r.repulsion_before = hamiltonian.terms().repulsion;
    r.normalized_alignment_before = static_cast<double>(alignment.normalized_alignment(omega));

    if (options.steps > 0) {
      LangevinOptions lo;
      lo.max_iterations = options.steps;
      lo.beta = options.beta;
      lo.batch_size = options.langevin_batch_size;
      lo.seed = langevin_root.split(static_cast<std::uint64_t>(k))();
      BallProjection ball;
      ball.radius = r.radius;
      CosineStep schedule;
      schedule.step_size = options.step_size;
      schedule.final_step_size = options.final_step_size;
      schedule.horizon = options.steps;
      ProjectedLangevin<BallProjection, CosineStep> langevin(lo, ball, schedule);
      progress_callback.first_step = k * options.steps;
      detail::LangevinStepObserver observer{ck.observer ? &ck : nullptr, k};
      langevin.optimize(hamiltonian, omega, progress_callback, observer);
    }

    r.energy_after = static_cast<double>(hamiltonian.evaluate(omega));
    r.alignment_after = hamiltonian.terms().alignment;
    r.repulsion_after = hamiltonian.terms().repulsion;
    r.normalized_alignment_after = static_cast<double>(alignment.normalized_alignment(omega));
    const double base = static_cast<double>(omega_before.norm());
    r.relative_change =
        static_cast<double>((omega - omega_before).norm()) / (base > 0.0 ? base : 1.0);
    model.set_omega(k, omega);

    report.energy_before += r.energy_before;
    report.energy_after += r.energy_after;
    report.alignment_before += r.alignment_before;
    report.alignment_after += r.alignment_after;
    report.repulsion_before += r.repulsion_before;
    report.repulsion_after += r.repulsion_after;
    report.omegas.push_back(r);
    if (ck.enabled() && k + 1 < K) save_stage("langevin", k + 1);
  }
  model.set_omega_trainable(false);
  if (ck.enabled()) save_stage("done", K);
  if (progress && !progress->finished()) progress->finish();
  report.seconds = earlier_seconds + detail::seconds_since(start);
  return report;
}

}  // namespace coulomb::train
