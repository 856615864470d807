// SPDX-License-Identifier: MIT
/// @file train/adamw.hpp
/// @brief AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
/// Regularization", ICLR 2019; Adam: Kingma & Ba, ICLR 2015), the optimizer of Phase B
/// (Badiei Khuzani et al., 2026, §4).
///
/// At step t = 1, 2, … with learning rate η (from a schedule), gradient g of a trainable
/// parameter θ, and moments m, v (zero before the first step):
///
///     θ ← θ − η λ θ                        decoupled weight decay, only where `decay`
///     m ← β₁ m + (1 − β₁) g
///     v ← β₂ v + (1 − β₂) g²               (entrywise)
///     θ ← θ − (η / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
///
/// i.e. θ − η m̂/(√v̂ + ε) with the bias-corrected moments m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ).
/// The decay multiplies by η, as in PyTorch's `torch.optim.AdamW` (the paper's schedule
/// multiplier η_t is η/η_max there; the two agree for a constant rate up to a rescaling of λ).
/// Parameters with `trainable == false` (a frozen Ω) are neither read nor changed.
///
/// The moments are keyed by parameter name and checked against the parameters' shapes at every
/// step, so an optimizer can never apply one tensor's moments to another: a parameter list that
/// changes after the first step (a new, removed, renamed, resized or newly frozen parameter) is
/// an error that names the parameter. The state exports to named tensors for checkpoints
/// (`export_state`, `import_state`; train/checkpoint.hpp writes it into a model file).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "detail_parameters.hpp"
#include "parameter_snapshot.hpp"

namespace coulomb::train {

/// Hyper-parameters of AdamW.
struct AdamWOptions {
  double beta1 = 0.9;          ///< β₁ ∈ [0, 1): decay of the first moment
  double beta2 = 0.999;        ///< β₂ ∈ [0, 1): decay of the second moment
  double epsilon = 1e-8;       ///< ε > 0, added to √v̂
  double weight_decay = 0.01;  ///< λ ≥ 0, decoupled; applied only to parameters with `decay`
  /// Check before each step that every trainable value and gradient is finite, and throw
  /// numerical_error naming the step and the parameter otherwise (nothing is changed then).
  /// One vectorized pass over the tensors; turn it off only if the caller checks itself.
  bool check_finite = true;

  /// Throws invalid_argument unless β₁, β₂ ∈ [0, 1), ε > 0 and λ ≥ 0, all finite.
  void validate() const {
    const char* where = "coulomb::train::AdamWOptions";
    coulomb::detail::require(beta1 >= 0.0 && beta1 < 1.0, where,
                             "argument 'beta1' must be in [0, 1), got " + std::to_string(beta1));
    coulomb::detail::require(beta2 >= 0.0 && beta2 < 1.0, where,
                             "argument 'beta2' must be in [0, 1), got " + std::to_string(beta2));
    coulomb::detail::require_positive(epsilon, where, "epsilon");
    coulomb::detail::require(weight_decay >= 0.0 && std::isfinite(weight_decay), where,
                             "argument 'weight_decay' must be finite and non-negative, got " +
                                 std::to_string(weight_decay));
  }
};

namespace detail {

/// AdamW's step t: its coefficients computed in double and rounded once to S, and the update
/// of n entries (AdamW and ShardedAdamW share it, so the two give the same bits).
template <RealScalar S>
struct AdamWStep {
  S shrink, c1, c1m, c2, c2m, step_size, inv_sqrt_bias2, eps;

  AdamWStep(const AdamWOptions& o, std::int64_t t, double learning_rate)
      : shrink(static_cast<S>(1.0 - learning_rate * o.weight_decay)),
        c1(static_cast<S>(o.beta1)),
        c1m(static_cast<S>(1.0 - o.beta1)),
        c2(static_cast<S>(o.beta2)),
        c2m(static_cast<S>(1.0 - o.beta2)),
        step_size(
            static_cast<S>(learning_rate / (1.0 - std::pow(o.beta1, static_cast<double>(t))))),
        inv_sqrt_bias2(
            static_cast<S>(1.0 / std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(t))))),
        eps(static_cast<S>(o.epsilon)) {}

  /// θ, m, v of n entries updated in place from the gradient g (θ decayed when `decay`).
  void apply(S* theta_data, const S* g_data, S* m_data, S* v_data, Index n, bool decay) const {
    Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> theta(theta_data, n);
    const Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>> g(g_data, n);
    Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> m(m_data, n);
    Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> v(v_data, n);
    if (decay) theta *= shrink;
    m = c1 * m + c1m * g;
    v = c2 * v + c2m * g.square();
    theta -= step_size * m / (v.sqrt() * inv_sqrt_bias2 + eps);
  }
};

}  // namespace detail

/// The state of an AdamW optimizer as named tensors: for every trainable parameter `<name>`,
/// "first_moment.<name>" (m) and "second_moment.<name>" (v), plus the number of steps taken.
template <RealScalar S>
struct AdamWState {
  std::int64_t step = 0;                  ///< steps taken (t of the last step)
  std::vector<StateTensor<S>> tensors{};  ///< m and v of every trainable parameter
};

/// Adam with decoupled weight decay over an nn::ParameterList (see the file comment).
template <RealScalar S>
class AdamW {
 public:
  /// Name prefix of the first moments in exported state.
  static constexpr std::string_view first_moment_prefix = "first_moment.";
  /// Name prefix of the second moments in exported state.
  static constexpr std::string_view second_moment_prefix = "second_moment.";

  /// An optimizer with the given hyper-parameters. Throws invalid_argument for invalid ones.
  explicit AdamW(const AdamWOptions& options = {}) : options_(options) { options_.validate(); }

  /// The hyper-parameters.
  const AdamWOptions& options() const noexcept { return options_; }

  /// Number of steps taken (0 before the first).
  std::int64_t step_count() const noexcept { return step_; }

  /// Takes one step (t = step_count() + 1) with learning rate `learning_rate` ≥ 0 on every
  /// trainable parameter of `params`. Everything is checked before anything changes, so a
  /// throwing call leaves the parameters and the optimizer as they were. Throws
  /// invalid_argument for a negative or non-finite learning rate, a parameter without a name,
  /// value or gradient, a gradient of another shape than its value, a duplicate name among the
  /// trainable parameters, or a list of trainable parameters that differs from the one the
  /// state was created for (names and shapes); numerical_error naming the step and parameter
  /// for a non-finite value or gradient (with options().check_finite).
  void step(const nn::ParameterList<S>& params, double learning_rate) {
    const char* where = "coulomb::train::AdamW::step";
    coulomb::detail::require(learning_rate >= 0.0 && std::isfinite(learning_rate), where,
                             "argument 'learning_rate' must be finite and non-negative, got " +
                                 std::to_string(learning_rate));
    const std::int64_t t = step_ + 1;
    const bool fresh = step_ == 0;  // the state is created at the first step
    std::vector<Slot*> slots;
    slots.reserve(params.size());
    ++pass_;
    std::size_t trainable = 0;
    for (const auto& p : params) {
      if (!p.trainable) continue;
      ++trainable;
      detail::check_parameter(p, where, true);
      if (options_.check_finite) {
        detail::require_finite_tensor(*p.value, where, t, "value", p.name);
        detail::require_finite_tensor(*p.gradient, where, t, "gradient", p.name);
      }
      if (fresh) {
        slots.push_back(nullptr);
        continue;
      }
      const auto it = slots_.find(p.name);
      if (it == slots_.end()) {
        coulomb::detail::throw_invalid(where, "trainable parameter '" + p.name +
                                                  "' has no optimizer state: the parameter "
                                                  "list changed after step " +
                                                  std::to_string(step_) + " (the state holds " +
                                                  std::to_string(slots_.size()) + " parameters)");
      }
      Slot& s = it->second;
      if (s.pass == pass_) {
        coulomb::detail::throw_invalid(where, "parameter name '" + p.name + "' appears twice");
      }
      s.pass = pass_;
      if (s.m.rows() != p.value->rows() || s.m.cols() != p.value->cols()) {
        coulomb::detail::throw_invalid(
            where, "parameter '" + p.name + "' is " +
                       detail::shape_text(p.value->rows(), p.value->cols()) +
                       ", its optimizer state is " + detail::shape_text(s.m.rows(), s.m.cols()) +
                       " (the parameter list changed after step " + std::to_string(step_) + ")");
      }
      slots.push_back(&s);
    }
    if (!fresh && trainable != slots_.size()) {
      for (const auto& [name, s] : slots_) {
        if (s.pass != pass_) {
          coulomb::detail::throw_invalid(
              where, "the optimizer has state for '" + name +
                         "', which is not a trainable "
                         "parameter of the list: the parameter list changed after step " +
                         std::to_string(step_));
        }
      }
    }
    if (fresh) {
      // Validate uniqueness before creating anything.
      std::map<std::string_view, int> seen;
      for (const auto& p : params) {
        if (p.trainable && !seen.emplace(p.name, 0).second) {
          coulomb::detail::throw_invalid(where, "parameter name '" + p.name + "' appears twice");
        }
      }
      std::size_t k = 0;
      for (const auto& p : params) {
        if (!p.trainable) continue;
        Slot& s = slots_[p.name];
        s.m.setZero(p.value->rows(), p.value->cols());
        s.v.setZero(p.value->rows(), p.value->cols());
        s.pass = pass_;
        slots[k++] = &s;
      }
    }

    const detail::AdamWStep<S> update(options_, t, learning_rate);

    // In blocks that stay in the first-level cache: four passes over a block instead of over
    // the whole tensors (a quarter of the memory traffic for a large embedding table). Each entry
    // takes the same operations as over the whole tensor: a block starts a multiple of 64
    // entries from the start, so it keeps the tensor's alignment and vector path.
    constexpr Index block = 1024;
    std::size_t k = 0;
    for (const auto& p : params) {
      if (!p.trainable) continue;
      Slot& s = *slots[k++];
      const bool decay = p.decay && options_.weight_decay != 0.0;
      const Index size = p.value->size();
      for (Index at = 0; at < size; at += block) {
        const Index n = std::min(block, size - at);
        update.apply(p.value->data() + at, p.gradient->data() + at, s.m.data() + at,
                     s.v.data() + at, n, decay);
      }
    }
    step_ = t;
  }

  /// Forgets the moments and the step count (the next step starts afresh).
  void reset() noexcept {
    slots_.clear();
    step_ = 0;
  }

  /// The first moment m of parameter `name`, or nullptr if it has no state.
  const Matrix<S>* first_moment(std::string_view name) const {
    const auto it = slots_.find(name);
    return it == slots_.end() ? nullptr : &it->second.m;
  }

  /// The second moment v of parameter `name`, or nullptr if it has no state.
  const Matrix<S>* second_moment(std::string_view name) const {
    const auto it = slots_.find(name);
    return it == slots_.end() ? nullptr : &it->second.v;
  }

  /// A copy of the state: the step count and "first_moment.<name>", "second_moment.<name>" for
  /// every parameter with state, in name order.
  AdamWState<S> export_state() const {
    AdamWState<S> state;
    state.step = step_;
    state.tensors.reserve(2 * slots_.size());
    for (const auto& [name, s] : slots_) {
      state.tensors.push_back({std::string(first_moment_prefix) + name, s.m});
      state.tensors.push_back({std::string(second_moment_prefix) + name, s.v});
    }
    return state;
  }

  /// Replaces the state by `state` (from export_state, possibly through a checkpoint), checked
  /// against `params`: with state.step > 0, there must be exactly one first and one second
  /// moment for every trainable parameter, of its shape, finite, with v ≥ 0; with state.step = 0
  /// there must be no tensors. Throws invalid_argument naming the tensor or parameter otherwise,
  /// and leaves the optimizer unchanged.
  void import_state(const AdamWState<S>& state, const nn::ParameterList<S>& params) {
    const char* where = "coulomb::train::AdamW::import_state";
    coulomb::detail::require(
        state.step >= 0, where,
        "the step count must be non-negative, got " + std::to_string(state.step));
    if (state.step == 0) {
      coulomb::detail::require(
          state.tensors.empty(), where,
          "a state of step 0 must have no tensors, got " + std::to_string(state.tensors.size()));
      reset();
      return;
    }
    std::map<std::string, Slot, std::less<>> slots;
    std::map<std::string_view, const nn::ParameterRef<S>*> by_name;
    for (const auto& p : params) {
      if (!p.trainable) continue;
      detail::check_parameter(p, where, false);
      if (!slots.emplace(p.name, Slot{}).second) {
        coulomb::detail::throw_invalid(where, "parameter name '" + p.name + "' appears twice");
      }
      by_name.emplace(p.name, &p);
    }
    std::map<std::string, std::pair<bool, bool>, std::less<>> filled;
    for (const auto& t : state.tensors) {
      const bool is_m = t.name.starts_with(first_moment_prefix);
      const bool is_v = t.name.starts_with(second_moment_prefix);
      if (!is_m && !is_v) {
        coulomb::detail::throw_invalid(where, "tensor '" + t.name + "' is not AdamW state");
      }
      const std::string_view name = std::string_view(t.name).substr(
          is_m ? first_moment_prefix.size() : second_moment_prefix.size());
      const auto it = slots.find(name);
      if (it == slots.end()) {
        coulomb::detail::throw_invalid(where, "tensor '" + t.name +
                                                  "' belongs to no trainable "
                                                  "parameter of the list");
      }
      const nn::ParameterRef<S>& p = *by_name.at(name);
      if (t.value.rows() != p.value->rows() || t.value.cols() != p.value->cols()) {
        coulomb::detail::throw_invalid(
            where, "tensor '" + t.name + "' is " +
                       detail::shape_text(t.value.rows(), t.value.cols()) + ", parameter '" +
                       p.name + "' is " + detail::shape_text(p.value->rows(), p.value->cols()));
      }
      if (!coulomb::detail::all_finite(t.value) || (is_v && (t.value.array() < S(0)).any())) {
        coulomb::detail::throw_invalid(
            where,
            "tensor '" + t.name + "' has " + (is_v ? "a negative or " : "a ") + "non-finite entry");
      }
      auto& f = filled[std::string(name)];
      bool& flag = is_m ? f.first : f.second;
      if (flag) coulomb::detail::throw_invalid(where, "tensor '" + t.name + "' appears twice");
      flag = true;
      (is_m ? it->second.m : it->second.v) = t.value;
    }
    for (const auto& [name, s] : slots) {
      const auto it = filled.find(name);
      if (it == filled.end() || !it->second.first || !it->second.second) {
        coulomb::detail::throw_invalid(
            where, "trainable parameter '" + name + "' has no " +
                       (it == filled.end() || !it->second.first ? "first" : "second") +
                       " moment in the state");
      }
    }
    slots_ = std::move(slots);
    step_ = state.step;
  }

 private:
  struct Slot {
    Matrix<S> m{};
    Matrix<S> v{};
    std::uint64_t pass = 0;  // the validation pass that last saw this parameter
  };

  AdamWOptions options_;
  std::map<std::string, Slot, std::less<>> slots_;
  std::int64_t step_ = 0;
  std::uint64_t pass_ = 0;
};

}  // namespace coulomb::train
