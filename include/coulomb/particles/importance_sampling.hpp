// SPDX-License-Identifier: MIT
/// @file particles/importance_sampling.hpp
/// @brief The importance-sampling kernel learner of Sinha & Duchi (2016), the baseline that
/// reweights a fixed pool of random features instead of moving them.
///
/// Sinha & Duchi, *Learning Kernels with Random Features*, NIPS 2016, §2–3. A pool of M
/// particles w_1 … w_M is drawn from a base distribution P₀ (for example the Gaussian draw of
/// RFF). Each gets its kernel–target alignment
///   v_m = (1/n²) Σ_{i,j} ŷ_iᵀŷ_j ϕ(x_i; w_m) ϕ(x_j; w_m) = ‖(1/n) Σ_i ŷ_i ϕ(x_i; w_m)‖²,
/// computed through the features in O(n·M·d), never through an n×n matrix (ϕ is the
/// un-normalised per-particle feature; for maps with two outputs per particle, such as
/// [cos, sin], the squares of both are summed). The weights q on the pool solve
///   maximize qᵀv  subject to  q ∈ Δ_M,  D_χ²(q ‖ 1/M) = (1/M) Σ_m (M q_m − 1)² ≤ ρ,
/// a concave (linear) problem on a convex set. For a dual variable γ > 0 of the divergence
/// constraint the maximizer of qᵀv − (γ/2) D_χ²(q) over the simplex is
///   q_m(γ) = max(0, v_m − τ(γ)) / (γ M),   with τ(γ) fixed by Σ_m q_m = 1
/// (a simplex projection, solved exactly after sorting v), and D_χ²(q(γ)) decreases from
/// M/|argmax v| − 1 (γ → 0) to 0 (γ → ∞); bisection on log γ makes the constraint tight. The
/// learned kernel is then used either by sampling N particles i.i.d. from q (Sinha & Duchi's
/// random-feature step), by weighting the whole pool's features by √q_m, or, as the paper's
/// example does, by keeping the support {m : q_m > 0} with its own phases as the final features
/// (support_map). The targets are not centred by default, as in the paper. The alignments are
/// computed in blocks of pool particles, so that memory is n × block, never n × M; random
/// Fourier pools (Rff, RffCosSin) take AlignmentEnergy's fused pass over blocks of rows instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "alignment.hpp"

namespace coulomb {

/// χ² divergence of weights q from the uniform distribution on their M entries:
/// D_χ²(q ‖ 1/M) = (1/M) Σ_m (M q_m − 1)².
template <typename D>
double chi_square_divergence(const Eigen::MatrixBase<D>& q) {
  const double m = static_cast<double>(q.size());
  detail::require(q.size() >= 1, "coulomb::chi_square_divergence", "argument 'q' is empty");
  return (m * q.template cast<double>().array() - 1.0).square().sum() / m;
}

/// Solution of the χ²-constrained alignment problem (see the header's description).
struct ChiSquareSolution {
  Vector<double> weights;         ///< q ∈ Δ_M
  double divergence = 0.0;        ///< D_χ²(q ‖ 1/M) (≤ ρ)
  double objective = 0.0;         ///< qᵀv
  double dual = 0.0;              ///< γ (0 when the constraint is not active)
  double threshold = 0.0;         ///< τ: q_m = max(0, v_m − τ)/(γM)
  int bisection_steps = 0;        ///< steps of the bisection on log γ
  bool constraint_active = true;  ///< false when ρ ≥ M/|argmax v| − 1 (the maximizer is the
                                  ///< uniform distribution on argmax v)
};

namespace detail {

/// q(γ) = max(0, v − τ)/(γM) with τ such that Σ q = 1; `sorted` is v in decreasing order.
inline double simplex_threshold(const std::vector<double>& sorted, double gamma_m) {
  // Σ_{top k} (v_(i) − τ) = γM with v_(k) > τ ≥ v_(k+1): the classic simplex projection.
  double prefix = 0.0;
  double tau = sorted.front() - gamma_m;
  for (std::size_t k = 0; k < sorted.size(); ++k) {
    prefix += sorted[k];
    const double candidate = (prefix - gamma_m) / static_cast<double>(k + 1);
    if (k + 1 == sorted.size() || sorted[k + 1] <= candidate) {
      tau = candidate;
      break;
    }
  }
  return tau;
}

inline void weights_for_dual(const Vector<double>& v, const std::vector<double>& sorted,
                             double gamma, Vector<double>& q, double& tau) {
  const double gamma_m = gamma * static_cast<double>(v.size());
  tau = simplex_threshold(sorted, gamma_m);
  q = ((v.array() - tau).max(0.0) / gamma_m).matrix();
  q /= q.sum();  // removes the rounding of the threshold; Σ q = 1 exactly up to one ulp
}

}  // namespace detail

/// Maximizes qᵀv over the simplex subject to D_χ²(q ‖ 1/M) ≤ ρ (Sinha & Duchi, 2016), by
/// bisection on the dual variable γ of the divergence constraint. Throws invalid_argument for
/// an empty or non-finite v, or ρ not positive.
template <typename D>
ChiSquareSolution maximize_alignment_chi_square(const Eigen::MatrixBase<D>& alignments,
                                                double rho) {
  const char* where = "coulomb::maximize_alignment_chi_square";
  detail::require(alignments.size() >= 1, where, "argument 'alignments' is empty");
  detail::require_finite(alignments, where, "alignments");
  detail::require_positive(rho, where, "rho");
  const Vector<double> v = alignments.derived().reshaped().template cast<double>();
  const Index m = v.size();
  const double md = static_cast<double>(m);

  ChiSquareSolution out;
  std::vector<double> sorted(v.data(), v.data() + m);
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const double vmax = sorted.front();
  const auto ties = static_cast<double>(
      std::count_if(sorted.begin(), sorted.end(), [vmax](double x) { return x >= vmax; }));
  // γ → 0 puts uniform mass on argmax v, with divergence M/|argmax| − 1: the largest possible.
  if (rho >= md / ties - 1.0) {
    out.weights = (v.array() >= vmax).cast<double>().matrix() / ties;
    out.constraint_active = false;
  } else {
    // Bracket γ: D(γ_hi) ≤ ρ < D(γ_lo). The scale of γ is the spread of v.
    const double spread = std::max(vmax - sorted.back(), std::numeric_limits<double>::min());
    Vector<double> q;
    double tau = 0.0;
    auto divergence_at = [&](double gamma) {
      detail::weights_for_dual(v, sorted, gamma, q, tau);
      return chi_square_divergence(q);
    };
    double lo = spread / md;
    double hi = spread / md;
    while (divergence_at(hi) > rho) hi *= 4.0;
    while (divergence_at(lo) <= rho && lo > 1e-300) lo *= 0.25;
    // Bisection on log γ until the bracket is tight to rounding.
    int steps = 0;
    while (hi / lo > 1.0 + 1e-13 && steps < 400) {
      const double mid = std::sqrt(lo * hi);
      if (divergence_at(mid) > rho)
        lo = mid;
      else
        hi = mid;
      ++steps;
    }
    divergence_at(hi);  // the feasible side of the bracket
    out.weights = q;
    out.dual = hi;
    out.threshold = tau;
    out.bisection_steps = steps;
  }
  out.divergence = chi_square_divergence(out.weights);
  out.objective = out.weights.dot(v);
  return out;
}

/// Options of ImportanceSampling.
struct ImportanceSamplingOptions {
  double rho = 1.0;  ///< χ² budget ρ > 0: how far q may move from uniform on the pool
  /// Centre the targets (ŷ = y − mean y). Off by default: Sinha & Duchi align with the raw ±1
  /// labels.
  bool centre = false;
  Index block_size = 2048;  ///< pool particles per block of the alignment pass (memory n × block)
};

/// Sinha & Duchi's kernel learner on a pool of random features: the per-particle alignments v,
/// the optimal weights q, and the two ways to use them (sampling particles from q, or the
/// whole pool with features weighted by √q_m). Works with any FeatureMap whose output columns
/// are blocks of one column per particle (column c belongs to particle c mod M), as every
/// coulomb map is.
template <FeatureMap Map>
class ImportanceSampling {
 public:
  using Scalar = typename Map::Scalar;  ///< the pool map's scalar type
  using MatrixType = Matrix<Scalar>;    ///< inputs, features and particles

  /// `pool`: the map holding the M pool particles; X: n×d inputs; Y: n×C targets (see
  /// binary_targets, one_hot_targets). Computes v and solves for q.
  template <typename DX, typename DY>
  ImportanceSampling(Map pool, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y,
                     ImportanceSamplingOptions options = {})
      : pool_(std::move(pool)), options_(options) {
    const char* where = "coulomb::ImportanceSampling";
    detail::require(X.rows() > 0, where, "argument 'X' has no rows (n = 0)");
    detail::require_cols(X, pool_.input_dim(), where, "X");
    detail::require(Y.rows() == X.rows(), where,
                    "argument 'Y' has " + std::to_string(Y.rows()) + " rows, expected " +
                        std::to_string(X.rows()) + " (one target row per input row)");
    detail::require(Y.cols() >= 1, where, "argument 'Y' has no columns");
    detail::require_finite(X, where, "X");
    detail::require_finite(Y, where, "Y");
    detail::require_positive(options.rho, where, "options.rho");
    detail::require(options.block_size >= 1, where,
                    "argument 'options.block_size' must be at least 1, got " +
                        std::to_string(options.block_size));
    MatrixType y = Y;
    if (options_.centre) y.rowwise() -= y.colwise().mean();
    detail::require(y.squaredNorm() > 0, where,
                    options_.centre
                        ? "the targets are constant (all labels equal): every alignment is zero"
                        : "the targets are all zero: every alignment is zero");
    alignments_ = pool_alignments(pool_, X, y, options_.block_size);
    const Index m = pool_.num_particles();
    solution_ = maximize_alignment_chi_square(alignments_, options_.rho);
    cumulative_.resize(static_cast<std::size_t>(m));
    std::partial_sum(solution_.weights.data(), solution_.weights.data() + m, cumulative_.begin());
  }

  /// The pool's map (its particles are the pool).
  const Map& pool() const noexcept { return pool_; }
  /// Number M of pool particles.
  Index pool_size() const noexcept { return pool_.num_particles(); }
  /// v: the alignment of each pool particle.
  const Vector<double>& alignments() const noexcept { return alignments_; }
  /// q: the learned weights on the pool.
  const Vector<double>& weights() const noexcept { return solution_.weights; }
  /// The solver's result (weights, divergence, dual variable, …).
  const ChiSquareSolution& solution() const noexcept { return solution_; }
  /// The options given to the constructor.
  const ImportanceSamplingOptions& options() const noexcept { return options_; }

  /// Indices of `count` pool particles drawn i.i.d. from q (with replacement).
  template <std::uniform_random_bit_generator G>
  std::vector<Index> sample_indices(Index count, G& rng) const {
    detail::require(count >= 1, "coulomb::ImportanceSampling::sample_indices",
                    "argument 'count' must be at least 1, got " + std::to_string(count));
    std::vector<Index> out(static_cast<std::size_t>(count));
    for (auto& index : out) {
      const double u = uniform01(rng) * cumulative_.back();
      const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      // The first cumulative weight above u: never a particle of weight 0.
      index = std::min<Index>(static_cast<Index>(it - cumulative_.begin()), pool_size() - 1);
    }
    return out;
  }

  /// `count` particles (rows of the pool's Ω) drawn i.i.d. from q: the learned random
  /// features, to be used with the standard 1/√count normalization.
  template <std::uniform_random_bit_generator G>
  MatrixType sample_particles(Index count, G& rng) const {
    const std::vector<Index> idx = sample_indices(count, rng);
    MatrixType omega(count, pool_.input_dim());
    for (Index k = 0; k < count; ++k)
      omega.row(k) = pool_.omega().row(idx[static_cast<std::size_t>(k)]);
    return omega;
  }

  /// Indices of the support {m : q_m > 0}, in pool order: the features Sinha & Duchi keep.
  std::vector<Index> support_indices() const {
    std::vector<Index> out;
    for (Index m = 0; m < pool_size(); ++m)
      if (weights()(m) > 0.0) out.push_back(m);
    return out;
  }

  /// The map of the support particles (frequencies and, for maps with phases, their own phases),
  /// with the usual 1/√|support| normalization: the final model of Sinha & Duchi's example. A
  /// map with phases is built with its (Ω, b[, options]) constructor (Rff keeps its bandwidth);
  /// a map without phases is a copy of the pool given the support's Ω by set_omega.
  Map support_map() const {
    const std::vector<Index> idx = support_indices();
    const MatrixType omega = pool_.omega()(idx, Eigen::all);
    if constexpr (feature_map_traits<Map>::has_phases) {
      const Vector<Scalar> phases = pool_.phases()(idx);
      if constexpr (requires { pool_.bandwidth(); })
        return Map(omega, phases, {.bandwidth = pool_.bandwidth()});
      else
        return Map(omega, phases);
    } else {
      Map out = pool_;
      out.set_omega(omega);
      return out;
    }
  }

  /// Features of the whole pool weighted by √(M q_m) (so that Φ_w Φ_wᵀ = Σ_m q_m ϕ_m ϕ_mᵀ):
  /// the learned kernel without sampling.
  template <typename D>
  void weighted_features(const Eigen::MatrixBase<D>& X, MatrixType& Phi) const {
    pool_.map(X, Phi);
    const Index m = pool_size();
    for (Index c = 0; c < Phi.cols(); ++c)
      Phi.col(c) *= static_cast<Scalar>(std::sqrt(static_cast<double>(m) * weights()(c % m)));
  }

 private:
  /// v_m = M Σ_c∈m ‖(1/n) ŶᵀΦ_c‖² over blocks of `block` pool particles: each block is a map of
  /// its own (the same particles and phases), so memory is n × block × outputs per particle.
  template <typename DX>
  static Vector<double> pool_alignments(const Map& pool, const Eigen::MatrixBase<DX>& X,
                                        const MatrixType& y, Index block) {
    const Index m = pool.num_particles();
    if constexpr (detail::is_random_fourier<Map>::value) {
      // Random Fourier pools: v_k = −M e_k, the one-particle energies of the alignment with
      // the pool's normalization, by the fused pass (cos and sin of XΩᵀ in cache-sized blocks).
      AlignmentEnergy<Map> alignment(pool, X, y, {.centre = false});
      Vector<Scalar> e;
      alignment.particle_energies(pool.omega(), e);
      return -static_cast<double>(m) * e.template cast<double>();
    }
    Vector<double> v = Vector<double>::Zero(m);
    MatrixType phi;
    const auto inv_n = static_cast<Scalar>(1.0 / static_cast<double>(X.rows()));
    for (Index b0 = 0; b0 < m; b0 += block) {
      const Index size = std::min(block, m - b0);
      if (size == m) {
        pool.map(X, phi);
      } else {
        Map part = block_map(pool, b0, size);
        part.map(X, phi);
      }
      // (1/n) ŶᵀΦ with the block's normalized features ϕ/√size; times size undoes it.
      const Matrix<double> projection = (inv_n * (y.transpose() * phi)).template cast<double>();
      for (Index c = 0; c < projection.cols(); ++c)
        v(b0 + c % size) += projection.col(c).squaredNorm() * static_cast<double>(size);
    }
    return v;
  }

  /// The pool's particles b0 … b0+size−1 (and their phases) as a map.
  static Map block_map(const Map& pool, Index b0, Index size) {
    const MatrixType omega = pool.omega().middleRows(b0, size);
    if constexpr (feature_map_traits<Map>::has_phases) {
      const Vector<Scalar> phases = pool.phases().segment(b0, size);
      if constexpr (requires { pool.bandwidth(); })
        return Map(omega, phases, {.bandwidth = pool.bandwidth()});
      else
        return Map(omega, phases);
    } else {
      Map out = pool;
      out.set_omega(omega);
      return out;
    }
  }

  Map pool_;
  ImportanceSamplingOptions options_;
  Vector<double> alignments_;
  ChiSquareSolution solution_;
  std::vector<double> cumulative_;
};

}  // namespace coulomb
