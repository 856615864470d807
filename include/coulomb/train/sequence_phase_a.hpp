// SPDX-License-Identifier: MIT
/// @file train/sequence_phase_a.hpp
/// @brief Phase A for the sequence model (nn/sequence_model.hpp) on the generated tasks of
/// issue 22 (ListOps, MQAR): the particles Ω of every attention layer are learned by projected
/// Langevin dynamics (Algorithm 1) on H_N(Ω) = E(Ω) + λ·W_{N,s}(Ω), the kernel-target alignment
/// of particles/alignment.hpp plus Riesz repulsion, as run_phase_a does for the text classifier
/// (train/phase_a.hpp); then Ω is set in the model and frozen. Badiei Khuzani et al., *A Coulomb
/// Particle Model for Learning Kernel Attention in Transformers*, 2026, §4, aligns the kernel
/// with the labels on sequence representations; for token-level tasks this header says what the
/// representations x and the targets y are (SequencePhaseATargets). Documented in
/// docs/training.md (section "Phase A for the sequence model").
///
/// With s = d_head^{-1/4} the attention's input scale and k_r, q_r the keys and queries of a
/// head at row r = b·L + t (position t of sequence b), as the feature map sees them:
///   pooled, classification head:  x_b = s · (1/n_b) Σ_{t ∈ b} k_{b·L+t},  y = the sequence label;
///   pooled, per-token heads:      x_r = s · mean of k over the positions row r attends to
///                                 (t' ≤ t for the causal head, every token otherwise), for every
///                                 row r with a target (MQAR: the queries), y = its target (the
///                                 answer): the prefix summary that the query's output reads;
///   query, per-token heads:       x_r = s · q_r at every row with a target, y = its target;
///   query, classification head:   x_r = s · q_r at `positions_per_sequence` evenly spaced
///                                 positions of each sequence, y = the sequence label.
/// The heads of a layer share its Ω, so their rows are stacked (as nn::split_heads does) and
/// each target is repeated per head; with one shared Ω the rows of every layer are stacked.
/// Targets are the distinct values present, renumbered 0 … C−1 in increasing order: binary
/// targets for C = 2, one-hot otherwise (MQAR: one class per answer token present).
///
/// The representations come from the model as given (PhaseARepresentation::initial): for a
/// fresh model its initialization; for representations after a warm-up, train the model with
/// Ω frozen first and call run_sequence_phase_a afterwards.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../data/token_sequences.hpp"
#include "../features/feature_map.hpp"
#include "../nn/sequence_batch.hpp"
#include "../nn/sequence_model.hpp"
#include "../particles/alignment.hpp"
#include "phase_a.hpp"
#include "phase_a_inputs.hpp"
#include "phase_a_options.hpp"

namespace coulomb::train {

/// Which representations and targets Phase A aligns for a sequence model (see the file comment).
enum class SequencePhaseATargets {
  pooled,  ///< pooled keys (per sequence, or per target row over its attended prefix)
  query,   ///< the queries at the positions with a target (or evenly spaced positions)
};

/// The name of a choice: "pooled" or "query".
inline const char* to_string(SequencePhaseATargets t) noexcept {
  return t == SequencePhaseATargets::pooled ? "pooled" : "query";
}

/// The choice named "pooled" or "query". Throws invalid_argument for another name.
inline SequencePhaseATargets sequence_phase_a_targets_from_string(std::string_view name) {
  if (name == "pooled") return SequencePhaseATargets::pooled;
  if (name == "query") return SequencePhaseATargets::query;
  coulomb::detail::throw_invalid(
      "coulomb::train::sequence_phase_a_targets_from_string",
      "argument 'name' must be pooled or query, got '" + std::string(name) + "'");
}

/// Options of run_sequence_phase_a.
struct SequencePhaseAOptions {
  /// The representations and targets (see the file comment).
  SequencePhaseATargets targets = SequencePhaseATargets::pooled;
  /// Positions per sequence of the query choice with the classification head (≥ 1).
  Index positions_per_sequence = 8;
  /// The dynamics and the sample, as for run_phase_a: num_sequences (0: all), batch_size,
  /// langevin, schedule, repulsion, riesz, projection, seed and progress. Its representation
  /// must be initial and its checkpoint path empty (no warm-up and no checkpoints here).
  PhaseAOptions phase_a{.num_sequences = 256, .batch_size = 64};

  /// Throws invalid_argument, naming the field, unless every field is valid.
  void validate() const {
    const char* where = "coulomb::train::SequencePhaseAOptions";
    using coulomb::detail::require;
    require(targets == SequencePhaseATargets::pooled || targets == SequencePhaseATargets::query,
            where, "argument 'targets' is neither pooled nor query");
    require(positions_per_sequence >= 1, where,
            "argument 'positions_per_sequence' must be at least 1, got " +
                std::to_string(positions_per_sequence));
    require(phase_a.representation == PhaseARepresentation::initial, where,
            "argument 'phase_a.representation' must be initial (warm the model up before "
            "calling run_sequence_phase_a)");
    require(phase_a.checkpoint.path.empty(), where,
            "argument 'phase_a.checkpoint.path' must be empty (no checkpoints in the sequence "
            "model's Phase A)");
    phase_a.validate();
  }
};

/// The inputs of Phase A for one Ω: the rows x (n × d_head) and their targets (n values, the
/// task's labels or tokens before renumbering).
template <RealScalar S>
struct SequencePhaseAInputs {
  Matrix<S> X;               ///< one representation per row
  std::vector<int> targets;  ///< the target of each row
};

namespace detail {

/// Rows of `M` (n × d) at `rows`, scaled by `scale`, appended as the rows `first…` of `out`.
template <RealScalar S>
void append_rows(const Matrix<S>& M, std::span<const Index> rows, S scale, Matrix<S>& out,
                 Index first) {
  for (Index j = 0; j < M.cols(); ++j)
    for (std::size_t r = 0; r < rows.size(); ++r)
      out(first + static_cast<Index>(r), j) = scale * M(rows[r], j);
}

/// For every row r = b·L + t in `rows`: s · the mean of K over the tokens of sequence b at
/// positions ≤ t (`causal`) or over all its tokens, written to rows first… of `out`.
template <RealScalar S>
void append_prefix_means(const Matrix<S>& K, const PaddingMask& mask, std::span<const Index> rows,
                         bool causal, S scale, Matrix<S>& out, Index first) {
  const Index L = mask.rows();
  const Index d = K.cols();
  Vector<S> sum(d);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Index b = rows[r] / L;
    const Index last = causal ? rows[r] % L : L - 1;
    sum.setZero();
    Index count = 0;
    for (Index t = 0; t <= last; ++t)
      if (mask(t, b)) {
        sum += K.row(b * L + t).transpose();
        ++count;
      }
    out.row(first + static_cast<Index>(r)) =
        (scale / static_cast<S>(std::max<Index>(count, 1))) * sum.transpose();
  }
}

/// The targets renumbered 0 … C−1 (distinct values in increasing order) as binary targets for
/// C = 2 or one-hot rows otherwise. Throws invalid_argument when all values are equal.
template <RealScalar S>
Matrix<S> sequence_alignment_targets(const std::vector<int>& y, const char* where) {
  std::vector<int> values = y;
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  coulomb::detail::require(values.size() >= 2, where,
                           "the targets of the sampled sequences are all equal (" +
                               std::to_string(values.empty() ? 0 : values.front()) +
                               "); the centred alignment is then zero");
  Eigen::VectorXi labels(static_cast<Index>(y.size()));
  for (std::size_t i = 0; i < y.size(); ++i)
    labels(static_cast<Index>(i)) =
        static_cast<int>(std::lower_bound(values.begin(), values.end(), y[i]) - values.begin());
  return class_targets<S>(labels, static_cast<Index>(values.size()));
}

}  // namespace detail

/// The Phase A inputs of `model` on the sequences `indices` of `data` for the choice
/// options.targets (see the file comment): one SequencePhaseAInputs per Ω of the model, rows
/// layer after layer, head after head, sequence after sequence. Runs evaluation forwards (no
/// dropout), in batches of options.phase_a.batch_size. Throws invalid_argument for a model with
/// softmax attention, empty `indices`, data without the labels (classification) or per-token
/// targets (other heads) the model needs, or data the model refuses.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
std::vector<SequencePhaseAInputs<S>> collect_sequence_phase_a_inputs(
    nn::SequenceModel<Map>& model, const data::TokenSequenceDataset& data,
    std::span<const Index> indices, const SequencePhaseAOptions& options) {
  const char* where = "coulomb::train::collect_sequence_phase_a_inputs";
  const nn::SequenceModelConfig& c = model.config();
  coulomb::detail::require(c.attention == nn::AttentionKind::linear, where,
                           "the model uses softmax attention, which has no Omega to learn");
  coulomb::detail::require(!indices.empty(), where, "argument 'indices' is empty");
  const bool classification = c.head == nn::SequenceHead::classification;
  if (classification) {
    for (const Index i : indices)
      if (i >= 0 && i < data.size() && data.labels[static_cast<std::size_t>(i)] < 0)
        coulomb::detail::throw_invalid(where, "argument 'data' has no label at sequence " +
                                                  std::to_string(i) +
                                                  " (the classification head needs one)");
  } else {
    coulomb::detail::require(data.has_targets(), where,
                             "argument 'data' has no per-token targets (the " +
                                 std::string(nn::to_string(c.head)) + " head needs them)");
  }
  const Index layers = model.num_layers();
  const Index H = c.num_heads;
  const Index dh = c.head_dim();
  const bool query = options.targets == SequencePhaseATargets::query;
  // Per layer, per head: the blocks of rows of every batch, then their targets.
  std::vector<std::vector<Matrix<S>>> blocks(static_cast<std::size_t>(layers * H));
  std::vector<int> targets;
  nn::SequenceBatch batch;
  Matrix<S> logits, pooled, R;
  nn::MaskedMeanPool<S> pool;
  Rng unused(0);
  const Index batch_size = options.phase_a.batch_size;
  const auto n = static_cast<Index>(indices.size());
  std::vector<Index> rows;
  for (Index start = 0; start < n; start += batch_size) {
    const Index count = std::min(batch_size, n - start);
    nn::make_sequence_batch(
        data, indices.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(count)),
        batch);
    const Index L = batch.length();
    if (classification) {
      model.forward(batch.ids, batch.mask, logits);
      rows.clear();
      for (Index b = 0; b < batch.size(); ++b) {
        const Index len = batch.lengths[static_cast<std::size_t>(b)];
        const Index k = query ? std::min(options.positions_per_sequence, len) : 1;
        for (Index j = 0; j < k; ++j) rows.push_back(b * L + (j * len) / k);
        for (Index j = 0; j < k; ++j) targets.push_back(batch.labels[static_cast<std::size_t>(b)]);
      }
    } else {
      rows = batch.rows;
      const std::vector<Index> first{0};
      model.forward_rows(batch.ids, batch.mask, rows.empty() ? first : rows, logits, false, unused);
      targets.insert(targets.end(), batch.targets.begin(), batch.targets.end());
    }
    const auto R_rows = static_cast<Index>(rows.size());
    for (Index l = 0; l < layers; ++l) {
      const auto& attention = model.layer(l).attention();
      const S scale = attention.input_scale();
      R.resize(R_rows, c.d_model);
      if (query) {
        detail::append_rows(attention.queries(), std::span<const Index>(rows), scale, R, 0);
      } else if (classification) {
        pool.forward(attention.keys(), batch.mask, pooled);
        R = scale * pooled;
      } else {
        detail::append_prefix_means(attention.keys(), batch.mask, std::span<const Index>(rows),
                                    c.causal(), scale, R, 0);
      }
      for (Index h = 0; h < H; ++h)
        blocks[static_cast<std::size_t>(l * H + h)].push_back(R.middleCols(h * dh, dh));
    }
  }
  const auto T = static_cast<Index>(targets.size());
  std::vector<SequencePhaseAInputs<S>> out(static_cast<std::size_t>(model.num_omegas()));
  std::vector<Index> filled(out.size(), 0);
  for (Index l = 0; l < layers; ++l) {
    auto& in = out[static_cast<std::size_t>(model.omega_index(l))];
    in.X.conservativeResize(in.X.rows() + H * T, dh);
  }
  for (Index l = 0; l < layers; ++l) {
    const auto k = static_cast<std::size_t>(model.omega_index(l));
    for (Index h = 0; h < H; ++h) {
      for (const Matrix<S>& block : blocks[static_cast<std::size_t>(l * H + h)]) {
        out[k].X.middleRows(filled[k], block.rows()) = block;
        filled[k] += block.rows();
      }
      out[k].targets.insert(out[k].targets.end(), targets.begin(), targets.end());
    }
  }
  return out;
}

/// What run_sequence_phase_a did: the report of run_phase_a's shape (one PhaseAOmegaReport per
/// Ω), with the choice of representations and the rows per Ω.
struct SequencePhaseAReport {
  SequencePhaseATargets targets = SequencePhaseATargets::pooled;  ///< the choice used
  PhaseAReport phase_a{};  ///< sequences, Langevin steps, per-Ω energies, seconds
};

/// Phase A on the sequence model `model` with the training split `train` (see the file
/// comment): draws options.phase_a.num_sequences training sequences, collects their
/// representations and targets (collect_sequence_phase_a_inputs) from the model as given, runs
/// projected Langevin dynamics with a cosine step schedule on H_N = alignment + λ·Riesz for
/// every Ω from its current value, sets the learned Ω (set_omega) and freezes it
/// (set_omega_trainable(false)). Deterministic for a given model, data and options (and thread
/// count). `callbacks` are handed to every Langevin run (particles/callbacks.hpp).
///
/// Throws invalid_argument for invalid options, a model with softmax attention, an empty
/// training split, data without the labels or targets the head needs, or targets that are all
/// equal among the sampled rows; numerical_error when the dynamics diverge. A throwing call
/// leaves Ω unchanged unless the dynamics of a later Ω diverge.
template <FeatureMap Map, RealScalar S = typename Map::Scalar, typename... Callbacks>
SequencePhaseAReport run_sequence_phase_a(nn::SequenceModel<Map>& model,
                                          const data::TokenSequenceDataset& train,
                                          const SequencePhaseAOptions& options,
                                          Callbacks&&... callbacks) {
  const char* where = "coulomb::train::run_sequence_phase_a";
  const auto start = std::chrono::steady_clock::now();
  options.validate();
  coulomb::detail::require(train.size() > 0, where, "argument 'train' is empty");
  const PhaseAOptions& o = options.phase_a;
  Rng root(o.seed);
  Rng sample_rng = root.split(0);
  Rng langevin_root = root.split(1);
  const std::vector<Index> sequences =
      detail::subsample_indices(train.size(), o.num_sequences, sample_rng);
  std::vector<SequencePhaseAInputs<S>> inputs =
      collect_sequence_phase_a_inputs(model, train, std::span<const Index>(sequences), options);
  std::vector<Matrix<S>> targets;
  for (const auto& in : inputs)
    targets.push_back(detail::sequence_alignment_targets<S>(in.targets, where));

  SequencePhaseAReport report;
  report.targets = options.targets;
  report.phase_a.representation = PhaseARepresentation::initial;
  report.phase_a.sequences = static_cast<Index>(sequences.size());
  const Index steps = o.langevin.max_iterations;
  report.phase_a.langevin_steps = steps;
  const Index K = model.num_omegas();
  LangevinProgress progress(o.progress, false);
  if (o.progress) o.progress->set_total(steps * K);
  for (Index k = 0; k < K; ++k) {
    const auto ks = static_cast<std::size_t>(k);
    const std::uint64_t seed = steps > 0 ? langevin_root.split(ks)() : 0;
    progress.first_step = k * steps;
    report.phase_a.add(detail::learn_omega_with_targets(model, k, inputs[ks].X, targets[ks], o,
                                                        seed, progress, callbacks...));
  }
  model.set_omega_trainable(false);
  if (o.progress && !o.progress->finished()) o.progress->finish();
  report.phase_a.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace coulomb::train
