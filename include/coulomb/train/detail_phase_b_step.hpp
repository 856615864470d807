// SPDX-License-Identifier: MIT
/// @file train/detail_phase_b_step.hpp
/// @brief Internal: the optimization step of Phase B (train/phase_b.hpp) on a batch of B
/// sequences with labels y_b:
///
///     logits = model(batch, dropout on)      loss = −(1/B) Σ_b log softmax(logits_b)[y_b]
///     g = ∂loss/∂θ for every trainable θ     (a frozen Ω gets no gradient)
///     g ← g · min(1, c/‖g‖)                  (global-norm clipping, c = clip_norm)
///     θ ← AdamW(θ, g, η_t)                   (η_t: linear warm-up, then linear/cosine decay)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

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
#include "gradients.hpp"
#include "phase_b_options.hpp"
#include "schedule.hpp"

namespace coulomb::train::detail {

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
        dropout_rng_(dropout_rng) {
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
    return static_cast<double>(loss);
  }

 private:
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
  Matrix<S> logits_, dlogits_;
};

/// Sum of the lengths of a batch's sequences.
inline Index batch_tokens(const TokenBatch& batch) {
  Index n = 0;
  for (const Index len : batch.lengths) n += len;
  return n;
}

}  // namespace coulomb::train::detail
