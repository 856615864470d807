// SPDX-License-Identifier: MIT
/// @file features/feature_map.hpp
/// @brief The FeatureMap concept, its capability traits, the stabilizer and the CRTP base that
/// every coulomb feature map derives from. Documented in docs/feature_maps.md.
///
/// A feature map turns a batch X ∈ R^{n×d} (one input per row) into Φ(X) ∈ R^{n×D} so that
/// Φ(x)ᵀΦ(y) estimates a kernel k(x, y). Its parameters are the particles Ω ∈ R^{m×d}, one
/// frequency ω_k per row; D = m or 2m depending on the map. The interface carries what the
/// particle model (gradients with respect to Ω) and attention (gradients with respect to X, a
/// stabilizer that cancels in attention's normalization) need.
#pragma once

#include <cmath>
#include <concepts>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../core/error.hpp"
#include "draw.hpp"

namespace coulomb {

/// Max-subtraction for exponential features. A stabilized map returns
/// Φ_stab(x_i) = Φ(x_i) · exp(−s_i): the shift s_i cancels exactly in the attention ratio
/// φ(q)ᵀΣφ(k)v / φ(q)ᵀΣφ(k) when it is per query row or shared by all keys. Maps whose
/// features are not exponential ignore it (their s_i is 0).
enum class Stabilizer {
  none,     ///< s_i = 0: the unbiased kernel features
  per_row,  ///< s_i = largest exponent in row i (queries): each row's largest entry is exp(0)
  global    ///< s_i = s = largest exponent in the whole block (keys): one shift for all rows
};

/// Name of a Stabilizer value.
inline const char* to_string(Stabilizer s) noexcept {
  switch (s) {
    case Stabilizer::none:
      return "none";
    case Stabilizer::per_row:
      return "per_row";
    case Stabilizer::global:
      return "global";
  }
  return "unknown";
}

namespace detail {
/// Internal: defines `flag_of<Map>()`, the capability flag a map type declares as a static
/// constant, or `fallback` when it does not (a map missing a flag then gives a readable
/// concept failure, never a hard error). Undefined right after use.
#define COULOMB_DETAIL_FLAG(flag, type, fallback) \
  template <typename Map>                         \
  constexpr type flag##_of() {                    \
    if constexpr (requires { Map::flag; })        \
      return static_cast<type>(Map::flag);        \
    else                                          \
      return fallback;                            \
  }
COULOMB_DETAIL_FLAG(is_positive, bool, false)
COULOMB_DETAIL_FLAG(has_closed_form_kernel, bool, false)
COULOMB_DETAIL_FLAG(has_phases, bool, false)
COULOMB_DETAIL_FLAG(is_stabilizable, bool, false)
COULOMB_DETAIL_FLAG(outputs_per_particle, Index, 1)
#undef COULOMB_DETAIL_FLAG
}  // namespace detail

/// Capability flags of a feature map type. The primary template reads the static constants
/// every coulomb map declares; a flag a map does not declare reads as false (and
/// outputs_per_particle as 1). A user map may declare them, or specialize this template.
template <typename Map>
struct feature_map_traits {
  /// Every feature is >= 0 (the map can feed linear attention's denominator).
  static constexpr bool is_positive = detail::is_positive_of<Map>();
  /// exact_kernel(X, Y) exists: the map is an unbiased estimator of a closed-form kernel.
  static constexpr bool has_closed_form_kernel = detail::has_closed_form_kernel_of<Map>();
  /// The map has random phases b (readable and writable with phases()/set_phases()).
  static constexpr bool has_phases = detail::has_phases_of<Map>();
  /// The features are exponentials and honour the Stabilizer argument.
  static constexpr bool is_stabilizable = detail::is_stabilizable_of<Map>();
  /// Output columns per particle: D = outputs_per_particle · m.
  static constexpr Index outputs_per_particle = detail::outputs_per_particle_of<Map>();
};

/// Scratch memory of the backward passes: ∂L/∂(XΩᵀ), n×m. Passing the same workspace to
/// repeated backward calls makes them allocate nothing once it has grown to the largest n
/// (an n×m buffer per call would otherwise be allocated and first touched every time). One
/// workspace per thread.
template <typename Scalar>
struct BackwardWorkspace {
  Matrix<Scalar> dZ;  ///< ∂L/∂Z for the last call
};

/// The duck type every feature map satisfies (docs/feature_maps.md). With
/// `M = Map::MatrixType` and `V = Map::VectorType`:
/// - `input_dim()`, `num_particles()`, `output_dim()`;
/// - `omega()` → const M& (m×d), `set_omega(M)`;
/// - `map(X, Phi, Stabilizer)`, `map(X, Phi, Stabilizer, log_scale)`, `map(X)`;
/// - `backward_input(X, Phi, dPhi, dX)`, `backward_params(X, Phi, dPhi, dOmega)` and both at
///   once `backward(X, Phi, dPhi, dX, dOmega)`, where Phi is the output of `map(X, Phi, s)`
///   and dPhi = ∂L/∂Phi: dX = ∂L/∂X, dOmega = ∂L/∂Ω, with the stabilizer shift held constant
///   (it cancels in attention);
/// - `redraw(rng)`.
template <typename Map>
concept FeatureMap = requires(const Map& cmap, Map& map, const typename Map::MatrixType& x,
                              typename Map::MatrixType& out, typename Map::VectorType& vec,
                              Rng& rng) {
  typename Map::Scalar;
  typename Map::MatrixType;
  typename Map::VectorType;
  { cmap.input_dim() } -> std::convertible_to<Index>;
  { cmap.num_particles() } -> std::convertible_to<Index>;
  { cmap.output_dim() } -> std::convertible_to<Index>;
  { cmap.omega() } -> std::convertible_to<const typename Map::MatrixType&>;
  map.set_omega(x);
  cmap.map(x, out, Stabilizer::none);
  cmap.map(x, out, Stabilizer::none, vec);
  { cmap.map(x) } -> std::convertible_to<typename Map::MatrixType>;
  cmap.backward_input(x, x, x, out);
  cmap.backward_params(x, x, x, out);
  cmap.backward(x, x, x, out, out);
  map.redraw(rng);
};

/// A feature map whose expectation is a closed-form kernel: the has_closed_form_kernel flag is
/// set and `exact_kernel(X, Y)` (n_x × n_y) exists.
template <typename Map>
concept KernelFeatureMap = FeatureMap<Map> && feature_map_traits<Map>::has_closed_form_kernel &&
    requires(const Map& cmap, const typename Map::MatrixType& x) {
  { cmap.exact_kernel(x, x) } -> std::convertible_to<typename Map::MatrixType>;
};

/// Compile-time check with a message that names the documentation page.
#define COULOMB_ASSERT_FEATURE_MAP(Type)                                               \
  static_assert(::coulomb::FeatureMap<Type>, #Type                                     \
                " does not satisfy coulomb::FeatureMap; see docs/feature_maps.md for " \
                "the members a feature map must provide")

/// CRTP base holding the particles and doing the argument checks; `Derived` supplies the
/// mathematics through
///   `template <class D> void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi,
///                                      Stabilizer s, VectorType* log_scale) const;`
///   `template <class D> void backward_impl(const Eigen::MatrixBase<D>& X, const MatrixType&
///        Phi, const MatrixType& dPhi, MatrixType& dZ) const;`  — dZ = ∂L/∂(XΩᵀ), n×m
///   and, for the input gradient, the correction of maps whose exponent includes −‖x‖²/2:
///   `template <class D> void input_correction(const Eigen::MatrixBase<D>& X, const MatrixType&
///        Phi, const MatrixType& dPhi, MatrixType& dX) const;` (may do nothing).
template <typename Derived, typename ScalarT>
class FeatureMapBase {
  static_assert(RealScalar<ScalarT>, "coulomb feature maps are instantiated for float or double");

 public:
  using Scalar = ScalarT;             ///< float or double
  using MatrixType = Matrix<Scalar>;  ///< inputs, features, particles and gradients
  using VectorType = Vector<Scalar>;  ///< per-row quantities (log_scale, phases)

  /// Dimension d of the inputs (columns of X and of Ω).
  Index input_dim() const noexcept { return omega_.cols(); }
  /// Number m of particles (rows of Ω).
  Index num_particles() const noexcept { return omega_.rows(); }
  /// Number D of output features (columns of Φ).
  Index output_dim() const noexcept { return Derived::outputs_per_particle * omega_.rows(); }

  /// The particles Ω (m×d), one frequency per row.
  const MatrixType& omega() const noexcept { return omega_; }

  /// Replaces the particles. Ω must be finite with input_dim() columns and at least one row;
  /// the number of particles may change, except for maps with phases. On error nothing is
  /// modified.
  template <typename D>
  void set_omega(const Eigen::MatrixBase<D>& omega) {
    static_assert(std::is_same_v<typename D::Scalar, Scalar>,
                  "set_omega: the matrix scalar type must match the feature map's");
    check_omega(omega, "set_omega");
    detail::require(omega.cols() == input_dim(), name_of("set_omega"),
                    "argument 'omega' has " + std::to_string(omega.cols()) +
                        " columns, expected input_dim() = " + std::to_string(input_dim()));
    if constexpr (Derived::has_phases) {
      detail::require(omega.rows() == num_particles(), name_of("set_omega"),
                      "argument 'omega' has " + std::to_string(omega.rows()) +
                          " rows, expected num_particles() = " + std::to_string(num_particles()) +
                          " (a map with phases keeps m; construct a new map to change it)");
    }
    omega_ = omega;
    derive_from_omega();
    derived().on_particles_changed();
  }

  /// Ω itself, writable in place: the storage a model's parameter view points to, so that the
  /// optimizer and model files change the one copy of Ω. Writes skip set_omega's checks and must
  /// keep the shape; call particles_written() after them, before the next call of the map.
  MatrixType& omega_storage() noexcept { return omega_; }

  /// Recomputes what the map derives from Ω (its overflow bounds, on_particles_changed) after
  /// Ω or the phases were written in place through omega_storage() or phases_storage().
  void particles_written() {
    derive_from_omega();
    derived().on_particles_changed();
  }

  /// Φ(X) into `Phi` (resized to n×D; no allocation if it already has that shape). Throws
  /// numerical_error naming 'X' when X is finite but so large that the features overflow the
  /// scalar type (docs/numerics.md).
  template <typename D>
  void map(const Eigen::MatrixBase<D>& X, MatrixType& Phi,
           Stabilizer stabilizer = Stabilizer::none) const {
    check_input(X, "map");
    derived().map_impl(X, Phi, stabilizer, static_cast<VectorType*>(nullptr));
    if (may_overflow(X, stabilizer)) check_features(X, Phi, nullptr);
  }

  /// Φ(X) and the shifts: row i of Phi equals the unbiased features times exp(−log_scale(i)).
  /// A shift is −∞ when the row's unbiased features all underflow (‖x‖² overflows).
  template <typename D>
  void map(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer stabilizer,
           VectorType& log_scale) const {
    check_input(X, "map");
    derived().map_impl(X, Phi, stabilizer, &log_scale);
    if (may_overflow(X, stabilizer)) check_features(X, Phi, &log_scale);
  }

  /// map(X, Phi, stabilizer, *log_scale) (or without the shifts when log_scale is null) for a
  /// caller that has checked that X is finite (linear attention, whose inputs are checked once
  /// per call): only that check is skipped.
  template <typename D>
  void map_finite_input(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer stabilizer,
                        VectorType* log_scale) const {
    check_input_shape(X, "map");
    derived().map_impl(X, Phi, stabilizer, log_scale);
    if (may_overflow(X, stabilizer)) check_features(X, Phi, log_scale);
  }

  /// Φ(X) as a new matrix.
  template <typename D>
  MatrixType map(const Eigen::MatrixBase<D>& X, Stabilizer stabilizer = Stabilizer::none) const {
    MatrixType Phi;
    map(X, Phi, stabilizer);
    return Phi;
  }

  /// Unbiased kernel estimate K̂ = Φ(X) Φ(Y)ᵀ (n_x × n_y).
  template <typename DX, typename DY>
  MatrixType kernel_estimate(const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) const {
    const MatrixType phi_x = map(X);
    const MatrixType phi_y = map(Y);
    return phi_x * phi_y.transpose();
  }

  /// dX = ∂L/∂X given dPhi = ∂L/∂Φ, where Phi is the output of map(X, Phi, s) for the same X.
  /// A stabilizer shift is treated as a constant.
  template <typename D>
  void backward_input(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                      MatrixType& dX) const {
    BackwardWorkspace<Scalar> workspace;
    backward_into(X, Phi, dPhi, &dX, nullptr, workspace, "backward_input");
  }

  /// backward_input with caller-owned scratch memory: no allocation once `workspace` (and dX)
  /// have the sizes of a previous call.
  template <typename D>
  void backward_input(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                      MatrixType& dX, BackwardWorkspace<Scalar>& workspace) const {
    backward_into(X, Phi, dPhi, &dX, nullptr, workspace, "backward_input");
  }

  /// dOmega = ∂L/∂Ω (m×d) given dPhi = ∂L/∂Φ, where Phi is the output of map(X, Phi, s).
  template <typename D>
  void backward_params(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                       MatrixType& dOmega) const {
    BackwardWorkspace<Scalar> workspace;
    backward_into(X, Phi, dPhi, nullptr, &dOmega, workspace, "backward_params");
  }

  /// backward_params with caller-owned scratch memory (see backward_input).
  template <typename D>
  void backward_params(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                       MatrixType& dOmega, BackwardWorkspace<Scalar>& workspace) const {
    backward_into(X, Phi, dPhi, nullptr, &dOmega, workspace, "backward_params");
  }

  /// Both gradients at once (one shared ∂L/∂(XΩᵀ) instead of two): dX = ∂L/∂X, dOmega = ∂L/∂Ω.
  template <typename D>
  void backward(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                MatrixType& dX, MatrixType& dOmega) const {
    BackwardWorkspace<Scalar> workspace;
    backward_into(X, Phi, dPhi, &dX, &dOmega, workspace, "backward");
  }

  /// backward with caller-owned scratch memory (see backward_input).
  template <typename D>
  void backward(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                MatrixType& dX, MatrixType& dOmega, BackwardWorkspace<Scalar>& workspace) const {
    backward_into(X, Phi, dPhi, &dX, &dOmega, workspace, "backward");
  }

  /// Draws new particles (and phases) from `rng` with the map's Draw policy, keeping m and d.
  template <std::uniform_random_bit_generator G>
  void redraw(G& rng) {
    omega_ = derived()
                 .scaled_draw(draw_particles(num_particles(), input_dim(), draw_, rng))
                 .template cast<Scalar>();
    derived().draw_extra(rng);
    derive_from_omega();
    derived().on_particles_changed();
  }

  /// The Draw policy used by redraw().
  Draw draw_policy() const noexcept { return draw_; }

 protected:
  FeatureMapBase() = default;

  /// The backward of every overload: ∂L/∂Z (Z = XΩᵀ) once, then dX = ∂L/∂Z Ω plus the map's
  /// input correction (dX non-null) and dOmega = ∂L/∂Zᵀ X (dOmega non-null), each checked.
  template <typename D>
  void backward_into(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType* dX, MatrixType* dOmega, BackwardWorkspace<Scalar>& workspace,
                     const char* function) const {
    check_backward(X, Phi, dPhi, function);
    derived().backward_impl(X, Phi, dPhi, workspace.dZ);
    if (dX != nullptr) {
      dX->resize(workspace.dZ.rows(), input_dim());
      omega_packed_.product(workspace.dZ, *dX);
      derived().input_correction(X, Phi, dPhi, *dX);
    }
    if (dOmega != nullptr) {
      // ∂L/∂Ω = ∂L/∂Zᵀ X, a sum over the rows.
      static thread_local MatrixType copy;  // for an X not stored column-major (s·X)
      const auto [x, ldx] = detail::column_major_operand<Scalar>(X, copy);
      dOmega->resize(num_particles(), input_dim());
      detail::inner_product(workspace.dZ.data(), workspace.dZ.rows(), x, ldx, X.rows(),
                            num_particles(), input_dim(), dOmega->data(), num_particles(),
                            detail::ProductInit::zero);
    }
    if (dX != nullptr) check_gradient(X, dPhi, *dX, "dX", function);
    if (dOmega != nullptr) check_gradient(X, dPhi, *dOmega, "dOmega", function);
  }

  /// The start of a map_impl without a shift: Φ sized n × output_dim(), *log_scale (when
  /// asked for) n zeros. Returns false when X has no rows, so there is nothing more to do.
  template <typename D>
  bool start_map(const Eigen::MatrixBase<D>& X, MatrixType& Phi, VectorType* log_scale) const {
    Phi.resize(X.rows(), output_dim());
    if (log_scale) log_scale->setZero(X.rows());
    return X.rows() > 0;
  }

  /// Z = X Ωᵀ (Z: X.rows() × m, a column-major matrix or a block of its columns) by the
  /// product kernel of core/detail_products.hpp with Ωᵀ packed when Ω changed.
  template <typename D, typename Out>
  void project(const Eigen::MatrixBase<D>& X, Out&& Z) const {
    omega_t_packed_.product(X, std::forward<Out>(Z));
  }

  /// Ωᵀ packed for project() (for maps whose features are computed elsewhere).
  const detail::PackedOperand<Scalar>& packed_omega_transpose() const noexcept {
    return omega_t_packed_;
  }

  /// Validates sizes, then draws Ω with `draw`.
  template <std::uniform_random_bit_generator G>
  void init_random(Index input_dim, Index num_particles, Draw draw, G& rng) {
    detail::require(input_dim >= 1, name_of("constructor"),
                    "argument 'input_dim' must be at least 1, got " + std::to_string(input_dim));
    detail::require(
        num_particles >= 1, name_of("constructor"),
        "argument 'num_particles' must be at least 1, got " + std::to_string(num_particles));
    draw_ = draw;
    omega_.resize(num_particles, input_dim);
    redraw(rng);
  }

  /// Validates and stores a given Ω.
  template <typename D>
  void init_given(const Eigen::MatrixBase<D>& omega, Draw draw) {
    static_assert(std::is_same_v<typename D::Scalar, Scalar>,
                  "the matrix scalar type must match the feature map's");
    check_omega(omega, "constructor");
    draw_ = draw;
    omega_ = omega;
    derive_from_omega();
    derived().on_particles_changed();
  }

  // Defaults for the customization points; a derived map hides the ones it needs.

  /// Turns standard draws (rows ~ N(0, I) or orthogonal) into the map's frequencies, in
  /// double (RFF divides by σ). Default: unchanged.
  Matrix<double> scaled_draw(Matrix<double> standard) const { return standard; }
  /// Draws any further random parameters after Ω (RFF's phases). Default: none.
  template <typename G>
  void draw_extra(G&) {}
  /// Called after Ω changed (construction, set_omega, redraw). Default: nothing.
  void on_particles_changed() {}
  /// Adds the part of ∂L/∂X that does not go through Z = XΩᵀ (the −‖x‖²/2 term of the
  /// exponential maps). Default: nothing.
  template <typename D>
  void input_correction(const Eigen::MatrixBase<D>&, const MatrixType&, const MatrixType&,
                        MatrixType&) const {}

  /// "coulomb::<name>::<function>", the location named in error messages.
  std::string name_of(const char* function) const {
    return std::string("coulomb::") + Derived::name() + "::" + function;
  }

  MatrixType omega_;       ///< the particles Ω, m×d
  Draw draw_ = Draw::iid;  ///< the Draw policy of redraw()

 private:
  double omega_l1_max_ = 0.0;  // max_k ‖ω_k‖₁: |ω_kᵀx| <= max|x| · max_k ‖ω_k‖₁
  double omega_sq_max_ = 0.0;  // max_k ‖ω_k‖²: ω_kᵀx − ‖x‖²/2 <= ‖ω_k‖²/2
  detail::PackedOperand<Scalar> omega_t_packed_;  // Ωᵀ (d × m) for Z = XΩᵀ
  detail::PackedOperand<Scalar> omega_packed_;    // Ω (m × d) for ∂L/∂X = ∂L/∂Z Ω

  // Everything derived from Ω: its bounds and its packed copies.
  void derive_from_omega() {
    omega_t_packed_.pack_transposed(omega_);
    omega_packed_.pack(omega_);
    omega_l1_max_ = static_cast<double>(omega_.cwiseAbs().rowwise().sum().maxCoeff());
    omega_sq_max_ = static_cast<double>(omega_.rowwise().squaredNorm().maxCoeff());
  }

  /// Whether the features of X may overflow: a cheap bound, so that ordinary inputs cost one
  /// pass over X and the features themselves are checked only near the range limits. Covers
  /// |XΩᵀ| and ‖x‖² (an eighth of the largest value, leaving room for sums of a few terms)
  /// and, for exponential maps without a shift, exp(ωᵀx − ‖x‖²/2) <= exp(‖ω‖²/2).
  template <typename D>
  bool may_overflow(const Eigen::MatrixBase<D>& X, Stabilizer stabilizer) const {
    if (X.size() == 0) return false;
    const double largest = static_cast<double>(std::numeric_limits<Scalar>::max());
    const double x_max = static_cast<double>(X.cwiseAbs().maxCoeff());
    const double bound = 0.125 * largest;
    if (x_max * omega_l1_max_ > bound) return true;
    if (x_max * x_max * static_cast<double>(X.cols()) > bound) return true;
    return feature_map_traits<Derived>::is_stabilizable && stabilizer == Stabilizer::none &&
           0.5 * omega_sq_max_ >= std::log(largest);
  }

  /// Throws numerical_error naming 'X' unless Phi is finite and no shift is NaN or +∞.
  template <typename D>
  void check_features(const Eigen::MatrixBase<D>& X, const MatrixType& Phi,
                      const VectorType* log_scale) const {
    bool bad = !coulomb::detail::all_finite(Phi);
    if (log_scale) {
      for (Index i = 0; i < log_scale->size() && !bad; ++i) {
        const Scalar v = (*log_scale)(i);
        bad = std::isnan(v) || v == std::numeric_limits<Scalar>::infinity();
      }
    }
    if (bad) throw_overflow(X, "map", "the features overflow");
  }

  /// Throws numerical_error naming 'X' and 'dPhi' unless the gradient `g` is finite.
  template <typename D>
  void check_gradient(const Eigen::MatrixBase<D>& X, const MatrixType& dPhi, const MatrixType& g,
                      const char* g_name, const char* function) const {
    if (coulomb::detail::all_finite(g)) return;
    std::ostringstream what;
    what << "the gradient '" << g_name << "' overflows";
    throw_overflow(X, function, what.str(),
                   dPhi.size() > 0 ? static_cast<double>(dPhi.cwiseAbs().maxCoeff()) : 0.0);
  }

  template <typename D>
  [[noreturn]] void throw_overflow(const Eigen::MatrixBase<D>& X, const char* function,
                                   const std::string& what, double dphi_max = -1.0) const {
    std::ostringstream os;
    os << name_of(function) << ": " << what << " "
       << (std::is_same_v<Scalar, float> ? "float" : "double") << ": argument 'X' is too large "
       << "(largest |x| = " << static_cast<double>(X.cwiseAbs().maxCoeff())
       << ", largest ||omega||^2 = " << omega_sq_max_;
    if (dphi_max >= 0.0) os << ", largest |dPhi| = " << dphi_max;
    os << "); scale the inputs down";
    throw numerical_error(os.str());
  }

  const Derived& derived() const { return static_cast<const Derived&>(*this); }
  Derived& derived() { return static_cast<Derived&>(*this); }

  template <typename D>
  void check_omega(const Eigen::MatrixBase<D>& omega, const char* function) const {
    const std::string where = name_of(function);
    detail::require(omega.rows() >= 1 && omega.cols() >= 1, where,
                    "argument 'omega' must have at least one row and one column, got " +
                        std::to_string(omega.rows()) + "x" + std::to_string(omega.cols()));
    detail::require_finite(omega, where, "omega");
  }

  template <typename D>
  void check_input_shape(const Eigen::MatrixBase<D>& X, const char* function) const {
    static_assert(std::is_same_v<typename D::Scalar, Scalar>,
                  "the input's scalar type must match the feature map's (use .cast<>())");
    if (X.cols() != input_dim()) {
      std::ostringstream os;
      os << "argument 'X' has " << X.cols() << " columns, expected input_dim() = " << input_dim();
      detail::throw_invalid(name_of(function), os.str());
    }
  }

  template <typename D>
  void check_input(const Eigen::MatrixBase<D>& X, const char* function) const {
    check_input_shape(X, function);
    if (!coulomb::detail::all_finite(X.derived()))
      detail::require_finite(X, name_of(function), "X");
  }

  template <typename D>
  void check_backward(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                      const char* function) const {
    check_input(X, function);
    detail::require_shape(Phi, X.rows(), output_dim(), name_of(function), "Phi");
    detail::require_shape(dPhi, X.rows(), output_dim(), name_of(function), "dPhi");
    if (!coulomb::detail::all_finite(dPhi)) detail::require_finite(dPhi, name_of(function), "dPhi");
  }
};

}  // namespace coulomb
