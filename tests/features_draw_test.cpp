// SPDX-License-Identifier: MIT
// coulomb::draw_particles: iid Gaussian rows, and orthogonal blocks with chi(d) or √d norms.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace features_draw_test {

namespace {

using coulomb::Draw;
using coulomb_test::Index;
using coulomb_test::Mat;
using coulomb_test::Vec;

/// Largest |G − I| entry of the Gram matrix of the normalized rows [start, start + rows).
double block_orthonormality_error(const Mat<double>& omega, Index start, Index rows) {
  Mat<double> block = omega.middleRows(start, rows);
  for (Index i = 0; i < rows; ++i) block.row(i).normalize();
  const Mat<double> gram = block * block.transpose();
  return (gram - Mat<double>::Identity(rows, rows)).cwiseAbs().maxCoeff();
}

}  // namespace

TEST_CASE("Draw_IidEntriesAreStandardNormal", "[features][draw][random]") {
  coulomb::Rng rng = coulomb_test::test_rng("Draw_IidEntriesAreStandardNormal");
  const Index m = 4096;
  const Index d = 16;
  const Mat<double> omega = coulomb::draw_particles(m, d, Draw::iid, rng);
  REQUIRE(omega.rows() == m);
  REQUIRE(omega.cols() == d);
  REQUIRE(omega.allFinite());
  const double N = static_cast<double>(omega.size());
  const double mean = omega.mean();
  const double var = (omega.array() - mean).square().sum() / (N - 1.0);
  INFO("mean " << mean << ", variance " << var);
  CHECK(std::abs(mean) < 6.0 / std::sqrt(N));
  CHECK(std::abs(var - 1.0) < 6.0 * std::sqrt(2.0 / N));
  // Columns are uncorrelated: the empirical covariance is I up to sampling error 1/√m.
  const Mat<double> cov = omega.transpose() * omega / static_cast<double>(m);
  const double off = (cov - Mat<double>::Identity(d, d)).cwiseAbs().maxCoeff();
  CHECK(off < 6.0 * std::sqrt(2.0 / static_cast<double>(m)));
  // iid rows are not orthogonal: consecutive rows have |cos| ~ 1/√d, not 0.
  CHECK(block_orthonormality_error(omega, 0, d) > 0.05);
}

TEST_CASE("Draw_OrthogonalSqrtDRowsAreOrthogonalWithNormSqrtD", "[features][draw][random]") {
  coulomb::Rng rng = coulomb_test::test_rng("Draw_OrthogonalSqrtDRowsAreOrthogonalWithNormSqrtD");
  for (const Index d : {Index{1}, Index{3}, Index{8}, Index{16}}) {
    for (const Index m : {Index{1}, d, 3 * d + 2, 4 * d}) {
      INFO("d = " << d << ", m = " << m);
      const Mat<double> omega = coulomb::draw_particles(m, d, Draw::orthogonal_sqrt_d, rng);
      REQUIRE(omega.rows() == m);
      REQUIRE(omega.cols() == d);
      // Every row has norm exactly √d.
      const Vec<double> norms = omega.rowwise().norm();
      CHECK((norms.array() - std::sqrt(static_cast<double>(d))).abs().maxCoeff() <
            coulomb_test::tol<double>::tight * std::sqrt(static_cast<double>(d)));
      // Within each block of d rows (the last one possibly partial): Ω_b Ω_bᵀ = d·I.
      for (Index start = 0; start < m; start += d) {
        const Index rows = std::min(d, m - start);
        const Mat<double> block = omega.middleRows(start, rows);
        const Mat<double> gram = block * block.transpose();
        const double err = (gram - static_cast<double>(d) * Mat<double>::Identity(rows, rows))
                               .cwiseAbs()
                               .maxCoeff();
        CHECK(err < coulomb_test::tol<double>::tight * static_cast<double>(d));
      }
      // Different blocks use different directions: rows of block 0 and block 1 are not
      // orthogonal to each other (|cos| = 0 only with probability 0).
      if (m >= 2 * d && d >= 2) {
        const Mat<double> cross = omega.topRows(d) * omega.middleRows(d, d).transpose();
        CHECK(cross.cwiseAbs().maxCoeff() > 0.1 * static_cast<double>(d));
      }
    }
  }
}

TEST_CASE("Draw_OrthogonalChiRowsAreOrthogonalWithChiNorms", "[features][draw][random]") {
  coulomb::Rng rng = coulomb_test::test_rng("Draw_OrthogonalChiRowsAreOrthogonalWithChiNorms");
  const Index d = 16;
  const Index m = 4096 + 5;  // 256 full blocks and a partial one
  const Mat<double> omega = coulomb::draw_particles(m, d, Draw::orthogonal_chi, rng);
  REQUIRE(omega.rows() == m);
  REQUIRE(omega.allFinite());
  // Directions: exactly orthonormal within every block.
  double worst = 0.0;
  for (Index start = 0; start < m; start += d)
    worst = std::max(worst, block_orthonormality_error(omega, start, std::min(d, m - start)));
  CHECK(worst < coulomb_test::tol<double>::tight);
  // Norms: squared norms are chi²(d), mean d and variance 2d (√d norms would have variance 0).
  const Vec<double> sq = omega.rowwise().squaredNorm();
  const double M = static_cast<double>(m);
  const double mean_sq = sq.mean();
  const double var_sq = (sq.array() - mean_sq).square().sum() / (M - 1.0);
  INFO("mean squared norm " << mean_sq << " (expected " << d << "), variance " << var_sq
                            << " (expected " << 2 * d << ")");
  CHECK(std::abs(mean_sq - static_cast<double>(d)) <
        6.0 * std::sqrt(2.0 * static_cast<double>(d) / M));
  // Var of the sample variance of chi²(d): (μ4 − σ⁴)/M with μ4 = 12d(d + 4) for chi²(d).
  const double d_ = static_cast<double>(d);
  const double se_var = std::sqrt((12.0 * d_ * (d_ + 4.0) - 4.0 * d_ * d_) / M);
  CHECK(std::abs(var_sq - 2.0 * d_) < 6.0 * se_var);
  // The norms within a block are independent of each other: not all equal.
  CHECK((sq.head(d).array() - sq(0)).abs().maxCoeff() > 1e-3);
  // Every row is marginally N(0, I): entries have mean 0 and variance 1.
  const double N = static_cast<double>(omega.size());
  const double mean = omega.mean();
  const double var = (omega.array() - mean).square().sum() / (N - 1.0);
  CHECK(std::abs(mean) < 6.0 / std::sqrt(N));
  // Entries of a block are not independent, so allow a wider band than iid's.
  CHECK(std::abs(var - 1.0) < 0.05);
}

TEST_CASE("Draw_OrthogonalDirectionsHaveNoSignBias", "[features][draw][random]") {
  // The Q factor of a Householder QR has a sign pattern fixed by the algorithm (for Eigen,
  // Q(k, k) of an uncorrected factor tends to one sign); the documented sign correction makes
  // the directions Haar distributed. Over 600 blocks of d = 4, the k-th row's k-th entry is
  // positive half of the time, and every coordinate's mean is 0.
  coulomb::Rng rng = coulomb_test::test_rng("Draw_OrthogonalDirectionsHaveNoSignBias");
  const Index d = 4;
  const Index blocks = 600;
  for (const Draw draw : {Draw::orthogonal_chi, Draw::orthogonal_sqrt_d}) {
    INFO("draw " << coulomb::to_string(draw));
    const Mat<double> omega = coulomb::draw_particles(blocks * d, d, draw, rng);
    int positive_diagonal = 0;
    for (Index b = 0; b < blocks; ++b)
      for (Index k = 0; k < d; ++k) positive_diagonal += omega(b * d + k, k) > 0.0 ? 1 : 0;
    const double n = static_cast<double>(blocks * d);
    const double fraction = positive_diagonal / n;
    INFO("fraction of positive diagonal entries " << fraction);
    CHECK(std::abs(fraction - 0.5) < 6.0 * std::sqrt(0.25 / n));
    // Column means 0 (each entry has variance 1 for both draws: |ω|² = d on average).
    for (Index k = 0; k < d; ++k) CHECK(std::abs(omega.col(k).mean()) < 6.0 / std::sqrt(n));
  }
}

TEST_CASE("Draw_MapsUseTheirDrawPolicy", "[features][draw][random]") {
  // A map constructed with a draw policy uses it for its particles and its redraws; RFF
  // scales the standard draw by 1/σ.
  coulomb::Rng rng = coulomb_test::test_rng("Draw_MapsUseTheirDrawPolicy");
  const Index d = 6;
  const Index m = 12;
  coulomb::FavorPlus<double> favor(d, m, rng, {Draw::orthogonal_sqrt_d});
  CHECK(favor.draw_policy() == Draw::orthogonal_sqrt_d);
  for (int r = 0; r < 2; ++r) {
    const Vec<double> norms = favor.omega().rowwise().norm();
    CHECK((norms.array() - std::sqrt(6.0)).abs().maxCoeff() < 1e-12);
    CHECK(block_orthonormality_error(favor.omega(), 0, d) < 1e-12);
    CHECK(block_orthonormality_error(favor.omega(), d, d) < 1e-12);
    favor.redraw(rng);
  }
  const double sigma = 2.5;
  coulomb::RffCosSin<double> rff(d, m, rng, {sigma, Draw::orthogonal_sqrt_d});
  const Vec<double> rff_norms = rff.omega().rowwise().norm();
  CHECK((rff_norms.array() - std::sqrt(6.0) / sigma).abs().maxCoeff() < 1e-12);
  CHECK(rff.bandwidth() == sigma);
  // Defaults: RFF draws iid, the others orthogonal with chi norms.
  CHECK(coulomb::Rff<double>(d, m, rng).draw_policy() == Draw::iid);
  CHECK(coulomb::FavorPlus<double>(d, m, rng).draw_policy() == Draw::orthogonal_chi);
  CHECK(coulomb::PorfRelu<double>(d, m, rng).draw_policy() == Draw::orthogonal_chi);
  CHECK(coulomb::SoftmaxFeat<double>(d, m, rng).draw_policy() == Draw::orthogonal_chi);
}

}  // namespace features_draw_test
