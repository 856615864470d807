// SPDX-License-Identifier: MIT
// The layers of nn/ that do not depend on a feature map (Linear, LayerNorm, GELU, Dropout,
// embeddings, masked mean pooling, the softmax cross-entropy): values against direct formulas,
// backward passes against central finite differences in double, and bad arguments. The
// attention block and the encoder layer are tested in nn_model_test.cpp, which instantiates
// them anyway (one instantiation of the attention templates per test binary, not two).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include <coulomb/nn/embedding.hpp>
#include <coulomb/nn/layers.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/pooling.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_layers_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb_nn_test::fd_gradient;
using coulomb_nn_test::fd_tolerance;
using coulomb_nn_test::gradient_error;
using coulomb_nn_test::mask_of;
using coulomb_nn_test::weighted_sum;
using coulomb_test::gaussian;
using coulomb_test::Mat;

}  // namespace

TEST_CASE("NnLinear_BackwardMatchesFiniteDifferences", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinear_BackwardMatchesFiniteDifferences");
  coulomb::nn::Linear<double> layer(4, 3);
  layer.initialize(rng);
  layer.bias() = gaussian(3, 1, rng);
  Mat<double> X = gaussian(5, 4, rng);
  const Mat<double> R = gaussian(5, 3, rng);
  Mat<double> Y, dX;
  layer.forward(X, Y);
  const Mat<double> expected = (X * layer.weight()).rowwise() + layer.bias().col(0).transpose();
  CHECK(coulomb_test::rel_diff(Y, expected) < 1e-15);
  layer.zero_grad();
  layer.backward(X, R, dX);
  auto loss = [&] {
    Mat<double> out;
    layer.forward(X, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dX, fd_gradient(X, loss)) < fd_tolerance);
  CHECK(gradient_error(layer.weight_gradient(), fd_gradient(layer.weight(), loss)) < fd_tolerance);
  CHECK(gradient_error(layer.bias_gradient(), fd_gradient(layer.bias(), loss)) < fd_tolerance);

  // Gradients accumulate; backward_add adds to dX.
  const Mat<double> dw = layer.weight_gradient();
  Mat<double> dX2 = dX;
  layer.backward_add(X, R, dX2);
  CHECK(coulomb_test::rel_diff(layer.weight_gradient(), 2 * dw) < 1e-15);
  CHECK(coulomb_test::rel_diff(dX2, 2 * dX) < 1e-15);
  layer.zero_grad();
  CHECK(layer.weight_gradient().isZero(0));
  CHECK(layer.bias_gradient().isZero(0));

  CHECK_THROWS_WITH(layer.forward(X.leftCols(3), Y), Contains("'X'"));
  CHECK_THROWS_WITH(layer.backward(X, R.leftCols(2), dX), Contains("'dY'"));
  CHECK_THROWS_WITH(coulomb::nn::Linear<double>(0, 3), Contains("'input_dim'"));
}

// Linear::set_num_threads splits the products into row ranges, one per thread. The split
// layer must agree with the unsplit one: Y and dX exactly (each entry is the same chain of
// multiply-adds), ∂L/∂W as a sum of partial products (rounding only), for row counts that do
// not divide evenly.
TEST_CASE("NnLinear_SplitProductsAgreeWithOneThread", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinear_SplitProductsAgreeWithOneThread");
  coulomb::nn::Linear<double> one(16, 24);
  one.initialize(rng);
  one.bias() = gaussian(24, 1, rng);
  CHECK_THROWS_WITH(one.set_num_threads(-1), Contains("'threads'"));
  for (const int threads : {2, 3, 0}) {
    for (const Index rows :
         {Index(7), 2 * coulomb::nn::Linear<double>::min_rows_per_thread + 1, Index(1543)}) {
      INFO("threads " << threads << " rows " << rows);
      coulomb::nn::Linear<double> split = one;
      split.set_num_threads(threads);
      CHECK(split.num_threads() == threads);
      const Mat<double> X = gaussian(rows, 16, rng);
      const Mat<double> R = gaussian(rows, 24, rng);
      Mat<double> Y1, Ys, dX1, dXs;
      one.forward(X, Y1);
      split.forward(X, Ys);
      CHECK(Ys == Y1);
      one.zero_grad();
      split.zero_grad();
      one.backward(X, R, dX1);
      split.backward(X, R, dXs);
      CHECK(dXs == dX1);
      CHECK(coulomb_test::rel_diff(split.weight_gradient(), one.weight_gradient()) < 1e-14);
      CHECK(coulomb_test::rel_diff(split.bias_gradient(), one.bias_gradient()) < 1e-15);
      split.backward_add(X, R, dXs);
      CHECK(coulomb_test::rel_diff(dXs, 2 * dX1) < 1e-15);
      CHECK(coulomb_test::rel_diff(split.weight_gradient(), 2 * one.weight_gradient()) < 1e-14);
    }
  }
}

// One step of the chain of detail::tall_small_product: Eigen's pmadd, a fused multiply-add
// where the target has one, else a product rounded and then added.
template <typename Scalar>
Scalar chain_step(Scalar a, Scalar b, Scalar acc) {
#ifdef EIGEN_VECTORIZE_FMA
  return std::fma(a, b, acc);
#else
  return acc + a * b;
#endif
}

// Linear's Y = X W + 1 bᵀ, dX = dY Wᵀ and dX += dY Wᵀ: every entry must be exactly the chain
// b_j (or 0, or the old entry), then + X(r, p) W(p, j) for p in order, computed here one scalar
// at a time. The shapes cover every path of the kernel: rows in full tiles, in single packets
// and fewer than a packet; columns in full and partial blocks; depths over one block (kc).
template <typename Scalar>
void check_linear_chains(coulomb::Rng& rng) {
  using M = Mat<Scalar>;
  constexpr Index kc = coulomb::detail::ProductTraits<Scalar>::kc;
  struct Shape {
    Index rows, in, out;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{5, 3, 2}, Shape{47, 64, 9}, Shape{48, 16, 8},
                        Shape{113, kc + 3, 7}, Shape{200, 2 * kc + 1, 24}, Shape{64, 24, 3 * kc}}) {
    INFO("rows " << s.rows << " in " << s.in << " out " << s.out);
    coulomb::nn::Linear<Scalar> layer(s.in, s.out);
    layer.initialize(rng);
    layer.bias() = gaussian<Scalar>(s.out, 1, rng);
    const M X = gaussian<Scalar>(s.rows, s.in, rng);
    const M dY = gaussian<Scalar>(s.rows, s.out, rng);
    const M start = gaussian<Scalar>(s.rows, s.in, rng);
    const M& W = layer.weight();
    M Y, dX, dX_add = start;
    layer.forward(X, Y);
    layer.backward(X, dY, dX);
    layer.backward_add(X, dY, dX_add);
    Index wrong_y = 0, wrong_dx = 0, wrong_add = 0;
    for (Index r = 0; r < s.rows; ++r) {
      for (Index j = 0; j < s.out; ++j) {
        Scalar acc = layer.bias()(j, 0);
        for (Index p = 0; p < s.in; ++p) acc = chain_step(X(r, p), W(p, j), acc);
        wrong_y += Y(r, j) == acc ? 0 : 1;
      }
      for (Index i = 0; i < s.in; ++i) {
        Scalar acc = 0, add = start(r, i);
        for (Index p = 0; p < s.out; ++p) {
          acc = chain_step(dY(r, p), W(i, p), acc);
          add = chain_step(dY(r, p), W(i, p), add);
        }
        wrong_dx += dX(r, i) == acc ? 0 : 1;
        wrong_add += dX_add(r, i) == add ? 0 : 1;
      }
    }
    CHECK(wrong_y == 0);
    CHECK(wrong_dx == 0);
    CHECK(wrong_add == 0);
  }
}

TEST_CASE("NnLinear_ProductsAreOneChainPerEntry", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinear_ProductsAreOneChainPerEntry");
  check_linear_chains<float>(rng);
  check_linear_chains<double>(rng);
}

// The product with B read in place, column-major (the fused head's dW += Xᵀ dZ) or row-major
// (attention's products with the key sums), with B packed ahead (the products with W), and the
// sum over rows Aᵀ B with A transposed in panels: the same single chain per entry, from the old
// entry, zero or the bias. The rows cover tiles of 3, 2 and 1 packets, two tiles of 2 where
// tiles of 3 would leave one packet (4 and 7 packets), and fewer than a packet, depths of one
// and two blocks, for float and double.
template <typename Scalar>
void check_direct_and_packed_chains(coulomb::Rng& rng) {
  using M = Mat<Scalar>;
  namespace cd = coulomb::detail;
  constexpr Index kc = cd::ProductTraits<Scalar>::kc;
  struct Shape {
    Index rows, depth, cols;
  };
  constexpr Index P = cd::ProductTraits<Scalar>::packet;
  for (const Shape s : {Shape{1, 1, 1}, Shape{64, 512, 128}, Shape{85, 37, 13}, Shape{40, kc, 9},
                        Shape{4 * P, 19, 10}, Shape{7 * P + 3, 23, 17}}) {
    INFO("rows " << s.rows << " depth " << s.depth << " cols " << s.cols);
    const M A = gaussian<Scalar>(s.rows, s.depth, rng);
    const M B = gaussian<Scalar>(s.depth, s.cols, rng);
    const M start = gaussian<Scalar>(s.rows, s.cols, rng);
    const M bias = gaussian<Scalar>(s.cols, 1, rng);
    M direct = start;
    cd::direct_product(A.data(), s.rows, s.rows, s.depth, B.data(), s.depth, s.cols, direct.data(),
                       s.rows, cd::ProductInit::accumulate);
    std::vector<Scalar> pack(
        static_cast<std::size_t>(cd::packed_operand_size<Scalar>(s.depth, s.cols)));
    cd::pack_small_operand(B.data(), Index{1}, s.depth, Index{0}, s.depth, s.cols, pack.data());
    M packed(s.rows, s.cols);
    cd::packed_product(A.data(), s.rows, s.rows, s.depth, pack.data(), s.cols, packed.data(),
                       s.rows, cd::ProductInit::bias, bias.data());
    // B read in place as the transpose of Bt; A B as a sum over the rows of At = Aᵀ.
    const M Bt = B.transpose();
    const M At = A.transpose();
    M transposed(s.rows, s.cols);
    cd::direct_product_transposed(A.data(), s.rows, s.rows, s.depth, Bt.data(), s.cols, s.cols,
                                  transposed.data(), s.rows, cd::ProductInit::zero);
    M inner = start;
    cd::inner_product(At.data(), s.depth, B.data(), s.depth, s.depth, s.rows, s.cols, inner.data(),
                      s.rows, cd::ProductInit::accumulate);
    // Entry (r, j) of init + A B as one chain of chain_steps over the depth.
    const auto chain = [&](Scalar init, Index r, Index j) {
      for (Index p = 0; p < s.depth; ++p) init = chain_step(A(r, p), B(p, j), init);
      return init;
    };
    Index wrong_direct = 0, wrong_packed = 0, wrong_transposed = 0, wrong_inner = 0;
    for (Index r = 0; r < s.rows; ++r)
      for (Index j = 0; j < s.cols; ++j) {
        wrong_direct += direct(r, j) == chain(start(r, j), r, j) ? 0 : 1;
        wrong_packed += packed(r, j) == chain(bias(j, 0), r, j) ? 0 : 1;
        wrong_transposed += transposed(r, j) == chain(Scalar(0), r, j) ? 0 : 1;
        wrong_inner += inner(r, j) == chain(start(r, j), r, j) ? 0 : 1;
      }
    CHECK(wrong_direct == 0);
    CHECK(wrong_packed == 0);
    CHECK(wrong_transposed == 0);
    CHECK(wrong_inner == 0);
  }
}

TEST_CASE("NnLinear_DirectAndPackedProductsAreOneChainPerEntry", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinear_DirectAndPackedProductsAreOneChainPerEntry");
  check_direct_and_packed_chains<float>(rng);
  check_direct_and_packed_chains<double>(rng);
}

TEST_CASE("NnLinear_WeightGradientOfManyRows", "[nn][layers]") {
  // ∂L/∂W = Xᵀ dY is summed in blocks of rows (2,048); with 8,192 + 7 rows (five blocks, the
  // last partial) it must equal the product in double up to float rounding, and a second
  // backward must add exactly the same amount again.
  coulomb::Rng rng = coulomb_test::test_rng("NnLinear_WeightGradientOfManyRows");
  coulomb::nn::Linear<float> layer(64, 32);
  layer.initialize(rng);
  const Index rows = 8192 + 7;
  const Mat<float> X = gaussian<float>(rows, 64, rng);
  const Mat<float> dY = gaussian<float>(rows, 32, rng);
  Mat<float> dX;
  layer.zero_grad();
  layer.backward(X, dY, dX);
  const Mat<double> exact = X.cast<double>().transpose() * dY.cast<double>();
  const double scale = std::sqrt(static_cast<double>(rows));  // size of each entry
  CHECK((layer.weight_gradient().cast<double>() - exact).cwiseAbs().maxCoeff() < 1e-4 * scale);
  CHECK((layer.bias_gradient().cast<double>() - dY.cast<double>().colwise().sum().transpose())
            .cwiseAbs()
            .maxCoeff() < 1e-4 * scale);
  const Mat<float> once = layer.weight_gradient();
  layer.zero_grad();
  layer.backward(X, dY, dX);
  CHECK(layer.weight_gradient() == once);
}

TEST_CASE("NnLayerNorm_NormalizesAndBackwardMatchesFiniteDifferences", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLayerNorm_NormalizesAndBackward");
  coulomb::nn::LayerNorm<double> norm(5);
  Mat<double> X = gaussian(6, 5, rng) * 3.0;
  X.col(2).array() += 4.0;
  Mat<double> Y;
  norm.forward(X, Y);
  // γ = 1, β = 0: every row has mean 0 and variance 1 / (1 + ε / σ²).
  for (Index i = 0; i < Y.rows(); ++i) {
    CHECK(std::abs(Y.row(i).mean()) < 1e-14);
    const double var = (X.row(i).array() - X.row(i).mean()).square().mean();
    CHECK(Y.row(i).squaredNorm() / 5.0 == Approx(var / (var + 1e-5)).epsilon(1e-12));
  }
  norm.gain() = gaussian(5, 1, rng);
  norm.bias() = gaussian(5, 1, rng);
  const Mat<double> R = gaussian(6, 5, rng);
  Mat<double> dX;
  norm.forward(X, Y);
  norm.zero_grad();
  norm.backward(R, dX);
  auto loss = [&] {
    Mat<double> out;
    norm.forward(X, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dX, fd_gradient(X, loss)) < fd_tolerance);
  CHECK(gradient_error(norm.gain_gradient(), fd_gradient(norm.gain(), loss)) < fd_tolerance);
  CHECK(gradient_error(norm.bias_gradient(), fd_gradient(norm.bias(), loss)) < fd_tolerance);

  CHECK_THROWS_WITH(norm.forward(X.leftCols(4), Y), Contains("'X'"));
  CHECK_THROWS_WITH(norm.backward(R.topRows(2), dX), Contains("'dY'"));
  CHECK_THROWS_WITH(coulomb::nn::LayerNorm<double>(5, 0.0), Contains("'epsilon'"));
}

TEST_CASE("NnLayerNorm_ManyRowsAgreeWithEachRowAlone", "[nn][layers]") {
  // 1,300 rows span several row blocks of the implementation (the last one partial): every
  // row's output and input gradient must be those of that row normalized alone, and the
  // parameter gradients the sums over the rows.
  coulomb::Rng rng = coulomb_test::test_rng("NnLayerNorm_ManyRowsAgreeWithEachRowAlone");
  const Index n = 1300;
  const Index d = 7;
  coulomb::nn::LayerNorm<double> norm(d);
  norm.gain() = gaussian(d, 1, rng);
  norm.bias() = gaussian(d, 1, rng);
  Mat<double> X = gaussian(n, d, rng) * 2.0;
  X.col(3).array() += 5.0;
  const Mat<double> R = gaussian(n, d, rng);
  Mat<double> Y, dX;
  norm.forward(X, Y);
  norm.zero_grad();
  norm.backward(R, dX);
  const Mat<double> dgain = norm.gain_gradient();
  const Mat<double> dbias = norm.bias_gradient();

  coulomb::nn::LayerNorm<double> one(d);
  one.gain() = norm.gain();
  one.bias() = norm.bias();
  one.zero_grad();
  double worst = 0.0;
  for (Index i = 0; i < n; ++i) {
    Mat<double> y, dx;
    one.forward(X.row(i), y);
    one.backward(R.row(i), dx);
    worst = std::max(worst, coulomb_test::rel_diff(Y.row(i), y));
    worst = std::max(worst, coulomb_test::rel_diff(dX.row(i), dx));
  }
  CHECK(worst < 1e-12);
  CHECK(coulomb_test::rel_diff(dgain, one.gain_gradient()) < 1e-12);
  CHECK(coulomb_test::rel_diff(dbias, one.bias_gradient()) < 1e-12);
}

TEST_CASE("NnGelu_ValuesAndBackward", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnGelu_ValuesAndBackward");
  coulomb::nn::Gelu<double> gelu;
  Mat<double> x(1, 5);
  x << -3.0, -1.0, 0.0, 1.0, 3.0;
  Mat<double> y;
  gelu.forward(x, y);
  for (Index j = 0; j < x.cols(); ++j) {
    const double v = x(0, j);
    const double u = std::sqrt(2.0 / 3.141592653589793) * (v + 0.044715 * v * v * v);
    CHECK(y(0, j) == Approx(0.5 * v * (1.0 + std::tanh(u))).epsilon(1e-15).margin(1e-300));
    // The tanh form stays within 1e-3 of the exact x·Φ(x).
    CHECK(std::abs(y(0, j) - 0.5 * v * std::erfc(-v / std::sqrt(2.0))) < 1e-3);
  }
  Mat<double> X = gaussian(4, 6, rng) * 2.0;
  const Mat<double> R = gaussian(4, 6, rng);
  Mat<double> dX;
  gelu.backward(X, R, dX);
  auto loss = [&] {
    Mat<double> out;
    gelu.forward(X, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dX, fd_gradient(X, loss)) < fd_tolerance);
  // In place (dX aliasing dY) gives the same.
  Mat<double> inplace = R;
  gelu.backward(X, inplace, inplace);
  CHECK(coulomb_test::rel_diff(inplace, dX) == 0.0);
}

TEMPLATE_TEST_CASE("NnGelu_KeptTanhGivesTheSameBits", "[nn][layers]", float, double) {
  // A training forward keeps tanh(u) for backward; values and gradients must be those of the
  // forward and backward that compute it (bit for bit), and a forward that does not keep it
  // must make backward compute it again.
  coulomb::Rng rng = coulomb_test::test_rng("NnGelu_KeptTanhGivesTheSameBits");
  const Mat<TestType> X = (gaussian(37, 5, rng) * 3.0).template cast<TestType>();
  const Mat<TestType> R = gaussian(37, 5, rng).template cast<TestType>();
  coulomb::nn::Gelu<TestType> plain, keeping;
  Mat<TestType> y_plain, y_kept, dx_plain, dx_kept;
  plain.forward(X, y_plain);
  keeping.forward(X, y_kept, true);
  CHECK(y_kept == y_plain);
  plain.backward(X, R, dx_plain);
  keeping.backward(X, R, dx_kept);
  CHECK(dx_kept == dx_plain);

  // A forward without keeping, on another input: backward follows that input.
  const Mat<TestType> X2 = (gaussian(37, 5, rng) * 2.0).template cast<TestType>();
  Mat<TestType> dx2_plain, dx2_after;
  plain.forward(X2, y_plain);
  plain.backward(X2, R, dx2_plain);
  keeping.forward(X2, y_kept, false);
  keeping.backward(X2, R, dx2_after);
  CHECK(dx2_after == dx2_plain);
  CHECK(dx2_after != dx_plain);
}

TEMPLATE_TEST_CASE("NnDropout_MaskFollowsTheDocumentedDraws", "[nn][layers]", float, double) {
  // Entry k (column-major) is dropped exactly when the k-th uniform01 draw is below p. The
  // shapes cover less than one, one and several of the forward's blocks of draws (256) with a
  // partial last block; std::mt19937 takes the path without a local copy of the generator
  // (its call is not noexcept) and two 32-bit calls per draw.
  const auto check = [](auto r, double p, Index rows, Index cols) {
    auto expected = r;
    coulomb::nn::Dropout<TestType> drop(p);
    Mat<TestType> X = Mat<TestType>::Constant(rows, cols, TestType(2));
    drop.forward(X, true, r);
    const auto keep = static_cast<TestType>(1.0 / (1.0 - p));
    Index mismatches = 0;
    for (Index k = 0; k < X.size(); ++k) {
      const bool dropped = coulomb::uniform01(expected) < p;
      const TestType m = drop.mask().reshaped()(k);
      mismatches += (dropped ? m != TestType(0) : m != keep) ? 1 : 0;
      mismatches += X.reshaped()(k) != TestType(2) * m ? 1 : 0;
    }
    CHECK(mismatches == 0);
    CHECK(r == expected);  // one draw per entry
  };
  for (const double p : {0.1, 0.3, 0.5, 0.9}) {
    for (const auto& [rows, cols] : {std::pair<Index, Index>{53, 7}, {16, 16}, {53, 17}, {1, 3}}) {
      CAPTURE(p, rows, cols);
      check(coulomb::Rng(11), p, rows, cols);
      check(std::mt19937(11), p, rows, cols);
    }
  }
}

TEST_CASE("NnDropout_MaskRateScaleAndBackward", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnDropout_MaskRateScaleAndBackward");
  const double p = 0.3;
  coulomb::nn::Dropout<double> drop(p);
  const Mat<double> X0 = gaussian(100, 100, rng);

  // Evaluation: identity.
  Mat<double> X = X0;
  coulomb::Rng unused(1);
  drop.forward(X, false, unused);
  CHECK(X == X0);
  CHECK_FALSE(drop.active());
  CHECK(unused == coulomb::Rng(1));

  // Training: entries 0 or 1/(1 − p), about a fraction p of zeros (5 standard errors).
  coulomb::Rng r1(7);
  drop.forward(X, true, r1);
  const Mat<double> mask = drop.mask();
  Index zeros = 0;
  for (Index i = 0; i < mask.size(); ++i) {
    const double m = mask.reshaped()(i);
    CHECK((m == 0.0 || m == 1.0 / (1.0 - p)));
    zeros += m == 0.0 ? 1 : 0;
  }
  const double n = static_cast<double>(mask.size());
  CHECK(std::abs(static_cast<double>(zeros) / n - p) < 5.0 * std::sqrt(p * (1 - p) / n));
  CHECK(X == Mat<double>(X0.array() * mask.array()));

  // Same generator state, same mask; backward multiplies by the mask.
  Mat<double> X2 = X0;
  coulomb::Rng r2(7);
  drop.forward(X2, true, r2);
  CHECK(X2 == X);
  Mat<double> dX = X0;
  drop.backward(dX);
  CHECK(dX == Mat<double>(X0.array() * mask.array()));
  Mat<double> bad(3, 3);
  CHECK_THROWS_WITH(drop.backward(bad), Contains("'dX'"));
  CHECK_THROWS_WITH(coulomb::nn::Dropout<double>(1.0), Contains("'rate'"));
  CHECK_THROWS_WITH(coulomb::nn::Dropout<double>(-0.1), Contains("'rate'"));
}

TEST_CASE("NnEmbedding_LookupAndBackward", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnEmbedding_LookupAndBackward");
  coulomb::nn::Embedding<double> table(7, 3);
  table.initialize(rng, 1.0);
  const std::vector<coulomb::TokenId> ids = {3, 0, 3, 6, 1};
  Mat<double> X;
  table.forward(ids, X);
  for (Index r = 0; r < 5; ++r) CHECK(X.row(r) == table.table().row(ids[static_cast<size_t>(r)]));
  const Mat<double> R = gaussian(5, 3, rng);
  table.zero_grad();
  table.backward(ids, R);
  auto loss = [&] {
    Mat<double> out;
    table.forward(ids, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(table.gradient(), fd_gradient(table.table(), loss)) < fd_tolerance);
  CHECK(table.gradient().row(2).isZero(0));  // id 2 is not used

  coulomb::nn::PositionEmbedding<double> pos(6, 3);
  pos.initialize(rng, 1.0);
  Mat<double> Z = Mat<double>::Zero(8, 3);  // 2 sequences of length 4
  pos.forward_add(4, 2, Z);
  CHECK(Z.topRows(4) == pos.table().topRows(4));
  CHECK(Z.bottomRows(4) == pos.table().topRows(4));
  const Mat<double> S = gaussian(8, 3, rng);
  pos.zero_grad();
  pos.backward(4, 2, S);
  auto pos_loss = [&] {
    Mat<double> out = Mat<double>::Zero(8, 3);
    pos.forward_add(4, 2, out);
    return weighted_sum(S, out);
  };
  CHECK(gradient_error(pos.gradient(), fd_gradient(pos.table(), pos_loss)) < fd_tolerance);
  CHECK(pos.gradient().bottomRows(2).isZero(0));

  const std::vector<coulomb::TokenId> bad = {1, 7};
  CHECK_THROWS_WITH(table.forward(bad, X), Contains("'ids'") && Contains("7"));
  const std::vector<coulomb::TokenId> negative = {-1};
  CHECK_THROWS_WITH(table.forward(negative, X), Contains("'ids'"));
  Mat<double> wrong = Mat<double>::Zero(14, 3);
  CHECK_THROWS_WITH(pos.forward_add(7, 2, wrong), Contains("'length'"));
  CHECK_THROWS_WITH(pos.forward_add(4, 2, wrong), Contains("'X'"));
}

TEST_CASE("NnMaskedMeanPool_IgnoresPaddingAndBackward", "[nn][layers]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnMaskedMeanPool_IgnoresPaddingAndBackward");
  const Index L = 5;
  const PaddingMask mask = mask_of(L, {5, 2, 0, 3});
  Mat<double> X = gaussian(4 * L, 3, rng);
  coulomb::nn::MaskedMeanPool<double> pool;
  Mat<double> P;
  pool.forward(X, mask, P);
  REQUIRE(P.rows() == 4);
  CHECK(coulomb_test::rel_diff(P.row(0), X.topRows(5).colwise().mean()) < 1e-15);
  CHECK(coulomb_test::rel_diff(P.row(1), X.middleRows(5, 2).colwise().mean()) < 1e-15);
  CHECK(P.row(2).isZero(0));  // no token: zero
  CHECK(coulomb_test::rel_diff(P.row(3), X.middleRows(15, 3).colwise().mean()) < 1e-15);

  const Mat<double> R = gaussian(4, 3, rng);
  Mat<double> dX;
  pool.backward(R, mask, dX);
  auto loss = [&] {
    coulomb::nn::MaskedMeanPool<double> p2;
    Mat<double> out;
    p2.forward(X, mask, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dX, fd_gradient(X, loss)) < fd_tolerance);
  for (Index b = 0; b < 4; ++b)
    for (Index t = 0; t < L; ++t)
      if (!mask(t, b)) CHECK(dX.row(b * L + t).isZero(0));

  CHECK_THROWS_WITH(pool.forward(X.topRows(19), mask, P), Contains("'X'"));
  CHECK_THROWS_WITH(pool.backward(R.topRows(3), mask, dX), Contains("'dP'"));
}

TEST_CASE("NnSoftmaxCrossEntropy_ValueGradientAndErrors", "[nn][layers][loss]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnSoftmaxCrossEntropy_ValueGradientAndErrors");
  Mat<double> Z = gaussian(4, 3, rng) * 2.0;
  const std::vector<int> y = {0, 2, 1, 2};
  Mat<double> dZ;
  const double loss = coulomb::nn::softmax_cross_entropy(Z, y, dZ);
  double expected = 0.0;
  for (Index b = 0; b < 4; ++b)
    expected -= Z(b, y[static_cast<size_t>(b)]) - std::log(Z.row(b).array().exp().sum());
  CHECK(loss == Approx(expected / 4.0).epsilon(1e-14));
  CHECK(coulomb::nn::softmax_cross_entropy(Z, y) == loss);
  auto f = [&] { return coulomb::nn::softmax_cross_entropy(Z, y); };
  CHECK(gradient_error(dZ, fd_gradient(Z, f)) < fd_tolerance);
  CHECK(dZ.rowwise().sum().cwiseAbs().maxCoeff() < 1e-16);

  // Large logits: finite, and the probabilities are exact.
  Mat<double> big(1, 3);
  big << 1000.0, 999.0, -1000.0;
  Mat<double> probs;
  coulomb::nn::softmax_probabilities(big, probs);
  CHECK(probs(0, 0) == Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-15));
  CHECK(probs.sum() == Approx(1.0).epsilon(1e-15));
  const std::vector<int> y1 = {1};
  CHECK(coulomb::nn::softmax_cross_entropy(big, y1) ==
        Approx(1.0 + std::log1p(std::exp(-1.0))).epsilon(1e-14));

  const std::vector<int> out_of_range = {0, 3, 1, 2};
  CHECK_THROWS_WITH(coulomb::nn::softmax_cross_entropy(Z, out_of_range, dZ), Contains("'labels'"));
  const std::vector<int> short_labels = {0, 1};
  CHECK_THROWS_WITH(coulomb::nn::softmax_cross_entropy(Z, short_labels), Contains("'labels'"));
  Mat<double> nan = Z;
  nan(1, 1) = std::nan("");
  CHECK_THROWS_WITH(coulomb::nn::softmax_cross_entropy(nan, y), Contains("'logits'"));
}

// The loss runs column by column over the column-major logits; each row must still get the
// operations of a row-by-row loop in its order (std::exp per entry, sums left to right), so the
// results are those of this scalar reference bit for bit.
TEMPLATE_TEST_CASE("NnSoftmaxCrossEntropy_ColumnOrderSameBitsAsRowLoop", "[nn][layers][loss]",
                   float, double) {
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("NnSoftmaxCrossEntropy_ColumnOrderSameBitsAsRowLoop");
  const Index B = 37, C = 1031;
  const Mat<S> Z = (gaussian(B, C, rng) * 6.0).template cast<S>();
  std::vector<int> y(static_cast<size_t>(B));
  for (Index b = 0; b < B; ++b)
    y[static_cast<size_t>(b)] = static_cast<int>(coulomb::uniform_index(C, rng));
  Mat<S> ref_grad(B, C), ref_probs(B, C);
  double total = 0.0;
  const S inv_b = S(1) / static_cast<S>(B);
  for (Index b = 0; b < B; ++b) {
    S mx = Z(b, 0);
    for (Index j = 1; j < C; ++j) mx = std::max(mx, Z(b, j));
    S sum = 0;
    for (Index j = 0; j < C; ++j) {
      ref_probs(b, j) = std::exp(Z(b, j) - mx);
      sum = j == 0 ? ref_probs(b, j) : sum + ref_probs(b, j);
    }
    const Index label = y[static_cast<size_t>(b)];
    total += static_cast<double>(std::log(sum) - (Z(b, label) - mx));
    const S scale = inv_b / sum;
    for (Index j = 0; j < C; ++j) {
      ref_grad(b, j) = ref_probs(b, j) * scale;
      ref_probs(b, j) /= sum;
    }
    ref_grad(b, label) -= inv_b;
  }
  const S ref_loss = static_cast<S>(total / static_cast<double>(B));
  Mat<S> dZ, probs;
  CHECK(coulomb::nn::softmax_cross_entropy(Z, y, dZ) == ref_loss);
  CHECK(coulomb::nn::softmax_cross_entropy(Z, y) == ref_loss);
  CHECK(dZ == ref_grad);
  coulomb::nn::softmax_probabilities(Z, probs);
  CHECK(probs == ref_probs);
}

}  // namespace nn_layers_test
