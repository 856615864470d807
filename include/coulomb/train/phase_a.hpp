// SPDX-License-Identifier: MIT
/// @file train/phase_a.hpp
/// @brief Phase A of the paper's text experiments (Badiei Khuzani et al., 2026, §4): the
/// particles Ω of a TextClassifier's feature maps are learned from the labels by projected
/// Langevin dynamics (Algorithm 1) on the particle Hamiltonian H_N(Ω) = E(Ω) + λ·W_{N,s}(Ω)
/// (kernel-target alignment + Riesz repulsion, particles/), with the model's sequence
/// representations as the inputs x (train/phase_a_inputs.hpp); then Ω is set in the model and
/// frozen for Phase B (train/phase_b.hpp). Documented in docs/training.md (section "Phase A").
///
/// Where the representations come from (PhaseARepresentation):
///   - initial: the model as it is (for a fresh model, its random initialization);
///   - warmup:  the model after a short Phase B with Ω frozen at its random draw (the vanilla
///     model), options.warmup.steps steps; the warmed-up weights are kept (Phase B continues
///     from them) unless options.warmup.keep_weights is false.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../nn/text_classifier.hpp"
#include "../particles/alignment.hpp"
#include "../particles/hamiltonian.hpp"
#include "../particles/langevin.hpp"
#include "../text/encoder.hpp"
#include "callbacks.hpp"
#include "detail_phase_a_checkpoint.hpp"
#include "detail_sharded_alignment.hpp"
#include "parameter_snapshot.hpp"
#include "phase_a_inputs.hpp"
#include "phase_a_options.hpp"
#include "phase_b.hpp"

namespace coulomb::train {

namespace detail {

/// Throws invalid_argument unless the options are valid, the model has linear attention (an Ω
/// to learn) and `train` is a non-empty dataset with labels in [0, C).
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void check_phase_a_arguments(const nn::TextClassifier<Map>& model, const EncodedDataset& train,
                             const PhaseAOptions& options, const char* where) {
  options.validate();
  coulomb::detail::require(model.config().attention == nn::AttentionKind::linear, where,
                           "the model uses softmax attention, which has no Omega to learn");
  coulomb::detail::require(train.size() > 0, where, "argument 'train' is empty");
  const int C = model.config().num_classes;
  for (Index i = 0; i < train.size(); ++i) {
    const int y = train.labels[static_cast<std::size_t>(i)];
    if (!(y >= 0 && y < C))
      coulomb::detail::throw_invalid(where, "argument 'train' has label " + std::to_string(y) +
                                                " at sequence " + std::to_string(i) +
                                                ", outside [0, " + std::to_string(C) + ")");
  }
}

/// The warm-up: options.warmup.steps steps of Phase B with Ω frozen at its draw and no
/// validation, checkpointed as Phase A's stage "warmup"; the weights from before it are put
/// back unless options.warmup.keep_weights. Sets the report's warm-up steps and time.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void warm_up(nn::TextClassifier<Map>& model, const EncodedDataset& train,
             const PhaseAOptions& options, PhaseACheckpoints<S, Map>& checkpoints,
             PhaseAReport& report) {
  const auto start = std::chrono::steady_clock::now();
  const bool restore = !options.warmup.keep_weights;
  ParameterSnapshot<S> before;
  if (restore) before = checkpoints.initial_weights();
  PhaseBOptions warm = options.warmup.training;
  const Index per_epoch = (train.size() + warm.batch_size - 1) / warm.batch_size;
  warm.epochs = (options.warmup.steps + per_epoch - 1) / per_epoch;
  warm.max_steps = options.warmup.steps;
  warm.early_stopping.patience = 0;
  warm.progress = nullptr;
  warm.checkpoint = checkpoints.warmup_options();
  warm.collective = options.collective;
  const PhaseBCheckpointContext<S> context =
      checkpoints.warmup_context(restore ? &before : nullptr);
  const EncodedDataset no_validation;
  const PhaseBHistory h = run_phase_b_in<Map>(checkpoints.enabled() ? &context : nullptr, model,
                                              train, no_validation, warm);
  report.warmup_steps = h.steps;
  if (restore) before.restore(model.parameters());
  report.warmup_seconds = checkpoints.earlier_warmup_seconds() + seconds_since(start);
}

/// Learns Ω k of `model` with the alignment term `alignment` (AlignmentEnergy or
/// ShardedAlignment of the rows of Ω k): see learn_omega_with_targets.
template <typename Model, typename Alignment, typename... Callbacks>
PhaseAOmegaReport learn_omega_on(Model& model, Index k, Alignment& alignment,
                                 const PhaseAOptions& options, std::uint64_t seed,
                                 Callbacks&... callbacks) {
  using S = typename Alignment::Scalar;
  Hamiltonian<Alignment> hamiltonian(alignment, options.repulsion, options.riesz);

  const Matrix<S> omega_before = model.omega(k);
  Matrix<S> omega = omega_before;
  PhaseAOmegaReport r;
  r.omega = k;
  r.samples = alignment.num_samples();
  const double largest = static_cast<double>(omega_before.rowwise().norm().maxCoeff());
  r.radius = options.projection.radius > 0.0
                 ? options.projection.radius
                 : std::max(options.projection.radius_factor * largest, 1e-12);
  r.energy_before = static_cast<double>(hamiltonian.evaluate(omega));
  r.alignment_before = hamiltonian.terms().alignment;
  r.repulsion_before = hamiltonian.terms().repulsion;
  r.normalized_alignment_before = static_cast<double>(alignment.normalized_alignment(omega));

  if (options.langevin.max_iterations > 0) {
    LangevinOptions langevin_options = options.langevin;
    langevin_options.seed = seed;
    CosineStep schedule = options.schedule;
    schedule.horizon = options.langevin.max_iterations;
    ProjectedLangevin<BallProjection, CosineStep> langevin(langevin_options,
                                                           BallProjection{r.radius}, schedule);
    langevin.optimize(hamiltonian, omega, callbacks...);
  }

  r.energy_after = static_cast<double>(hamiltonian.evaluate(omega));
  r.alignment_after = hamiltonian.terms().alignment;
  r.repulsion_after = hamiltonian.terms().repulsion;
  r.normalized_alignment_after = static_cast<double>(alignment.normalized_alignment(omega));
  const double base = static_cast<double>(omega_before.norm());
  r.relative_change =
      static_cast<double>((omega - omega_before).norm()) / (base > 0.0 ? base : 1.0);
  model.set_omega(k, omega);
  return r;
}

/// Learns Ω k of `model` (a TextClassifier or a SequenceModel: any EncoderAccess model) from
/// the rows `X` with the targets `targets` (n × C, binary_targets or one_hot_targets): H_N = E +
/// λ·W_{N,s} with the model's own feature map, projected Langevin dynamics from the current Ω
/// in the ball of the options with the cosine step schedule, its noise and minibatches seeded
/// by `seed`; then set_omega. Returns its report. Of `options` it uses langevin, schedule,
/// repulsion, riesz, projection and collective: with several processes, each sums E and ∂E/∂Ω
/// over its share of the rows (ShardedAlignment; every process passes all of X).
template <typename Model, RealScalar S, typename... Callbacks>
PhaseAOmegaReport learn_omega_with_targets(Model& model, Index k, const Matrix<S>& X,
                                           const Matrix<S>& targets, const PhaseAOptions& options,
                                           std::uint64_t seed, Callbacks&... callbacks) {
  using Map = typename Model::FeatureMapType;
  Index first_layer = 0;
  while (model.omega_index(first_layer) != k) ++first_layer;
  if (is_distributed(options.collective)) {
    ShardedAlignment<Map> alignment(model.feature_map(first_layer), X, targets,
                                    *options.collective);
    return learn_omega_on(model, k, alignment, options, seed, callbacks...);
  }
  AlignmentEnergy<Map> alignment(model.feature_map(first_layer), X, targets);
  return learn_omega_on(model, k, alignment, options, seed, callbacks...);
}

/// The alignment targets of `labels` in [0, C): binary targets for C = 2, one-hot otherwise.
template <RealScalar S, typename D>
Matrix<S> class_targets(const Eigen::MatrixBase<D>& labels, Index C) {
  return C == 2 ? binary_targets<S>(labels) : one_hot_targets<S>(labels, C);
}

/// Learns Ω k of `model` from the rows `X` with labels `y` (learn_omega_with_targets with
/// class_targets).
template <FeatureMap Map, RealScalar S = typename Map::Scalar, typename... Callbacks>
PhaseAOmegaReport learn_omega(nn::TextClassifier<Map>& model, Index k, const Matrix<S>& X,
                              const std::vector<int>& y, const PhaseAOptions& options,
                              std::uint64_t seed, Callbacks&... callbacks) {
  const Eigen::Map<const Eigen::VectorXi> labels(y.data(), static_cast<Index>(y.size()));
  const Matrix<S> targets = class_targets<S>(labels, model.config().num_classes);
  return learn_omega_with_targets(model, k, X, targets, options, seed, callbacks...);
}

}  // namespace detail

/// Phase A on `model` with the training set `train` (see the file comment): takes the
/// representations (after a warm-up when options.representation is warmup), runs projected
/// Langevin dynamics with a cosine step schedule on H_N = alignment + λ·Riesz for every Ω of
/// the model from its current value, sets the learned Ω (set_omega) and freezes it
/// (set_omega_trainable(false)). Returns what it did. Deterministic for a given model, data and
/// options (and thread count). `callbacks` are handed to the Langevin run of every Ω, as
/// ProjectedLangevin::optimize takes them (particles/callbacks.hpp); options.progress is
/// reported to through a LangevinProgress that numbers the runs' steps one after the other.
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
template <FeatureMap Map, RealScalar S = typename Map::Scalar, typename... Callbacks>
PhaseAReport run_phase_a(nn::TextClassifier<Map>& model, const EncodedDataset& train,
                         const PhaseAOptions& options, Callbacks&&... callbacks) {
  const char* where = "coulomb::train::run_phase_a";
  detail::check_phase_a_arguments(model, train, options, where);
  Rng root(options.seed);
  Rng sample_rng = root.split(0);
  Rng langevin_root = root.split(1);
  model.set_omega_trainable(false);
  const Index K = model.num_omegas();
  const Index steps = options.langevin.max_iterations;
  detail::PhaseACheckpoints<S, Map> checkpoints(options, model, train, where);
  PhaseAReport report;
  report.representation = options.representation;
  report.langevin_steps = steps;
  if (checkpoints.stage() == "done") return checkpoints.finished(report);

  // 1. The representations x of a subsample of the training sequences, from the model after a
  //    warm-up or as given, with every Ω at its start (also when resuming the Langevin stage).
  if (options.representation == PhaseARepresentation::warmup && checkpoints.stage() != "langevin")
    detail::warm_up(model, train, options, checkpoints, report);
  const Index first_omega = checkpoints.begin_langevin(report);
  const std::vector<Index> sequences =
      detail::subsample_indices(train.size(), options.num_sequences, sample_rng);
  report.sequences = static_cast<Index>(sequences.size());
  std::vector<Matrix<S>> X;
  std::vector<std::vector<int>> labels;
  collect_phase_a_inputs(model, train, std::span<const Index>(sequences), options.batch_size, X,
                         labels);
  checkpoints.langevin_ready(report);

  // 2–3. Every Ω in turn: H_N on its rows, and projected Langevin dynamics from its value.
  LangevinProgress progress(options.progress, false);
  if (options.progress) options.progress->set_total(steps * K);
  for (Index k = 0; k < first_omega && steps > 0; ++k)  // the seeds of the Ω done before a resume
    (void)langevin_root.split(static_cast<std::uint64_t>(k));
  for (Index k = first_omega; k < K; ++k) {
    const auto ks = static_cast<std::size_t>(k);
    const std::uint64_t seed = steps > 0 ? langevin_root.split(ks)() : 0;
    progress.first_step = k * steps;
    detail::LangevinStepObserver observer = checkpoints.step_observer(k);
    report.add(detail::learn_omega(model, k, X[ks], labels[ks], options, seed, progress, observer,
                                   callbacks...));
    if (k + 1 < K) checkpoints.save("langevin", k + 1, report);
  }

  // 4. Ω frozen for Phase B.
  model.set_omega_trainable(false);
  checkpoints.save("done", K, report);
  if (options.progress && !options.progress->finished()) options.progress->finish();
  report.seconds = checkpoints.seconds();
  return report;
}

}  // namespace coulomb::train
