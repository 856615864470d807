// SPDX-License-Identifier: MIT
// custom_feature_map: a feature map written outside the library, as docs/feature_maps.md
// ("How to add a feature map") describes.
//
// LaplaceFourier estimates the Laplace kernel k(x, y) = exp(−‖x − y‖₁ / σ) with random
// Fourier features (Rahimi & Recht, *Random Features for Large-Scale Kernel Machines*, NIPS
// 2007). The kernel's spectral density is a product of Cauchy densities, so with the entries
// of every ω i.i.d. Cauchy(0, 1/σ), E[cos ωᵀ(x − y)] = k(x, y), and
//   φ(x) = (1/√m) [cos Ωx, sin Ωx]        (D = 2m).
//
// The program checks that the type satisfies coulomb::KernelFeatureMap, that the kernel
// estimate converges to the exact kernel at the Monte Carlo rate 1/√m, and that backward()
// agrees with central finite differences. It exits with status 1 if the gradient check fails.
// `custom_feature_map --help` lists its options (--seed).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numbers>
#include <string>

#include <coulomb/coulomb.hpp>

#include "common/cli.hpp"  // the command line shared by the examples (CLI11)

using coulomb::Index;

/// Random Fourier features of the Laplace kernel exp(−‖x − y‖₁/σ).
template <typename ScalarT>
class LaplaceFourier : public coulomb::FeatureMapBase<LaplaceFourier<ScalarT>, ScalarT> {
  using Base = coulomb::FeatureMapBase<LaplaceFourier<ScalarT>, ScalarT>;
  friend Base;  // the base calls the private customization points below

 public:
  using typename Base::MatrixType;
  using typename Base::Scalar;
  using typename Base::VectorType;

  // Capability flags, read by coulomb::feature_map_traits.
  static constexpr bool is_positive = false;            // cos and sin take both signs
  static constexpr bool has_closed_form_kernel = true;  // exact_kernel() below
  static constexpr bool has_phases = false;
  static constexpr bool is_stabilizable = false;  // not exponential: the Stabilizer is ignored
  static constexpr Index outputs_per_particle = 2;

  /// Used by the base in error messages ("coulomb::LaplaceFourier::map: ...").
  static constexpr const char* name() noexcept { return "LaplaceFourier"; }

  /// m frequencies in dimension d, drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  LaplaceFourier(Index input_dim, Index num_particles, G& rng, double bandwidth = 1.0,
                 coulomb::Draw draw = coulomb::Draw::iid) {
    set_bandwidth(bandwidth);
    this->init_random(input_dim, num_particles, draw, rng);
  }

  /// Given frequencies Ω (m×d), for example read back from a file.
  template <typename D>
  explicit LaplaceFourier(const Eigen::MatrixBase<D>& omega, double bandwidth = 1.0) {
    set_bandwidth(bandwidth);
    this->init_given(omega, coulomb::Draw::iid);
  }

  double bandwidth() const noexcept { return bandwidth_; }

  /// exp(−‖x − y‖₁/σ) between the rows of X and Y.
  template <typename DX, typename DY>
  MatrixType exact_kernel(const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) const {
    if (X.cols() != Y.cols())
      throw coulomb::invalid_argument(this->name_of("exact_kernel") + ": argument 'Y' has " +
                                      std::to_string(Y.cols()) + " columns, expected " +
                                      std::to_string(X.cols()));
    MatrixType k(X.rows(), Y.rows());
    for (Index j = 0; j < Y.rows(); ++j)
      for (Index i = 0; i < X.rows(); ++i)
        k(i, j) =
            std::exp(-(X.row(i) - Y.row(j)).template lpNorm<1>() / static_cast<Scalar>(bandwidth_));
    return k;
  }

 private:
  void set_bandwidth(double bandwidth) {
    if (!(bandwidth > 0.0) || !std::isfinite(bandwidth))
      throw coulomb::invalid_argument(this->name_of("constructor") +
                                      ": argument 'bandwidth' must be positive and finite, got " +
                                      std::to_string(bandwidth));
    bandwidth_ = bandwidth;
  }

  // Customization point of redraw(): the base hands over an m×d matrix of standard normal
  // draws (in double) and stores what this returns. Each entry z is mapped to a Cauchy(0, 1/σ)
  // draw by the probability integral transform, written with erfc so that both tails are
  // accurate: z ↦ sign(z) · cot((π/2) · erfc(|z|/√2)) / σ.
  coulomb::Matrix<double> scaled_draw(coulomb::Matrix<double> standard) const {
    const double half_pi = 0.5 * std::numbers::pi;
    return standard.unaryExpr([this, half_pi](double z) {
      const double tail = std::erfc(std::abs(z) / std::numbers::sqrt2);
      return std::copysign(1.0 / std::tan(half_pi * tail), z) / bandwidth_;
    });
  }

  // Φ = (1/√m)[cos Z, sin Z] with Z = XΩᵀ. Phi is resized here (no reallocation when it
  // already has the shape n×2m); the base has already checked X.
  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, coulomb::Stabilizer,
                VectorType* log_scale) const {
    const Index m = this->num_particles();
    Phi.resize(X.rows(), 2 * m);
    if (log_scale) log_scale->setZero(X.rows());  // no shift: Φ is the unbiased feature
    Phi.leftCols(m).noalias() = X * this->omega().transpose();
    const Scalar c = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(m)));
    for (Index j = 0; j < m; ++j) {
      Phi.col(m + j).array() = c * Phi.col(j).array().sin();
      Phi.col(j).array() = c * Phi.col(j).array().cos();
    }
  }

  // dZ = ∂L/∂Z (n×m) from dPhi = ∂L/∂Φ. With Φ_cos = c cos z and Φ_sin = c sin z:
  // ∂Φ_cos/∂z = −Φ_sin and ∂Φ_sin/∂z = Φ_cos, so everything is read from Φ. The base turns
  // dZ into ∂L/∂X = dZ Ω and ∂L/∂Ω = dZᵀ X.
  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>&, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    const Index m = this->num_particles();
    dZ.resize(Phi.rows(), m);
    for (Index j = 0; j < m; ++j)
      dZ.col(j).array() = Phi.col(j).array() * dPhi.col(m + j).array() -
                          Phi.col(m + j).array() * dPhi.col(j).array();
  }

  double bandwidth_ = 1.0;
};

COULOMB_ASSERT_FEATURE_MAP(LaplaceFourier<float>);
COULOMB_ASSERT_FEATURE_MAP(LaplaceFourier<double>);
static_assert(coulomb::KernelFeatureMap<LaplaceFourier<double>>);

namespace {

using Mat = coulomb::Matrix<double>;

/// L(X, Ω) = Σ_ij W_ij Φ_ij(X; Ω), so that ∂L/∂Φ = W.
double weighted_sum(const LaplaceFourier<double>& fm, const Mat& X, const Mat& W) {
  return (fm.map(X).array() * W.array()).sum();
}

/// Largest |analytic − numeric| / max(1, |numeric|) over the entries of X and of Ω, with
/// central differences of step h.
double gradient_check(const Mat& X, const Mat& omega, const Mat& W, double h) {
  LaplaceFourier<double> fm(omega, 2.0);
  Mat Phi;
  Mat dX;
  Mat dOmega;
  fm.map(X, Phi);
  fm.backward(X, Phi, W, dX, dOmega);  // Phi must be the output of map() for this X

  double worst = 0.0;
  auto compare = [&worst](double analytic, double numeric) {
    worst = std::max(worst, std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric)));
  };
  for (Index k = 0; k < X.size(); ++k) {
    Mat Xp = X;
    Mat Xm = X;
    Xp(k) += h;
    Xm(k) -= h;
    compare(dX(k), (weighted_sum(fm, Xp, W) - weighted_sum(fm, Xm, W)) / (2 * h));
  }
  LaplaceFourier<double> shifted(omega, 2.0);
  for (Index k = 0; k < omega.size(); ++k) {
    Mat plus = omega;
    Mat minus = omega;
    plus(k) += h;
    minus(k) -= h;
    shifted.set_omega(plus);
    const double up = weighted_sum(shifted, X, W);
    shifted.set_omega(minus);
    const double down = weighted_sum(shifted, X, W);
    compare(dOmega(k), (up - down) / (2 * h));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) try {
  coulomb_examples::CommandLine cli(
      "custom_feature_map",
      "A feature map written outside the library: random Fourier features of the Laplace kernel "
      "exp(-|x - y|_1 / sigma) with Cauchy frequencies. Checks that the type satisfies "
      "coulomb::KernelFeatureMap, prints the RMSE of the kernel estimate for m = 16 to 4096 "
      "(it falls like 1/sqrt(m)), compares backward() with central finite differences and shows "
      "the error message of a bad input. Exits with status 1 if the gradient check fails.");
  std::uint64_t seed = 2026;
  cli.add_seed(seed, "Seed of the inputs and of the frequencies");
  if (const auto status = cli.parse(argc, argv)) return *status;

  coulomb::Rng rng(seed);
  const Index d = 8;
  const double bandwidth = 2.0;

  // 1. Convergence: RMSE of the estimate over 256 input pairs, 4 draws of Ω per m.
  Mat X(256, d);
  Mat Y(256, d);
  coulomb::fill_standard_normal(X, rng);
  coulomb::fill_standard_normal(Y, rng);
  X *= 0.5;
  Y *= 0.5;
  std::printf("LaplaceFourier: k(x, y) = exp(-|x - y|_1 / %.1f), d = %td, 256 pairs\n", bandwidth,
              d);
  std::printf("%8s %12s %12s\n", "m", "RMSE", "RMSE*sqrt(m)");
  for (Index m = 16; m <= 4096; m *= 4) {
    LaplaceFourier<double> fm(d, m, rng, bandwidth);
    const Mat exact = fm.exact_kernel(X, Y).diagonal();  // k(x_i, y_i)
    double squared = 0.0;
    const int draws = 4;
    for (int r = 0; r < draws; ++r) {
      if (r > 0) fm.redraw(rng);  // new Ω, same m, d and Draw policy
      const Mat estimate = (fm.map(X).array() * fm.map(Y).array()).rowwise().sum();
      squared += (estimate - exact).squaredNorm();
    }
    const double rmse = std::sqrt(squared / (draws * 256.0));
    std::printf("%8td %12.3e %12.3f\n", m, rmse, rmse * std::sqrt(static_cast<double>(m)));
  }

  // 2. Gradients against central finite differences, in double. The truncation error of a
  // central difference grows like h²|ω|³ and Cauchy frequencies are heavy-tailed, hence the
  // small step; the rounding error is then about 1e-16/h.
  LaplaceFourier<double> small(d, 16, rng, bandwidth);
  Mat Xs(5, d);
  Mat W(5, small.output_dim());
  coulomb::fill_standard_normal(Xs, rng);
  coulomb::fill_standard_normal(W, rng);
  const double h = 1e-6;
  const double worst = gradient_check(Xs, small.omega(), W, h);
  const bool ok = worst < 1e-6;
  std::printf("\nbackward() vs central differences (h = %.0e): largest error %.2e  %s\n", h, worst,
              ok ? "OK" : "FAILED");

  // 3. Errors name the map, the function and the argument.
  try {
    small.map(Mat::Zero(2, d + 1));
  } catch (const coulomb::invalid_argument& e) {
    std::printf("bad input rejected: %s\n", e.what());
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_feature_map: %s\n", e.what());
  return 1;
}
