// SPDX-License-Identifier: MIT
/// @file train/detail_phase_b_step.hpp
/// @brief Internal: the optimization step of Phase B (train/phase_b.hpp) on a batch of B
/// sequences with labels y_b:
///
///     logits = model(batch, dropout on)      loss = −(1/B) Σ_b log softmax(logits_b)[y_b]
///     g = ∂loss/∂θ for every trainable θ     (a frozen Ω gets no gradient)
///     g ← g · min(1, c/‖g‖)                  (global-norm clipping, c = clip_norm)
///     θ ← AdamW(θ, g, η_t)                   (η_t: linear warm-up, then linear/cosine decay)
///
/// Data-parallel (options.collective of P > 1 processes, train/collective.hpp): process r takes
/// the sequences shard_range(B, r, P) of the global batch, scales its shard's mean loss by its
/// share B_r/B, packs the gradients of every trainable parameter (then its loss share and a
/// failure flag) into one contiguous buffer and sums it over the processes in one call, so that
/// every process holds g = ∂loss/∂θ of the global batch before the same clipping and AdamW
/// step. Its dropout masks come from a generator derived from (seed, r, step). Of the token
/// embedding table only the rows of the ids in the global batch can have a gradient (every
/// process knows the whole batch), so only those rows are packed: about a tenth of the table
/// for a batch of 32 sentences, where the table is most of the model's parameters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../nn/loss.hpp"
#include "../nn/parameter.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "adamw.hpp"
#include "collective.hpp"
#include "gradients.hpp"
#include "phase_b_options.hpp"
#include "schedule.hpp"

namespace coulomb::train::detail {

/// out ← the sequences [range.begin, range.end) of `batch` (a non-empty range inside it), with
/// the batch's padded length.
inline void shard_of(const TokenBatch& batch, ShardRange range, TokenBatch& out) {
  const Index n = range.size();
  const auto b0 = static_cast<std::ptrdiff_t>(range.begin);
  const auto b1 = static_cast<std::ptrdiff_t>(range.end);
  out.ids = batch.ids.middleCols(range.begin, n);
  out.segments = batch.segments.middleCols(range.begin, n);
  out.mask = batch.mask.middleCols(range.begin, n);
  out.labels.assign(batch.labels.begin() + b0, batch.labels.begin() + b1);
  out.indices.assign(batch.indices.begin() + b0, batch.indices.begin() + b1);
  out.lengths.assign(batch.lengths.begin() + b0, batch.lengths.begin() + b1);
  if (batch.overlap.rows() > 0)
    out.overlap = batch.overlap.middleRows(range.begin, n);
  else
    out.overlap.resize(0, 0);
}

/// One Phase B optimizer step after another on a model: forward with dropout, cross-entropy,
/// backward, finiteness check, clipping, AdamW. Holds the optimizer, the schedule, the parameter
/// list and the buffers; the model must outlive it and keep its parameter list.
template <RealScalar S, FeatureMap Map>
class PhaseBStepper {
 public:
  PhaseBStepper(nn::TextClassifier<Map>& model, const PhaseBOptions& options, Index total_steps,
                Rng dropout_rng)
      : model_(&model),
        params_(model.parameters()),
        adamw_(without_finite_check(options.optimizer)),
        clip_norm_(options.clip_norm),
        dropout_rng_(dropout_rng),
        collective_(is_distributed(options.collective) ? options.collective : nullptr) {
    if (collective_) {
      rank_rng_ = dropout_rng.split(static_cast<std::uint64_t>(collective_->rank()));
      token_table_ = find_token_table(params_);
    }
    const Index total = std::max<Index>(total_steps, 1);
    const PhaseBSchedule& s = options.schedule;
    const Index warmup =
        s.warmup_steps >= 0
            ? std::min(s.warmup_steps, total)
            : static_cast<Index>(std::llround(s.warmup_fraction * static_cast<double>(total)));
    schedule_ =
        LearningRateSchedule{s.learning_rate, s.final_learning_rate, warmup, total, s.decay};
    schedule_.validate();
  }

  /// Optimizer steps taken.
  Index steps() const noexcept { return static_cast<Index>(adamw_.step_count()); }
  /// The rate of the next step.
  double next_learning_rate() const { return schedule_(steps()); }
  /// The parameter list (as of construction).
  const nn::ParameterList<S>& parameters() const noexcept { return params_; }
  /// The optimizer (its state goes into checkpoints).
  AdamW<S>& optimizer() noexcept { return adamw_; }
  /// The generator of the dropout masks (its state goes into checkpoints).
  Rng& dropout_rng() noexcept { return dropout_rng_; }

  /// One step on `batch`; returns its loss. Throws numerical_error naming the step and, when
  /// one is to blame, the parameter, leaving the parameters as they were before the step.
  double step(const TokenBatch& batch) {
    if (collective_) return distributed_step(batch);
    const char* where = "coulomb::train::run_phase_b";
    const std::int64_t t = adamw_.step_count() + 1;
    try {
      model_->forward(batch, logits_, true, dropout_rng_);
    } catch (const coulomb::invalid_argument& e) {
      // The attention refuses non-finite queries, keys or values: report it as a divergence.
      if (std::string_view(e.what()).find("non-finite") == std::string_view::npos) throw;
      overflow(t, where, e.what());
    }
    if (!coulomb::detail::all_finite(logits_)) overflow(t, where, "the logits are not finite");
    const S loss = nn::softmax_cross_entropy(logits_, std::span<const int>(batch.labels), dlogits_);
    if (!std::isfinite(static_cast<double>(loss))) overflow(t, where, "the loss is not finite");
    model_->zero_grad();
    model_->backward(dlogits_);
    update(t);
    return static_cast<double>(loss);
  }

 private:
  /// Clipping (which also checks that the gradients are finite) and the AdamW step of step t.
  void update(std::int64_t t) {
    if (clip_norm_ > 0.0) {
      // The global norm is accumulated in double, where the squares of float gradients cannot
      // overflow: it is finite exactly when every gradient is, so it also serves as their
      // finiteness check (one pass over the gradients instead of two). When it is not finite,
      // require_finite_parameters names the parameter; finite gradients whose squares overflow
      // (double only) make clip_gradient_norm throw as before.
      const double norm = global_gradient_norm(params_);
      if (!std::isfinite(norm)) {
        require_finite_parameters(params_, t, FiniteCheck::gradients);
        clip_gradient_norm(params_, clip_norm_);
      }
      detail::scale_gradients_to(params_, norm, clip_norm_);
    } else {
      require_finite_parameters(params_, t, FiniteCheck::gradients);
    }
    adamw_.step(params_, schedule_(steps()));
  }

  /// step() of one of P > 1 processes (see the file comment). Every process takes part in the
  /// sum whatever happens on it, so that a divergence on one process makes every process throw
  /// the same numerical_error instead of leaving the others waiting.
  double distributed_step(const TokenBatch& batch) {
    const char* where = "coulomb::train::run_phase_b";
    const std::int64_t t = adamw_.step_count() + 1;
    const Index B = batch.size();
    const ShardRange shard = shard_range(B, collective_);
    model_->zero_grad();
    double loss_share = 0.0;
    bool failed = false;
    if (shard.size() > 0) {
      shard_of(batch, shard, shard_);
      Rng rank_rng = rank_rng_;  // the masks of step t: from (seed, rank, t) alone
      Rng rng = rank_rng.split(static_cast<std::uint64_t>(t));
      try {
        model_->forward(shard_, logits_, true, rng);
        failed = !coulomb::detail::all_finite(logits_);
      } catch (const coulomb::invalid_argument& e) {
        if (std::string_view(e.what()).find("non-finite") == std::string_view::npos) throw;
        failed = true;
      }
      if (!failed) {
        const S loss =
            nn::softmax_cross_entropy(logits_, std::span<const int>(shard_.labels), dlogits_);
        failed = !std::isfinite(static_cast<double>(loss));
        if (!failed) {
          // ∂(B_r/B · shard mean)/∂logits: the sum over the processes is the global mean's.
          const double share = static_cast<double>(shard.size()) / static_cast<double>(B);
          dlogits_ *= static_cast<S>(share);
          model_->backward(dlogits_);
          loss_share = share * static_cast<double>(loss);
        }
      }
    }  // a failed process sends zero gradients (zero_grad above) and its flag

    // One fused buffer: every trainable gradient in list order (of the token table, the rows
    // of the batch's ids only: the others are zero on every process), the loss share, the
    // failures.
    batch_rows(batch);
    Index n = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].trainable) continue;
      n += i == token_table_ ? static_cast<Index>(rows_.size()) * params_[i].gradient->cols()
                             : params_[i].gradient->size();
    }
    fused_.resize(n + 2);
    Index at = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (!p.trainable) continue;
      if (i == token_table_) {
        for (Index j = 0; j < p.gradient->cols(); ++j)
          for (const Index r : rows_) fused_(at++) = (*p.gradient)(r, j);
        continue;
      }
      fused_.segment(at, p.gradient->size()) = p.gradient->reshaped();
      at += p.gradient->size();
    }
    fused_(n) = static_cast<S>(loss_share);
    fused_(n + 1) = failed ? S(1) : S(0);
    collective_->sum(std::span<S>(fused_.data(), static_cast<std::size_t>(fused_.size())));
    if (fused_(n + 1) > S(0)) {
      std::ostringstream os;
      os << "the logits or the loss are not finite on " << static_cast<long long>(fused_(n + 1))
         << " of " << collective_->size() << " processes";
      overflow(t, where, os.str());
    }
    // The clipping norm from the buffer, which holds every non-zero gradient entry in fewer
    // entries than the gradients, scaled there before unpacking. Not finite: update() names
    // the parameter.
    bool clipped = false;
    if (clip_norm_ > 0.0) {
      const double norm = std::sqrt(sum_of_squares(fused_.data(), n));
      if (std::isfinite(norm)) {
        if (norm > clip_norm_) fused_.head(n) *= static_cast<S>(clip_norm_ / norm);
        clipped = true;
      }
    }
    at = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (!p.trainable) continue;
      if (i == token_table_) {
        for (Index j = 0; j < p.gradient->cols(); ++j)
          for (const Index r : rows_) (*p.gradient)(r, j) = fused_(at++);
        continue;
      }
      p.gradient->reshaped() = fused_.segment(at, p.gradient->size());
      at += p.gradient->size();
    }
    if (clipped)
      adamw_.step(params_, schedule_(steps()));
    else
      update(t);
    return static_cast<double>(fused_(n));
  }

  /// rows_ ← the distinct ids of `batch` (padding included), in increasing order: the rows of
  /// the token table that the backward of any shard of it can write.
  void batch_rows(const TokenBatch& batch) {
    rows_.clear();
    if (token_table_ == no_table) return;
    seen_.assign(static_cast<std::size_t>(params_[token_table_].gradient->rows()), 0);
    const TokenId* ids = batch.ids.data();
    for (Index k = 0; k < batch.ids.size(); ++k) {
      // The model's forward has checked every id of the shards against the table; a process
      // without a shard has not, so ids outside it are left to the others' error.
      const TokenId id = ids[k];
      if (id >= 0 && static_cast<std::size_t>(id) < seen_.size())
        seen_[static_cast<std::size_t>(id)] = 1;
    }
    for (std::size_t r = 0; r < seen_.size(); ++r)
      if (seen_[r]) rows_.push_back(static_cast<Index>(r));
  }

  /// The index of the trainable token table "embedding.token" in `params`, or no_table.
  static std::size_t find_token_table(const nn::ParameterList<S>& params) {
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].trainable && params[i].name == "embedding.token") return i;
    return no_table;
  }

  // The step checks the gradients itself (with the clipping norm) and the values on overflow.
  static AdamWOptions without_finite_check(AdamWOptions o) {
    o.check_finite = false;
    return o;
  }

  /// Names a non-finite parameter value if there is one (numerical_error from
  /// require_finite_parameters), else reports `what` at step t.
  [[noreturn]] void overflow(std::int64_t t, const char* where, const std::string& what) {
    require_finite_parameters(params_, t, FiniteCheck::values);
    std::ostringstream os;
    os << where << ": step " << t << ": " << what
       << " although every parameter is finite (the values grew too large: lower the learning "
          "rate or clip the gradients)";
    throw numerical_error(os.str());
  }

  nn::TextClassifier<Map>* model_;
  nn::ParameterList<S> params_;
  AdamW<S> adamw_;
  LearningRateSchedule schedule_;
  double clip_norm_;
  Rng dropout_rng_;
  Collective* collective_;  // nullptr: one process
  Rng rank_rng_{0};         // of this process (data-parallel only): split(step) gives the masks
  TokenBatch shard_;        // this process's part of the batch (data-parallel only)
  Vector<S> fused_;         // the gradients, loss share and failures summed over the processes
  static constexpr std::size_t no_table = static_cast<std::size_t>(-1);
  std::size_t token_table_ = no_table;  // the token table in params_ (data-parallel only)
  std::vector<Index> rows_;             // its rows with ids in the batch
  std::vector<unsigned char> seen_;     // which ids are in the batch
  Matrix<S> logits_, dlogits_;
};

/// Sum of the lengths of a batch's sequences.
inline Index batch_tokens(const TokenBatch& batch) {
  Index n = 0;
  for (const Index len : batch.lengths) n += len;
  return n;
}

}  // namespace coulomb::train::detail
