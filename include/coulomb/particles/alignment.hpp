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
///
/// Random Fourier maps (Rff, RffCosSin) take a fused path: E depends on the data only through
/// the sums S_kc = (1/n) Σ_i ŷ_ic e^{i ω_k·x_i} and T_kc = (1/n) Σ_i ŷ_ic x_i e^{i ω_k·x_i}, which
/// one pass over blocks of rows accumulates (Z = XΩᵀ, cos Z, sin Z, then two products with
/// [ŷ_c ∘ X, ŷ_c]); the features and ∂E/∂Φ are never stored. E is then a sum of one-particle
/// energies e_k (particle_energies), what exact Metropolis moves of one particle need.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <new>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../features/rff.hpp"

namespace coulomb {

namespace detail {
template <typename Map>
struct is_random_fourier : std::false_type {};
template <typename S, RffForm F>
struct is_random_fourier<Rff<S, F>> : std::true_type {};
}  // namespace detail

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

namespace detail {
/// An Eigen matrix or matrix expression, by any reference (what AlignmentEnergy takes).
template <typename T>
concept EigenMatrixArgument = requires(const std::remove_cvref_t<T>& x) {
  x.derived();
  x.rows();
  x.cols();
};
}  // namespace detail

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
///
/// The data are not copied when they are matrices the caller keeps: an X (or Y) passed as an
/// lvalue of type Matrix<Scalar> is viewed in place and must outlive the energy and stay
/// unchanged; a temporary matrix is moved in, and any other expression evaluated once into
/// the energy's own storage. Centred targets (options.centre) are always the energy's own
/// copy. inputs().data() tells which (the caller's X when viewed).
template <FeatureMap Map>
class AlignmentEnergy {
 public:
  using Scalar = typename Map::Scalar;            ///< the map's scalar type
  using MatrixType = Matrix<Scalar>;              ///< inputs, targets, particles and gradients
  using DataView = Eigen::Map<const MatrixType>;  ///< how the inputs and targets are read
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how the products read X and Y

  /// X: n×d inputs; Y: n×C targets (see binary_targets, one_hot_targets); viewed, moved or
  /// copied as the class comment says.
  template <typename DX, typename DY>
  requires detail::EigenMatrixArgument<DX> && detail::EigenMatrixArgument<DY> AlignmentEnergy(
      Map map, DX&& X, DY&& Y, AlignmentOptions options = {})
      : map_(std::move(map)), options_(options) {
    bind(x_store_, X_, std::forward<DX>(X), false);
    bind(y_store_, Y_, std::forward<DY>(Y), options_.centre);
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
    if (options_.centre) y_store_.rowwise() -= y_store_.colwise().mean();
    detail::require(Y_.squaredNorm() > 0, where,
                    "the targets are constant (all labels equal): the centred alignment is zero");
    order_.resize(static_cast<std::size_t>(X_.rows()));
    std::iota(order_.begin(), order_.end(), Index{0});
  }

  /// A copy: views what `other` views, and its own copy of what `other` owns.
  AlignmentEnergy(const AlignmentEnergy& other) : AlignmentEnergy(other, Rebind{}) {}
  /// A move: takes what `other` owns (the views follow the storage).
  AlignmentEnergy(AlignmentEnergy&& other) noexcept : AlignmentEnergy(std::move(other), Rebind{}) {}
  AlignmentEnergy& operator=(const AlignmentEnergy&) = delete;  ///< not assignable (the views)
  AlignmentEnergy& operator=(AlignmentEnergy&&) = delete;       ///< not assignable (the views)

  /// Whether E is a sum of one-particle energies computed by the fused Fourier path (Rff and
  /// RffCosSin): particle_energies and evaluate_particles exist.
  static constexpr bool fourier = detail::is_random_fourier<Map>::value;
  /// True for Rff and RffCosSin (see `fourier`): each particle's energy e_k is its own.
  static constexpr bool separable() noexcept { return fourier; }

  /// Number n of samples.
  Index num_samples() const noexcept { return X_.rows(); }
  /// The (centred) targets Ŷ.
  const DataView& targets() const noexcept { return Y_; }
  /// The inputs X: the caller's matrix when it is viewed (see the class comment).
  const DataView& inputs() const noexcept { return X_; }
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

  /// The one-particle energies e_k on all samples, E = Σ_k e_k, for particles `omega` laid out
  /// as in evaluate (m rows). Rff and RffCosSin only.
  template <typename D>
  requires fourier void particle_energies(const Eigen::MatrixBase<D>& omega,
                                          Vector<Scalar>& energies) {
    set_particles(omega);
    fourier_pass(X_, Y_);
    fourier_combine(X_.rows(), false, nullptr, &energies);
  }

  /// E, the one-particle energies e_k and ∂E/∂θ on all samples (Rff and RffCosSin only): row k
  /// of the gradient is ∂e_k/∂θ_k, since e_k depends on θ_k alone.
  template <typename D>
  requires fourier Scalar evaluate_particles(const Eigen::MatrixBase<D>& omega,
                                             Vector<Scalar>& energies, MatrixType& gradient) {
    set_particles(omega);
    if (full_weights_.rows() != X_.rows()) fourier_weights(X_, Y_, full_weights_);
    fourier_pass(X_, full_weights_);
    return fourier_combine(X_.rows(), true, &gradient, &energies);
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
  static Scalar normalized_alignment_of(const MatrixType& phi, const ConstRef& y, bool centre) {
    MatrixType phi_c = phi;
    if (centre) phi_c.rowwise() -= phi_c.colwise().mean();
    const double numerator = (y.transpose() * phi).squaredNorm();
    const double k_norm = (phi_c.transpose() * phi_c).norm();
    const double y_norm = (y.transpose() * y).norm();
    if (k_norm == 0.0 || y_norm == 0.0) return Scalar(0);
    return static_cast<Scalar>(numerator / (k_norm * y_norm));
  }

 private:
  struct Rebind {};

  // Copies or moves every member, then points the views at this object's storage where they
  // pointed at the other's.
  template <typename Other>
  AlignmentEnergy(Other&& other, Rebind)
      : map_(std::forward<Other>(other).map_),
        x_store_(std::forward<Other>(other).x_store_),
        y_store_(std::forward<Other>(other).y_store_),
        X_(other.X_),
        Y_(other.Y_),
        options_(other.options_),
        order_(std::forward<Other>(other).order_),
        full_weights_(std::forward<Other>(other).full_weights_) {
    if (x_store_.size() > 0) new (&X_) DataView(x_store_.data(), x_store_.rows(), x_store_.cols());
    if (y_store_.size() > 0) new (&Y_) DataView(y_store_.data(), y_store_.rows(), y_store_.cols());
  }

  // Points `view` at `data`: in place for a Matrix lvalue (unless `own`), else at `store`,
  // into which `data` is moved (a Matrix rvalue) or evaluated.
  template <typename D>
  static void bind(MatrixType& store, DataView& view, D&& data, bool own) {
    using Derived = std::remove_cvref_t<decltype(data.derived())>;
    if constexpr (std::is_same_v<Derived, MatrixType> && std::is_lvalue_reference_v<D>) {
      if (!own) {
        const MatrixType& m = data.derived();
        new (&view) DataView(m.data(), m.rows(), m.cols());
        return;
      }
      store = data;
    } else if constexpr (std::is_same_v<Derived, MatrixType>) {
      store = std::move(data.derived());
    } else {
      store = data;
    }
    new (&view) DataView(store.data(), store.rows(), store.cols());
  }

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
      return value_and_gradient(X_, Y_, true, gradient);
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
    return value_and_gradient(batch_x_, batch_y_, false, gradient);
  }

  /// W = [ŷ_c ∘ X, ŷ_c] for c = 0 … C−1 (n × C(d+1)): one product with cos Z (sin Z) then gives
  /// the real (imaginary) parts of every T_kc and S_kc.
  static void fourier_weights(const ConstRef& X, const ConstRef& Y, MatrixType& W) {
    const Index d = X.cols();
    W.resize(X.rows(), Y.cols() * (d + 1));
    for (Index c = 0; c < Y.cols(); ++c) {
      W.middleCols(c * (d + 1), d) = X.array().colwise() * Y.col(c).array();
      W.col(c * (d + 1) + d) = Y.col(c);
    }
  }

  /// sums_cos_ = (cos Z)ᵀW and sums_sin_ = (sin Z)ᵀW for Z = XΩᵀ, over blocks of rows small
  /// enough for Z, cos Z and sin Z to stay in cache.
  void fourier_pass(const ConstRef& X, const ConstRef& W) {
    const MatrixType& omega = map_.omega();
    const Index n = X.rows();
    const Index m = omega.rows();
    const Index block = std::clamp<Index>(Index{32768} / std::max<Index>(m, 1), 16, n);
    sums_cos_.setZero(m, W.cols());
    sums_sin_.setZero(m, W.cols());
    z_.resize(block * m);
    cos_.resize(block * m);
    for (Index r0 = 0; r0 < n; r0 += block) {
      const Index rows = std::min(block, n - r0);
      // Contiguous rows × m blocks, so that cos and sin run as one vectorized sweep (a column
      // of a taller matrix would leave unaligned heads and tails to the scalar libm calls).
      Eigen::Map<MatrixType> z(z_.data(), rows, m), c(cos_.data(), rows, m);
      Eigen::Map<Eigen::Array<Scalar, Eigen::Dynamic, 1>> z_flat(z_.data(), rows * m),
          c_flat(cos_.data(), rows * m);
      z.noalias() = X.middleRows(r0, rows) * omega.transpose();
      c_flat = z_flat.cos();
      z_flat = z_flat.sin();
      sums_cos_.noalias() += c.transpose() * W.middleRows(r0, rows);
      sums_sin_.noalias() += z.transpose() * W.middleRows(r0, rows);
    }
  }

  /// E, and the one-particle energies and the gradient when asked, from the sums of
  /// fourier_pass (with T when `with_t`, the weights of fourier_weights; S only otherwise).
  Scalar fourier_combine(Index n, bool with_t, MatrixType* gradient, Vector<Scalar>* energies) {
    const Index m = map_.num_particles();
    const Index d = map_.input_dim();
    const Index classes = Y_.cols();
    const Index width = with_t ? d + 1 : 1;
    const double inv_n = 1.0 / static_cast<double>(n);
    const bool phases = options_.learn_phases;
    if (gradient) gradient->setZero(m, phases ? d + 1 : d);
    if (energies) energies->resize(m);
    double total = 0.0;
    for (Index k = 0; k < m; ++k) {
      double e = 0.0;
      for (Index c = 0; c < classes; ++c) {
        const Index s_col = c * width + width - 1;
        const double s_re = static_cast<double>(sums_cos_(k, s_col)) * inv_n;
        const double s_im = static_cast<double>(sums_sin_(k, s_col)) * inv_n;
        if constexpr (Map::form == RffForm::cos_sin) {
          // E = −(1/m) Σ (S_re² + S_im²); ∂S_re/∂ω = −T_im, ∂S_im/∂ω = T_re.
          const double a = 1.0 / static_cast<double>(m);
          e -= a * (s_re * s_re + s_im * s_im);
          if (gradient)
            for (Index j = 0; j < d; ++j) {
              const double t_re = static_cast<double>(sums_cos_(k, c * width + j)) * inv_n;
              const double t_im = static_cast<double>(sums_sin_(k, c * width + j)) * inv_n;
              (*gradient)(k, j) += static_cast<Scalar>(2.0 * a * (s_re * t_im - s_im * t_re));
            }
        } else {
          // P = a Re(e^{ib} S), E = −Σ P²; ∂P/∂ω = −a Im(e^{ib} T), ∂P/∂b = −a Im(e^{ib} S).
          const double a = std::sqrt(2.0 / static_cast<double>(m));
          const double b = static_cast<double>(map_.phases()(k));
          const double cb = std::cos(b), sb = std::sin(b);
          const double p = a * (cb * s_re - sb * s_im);
          e -= p * p;
          if (gradient) {
            for (Index j = 0; j < d; ++j) {
              const double t_re = static_cast<double>(sums_cos_(k, c * width + j)) * inv_n;
              const double t_im = static_cast<double>(sums_sin_(k, c * width + j)) * inv_n;
              (*gradient)(k, j) += static_cast<Scalar>(2.0 * p * a * (sb * t_re + cb * t_im));
            }
            if (phases)
              (*gradient)(k, d) += static_cast<Scalar>(2.0 * p * a * (sb * s_re + cb * s_im));
          }
        }
      }
      if (energies) (*energies)(k) = static_cast<Scalar>(e);
      total += e;
    }
    return static_cast<Scalar>(total);
  }

  Scalar value_and_gradient(const ConstRef& X, const ConstRef& Y, bool full, MatrixType* gradient) {
    if constexpr (fourier) {
      if (gradient) {
        MatrixType& W = full ? full_weights_ : batch_weights_;
        if (!full || W.rows() != X.rows()) fourier_weights(X, Y, W);
        fourier_pass(X, W);
        return fourier_combine(X.rows(), true, gradient, nullptr);
      }
      fourier_pass(X, Y);
      return fourier_combine(X.rows(), false, nullptr, nullptr);
    }
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
  MatrixType x_store_, y_store_;  // X and Y when not viewed in place (see the class comment)
  DataView X_{nullptr, 0, 0};
  DataView Y_{nullptr, 0, 0};
  AlignmentOptions options_;
  std::vector<Index> order_;
  MatrixType phi_, dphi_, projection_, batch_x_, batch_y_, omega_gradient_;
  // The Fourier path's weights (all samples; the last minibatch), sums and blocks of Z.
  MatrixType full_weights_, batch_weights_, sums_cos_, sums_sin_;
  Vector<Scalar> z_, cos_;
  BackwardWorkspace<Scalar> workspace_;
};

}  // namespace coulomb
