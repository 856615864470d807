// SPDX-License-Identifier: MIT
/// @file particles/alignment.hpp
/// @brief Kernel-target alignment of a feature map's particles, the attraction term of the
/// Hamiltonian, and the normalized alignment of Cortes et al. as a metric.
///
/// Badiei Khuzani et al. (2026), §2: with targets Ŷ ∈ R^{n×C} (±1 labels for C = 1, one-hot
/// rows otherwise; centred, Ŷ = Y − mean Y, by default) and the map's normalized features
/// Φ = Φ(X) ∈ R^{n×D} (so that K_N = ΦΦᵀ),
///   E(Ω) = −(1/n²) Σ_{i,j} ŷ_iᵀŷ_j K_N(x_i, x_j) = −‖(1/n) ŶᵀΦ‖²_F
///        = −(1/N) Σ_k ‖(1/n) Σ_i ŷ_i ϕ(x_i; ω_k)‖²   (for maps with one feature per particle),
/// a sum of one-particle potentials evaluated in O(n·N·d) through the features, never through
/// an n×n matrix. Its gradient is the map's backward_params with ∂E/∂Φ = −(2/n²) Ŷ(ŶᵀΦ).
///
/// Normalized alignment (Cortes, Mohri & Rostamizadeh, JMLR 2012), with Φ_c the column-centred
/// features when the targets are centred:
///   A(Ω) = ⟨K_c, ŶŶᵀ⟩_F / (‖K_c‖_F ‖ŶŶᵀ‖_F) = ‖ŶᵀΦ‖²_F / (‖Φ_cᵀΦ_c‖_F ‖ŶᵀŶ‖_F) ∈ [0, 1].
///
/// Learned phases (AlignmentOptions::learn_phases, maps with phases such as Rff): the particles
/// are Θ = [Ω | b] (m×(d+1)), feature j is √(2/m) cos(z_j + b_j) with z = XΩᵀ, and since
/// ∂φ_j/∂b_j = ∂φ_j/∂z_j the phase gradient is a column sum of ∂E/∂Z:
///   ∂E/∂b_j = Σ_i (∂E/∂Z)_ij.
/// Sinha & Duchi (NIPS 2016) use uncentred targets (AlignmentOptions{.centre = false}).
#pragma once

#include <cmath>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"

namespace coulomb {

/// Targets for binary labels: +1 for label 1 (or any positive value), −1 for label 0 (or −1).
/// Throws invalid_argument for an empty label vector or a value outside {0, 1, −1}.
template <typename Scalar, typename D>
Matrix<Scalar> binary_targets(const Eigen::MatrixBase<D>& labels) {
  const char* where = "coulomb::binary_targets";
  detail::require(labels.size() > 0, where, "argument 'labels' is empty");
  Matrix<Scalar> y(labels.size(), 1);
  for (Index i = 0; i < labels.size(); ++i) {
    const double v = static_cast<double>(labels.derived().reshaped()(i));
    if (v == 1.0)
      y(i, 0) = 1;
    else if (v == 0.0 || v == -1.0)
      y(i, 0) = -1;
    else
      detail::throw_invalid(where, "argument 'labels' has value " + std::to_string(v) +
                                       " at index " + std::to_string(i) + ", expected 0, 1 or -1");
  }
  return y;
}

/// One-hot targets (n × C) for class indices in [0, C).
template <typename Scalar, typename D>
Matrix<Scalar> one_hot_targets(const Eigen::MatrixBase<D>& labels, Index num_classes) {
  const char* where = "coulomb::one_hot_targets";
  detail::require(labels.size() > 0, where, "argument 'labels' is empty");
  detail::require(num_classes >= 2, where,
                  "argument 'num_classes' must be at least 2, got " + std::to_string(num_classes));
  Matrix<Scalar> y = Matrix<Scalar>::Zero(labels.size(), num_classes);
  for (Index i = 0; i < labels.size(); ++i) {
    const double v = static_cast<double>(labels.derived().reshaped()(i));
    const auto c = static_cast<Index>(v);
    if (static_cast<double>(c) != v || c < 0 || c >= num_classes)
      detail::throw_invalid(where, "argument 'labels' has value " + std::to_string(v) +
                                       " at index " + std::to_string(i) + ", expected 0.." +
                                       std::to_string(num_classes - 1));
    y(i, c) = 1;
  }
  return y;
}

/// Options of AlignmentEnergy.
struct AlignmentOptions {
  bool centre = true;  ///< subtract the mean target (centred kernel-target alignment)
  /// Learn the phases too: the particles are [Ω | b] (m×(d+1)) and the gradient has a phase
  /// column. Only for maps with phases (feature_map_traits<Map>::has_phases).
  bool learn_phases = false;
};

/// The particles [Ω | b] (m×(d+1)) of a map with phases: the frequencies and, as the last
/// column, the phases; what AlignmentEnergy with learn_phases evaluates.
template <FeatureMap Map>
requires(feature_map_traits<Map>::has_phases) Matrix<typename Map::Scalar> phased_particles(
    const Map& map) {
  Matrix<typename Map::Scalar> theta(map.num_particles(), map.input_dim() + 1);
  theta << map.omega(), map.phases();
  return theta;
}

/// Sets a map's frequencies and phases from particles [Ω | b] (m×(d+1), m = the map's number of
/// particles). Throws invalid_argument (and changes nothing) on a wrong shape or non-finite
/// entries.
template <FeatureMap Map, typename D>
requires(feature_map_traits<Map>::has_phases) void set_phased_particles(
    Map& map, const Eigen::MatrixBase<D>& theta) {
  const char* where = "coulomb::set_phased_particles";
  detail::require_shape(theta, map.num_particles(), map.input_dim() + 1, where, "theta");
  detail::require_finite(theta, where, "theta");
  map.set_omega(theta.leftCols(map.input_dim()));
  map.set_phases(theta.col(map.input_dim()));
}

/// The alignment energy E(Ω) = −‖(1/n) ŶᵀΦ(X; Ω)‖²_F of a feature map on a data set, with
/// value, gradient with respect to Ω, and minibatches. Holds a copy of the map, whose
/// particles it replaces at each evaluation (set_omega), and reusable workspaces: an instance
/// is not safe to evaluate from several threads at once.
template <FeatureMap Map>
class AlignmentEnergy {
 public:
  using Scalar = typename Map::Scalar;  ///< the map's scalar type
  using MatrixType = Matrix<Scalar>;    ///< inputs, targets, particles and gradients

  /// X: n×d inputs; Y: n×C targets (see binary_targets, one_hot_targets).
  template <typename DX, typename DY>
  AlignmentEnergy(Map map, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y,
                  AlignmentOptions options = {})
      : map_(std::move(map)), X_(X), Y_(Y), options_(options) {
    const char* where = "coulomb::AlignmentEnergy";
    detail::require(X_.rows() > 0, where, "argument 'X' has no rows (n = 0)");
    detail::require_cols(X_, map_.input_dim(), where, "X");
    detail::require(Y_.rows() == X_.rows(), where,
                    "argument 'Y' has " + std::to_string(Y_.rows()) + " rows, expected " +
                        std::to_string(X_.rows()) + " (one target row per input row)");
    detail::require(Y_.cols() >= 1, where, "argument 'Y' has no columns");
    detail::require_finite(X_, where, "X");
    detail::require_finite(Y_, where, "Y");
    detail::require(!options_.learn_phases || feature_map_traits<Map>::has_phases, where,
                    "argument 'options.learn_phases' needs a map with phases (such as Rff)");
    if (options_.centre) Y_.rowwise() -= Y_.colwise().mean();
    detail::require(Y_.squaredNorm() > 0, where,
                    "the targets are constant (all labels equal): the centred alignment is zero");
    order_.resize(static_cast<std::size_t>(X_.rows()));
    std::iota(order_.begin(), order_.end(), Index{0});
  }

  /// Number n of samples.
  Index num_samples() const noexcept { return X_.rows(); }
  /// The (centred) targets Ŷ.
  const MatrixType& targets() const noexcept { return Y_; }
  /// The inputs X.
  const MatrixType& inputs() const noexcept { return X_; }
  /// The feature map (its particles are those of the last evaluation).
  const Map& feature_map() const noexcept { return map_; }

  /// E(Ω) on all samples.
  template <typename D>
  Scalar evaluate(const Eigen::MatrixBase<D>& omega) {
    return compute(omega, 0, num_samples(), nullptr);
  }

  /// E(Ω) on all samples, and its gradient (resized to m×d).
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) {
    return compute(omega, 0, num_samples(), &gradient);
  }

  /// E on the minibatch of `size` samples starting at position `begin` of the current order
  /// (see shuffle), and its gradient.
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, Index begin, Index size,
                                MatrixType& gradient) {
    detail::require(begin >= 0 && size >= 1 && begin + size <= num_samples(),
                    "coulomb::AlignmentEnergy::evaluate_with_gradient",
                    "minibatch [" + std::to_string(begin) + ", " + std::to_string(begin + size) +
                        ") is not inside [0, " + std::to_string(num_samples()) + ")");
    return compute(omega, begin, size, &gradient);
  }

  /// Draws a new sample order for minibatches: a uniformly random permutation that depends on
  /// `rng` only (not on earlier orders), so runs with the same seed see the same batches.
  template <std::uniform_random_bit_generator G>
  void shuffle(G& rng) {
    std::iota(order_.begin(), order_.end(), Index{0});
    coulomb::shuffle(std::span<Index>(order_), rng);
  }

  /// Normalized (centred) alignment A(Ω) ∈ [0, 1] on all samples: a metric, larger is better.
  /// With learn_phases, `omega` is [Ω | b].
  template <typename D>
  Scalar normalized_alignment(const Eigen::MatrixBase<D>& omega) {
    set_particles(omega);
    map_.map(X_, phi_);
    return normalized_alignment_of(phi_, Y_, options_.centre);
  }

  /// A(Φ, Ŷ) for given features and (already centred if `centre`) targets.
  static Scalar normalized_alignment_of(const MatrixType& phi, const MatrixType& y, bool centre) {
    MatrixType phi_c = phi;
    if (centre) phi_c.rowwise() -= phi_c.colwise().mean();
    const double numerator = (y.transpose() * phi).squaredNorm();
    const double k_norm = (phi_c.transpose() * phi_c).norm();
    const double y_norm = (y.transpose() * y).norm();
    if (k_norm == 0.0 || y_norm == 0.0) return Scalar(0);
    return static_cast<Scalar>(numerator / (k_norm * y_norm));
  }

 private:
  template <typename D>
  void set_particles(const Eigen::MatrixBase<D>& omega) {
    if constexpr (feature_map_traits<Map>::has_phases) {
      if (options_.learn_phases) {
        const Index d = X_.cols();
        detail::require_cols(omega, d + 1, "coulomb::AlignmentEnergy::evaluate", "omega");
        map_.set_omega(omega.leftCols(d));
        map_.set_phases(omega.col(d));
        return;
      }
    }
    map_.set_omega(omega);
  }

  template <typename D>
  Scalar compute(const Eigen::MatrixBase<D>& omega, Index begin, Index size, MatrixType* gradient) {
    set_particles(omega);
    const bool full = begin == 0 && size == num_samples();
    if (full) {
      return value_and_gradient(X_, Y_, gradient);
    }
    batch_x_.resize(size, X_.cols());
    batch_y_.resize(size, Y_.cols());
    // Gather column by column: each pass reads one column of X (contiguous, cache-resident)
    // and writes one contiguous column of the batch.
    const Index* rows = order_.data() + begin;
    for (Index j = 0; j < X_.cols(); ++j) {
      const Scalar* src = X_.col(j).data();
      Scalar* dst = batch_x_.col(j).data();
      for (Index i = 0; i < size; ++i) dst[i] = src[rows[i]];
    }
    for (Index j = 0; j < Y_.cols(); ++j) {
      const Scalar* src = Y_.col(j).data();
      Scalar* dst = batch_y_.col(j).data();
      for (Index i = 0; i < size; ++i) dst[i] = src[rows[i]];
    }
    return value_and_gradient(batch_x_, batch_y_, gradient);
  }

  Scalar value_and_gradient(const MatrixType& X, const MatrixType& Y, MatrixType* gradient) {
    const Scalar inv_n = Scalar(1) / static_cast<Scalar>(X.rows());
    map_.map(X, phi_);
    projection_.noalias() = inv_n * (Y.transpose() * phi_);  // (1/n) ŶᵀΦ, C×D
    const Scalar value = -projection_.squaredNorm();
    if (gradient) {
      dphi_.noalias() = (Scalar(-2) * inv_n) * (Y * projection_);  // ∂E/∂Φ
      if constexpr (feature_map_traits<Map>::has_phases) {
        if (options_.learn_phases) {
          // ∂E/∂b_j = Σ_i (∂E/∂Z)_ij, beside ∂E/∂Ω = (∂E/∂Z)ᵀX.
          map_.backward_params(X, phi_, dphi_, omega_gradient_, workspace_);
          const Index d = omega_gradient_.cols();
          gradient->resize(omega_gradient_.rows(), d + 1);
          gradient->leftCols(d) = omega_gradient_;
          gradient->col(d).noalias() = workspace_.dZ.colwise().sum().transpose();
          return value;
        }
      }
      if constexpr (requires { map_.backward_params(X, phi_, dphi_, *gradient, workspace_); }) {
        // The workspace overload (coulomb's maps have it) allocates nothing after the first call.
        map_.backward_params(X, phi_, dphi_, *gradient, workspace_);
      } else {
        map_.backward_params(X, phi_, dphi_, *gradient);
      }
    }
    return value;
  }

  Map map_;
  MatrixType X_;
  MatrixType Y_;
  AlignmentOptions options_;
  std::vector<Index> order_;
  MatrixType phi_, dphi_, projection_, batch_x_, batch_y_, omega_gradient_;
  BackwardWorkspace<Scalar> workspace_;
};

}  // namespace coulomb
