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
/// step (the buffer: train/gradient_sum.hpp, which packs only the token table's rows of the ids
/// in the global batch). Its dropout masks come from a generator derived from (seed, r, step).
/// With options.shard_optimizer (the default) the AdamW state is sharded
/// (train/sharded_adamw.hpp): the sum is a reduce-scatter, each process updates its slice of
/// the parameters with its slice of the moments, and an all-gather brings every slice to every
/// process.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
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
#include "gradient_sum.hpp"
#include "gradients.hpp"
#include "phase_b_options.hpp"
#include "schedule.hpp"
#include "sharded_adamw.hpp"

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
  /// With P > 1 processes and options.shard_optimizer, the AdamW state is sharded
  /// (ShardedAdamW); otherwise the whole gradient is summed (GradientSum) and every process
  /// takes the full AdamW step.
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
      if (options.shard_optimizer)
        sharded_.emplace(params_, *collective_, adamw_.options());
      else
        gradient_sum_.emplace(params_, *collective_);
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
  Index steps() const noexcept {
    return static_cast<Index>(sharded_ ? sharded_->step_count() : adamw_.step_count());
  }
  /// The rate of the next step.
  double next_learning_rate() const { return schedule_(steps()); }
  /// The parameter list (as of construction).
  const nn::ParameterList<S>& parameters() const noexcept { return params_; }
  /// The optimizer, whose state goes into checkpoints. Sharded, it holds the whole state only
  /// between gather_optimizer() and optimizer_written(), and between a restore into it and
  /// optimizer_restored().
  AdamW<S>& optimizer() noexcept { return adamw_; }
  /// optimizer() with its whole state, for writing a checkpoint: sharded, the moments are
  /// first gathered from every process (collective: every process calls it at the same point).
  AdamW<S>& gather_optimizer() {
    if (sharded_) adamw_.import_state(sharded_->export_state(), params_);
    return adamw_;
  }
  /// After gather_optimizer() has been written (sharded: frees the gathered moments).
  void optimizer_written() noexcept {
    if (sharded_) adamw_.reset();
  }
  /// After a checkpoint's state was restored into optimizer() (sharded: each process keeps its
  /// slice of it; no communication).
  void optimizer_restored() {
    if (!sharded_) return;
    sharded_->import_state(adamw_.export_state());
    adamw_.reset();
  }
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
    const std::int64_t t = steps() + 1;
    const Index B = batch.size();
    const ShardRange shard = shard_range(B, collective_);
    // Sharded: of the token table only the rows of the last batch (the rest stays zero).
    if (sharded_)
      sharded_->zero_gradients();
    else
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

    const std::span<const TokenId> ids(batch.ids.data(),
                                       static_cast<std::size_t>(batch.ids.size()));
    if (sharded_) {
      // Reduce-scatter, clipping, AdamW on this process's slice, all-gather of the parameters.
      const ShardedAdamWResult r =
          sharded_->step(ids, loss_share, failed, clip_norm_, schedule_(steps()));
      if (r.failures > 0) failures(t, where, r.failures);
      if (!r.stepped) {
        // A summed gradient or the norm is not finite (the gradients are unpacked): name it.
        require_finite_parameters(params_, t, FiniteCheck::gradients);
        if (clip_norm_ > 0.0) clip_gradient_norm(params_, clip_norm_);
        throw numerical_error(std::string(where) + ": step " + std::to_string(t) +
                              ": the gradient norm is not finite");
      }
      return r.loss;
    }
    // One fused buffer (train/gradient_sum.hpp): every trainable gradient, the loss share, the
    // failures, summed over the processes and clipped there.
    const GradientSumResult sum = gradient_sum_->sum(ids, loss_share, failed, clip_norm_);
    if (sum.failures > 0) failures(t, where, sum.failures);
    // Not clipped (a norm that is not finite): update() names the parameter.
    if (sum.clipped)
      adamw_.step(params_, schedule_(steps()));
    else
      update(t);
    return sum.loss;
  }

  /// Reports that `count` processes failed at step t (overflow()).
  [[noreturn]] void failures(std::int64_t t, const char* where, Index count) {
    std::ostringstream os;
    os << "the logits or the loss are not finite on " << static_cast<long long>(count) << " of "
       << collective_->size() << " processes";
    overflow(t, where, os.str());
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
  std::optional<GradientSum<S>> gradient_sum_;  // the fused sum (data-parallel, not sharded)
  std::optional<ShardedAdamW<S>> sharded_;      // the sharded step (data-parallel, sharded)
  Matrix<S> logits_, dlogits_;
};

/// Sum of the lengths of a batch's sequences.
inline Index batch_tokens(const TokenBatch& batch) {
  Index n = 0;
  for (const Index len : batch.lengths) n += len;
  return n;
}

}  // namespace coulomb::train::detail
