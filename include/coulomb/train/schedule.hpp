// SPDX-License-Identifier: MIT
/// @file train/schedule.hpp
/// @brief Learning-rate schedules of Phase B: linear warm-up to a peak, then constant, linear or
/// cosine decay to a floor.
///
/// The argument is the 0-based index t of the update (the optimizer's step_count() before the
/// step). With peak η, floor η_min, W warm-up steps and T total steps:
///
///     t < W:       η_t = η (t + 1) / W                   (reaches η at t = W − 1; never 0)
///     W ≤ t:       p = min(1, (t − W) / (T − W))          (p = 1 when T = W)
///       constant:  η_t = η
///       linear:    η_t = η_min + (η − η_min)(1 − p)
///       cosine:    η_t = η_min + (η − η_min)(1 + cos πp)/2   (Loshchilov & Hutter, SGDR, 2017)
///
/// so η_W = η and η_t = η_min for t ≥ T. The same idea, with a different parametrization, is
/// coulomb::CosineStep of the particle dynamics (particles/langevin.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb::train {

/// Shape of the decay after the warm-up.
enum class Decay {
  constant,  ///< stay at the peak
  linear,    ///< straight line from the peak to the floor over [W, T]
  cosine,    ///< half cosine from the peak to the floor over [W, T]
};

/// Warm-up then decay (see the file comment). The default is a constant rate of 10⁻³.
struct LearningRateSchedule {
  double peak = 1e-3;             ///< η > 0, the rate at the end of the warm-up
  double floor = 0.0;             ///< η_min ∈ [0, η], the rate from step T on (linear, cosine)
  Index warmup_steps = 0;         ///< W ≥ 0 (0: no warm-up)
  Index total_steps = 0;          ///< T ≥ W, the end of the decay (ignored by Decay::constant)
  Decay decay = Decay::constant;  ///< shape of the decay

  /// A constant rate η (no warm-up).
  static LearningRateSchedule constant(double rate) {
    LearningRateSchedule s;
    s.peak = rate;
    return s;
  }

  /// Linear warm-up over `warmup` steps to `peak`, then cosine decay to `floor` at step `total`.
  static LearningRateSchedule warmup_cosine(double peak, Index warmup, Index total,
                                            double floor = 0.0) {
    return LearningRateSchedule{peak, floor, warmup, total, Decay::cosine};
  }

  /// Linear warm-up over `warmup` steps to `peak`, then linear decay to `floor` at step `total`.
  static LearningRateSchedule warmup_linear(double peak, Index warmup, Index total,
                                            double floor = 0.0) {
    return LearningRateSchedule{peak, floor, warmup, total, Decay::linear};
  }

  /// Throws invalid_argument unless η > 0 is finite, 0 ≤ η_min ≤ η, W ≥ 0, and, for a linear
  /// or cosine decay, T ≥ max(W, 1).
  void validate() const {
    const char* where = "coulomb::train::LearningRateSchedule";
    coulomb::detail::require_positive(peak, where, "peak");
    coulomb::detail::require(floor >= 0.0 && floor <= peak, where,
                             "argument 'floor' must be in [0, peak], got " + std::to_string(floor));
    coulomb::detail::require(
        warmup_steps >= 0, where,
        "argument 'warmup_steps' must be non-negative, got " + std::to_string(warmup_steps));
    if (decay != Decay::constant) {
      coulomb::detail::require(total_steps >= warmup_steps && total_steps >= 1, where,
                               "argument 'total_steps' must be at least max(warmup_steps, 1) = " +
                                   std::to_string(std::max<Index>(warmup_steps, 1)) + ", got " +
                                   std::to_string(total_steps));
    }
  }

  /// η_t for the update of index `step` (0-based). Negative steps are treated as 0.
  double operator()(Index step) const {
    const Index t = std::max<Index>(step, 0);
    if (t < warmup_steps) {
      return peak * static_cast<double>(t + 1) / static_cast<double>(warmup_steps);
    }
    if (decay == Decay::constant) return peak;
    const Index span = total_steps - warmup_steps;
    const double p =
        span <= 0
            ? 1.0
            : std::min(1.0, static_cast<double>(t - warmup_steps) / static_cast<double>(span));
    const double shape =
        decay == Decay::linear ? 1.0 - p : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    return floor + (peak - floor) * shape;
  }
};

}  // namespace coulomb::train
