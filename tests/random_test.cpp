// SPDX-License-Identifier: MIT
// coulomb::Rng and the sampling helpers of core/random.hpp; reproducibility of the particles
// Ω of every feature map.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace random_test {

namespace {

using coulomb_test::Index;
using coulomb_test::Mat;
using coulomb_test::Vec;
using namespace coulomb_test::cases;

// ---------------------------------------------------------------------------------------------
// Reference generators, written from the published descriptions (Steele, Lea & Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014, for SplitMix64; Blackman &
// Vigna, "Scrambled linear pseudorandom number generators", ACM TOMS 2021, for xoshiro256++),
// independently of core/random.hpp.
// ---------------------------------------------------------------------------------------------

/// Rotation of a 64-bit word left by k bits, 0 < k < 64.
constexpr std::uint64_t rotate_left(std::uint64_t word, unsigned k) {
  return (word << k) | (word >> (64U - k));
}

/// SplitMix64: a Weyl sequence with increment 0x9e3779b97f4a7c15 (the golden gamma), each
/// state then passed through the "mix64variant13" finalizer.
struct ReferenceSplitMix64 {
  std::uint64_t weyl;

  std::uint64_t next() {
    weyl += 0x9e3779b97f4a7c15ULL;
    std::uint64_t v = weyl;
    v ^= v >> 30U;
    v *= 0xbf58476d1ce4e5b9ULL;
    v ^= v >> 27U;
    v *= 0x94d049bb133111ebULL;
    v ^= v >> 31U;
    return v;
  }
};

/// xoshiro256++ on state words (a, b, c, e): output rotl(a + e, 23) + a; the linear engine
/// then does b' = b ^ c ^ a, a' = a ^ e ^ b, c' = c ^ a ^ (b << 17), e' = rotl(e ^ b, 45).
struct ReferenceXoshiro256pp {
  std::uint64_t a, b, c, e;

  std::uint64_t next() {
    const std::uint64_t out = rotate_left(a + e, 23) + a;
    const std::uint64_t new_c = c ^ a ^ (b << 17U);
    const std::uint64_t new_e = rotate_left(e ^ b, 45);
    const std::uint64_t new_b = b ^ (c ^ a);
    const std::uint64_t new_a = a ^ (e ^ b);
    a = new_a;
    b = new_b;
    c = new_c;
    e = new_e;
    return out;
  }
};

/// The seeding documented by coulomb::Rng: the four state words are the first four outputs
/// of SplitMix64 started at the seed.
ReferenceXoshiro256pp reference_seeded(std::uint64_t seed) {
  ReferenceSplitMix64 sm{seed};
  const std::uint64_t w0 = sm.next();
  const std::uint64_t w1 = sm.next();
  const std::uint64_t w2 = sm.next();
  const std::uint64_t w3 = sm.next();
  return ReferenceXoshiro256pp{w0, w1, w2, w3};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Rng
// ---------------------------------------------------------------------------------------------

static_assert(std::uniform_random_bit_generator<coulomb::Rng>);
static_assert(coulomb::Rng::min() == 0 && coulomb::Rng::max() == ~std::uint64_t{0});

TEST_CASE("Rng_ReferenceImplementationMatchesPublishedValues", "[random]") {
  // Validates the reference above against third-party published outputs before it is used
  // to check coulomb::Rng. xoshiro256++ from state (0, 0, 0, 1): 0x800000, 0x800011,
  // 0x2200000800011 (hand-checkable: the first output is rotl(1, 23)).
  ReferenceXoshiro256pp x{0, 0, 0, 1};
  CHECK(x.next() == 0x0000000000800000ULL);
  CHECK(x.next() == 0x0000000000800011ULL);
  CHECK(x.next() == 0x0002200000800011ULL);
  // SplitMix64-seeded xoshiro256++ with seed 12345 (the README example of Xoshiro-cpp, which
  // seeds the same way).
  ReferenceXoshiro256pp y = reference_seeded(12345);
  CHECK(y.next() == 10201931350592234856ULL);
  CHECK(y.next() == 3780764549115216544ULL);
  CHECK(y.next() == 1570246627180645737ULL);
}

TEST_CASE("Rng_ExactBitsMatchReference", "[random][regression]") {
  // Regression on the exact bits: the first outputs of Rng(42) (and of a few other seeds)
  // equal the independent reference implementation.
  for (const std::uint64_t seed : {std::uint64_t{42}, std::uint64_t{0}, std::uint64_t{12345},
                                   ~std::uint64_t{0}, coulomb_test::base_seed()}) {
    INFO("seed " << seed);
    coulomb::Rng rng(seed);
    ReferenceXoshiro256pp ref = reference_seeded(seed);
    for (int k = 0; k < 3; ++k) REQUIRE(rng() == ref.next());
  }
  // The default-constructed generator is documented as seeded with 0x9E3779B97F4A7C15.
  coulomb::Rng default_rng;
  ReferenceXoshiro256pp ref_default = reference_seeded(0x9E3779B97F4A7C15ULL);
  for (int k = 0; k < 3; ++k) CHECK(default_rng() == ref_default.next());
  // Published values for seed 12345 directly on coulomb::Rng.
  coulomb::Rng r12345(12345);
  CHECK(r12345() == 10201931350592234856ULL);
  CHECK(r12345() == 3780764549115216544ULL);
  CHECK(r12345() == 1570246627180645737ULL);
}

TEST_CASE("Rng_DeterministicForSeed", "[random]") {
  const std::uint64_t seed = coulomb_test::base_seed();
  coulomb::Rng a(seed);
  coulomb::Rng b(seed);
  CHECK(a == b);
  int equal = 0;
  for (int k = 0; k < 1000; ++k) equal += (a() == b()) ? 1 : 0;
  CHECK(equal == 1000);
  CHECK(a == b);

  // reseed restarts the stream.
  coulomb::Rng c(seed + 7);
  c.reseed(seed);
  coulomb::Rng d(seed);
  int equal_after_reseed = 0;
  for (int k = 0; k < 100; ++k) equal_after_reseed += (c() == d()) ? 1 : 0;
  CHECK(equal_after_reseed == 100);
}

TEST_CASE("Rng_StateSavedAndRestoredContinuesTheStream", "[random]") {
  // A generator restored from a saved state continues the stream of the saved one exactly,
  // also after draws of every kind (integers, uniforms, Gaussians, splits), as a checkpoint
  // needs.
  coulomb::Rng a(coulomb_test::base_seed());
  for (int k = 0; k < 37; ++k) (void)a();
  (void)coulomb::standard_normal(a);
  (void)a.split(3);
  const std::array<std::uint64_t, 4> saved = a.state();
  std::vector<std::uint64_t> expected;
  for (int k = 0; k < 200; ++k) expected.push_back(a());
  const double expected_normal = coulomb::standard_normal(a);

  coulomb::Rng b(12345);  // any other generator
  CHECK_FALSE(b.state() == saved);
  b.set_state(saved);
  std::vector<std::uint64_t> got;
  for (int k = 0; k < 200; ++k) got.push_back(b());
  CHECK(got == expected);
  CHECK(coulomb::standard_normal(b) == expected_normal);
  CHECK(a == b);

  // The all-zero state is a fixed point of xoshiro256++: refused, the generator unchanged.
  const auto before = b.state();
  CHECK_THROWS_AS(b.set_state({0, 0, 0, 0}), coulomb::invalid_argument);
  CHECK(b.state() == before);
}

TEST_CASE("Rng_DifferentSeedsGiveDifferentStreams", "[random]") {
  const std::uint64_t seed = coulomb_test::base_seed();
  for (const std::uint64_t other : {seed + 1, seed ^ (std::uint64_t{1} << 63), ~seed}) {
    coulomb::Rng a(seed);
    coulomb::Rng b(other);
    CHECK_FALSE(a == b);
    int equal = 0;
    for (int k = 0; k < 1000; ++k) equal += (a() == b()) ? 1 : 0;
    CHECK(equal == 0);
  }
}

TEST_CASE("Rng_SplitStreamsDiffer", "[random]") {
  const std::uint64_t seed = coulomb_test::base_seed();
  coulomb::Rng parent(seed);
  coulomb::Rng parent_copy(seed);
  coulomb::Rng s0 = parent.split(0);
  coulomb::Rng s0_again = parent_copy.split(0);
  // Deterministic: the same parent state and stream index give the same child.
  CHECK(s0 == s0_again);
  // split advances the parent, so a second split with the same index is a new stream.
  coulomb::Rng s0_later = parent.split(0);
  CHECK_FALSE(s0 == s0_later);

  coulomb::Rng fresh(seed);
  coulomb::Rng t0 = coulomb::Rng(fresh).split(0);
  coulomb::Rng t1 = coulomb::Rng(fresh).split(1);
  coulomb::Rng t2 = coulomb::Rng(fresh).split(2);
  std::vector<coulomb::Rng> streams{fresh, t0, t1, t2, s0_later};
  std::vector<std::vector<std::uint64_t>> outputs;
  for (auto& g : streams) {
    std::vector<std::uint64_t> out(256);
    for (auto& o : out) o = g();
    outputs.push_back(out);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      int equal = 0;
      for (std::size_t k = 0; k < 256; ++k) equal += (outputs[i][k] == outputs[j][k]) ? 1 : 0;
      INFO("streams " << i << " and " << j);
      CHECK(equal == 0);
    }
  }
}

TEST_CASE("Rng_WorksWithStandardDistributions", "[random]") {
  coulomb::Rng rng = coulomb_test::test_rng("Rng_WorksWithStandardDistributions");
  std::uniform_int_distribution<int> die(1, 6);
  std::array<int, 7> counts{};
  bool in_range = true;
  for (int k = 0; k < 6000; ++k) {
    const int v = die(rng);
    in_range = in_range && v >= 1 && v <= 6;
    if (v >= 1 && v <= 6) ++counts[static_cast<std::size_t>(v)];
  }
  CHECK(in_range);
  // Each face ~ 1000 ± 29; 6 standard deviations.
  for (int f = 1; f <= 6; ++f) CHECK(std::abs(counts[static_cast<std::size_t>(f)] - 1000) < 175);
}

// ---------------------------------------------------------------------------------------------
// Sampling helpers
// ---------------------------------------------------------------------------------------------

TEST_CASE("FillStandardNormal_MomentsMatchStandardNormal", "[random]") {
  coulomb::Rng rng = coulomb_test::test_rng("FillStandardNormal_MomentsMatchStandardNormal");
  const Index n = 200001;  // odd: the last entry uses half a Box-Muller pair
  Vec<double> z(n);
  coulomb::fill_standard_normal(z, rng);
  REQUIRE(z.allFinite());
  const double N = static_cast<double>(n);
  const double mean = z.mean();
  const double var = (z.array() - mean).square().sum() / (N - 1.0);
  const double m3 = (z.array() - mean).cube().sum() / N;
  const double m4 = (z.array() - mean).square().square().sum() / N;
  // Standard errors: mean 1/√N, variance √(2/N), third moment √(15/N), fourth √(96/N);
  // 6 standard errors.
  CHECK(std::abs(mean) < 6.0 / std::sqrt(N));
  CHECK(std::abs(var - 1.0) < 6.0 * std::sqrt(2.0 / N));
  CHECK(std::abs(m3) < 6.0 * std::sqrt(15.0 / N));
  CHECK(std::abs(m4 - 3.0) < 6.0 * std::sqrt(96.0 / N));
  // Tail: P(|z| > 3) = 0.0026998, binomial standard error √(p(1−p)/N).
  const double tail = static_cast<double>((z.array().abs() > 3.0).count()) / N;
  CHECK(std::abs(tail - 0.0026998) < 6.0 * std::sqrt(0.0027 / N));
  // Consecutive draws are uncorrelated (Box-Muller pairs are independent).
  const double lag1 = ((z.head(n - 1).array() - mean) * (z.tail(n - 1).array() - mean)).mean();
  CHECK(std::abs(lag1) < 6.0 / std::sqrt(N));
}

TEST_CASE("FillStandardNormal_StorageOrderAndPrecision", "[random]") {
  const std::uint64_t seed = coulomb_test::fnv1a("FillStandardNormal_StorageOrderAndPrecision") ^
                             coulomb_test::base_seed();
  // A 7x3 matrix is filled in storage (column-major) order: the same values as a 21-vector.
  coulomb::Rng r1(seed);
  coulomb::Rng r2(seed);
  coulomb::Rng r3(seed);
  Mat<double> m(7, 3);
  Vec<double> v(21);
  Mat<float> mf(7, 3);
  coulomb::fill_standard_normal(m, r1);
  coulomb::fill_standard_normal(v, r2);
  coulomb::fill_standard_normal(mf, r3);
  CHECK(m.reshaped() == v);
  // Draws are made in double and rounded to float.
  CHECK(mf == m.cast<float>());
  // Both generators consumed the same number of outputs.
  CHECK(r1 == r2);
  CHECK(r1 == r3);
  // standard_normal gives the first draw of the same stream.
  coulomb::Rng r4(seed);
  CHECK(coulomb::standard_normal(r4) == m(0, 0));
}

TEST_CASE("Uniform01_RangeAndMean", "[random]") {
  coulomb::Rng rng = coulomb_test::test_rng("Uniform01_RangeAndMean");
  const int n = 200000;
  double sum = 0.0;
  double sum_open = 0.0;
  double lo = 1.0;
  double hi = 0.0;
  std::array<int, 10> bins{};
  double lo_open = 1.0;
  double hi_open = 0.0;
  for (int k = 0; k < n; ++k) {
    const double u = coulomb::uniform01(rng);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    ++bins[std::min<std::size_t>(static_cast<std::size_t>(u * 10.0), 9)];
    const double v = coulomb::uniform_open0(rng);
    sum_open += v;
    lo_open = std::min(lo_open, v);
    hi_open = std::max(hi_open, v);
  }
  // uniform01 is in [0, 1), uniform_open0 in (0, 1].
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  CHECK(lo_open > 0.0);
  CHECK(hi_open <= 1.0);
  const double N = static_cast<double>(n);
  // Mean 1/2 with standard error √(1/12/N).
  const double se = std::sqrt(1.0 / 12.0 / N);
  CHECK(std::abs(sum / N - 0.5) < 6.0 * se);
  CHECK(std::abs(sum_open / N - 0.5) < 6.0 * se);
  CHECK(lo < 1e-3);
  CHECK(hi > 1.0 - 1e-3);
  // Chi-square with 9 degrees of freedom over 10 equal bins; P(chi2_9 > 40) ≈ 7e-6.
  double chi2 = 0.0;
  for (const int b : bins) chi2 += (b - N / 10.0) * (b - N / 10.0) / (N / 10.0);
  CHECK(chi2 < 40.0);

  // A 32-bit engine is combined into 64 bits and gives a valid uniform too.
  std::mt19937 mt(static_cast<std::uint32_t>(coulomb_test::base_seed()));
  double mt_sum = 0.0;
  bool mt_in_range = true;
  for (int k = 0; k < 20000; ++k) {
    const double u = coulomb::uniform01(mt);
    mt_in_range = mt_in_range && u >= 0.0 && u < 1.0;
    mt_sum += u;
  }
  CHECK(mt_in_range);
  CHECK(std::abs(mt_sum / 20000.0 - 0.5) < 6.0 * std::sqrt(1.0 / 12.0 / 20000.0));
}

TEST_CASE("UniformIndex_BoundsAndUniformity", "[random]") {
  coulomb::Rng rng = coulomb_test::test_rng("UniformIndex_BoundsAndUniformity");
  // n = 1 always gives 0.
  bool all_zero = true;
  for (int k = 0; k < 100; ++k) all_zero = all_zero && coulomb::uniform_index(1, rng) == 0;
  CHECK(all_zero);
  // Bounds, including n that do not divide 2^64 and n above 2^63.
  const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
  for (const std::uint64_t n : {std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{7},
                                std::uint64_t{1000003}, big, ~std::uint64_t{0}}) {
    INFO("n = " << n);
    std::uint64_t largest = 0;
    for (int k = 0; k < 2000; ++k) largest = std::max(largest, coulomb::uniform_index(n, rng));
    CHECK(largest < n);
    // The range is used: the largest of 2000 draws is in the top 1% (P(fail) = 0.99^2000).
    if (n >= 1000) CHECK(static_cast<double>(largest) > 0.99 * static_cast<double>(n));
  }
  // Rough uniformity: chi-square over n = 10 and n = 3; P(chi2_9 > 40), P(chi2_2 > 25) < 1e-5.
  const int draws = 100000;
  std::array<int, 10> c10{};
  std::array<int, 3> c3{};
  for (int k = 0; k < draws; ++k) {
    ++c10[coulomb::uniform_index(10, rng)];
    ++c3[coulomb::uniform_index(3, rng)];
  }
  double chi10 = 0.0;
  for (const int c : c10) chi10 += (c - draws / 10.0) * (c - draws / 10.0) / (draws / 10.0);
  double chi3 = 0.0;
  for (const int c : c3) chi3 += (c - draws / 3.0) * (c - draws / 3.0) / (draws / 3.0);
  CHECK(chi10 < 40.0);
  CHECK(chi3 < 25.0);
  // For n = 3·2^62 a modulo-biased draw (r % n without rejection) lands in [0, 2^62) with
  // probability 1/2 instead of 1/3.
  const std::uint64_t three_quarters = 3 * (std::uint64_t{1} << 62);
  int low = 0;
  for (int k = 0; k < 30000; ++k)
    low += coulomb::uniform_index(three_quarters, rng) < (std::uint64_t{1} << 62) ? 1 : 0;
  CHECK(std::abs(low / 30000.0 - 1.0 / 3.0) < 6.0 * std::sqrt(2.0 / 9.0 / 30000.0));
}

// ---------------------------------------------------------------------------------------------
// Reproducible particles
// ---------------------------------------------------------------------------------------------

namespace {

template <typename Map>
bool same_phases(const Map& a, const Map& b) {
  if constexpr (coulomb::feature_map_traits<Map>::has_phases) {
    return a.phases() == b.phases();
  } else {
    return true;
  }
}

}  // namespace

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_SameSeedSameParticles", "[random][features]",
                           COULOMB_TEST_EVERY_MAP, (float, double)) {
  using Map = typename TestType::Map;
  const std::uint64_t seed = coulomb_test::base_seed() ^ 0x51ED;
  const Index d = 5;
  const Index m = 12;  // two full blocks of d rows and a partial one
  for (const coulomb::Draw draw :
       {coulomb::Draw::iid, coulomb::Draw::orthogonal_chi, coulomb::Draw::orthogonal_sqrt_d}) {
    INFO("draw " << coulomb::to_string(draw));
    coulomb::Rng r1(seed);
    coulomb::Rng r2(seed);
    Map a = TestType::make(d, m, r1, draw);
    const Map b = TestType::make(d, m, r2, draw);
    REQUIRE(a.omega().rows() == m);
    REQUIRE(a.omega().cols() == d);
    CHECK(a.omega().allFinite());
    // Bitwise identical particles (and phases) for the same seed.
    CHECK(a.omega() == b.omega());
    CHECK(same_phases(a, b));
    CHECK(a.draw_policy() == draw);

    // redraw changes the particles (and the phases)...
    a.redraw(r1);
    CHECK((a.omega().array() != b.omega().array()).all());
    if constexpr (coulomb::feature_map_traits<Map>::has_phases) {
      CHECK((a.phases().array() != b.phases().array()).all());
    }
    CHECK(a.num_particles() == m);
    CHECK(a.input_dim() == d);
    // ...and a redraw from a generator re-seeded with the construction seed reproduces them.
    coulomb::Rng r3(seed);
    a.redraw(r3);
    CHECK(a.omega() == b.omega());
    CHECK(same_phases(a, b));
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_FloatAndDoubleShareParticles", "[random][features]",
                           COULOMB_TEST_EVERY_MAP, (float)) {
  // Particles are drawn in double and rounded: a float map and a double map built from the
  // same seed hold the same Ω up to the rounding of each entry to float.
  using FloatMap = typename TestType::Map;
  using DoubleCase = typename TestType::template rebind<double>;
  using DoubleMap = typename DoubleCase::Map;
  static_assert(std::is_same_v<typename DoubleMap::Scalar, double>);
  const std::uint64_t seed = coulomb_test::base_seed() ^ 0xF10A7;
  for (const coulomb::Draw draw :
       {coulomb::Draw::iid, coulomb::Draw::orthogonal_chi, coulomb::Draw::orthogonal_sqrt_d}) {
    INFO("draw " << coulomb::to_string(draw));
    coulomb::Rng rf(seed);
    coulomb::Rng rd(seed);
    const FloatMap f = TestType::make(6, 20, rf, draw);
    const DoubleMap d = DoubleCase::make(6, 20, rd, draw);
    // Rounded entry by entry: exactly the double particles cast to float...
    CHECK(f.omega() == d.omega().template cast<float>());
    // ...which is within half an ulp of float.
    const double err = (f.omega().template cast<double>() - d.omega()).cwiseAbs().maxCoeff();
    CHECK(err <= 0.5 * coulomb_test::tol<float>::eps * d.omega().cwiseAbs().maxCoeff());
    if constexpr (coulomb::feature_map_traits<FloatMap>::has_phases) {
      CHECK(f.phases() == d.phases().template cast<float>());
    }
    // Both consumed the generator identically.
    CHECK(rf == rd);
  }
}

TEST_CASE("Shuffle_IsFisherYatesFromTheBackAndUniform", "[random]") {
  // The exact stream: entry i − 1 swaps with uniform_index(i) for i = n … 2 (the batch orders,
  // folds and minibatch orders of every saved result depend on it).
  coulomb::Rng a(77), b(77);
  std::vector<int> v(10), reference(10);
  std::iota(v.begin(), v.end(), 0);
  std::iota(reference.begin(), reference.end(), 0);
  coulomb::shuffle(std::span<int>(v), a);
  for (std::size_t i = reference.size(); i > 1; --i)
    std::swap(reference[i - 1], reference[coulomb::uniform_index(i, b)]);
  CHECK(v == reference);
  CHECK(a() == b());
  // Every permutation of three entries about equally often: 60,000 draws, each count within
  // 5 standard deviations of 10,000.
  std::map<std::vector<int>, int> counts;
  for (int t = 0; t < 60000; ++t) {
    std::vector<int> w{0, 1, 2};
    coulomb::shuffle(std::span<int>(w), a);
    ++counts[w];
  }
  REQUIRE(counts.size() == 6);
  for (const auto& [perm, c] : counts) CHECK(std::abs(c - 10000) < 5 * std::sqrt(60000.0 * 5 / 36));
}

TEST_CASE("PartialShuffle_DrawsASampleWithoutReplacement", "[random]") {
  coulomb::Rng a(5), b(5);
  std::vector<int> v(20), reference(20);
  std::iota(v.begin(), v.end(), 0);
  std::iota(reference.begin(), reference.end(), 0);
  coulomb::partial_shuffle(std::span<int>(v), 7, a);
  for (std::size_t j = 0; j < 7; ++j)
    std::swap(reference[j], reference[j + coulomb::uniform_index(reference.size() - j, b)]);
  CHECK(v == reference);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 20; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);  // a permutation
  // Each entry lands in the sample with probability k/n = 7/20: 20,000 draws.
  std::vector<int> hits(20, 0);
  for (int t = 0; t < 20000; ++t) {
    std::vector<int> w(20);
    std::iota(w.begin(), w.end(), 0);
    coulomb::partial_shuffle(std::span<int>(w), 7, a);
    for (std::size_t j = 0; j < 7; ++j) ++hits[static_cast<std::size_t>(w[j])];
  }
  const double mean = 20000.0 * 7 / 20, sd = std::sqrt(20000.0 * 0.35 * 0.65);
  for (int h : hits) CHECK(std::abs(h - mean) < 5 * sd);
}

}  // namespace random_test
