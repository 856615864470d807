// SPDX-License-Identifier: MIT
/// @file train/detail_sharded_alignment.hpp
/// @brief Internal: the alignment energy of particles/alignment.hpp with its rows shared
/// between the P processes of a data-parallel Phase A (train/collective.hpp). With Ŷ centred by
/// the mean of all n rows and Φ = Φ(X; Ω), E(Ω) = −‖P‖²_F for P = (1/n) ŶᵀΦ = Σ_r (1/n) Ŷ_rᵀΦ_r,
/// a sum over the processes' rows r; and ∂E/∂Ω = Σ_r backward_params(X_r, Φ_r, ∂E/∂Φ_r) with
/// ∂E/∂Φ_r = −(2/n) Ŷ_r P. E is quadratic in the sum P, so a step takes two sums over the
/// processes: P (C × D), then the gradient (m × d). Every process then holds the same E and
/// ∂E/∂Ω bit for bit, and the Langevin dynamics, whose noise every process draws from the same
/// seed, keep the same particles on every process.
#pragma once

#include <span>
#include <string>
#include <utility>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "../particles/alignment.hpp"
#include "collective.hpp"

namespace coulomb::train::detail {

/// E(Ω) = −‖(1/n) ŶᵀΦ(X; Ω)‖²_F and its gradient over the processes of `collective`, each of
/// which keeps the rows shard_range(n) of X and Ŷ (full-batch evaluation only). Every process
/// passes all the rows (the same X and Y everywhere, which it views: they must outlive the
/// object); the normalized alignment, a metric, is computed from all of them on every process.
template <FeatureMap Map>
class ShardedAlignment {
 public:
  using Scalar = typename Map::Scalar;  ///< the map's scalar type
  using MatrixType = Matrix<Scalar>;    ///< inputs, targets, particles and gradients

  /// X: n×d inputs and Y: n×C targets, every row (centred here by the mean of all rows).
  /// Throws invalid_argument as AlignmentEnergy does (no rows, shapes, non-finite entries,
  /// constant targets).
  ShardedAlignment(Map map, const MatrixType& X, const MatrixType& Y, Collective& collective)
      : map_(std::move(map)), collective_(&collective), X_all_(&X) {
    const char* where = "coulomb::train::ShardedAlignment";
    coulomb::detail::require(X.rows() > 0, where, "argument 'X' has no rows (n = 0)");
    coulomb::detail::require_cols(X, map_.input_dim(), where, "X");
    coulomb::detail::require(Y.rows() == X.rows(), where,
                             "argument 'Y' has " + std::to_string(Y.rows()) + " rows, expected " +
                                 std::to_string(X.rows()));
    coulomb::detail::require(Y.cols() >= 1, where, "argument 'Y' has no columns");
    coulomb::detail::require_finite(X, where, "X");
    coulomb::detail::require_finite(Y, where, "Y");
    y_all_ = Y;
    y_all_.rowwise() -= y_all_.colwise().mean();  // as AlignmentEnergy centres
    coulomb::detail::require(
        y_all_.squaredNorm() > 0, where,
        "the targets are constant (all labels equal): the centred alignment is zero");
    shard_ = shard_range(X.rows(), &collective);
    x_ = X.middleRows(shard_.begin, shard_.size());
    y_ = y_all_.middleRows(shard_.begin, shard_.size());
  }

  /// Not copyable (it views the caller's X).
  ShardedAlignment(const ShardedAlignment&) = delete;
  ShardedAlignment& operator=(const ShardedAlignment&) = delete;  ///< not copyable

  /// Never separable (particles/hamiltonian.hpp): no one-particle energies.
  static constexpr bool separable() noexcept { return false; }
  /// Number n of rows over every process.
  Index num_samples() const noexcept { return X_all_->rows(); }
  /// The rows this process keeps.
  ShardRange shard() const noexcept { return shard_; }

  /// E(Ω) (one sum over the processes).
  template <typename D>
  Scalar evaluate(const Eigen::MatrixBase<D>& omega) {
    return compute(omega, nullptr);
  }

  /// E(Ω) and ∂E/∂Ω (resized to m×d; two sums over the processes).
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) {
    return compute(omega, &gradient);
  }

  /// Minibatches are not shared between processes: throws invalid_argument (PhaseAOptions
  /// refuses langevin.batch_size > 0 with a collective of several processes first).
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>&, Index, Index, MatrixType&) {
    throw invalid_argument(
        "coulomb::train::ShardedAlignment: minibatches are not supported across processes");
  }

  /// Nothing to shuffle (no minibatches).
  template <typename G>
  void shuffle(G&) {}

  /// A(Ω) on all the rows, on this process alone (every process has them).
  template <typename D>
  Scalar normalized_alignment(const Eigen::MatrixBase<D>& omega) {
    map_.set_omega(omega);
    map_.map(*X_all_, phi_);
    return AlignmentEnergy<Map>::normalized_alignment_of(phi_, y_all_, true);
  }

 private:
  template <typename D>
  Scalar compute(const Eigen::MatrixBase<D>& omega, MatrixType* gradient) {
    map_.set_omega(omega);
    const Scalar inv_n = Scalar(1) / static_cast<Scalar>(num_samples());
    const bool rows = shard_.size() > 0;
    if (rows) {
      map_.map(x_, phi_);
      projection_.noalias() = inv_n * (y_.transpose() * phi_);  // (1/n) Ŷ_rᵀΦ_r, C×D
    } else {
      projection_.setZero(y_all_.cols(), map_.output_dim());
    }
    collective_->sum(std::span<Scalar>(projection_.data(), size_of(projection_)));
    const Scalar value = -projection_.squaredNorm();
    if (gradient) {
      if (rows) {
        dphi_.noalias() = (Scalar(-2) * inv_n) * (y_ * projection_);  // ∂E/∂Φ_r
        if constexpr (requires { map_.backward_params(x_, phi_, dphi_, *gradient, workspace_); })
          map_.backward_params(x_, phi_, dphi_, *gradient, workspace_);
        else
          map_.backward_params(x_, phi_, dphi_, *gradient);
      } else {
        gradient->setZero(map_.num_particles(), map_.input_dim());
      }
      collective_->sum(std::span<Scalar>(gradient->data(), size_of(*gradient)));
    }
    return value;
  }

  static std::size_t size_of(const MatrixType& m) { return static_cast<std::size_t>(m.size()); }

  Map map_;
  Collective* collective_;
  const MatrixType* X_all_;
  MatrixType y_all_, x_, y_;
  ShardRange shard_;
  MatrixType phi_, dphi_, projection_;
  BackwardWorkspace<Scalar> workspace_;
};

}  // namespace coulomb::train::detail
