// SPDX-License-Identifier: MIT
// bf16 inference (core/precision.hpp, nn/detail_bf16_products.hpp): the rounding to bf16, the
// VDPBF16PS kernel against a scalar reference of the same bf16-rounded inputs, the classifier's
// bf16 logits against its fp32 ones, the forced fallback to fp32, and the precision's names.
// The kernel tests need a CPU with AVX512-BF16 and say so when they skip.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <coulomb/core/precision.hpp>
#include <coulomb/features/favor.hpp>
#include <coulomb/nn/layers.hpp>
#include <coulomb/nn/text_classifier.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_bf16_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::InferencePrecision;
using coulomb_test::Mat;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

/// The unit roundoff of bf16 (8 bits of significand).
constexpr double bf16_unit = 1.0 / 256.0;

/// The classifier at the size of the sentence benchmarks (d_model 64, 4 heads, d_ff 256,
/// 2 layers, m = 64), with a small vocabulary.
coulomb::nn::TextClassifierConfig benchmark_config() {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = 200;
  c.max_length = 40;
  c.d_model = 64;
  c.num_heads = 4;
  c.d_ff = 256;
  c.num_layers = 2;
  c.num_classes = 2;
  c.num_features = 64;
  c.num_threads = 1;
  return c;
}

/// Sets COULOMB_DISABLE_BF16=1 for its lifetime, then restores the previous value.
struct DisableBf16ByEnvironment {
  DisableBf16ByEnvironment() {
    if (const char* old = std::getenv("COULOMB_DISABLE_BF16")) previous = old;
    setenv("COULOMB_DISABLE_BF16", "1", 1);
  }
  ~DisableBf16ByEnvironment() {
    if (previous)
      setenv("COULOMB_DISABLE_BF16", previous->c_str(), 1);
    else
      unsetenv("COULOMB_DISABLE_BF16");
  }
  std::optional<std::string> previous;
  DisableBf16ByEnvironment(const DisableBf16ByEnvironment&) = delete;
  DisableBf16ByEnvironment& operator=(const DisableBf16ByEnvironment&) = delete;
};

bool skip_without_bf16() {
  if (coulomb::bf16_available()) return false;
  WARN("this CPU has no AVX512-BF16 (or COULOMB_DISABLE_BF16 is set): bf16 kernel not tested");
  return true;
}

}  // namespace

TEST_CASE("Bf16_RoundsToNearestEven", "[nn][bf16]") {
  using coulomb::detail::round_to_bf16;
  CHECK(round_to_bf16(1.0f) == 1.0f);
  // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: ties go to the even significand, 1.
  CHECK(round_to_bf16(1.0f + 0x1p-8f) == 1.0f);
  // 1 + 3·2⁻⁸ lies halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: to 1 + 2⁻⁶ (even).
  CHECK(round_to_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);  // above the tie: up
  CHECK(round_to_bf16(-2.5f) == -2.5f);
  CHECK(round_to_bf16(std::numeric_limits<float>::infinity()) ==
        std::numeric_limits<float>::infinity());
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // The largest float rounds up to infinity, as in IEEE rounding to a narrower format.
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_RoundsToNearestEven");
  const Mat<float> x = coulomb_test::gaussian<float>(1000, 1, rng);
  for (Index i = 0; i < x.size(); ++i) {
    const float r = round_to_bf16(x(i));
    CHECK(std::abs(r - x(i)) <= 0x1p-8f * std::abs(x(i)));  // u = 2⁻⁸: half an ulp
  }
}

TEST_CASE("Bf16_KernelMatchesScalarReference", "[nn][bf16]") {
  if (skip_without_bf16()) return;
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_KernelMatchesScalarReference");
  using coulomb::detail::round_to_bf16;
  // Row counts around the kernel's block of 48 rows and its registers of 16, odd depths, and
  // column counts around its blocks of 8; X read as a block of a taller matrix (stride > n).
  for (const Index n : {1, 15, 16, 47, 48, 49, 130}) {
    for (const Index k : {1, 2, 7, 64}) {
      for (const Index m : {1, 3, 8, 13, 64}) {
        coulomb::nn::Linear<float> layer(k, m);
        layer.initialize(rng);
        layer.bias() = coulomb_test::gaussian<float>(m, 1, rng);
        const Mat<float> tall = coulomb_test::gaussian<float>(n + 5, k, rng);
        const auto X = tall.middleRows(2, n);
        Mat<float> Y;
        layer.forward(X, Y, InferencePrecision::bf16);
        REQUIRE(Y.rows() == n);
        REQUIRE(Y.cols() == m);
        // Reference: the same bf16-rounded inputs, products and sums in double. The kernel's
        // only other roundings are its k fp32 additions: |error| <= (k + 1)·2⁻²⁴·Σ|terms|.
        double worst = 0.0;
        for (Index r = 0; r < n; ++r) {
          for (Index j = 0; j < m; ++j) {
            double sum = layer.bias()(j, 0);
            double magnitude = std::abs(sum);
            for (Index p = 0; p < k; ++p) {
              const double term = static_cast<double>(round_to_bf16(X(r, p))) *
                                  static_cast<double>(round_to_bf16(layer.weight()(p, j)));
              sum += term;
              magnitude += std::abs(term);
            }
            const double bound = static_cast<double>(k + 1) * 0x1p-24 * magnitude;
            worst = std::max(worst, std::abs(Y(r, j) - sum) / bound);
          }
        }
        INFO("n = " << n << ", k = " << k << ", m = " << m);
        CHECK(worst <= 1.0);
      }
    }
  }
}

TEST_CASE("Bf16_Fp32PrecisionIsTheFp32Forward", "[nn][bf16]") {
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_Fp32PrecisionIsTheFp32Forward");
  coulomb::nn::Linear<float> layer(64, 40);
  layer.initialize(rng);
  const Mat<float> X = coulomb_test::gaussian<float>(100, 64, rng);
  Mat<float> Y, Y32;
  layer.forward(X, Y);
  layer.forward(X, Y32, InferencePrecision::fp32);
  CHECK(Y32 == Y);
  // A double layer has no bf16 path: its bf16 forward is the fp32 one, bit for bit.
  coulomb::nn::Linear<double> wide(8, 5);
  wide.initialize(rng);
  const Mat<double> Xd = coulomb_test::gaussian(7, 8, rng);
  Mat<double> Yd, Yd16;
  wide.forward(Xd, Yd);
  wide.forward(Xd, Yd16, InferencePrecision::bf16);
  CHECK(Yd16 == Yd);
}

TEST_CASE("Bf16_ClassifierLogitsAgreeWithFp32", "[nn][bf16][model]") {
  if (skip_without_bf16()) return;
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_ClassifierLogitsAgreeWithFp32");
  Model model(benchmark_config(), 7);
  const coulomb::TokenBatch batch =
      coulomb_nn_test::make_batch({40, 33, 12, 1, 40, 27, 8, 39}, 40, 200, 2, rng);
  Mat<float> fp32, bf16;
  model.forward(batch, fp32);
  const coulomb::PrecisionChoice choice = model.set_inference_precision(InferencePrecision::bf16);
  REQUIRE(choice.used == InferencePrecision::bf16);
  CHECK(choice.notice.empty());
  CHECK(model.inference_precision() == InferencePrecision::bf16);
  model.forward(batch, bf16);
  // Each of the 2 × 3 affine layers on the path rounds its inputs and weights to bf16
  // (relative error u = 2⁻⁸ each), and a sum of d terms with independent errors grows like
  // √d: the logits' relative error (Frobenius norm over the batch) stays below u·√d_model
  // (measured: about u).
  const double rel = (bf16 - fp32).norm() / fp32.norm();
  INFO("relative error of the bf16 logits: " << rel);
  CHECK(rel > 0.0);  // the bf16 path was taken
  CHECK(rel <= bf16_unit * std::sqrt(64.0));
  // Back to fp32: the same bits as before.
  model.set_inference_precision(InferencePrecision::fp32);
  Mat<float> again;
  model.forward(batch, again);
  CHECK(again == fp32);
}

TEST_CASE("Bf16_TrainingForwardStaysFp32", "[nn][bf16][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_TrainingForwardStaysFp32");
  Model model(benchmark_config(), 3);
  const coulomb::TokenBatch batch = coulomb_nn_test::make_batch({20, 9, 14}, 20, 200, 2, rng);
  Mat<float> before, after;
  coulomb::Rng drop1(5), drop2(5);
  model.forward(batch, before, true, drop1);
  model.set_inference_precision(InferencePrecision::bf16);
  model.forward(batch, after, true, drop2);
  CHECK(after == before);
}

TEST_CASE("Bf16_ForcedFallbackIsFp32WithANotice", "[nn][bf16][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("Bf16_ForcedFallbackIsFp32WithANotice");
  Model model(benchmark_config(), 11);
  const coulomb::TokenBatch batch = coulomb_nn_test::make_batch({30, 17}, 30, 200, 2, rng);
  Mat<float> fp32, fallback;
  model.forward(batch, fp32);
  SECTION("by the argument") {
    const coulomb::PrecisionChoice choice =
        model.set_inference_precision(InferencePrecision::bf16, false);
    CHECK(choice.used == InferencePrecision::fp32);
    CHECK_THAT(choice.notice, Contains("using fp32"));
    CHECK(choice.notice.find('\n') == std::string::npos);  // one line
  }
  SECTION("by COULOMB_DISABLE_BF16") {
    const DisableBf16ByEnvironment disabled;
    CHECK_FALSE(coulomb::bf16_available());
    const coulomb::PrecisionChoice choice = model.set_inference_precision(InferencePrecision::bf16);
    CHECK(choice.used == InferencePrecision::fp32);
    CHECK_THAT(choice.notice, Contains("using fp32"));
    CHECK(choice.notice.find('\n') == std::string::npos);
  }
  CHECK(model.inference_precision() == InferencePrecision::fp32);
  model.forward(batch, fallback);
  CHECK(fallback == fp32);
}

TEST_CASE("Bf16_DoubleModelFallsBack", "[nn][bf16][model]") {
  coulomb::nn::TextClassifierConfig c = benchmark_config();
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_features = 6;
  coulomb::nn::TextClassifier<coulomb::FavorPlus<double>> model(c, 1);
  const coulomb::PrecisionChoice choice = model.set_inference_precision(InferencePrecision::bf16);
  CHECK(choice.used == InferencePrecision::fp32);
  CHECK_THAT(choice.notice, Contains("float model"));
}

TEST_CASE("Bf16_PrecisionNames", "[nn][bf16]") {
  CHECK(coulomb::parse_inference_precision("fp32") == InferencePrecision::fp32);
  CHECK(coulomb::parse_inference_precision("bf16") == InferencePrecision::bf16);
  CHECK(std::string(coulomb::to_string(InferencePrecision::bf16)) == "bf16");
  CHECK(std::string(coulomb::to_string(InferencePrecision::fp32)) == "fp32");
  CHECK_THROWS_AS(coulomb::parse_inference_precision("fp16"), coulomb::invalid_argument);
  CHECK_THROWS_WITH(coulomb::parse_inference_precision("BF16"),
                    Contains("'BF16'") && Contains("expected fp32 or bf16"));
}

}  // namespace nn_bf16_test
