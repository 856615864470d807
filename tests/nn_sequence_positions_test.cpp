// SPDX-License-Identifier: MIT
// Positions for long sequences (nn/positions.hpp): rotary positions are rotations (R x keeps
// norms, rotate_back is their transpose and inverse) whose scores depend on the offset only, in
// float at positions near 4096; the decoding step's rotation and sinusoid are the tables'
// numbers; sinusoidal encodings against their formula; the attention block with rotary
// positions (linear causal, tied or not, and softmax) against central differences; bad
// arguments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/nn/attention_block.hpp>
#include <coulomb/nn/positions.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_sequence_positions_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::nn::RotaryPositions;
using coulomb::nn::SinusoidalPositions;
using coulomb_nn_test::fd_gradient;
using coulomb_nn_test::gradient_error;
using coulomb_nn_test::mask_of;
using coulomb_nn_test::weighted_sum;
using coulomb_test::Mat;
using coulomb_test::tol;

/// R_δ k for one head (the half pairing), in double: the reference rotation by offset δ.
Mat<double> rotate_reference(const Mat<double>& k, double offset, Index head_dim, double base) {
  Mat<double> out = k;
  const Index half = head_dim / 2;
  for (Index i = 0; i < half; ++i) {
    const double a =
        offset * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    out(0, i) = k(0, i) * std::cos(a) - k(0, half + i) * std::sin(a);
    out(0, half + i) = k(0, i) * std::sin(a) + k(0, half + i) * std::cos(a);
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("NnRotaryPositions_AreRotationsOfTheOffset", "[nn][sequence][positions]", float,
                   double) {
  using S = TestType;
  auto rng = coulomb_test::test_rng("NnRotaryPositions_AreRotationsOfTheOffset");
  const Index dh = 16, H = 2, L = 4096, B = 2;
  RotaryPositions<S> rotary(dh);
  const Mat<S> X = coulomb_test::gaussian<S>(B * L, H * dh, rng);
  Mat<S> R = X;
  rotary.rotate(R, L);
  // Norms kept per head, and rotate_back undoes it.
  for (Index r : {Index(0), Index(1), L - 1, 2 * L - 1})
    for (Index h = 0; h < H; ++h)
      CHECK(std::abs(R.row(r).segment(h * dh, dh).norm() - X.row(r).segment(h * dh, dh).norm()) <
            tol<S>::tight * X.row(r).segment(h * dh, dh).norm());
  Mat<S> back = R;
  rotary.rotate_back(back, L);
  CHECK(coulomb_test::rel_diff(back, X) < tol<S>::tight);
  // rotate_back is the transpose: <R x, y> = <x, Rᵀ y>.
  const Mat<S> Y = coulomb_test::gaussian<S>(B * L, H * dh, rng);
  Mat<S> RtY = Y;
  rotary.rotate_back(RtY, L);
  const double lhs = (R.template cast<double>().array() * Y.template cast<double>().array()).sum();
  const double rhs =
      (X.template cast<double>().array() * RtY.template cast<double>().array()).sum();
  CHECK(std::abs(lhs - rhs) < tol<S>::loose * X.norm() * Y.norm());
  // Scores depend on the offset only: (R_t q)ᵀ(R_u k) = qᵀ R_{u−t} k, at positions near 4096,
  // to the accuracy of S (the angles are computed in double).
  const Mat<double> q = coulomb_test::gaussian(1, dh, rng);
  const Mat<double> k = coulomb_test::gaussian(1, dh, rng);
  for (const auto& [t, u] :
       std::vector<std::pair<Index, Index>>{{4000, 4095}, {4095, 3}, {17, 17}}) {
    Mat<S> qt = q.cast<S>(), ku = k.cast<S>();
    rotary.rotate_at(qt, t);
    rotary.rotate_at(ku, u);
    const double score =
        (qt.template cast<double>() * ku.template cast<double>().transpose())(0, 0);
    const double expected =
        (q * rotate_reference(k, static_cast<double>(u - t), dh, 10000.0).transpose())(0, 0);
    // The angle t·θ in double carries an error of about t·ε_double, beside S's rounding.
    const double bound =
        tol<S>::tight + 4.0 * static_cast<double>(std::max(t, u)) * tol<double>::eps;
    INFO("t = " << t << ", u = " << u);
    CHECK(std::abs(score - expected) < bound * q.norm() * k.norm());
  }
  // The step's rotation of one position is the table's, bit for bit.
  for (const Index t : {Index(0), Index(1), Index(2047), L - 1}) {
    Mat<S> row = X.row(L + t);
    rotary.rotate_at(row, t);
    CHECK(row == R.row(L + t));
  }
}

TEMPLATE_TEST_CASE("NnSinusoidalPositions_FollowTheFormula", "[nn][sequence][positions]", float,
                   double) {
  using S = TestType;
  const Index d = 9, L = 4096;
  SinusoidalPositions<S> pe(d);
  Mat<S> X = Mat<S>::Zero(2 * L, d);
  pe.forward_add(L, 2, X);
  for (const Index t : {Index(0), Index(5), Index(4095)}) {
    for (Index j = 0; j < d; ++j) {
      const double w =
          std::pow(10000.0, -2.0 * static_cast<double>(j / 2) / static_cast<double>(d));
      const double expected = j % 2 == 0 ? std::sin(t * w) : std::cos(t * w);
      CHECK(std::abs(static_cast<double>(X(t, j)) - expected) <= tol<S>::eps);
      CHECK(X(L + t, j) == X(t, j));
    }
    Mat<S> row = Mat<S>::Zero(1, d);
    pe.add_at(t, row);
    CHECK(row == X.row(t));
  }
  // Distinct positions have distinct encodings.
  CHECK((X.row(4095) - X.row(4094)).norm() > 0.01);
  CHECK_THROWS_WITH(SinusoidalPositions<S>(0), Contains("'dim'"));
  CHECK_THROWS_WITH(SinusoidalPositions<S>(4, 0.5), Contains("'base'"));
  CHECK_THROWS_WITH(RotaryPositions<S>(5), Contains("'head_dim'"));
  RotaryPositions<S> rotary(4);
  Mat<S> wrong(3, 6);
  CHECK_THROWS_WITH(rotary.rotate(wrong, 3), Contains("head_dim"));
  Mat<S> rows(3, 8);
  CHECK_THROWS_WITH(rotary.rotate(rows, 2), Contains("length"));
  CHECK_THROWS_WITH(rotary.rotate_at(rows, -1), Contains("'position'"));
}

TEST_CASE("NnMultiHeadAttention_RotaryBackwardMatchesFiniteDifferences",
          "[nn][sequence][positions][gradient]") {
  auto rng = coulomb_test::test_rng("NnMultiHeadAttention_RotaryBackwardMatchesFD");
  using Block = coulomb::nn::MultiHeadAttention<double, coulomb::FavorPlus<double>>;
  const Index d = 8, H = 2, L = 5;
  const PaddingMask mask = mask_of(L, {5, 3});
  Mat<double> X = coulomb_test::gaussian(2 * L, d, rng);
  const Mat<double> R = coulomb_test::gaussian(2 * L, d, rng);
  struct Variant {
    bool linear, causal, tied;
  };
  for (const Variant v :
       {Variant{true, true, false}, Variant{true, true, true}, Variant{true, false, false},
        Variant{false, true, true}, Variant{false, false, false}}) {
    coulomb::AttentionOptions opt;
    opt.num_heads = H;
    opt.causal = v.causal;
    opt.num_threads = 1;
    Block block = v.linear ? Block(d, coulomb::FavorPlus<double>(d / H, 6, rng), opt, v.tied)
                           : Block(d, opt, v.tied);
    block.set_rotary(10000.0);
    block.initialize(rng);
    INFO((v.linear ? "linear" : "softmax")
         << (v.causal ? ", causal" : "") << (v.tied ? ", tied" : ""));
    auto loss = [&] {
      Mat<double> Y;
      block.forward(X, mask, Y);
      return weighted_sum(R, Y);
    };
    Mat<double> Y, dX;
    block.forward(X, mask, Y);
    block.zero_grad();
    block.backward(X, mask, R, dX);
    CHECK(gradient_error(dX, fd_gradient(X, loss)) < coulomb_nn_test::fd_tolerance);
    for (const auto& p : [&] {
           coulomb::nn::ParameterList<double> l;
           block.append_parameters(l, "");
           return l;
         }()) {
      INFO(p.name);
      const Mat<double> analytic = *p.gradient;
      CHECK(gradient_error(analytic, fd_gradient(*p.value, loss)) < coulomb_nn_test::fd_tolerance);
    }
  }
}

}  // namespace nn_sequence_positions_test
