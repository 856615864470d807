// SPDX-License-Identifier: MIT
// Argument validation of the feature maps: every bad input throws coulomb::invalid_argument
// (a coulomb::error, a std::exception) whose message names the function and the argument;
// a failed set_omega leaves the map unchanged; an empty batch is valid.
#include <catch2/catch.hpp>

#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace features_input_test {

namespace {

using coulomb::Draw;
using coulomb::Stabilizer;
using coulomb_test::Index;
using coulomb_test::Mat;
using coulomb_test::Vec;
using namespace coulomb_test::cases;

/// Runs `f` and checks that it throws coulomb::invalid_argument — which is also caught as
/// coulomb::error and as std::exception — with a message that starts with `where` and names
/// the argument as 'arg'. Not a template, so that the Catch machinery is compiled once.
void check_invalid_argument(const std::function<void()>& f, const std::string& where,
                            const std::string& arg, const char* expr, int line) {
  INFO("line " << line << ": " << expr);
  const std::string quoted = "'" + arg + "'";
  bool threw_invalid_argument = false;
  try {
    f();
  } catch (const coulomb::invalid_argument& e) {
    threw_invalid_argument = true;
    const std::string message = e.what();
    INFO("message: " << message);
    CHECK(message.rfind(where, 0) == 0);
    CHECK(message.find(quoted) != std::string::npos);
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a std::exception that is not coulomb::invalid_argument: " << e.what());
  } catch (...) {
    FAIL_CHECK("threw something that is not a std::exception");
  }
  CHECK(threw_invalid_argument);
  // The same call is caught through the base classes.
  bool caught_as_error = false;
  try {
    f();
  } catch (const coulomb::error&) {
    caught_as_error = true;
  } catch (...) {
  }
  CHECK(caught_as_error);
  bool caught_as_std = false;
  try {
    f();
  } catch (const std::exception&) {
    caught_as_std = true;
  }
  CHECK(caught_as_std);
}

#define CHECK_INVALID_ARGUMENT(expr, where, arg) \
  check_invalid_argument([&] { (void)(expr); }, (where), (arg), #expr, __LINE__)

static_assert(std::is_base_of_v<coulomb::error, coulomb::invalid_argument>);
static_assert(std::is_base_of_v<coulomb::error, coulomb::numerical_error>);
static_assert(std::is_base_of_v<coulomb::error, coulomb::io_error>);
static_assert(std::is_base_of_v<std::runtime_error, coulomb::error>);

constexpr Index kD = 4;
constexpr Index kM = 6;
constexpr Index kN = 3;

template <typename S>
constexpr S kNaN = std::numeric_limits<S>::quiet_NaN();
template <typename S>
constexpr S kInf = std::numeric_limits<S>::infinity();

/// A map of the case's type built from given particles (RFF also needs phases).
template <typename Map>
Map map_from_omega(const Mat<typename Map::Scalar>& omega, coulomb::Rng& rng) {
  if constexpr (std::is_constructible_v<Map, const Mat<typename Map::Scalar>&, coulomb::Rng&>) {
    return Map(omega, rng);
  } else {
    return Map(omega);
  }
}

template <typename Map>
std::string where(const char* function) {
  return std::string("coulomb::") + Map::name() + "::" + function;
}

}  // namespace

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_RejectsBadArguments", "[features][input]",
                           COULOMB_TEST_EVERY_MAP, (float, double)) {
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("BadArguments/") + Map::name());
  Map map = TestType::make(kD, kM, rng, Draw::orthogonal_chi);
  const Index D = map.output_dim();
  const Mat<S> X = coulomb_test::gaussian<S>(kN, kD, rng);
  Mat<S> phi;
  Vec<S> log_scale;

  SECTION("a failed call modifies none of its output arguments") {
    const Mat<S> bad = Mat<S>::Ones(kN, kD + 1);
    Mat<S> out = Mat<S>::Constant(2, 3, S(7));
    Vec<S> shifts = Vec<S>::Constant(4, S(7));
    CHECK_THROWS_AS(map.map(bad, out, Stabilizer::per_row, shifts), coulomb::invalid_argument);
    CHECK(out == Mat<S>::Constant(2, 3, S(7)));
    CHECK(shifts == Vec<S>::Constant(4, S(7)));
    map.map(X, phi, Stabilizer::none);
    Mat<S> dX = Mat<S>::Constant(2, 3, S(7));
    Mat<S> dOmega = Mat<S>::Constant(3, 2, S(7));
    Mat<S> bad_dphi = Mat<S>::Ones(kN, D);
    bad_dphi(0, 0) = kNaN<S>;
    CHECK_THROWS_AS(map.backward(X, phi, bad_dphi, dX, dOmega), coulomb::invalid_argument);
    CHECK_THROWS_AS(map.backward_input(X, phi, bad_dphi, dX), coulomb::invalid_argument);
    CHECK_THROWS_AS(map.backward_params(X, phi, bad_dphi, dOmega), coulomb::invalid_argument);
    CHECK(dX == Mat<S>::Constant(2, 3, S(7)));
    CHECK(dOmega == Mat<S>::Constant(3, 2, S(7)));
  }

  SECTION("map: X with the wrong number of columns") {
    for (const Index cols : {Index{0}, kD - 1, kD + 1}) {
      INFO("columns " << cols);
      const Mat<S> bad = Mat<S>::Ones(kN, cols);
      CHECK_INVALID_ARGUMENT(map.map(bad, phi, Stabilizer::none), where<Map>("map"), "X");
      CHECK_INVALID_ARGUMENT(map.map(bad, phi, Stabilizer::per_row, log_scale), where<Map>("map"),
                             "X");
      CHECK_INVALID_ARGUMENT(map.map(bad), where<Map>("map"), "X");
      CHECK_THROWS_AS(map.kernel_estimate(X, bad), coulomb::invalid_argument);
      CHECK_THROWS_AS(map.kernel_estimate(bad, X), coulomb::invalid_argument);
    }
  }

  SECTION("map: non-finite entries in X") {
    for (const S bad_value : {kNaN<S>, kInf<S>, -kInf<S>}) {
      INFO("value " << bad_value);
      Mat<S> bad = X;
      bad(1, 2) = bad_value;
      CHECK_INVALID_ARGUMENT(map.map(bad), where<Map>("map"), "X");
      CHECK_INVALID_ARGUMENT(map.map(bad, phi, Stabilizer::global, log_scale), where<Map>("map"),
                             "X");
      // The message locates the entry.
      CHECK_THROWS_WITH(map.map(bad), Catch::Matchers::Contains("(1, 2)"));
      CHECK_THROWS_AS(map.kernel_estimate(bad, X), coulomb::invalid_argument);
    }
  }

  SECTION("backward: wrong shapes and non-finite entries") {
    map.map(X, phi, Stabilizer::none);
    const Mat<S> dphi = Mat<S>::Ones(kN, D);
    Mat<S> dX;
    Mat<S> dOmega;
    const Mat<S> wrong_X = Mat<S>::Ones(kN, kD + 1);
    CHECK_INVALID_ARGUMENT(map.backward_input(wrong_X, phi, dphi, dX), where<Map>("backward_input"),
                           "X");
    CHECK_INVALID_ARGUMENT(map.backward_params(wrong_X, phi, dphi, dOmega),
                           where<Map>("backward_params"), "X");
    CHECK_INVALID_ARGUMENT(map.backward(wrong_X, phi, dphi, dX, dOmega), where<Map>("backward"),
                           "X");
    for (const auto& shape :
         {std::pair<Index, Index>{kN + 1, D}, {kN - 1, D}, {kN, D - 1}, {kN, D + 1}, {0, 0}}) {
      INFO("shape " << shape.first << "x" << shape.second);
      const Mat<S> wrong = Mat<S>::Ones(shape.first, shape.second);
      CHECK_INVALID_ARGUMENT(map.backward_input(X, wrong, dphi, dX), where<Map>("backward_input"),
                             "Phi");
      CHECK_INVALID_ARGUMENT(map.backward_params(X, wrong, dphi, dOmega),
                             where<Map>("backward_params"), "Phi");
      CHECK_INVALID_ARGUMENT(map.backward(X, wrong, dphi, dX, dOmega), where<Map>("backward"),
                             "Phi");
      CHECK_INVALID_ARGUMENT(map.backward_input(X, phi, wrong, dX), where<Map>("backward_input"),
                             "dPhi");
      CHECK_INVALID_ARGUMENT(map.backward_params(X, phi, wrong, dOmega),
                             where<Map>("backward_params"), "dPhi");
      CHECK_INVALID_ARGUMENT(map.backward(X, phi, wrong, dX, dOmega), where<Map>("backward"),
                             "dPhi");
    }
    for (const S bad_value : {kNaN<S>, kInf<S>, -kInf<S>}) {
      INFO("value " << bad_value);
      Mat<S> bad_dphi = dphi;
      bad_dphi(kN - 1, D - 1) = bad_value;
      CHECK_INVALID_ARGUMENT(map.backward_input(X, phi, bad_dphi, dX), where<Map>("backward_input"),
                             "dPhi");
      CHECK_INVALID_ARGUMENT(map.backward_params(X, phi, bad_dphi, dOmega),
                             where<Map>("backward_params"), "dPhi");
      CHECK_INVALID_ARGUMENT(map.backward(X, phi, bad_dphi, dX, dOmega), where<Map>("backward"),
                             "dPhi");
      Mat<S> bad_X = X;
      bad_X(0, 0) = bad_value;
      CHECK_INVALID_ARGUMENT(map.backward_input(bad_X, phi, dphi, dX), where<Map>("backward_input"),
                             "X");
      CHECK_INVALID_ARGUMENT(map.backward_params(bad_X, phi, dphi, dOmega),
                             where<Map>("backward_params"), "X");
    }
  }

  SECTION("constructor: sizes") {
    CHECK_INVALID_ARGUMENT(TestType::make(0, kM, rng), where<Map>("constructor"), "input_dim");
    CHECK_INVALID_ARGUMENT(TestType::make(-3, kM, rng), where<Map>("constructor"), "input_dim");
    CHECK_INVALID_ARGUMENT(TestType::make(kD, 0, rng), where<Map>("constructor"), "num_particles");
    CHECK_INVALID_ARGUMENT(TestType::make(kD, -1, rng), where<Map>("constructor"), "num_particles");
  }

  SECTION("constructor: given particles") {
    CHECK_INVALID_ARGUMENT(map_from_omega<Map>(Mat<S>(0, kD), rng), where<Map>("constructor"),
                           "omega");
    CHECK_INVALID_ARGUMENT(map_from_omega<Map>(Mat<S>(kM, 0), rng), where<Map>("constructor"),
                           "omega");
    for (const S bad_value : {kNaN<S>, kInf<S>, -kInf<S>}) {
      INFO("value " << bad_value);
      Mat<S> bad = map.omega();
      bad(kM - 1, 0) = bad_value;
      CHECK_INVALID_ARGUMENT(map_from_omega<Map>(bad, rng), where<Map>("constructor"), "omega");
    }
    // Valid particles are taken as given.
    const Map given = map_from_omega<Map>(map.omega(), rng);
    CHECK(given.omega() == map.omega());
  }

  SECTION("set_omega: rejected particles leave the map unchanged") {
    const Mat<S> before = map.omega();
    const Draw draw_before = map.draw_policy();
    const Mat<S> phi_before = map.map(X);
    for (const S bad_value : {kNaN<S>, kInf<S>, -kInf<S>}) {
      INFO("value " << bad_value);
      Mat<S> bad = coulomb_test::gaussian<S>(kM, kD, rng);
      bad(2, 1) = bad_value;
      CHECK_INVALID_ARGUMENT(map.set_omega(bad), where<Map>("set_omega"), "omega");
      CHECK(map.omega() == before);
    }
    CHECK_INVALID_ARGUMENT(map.set_omega(coulomb_test::gaussian<S>(kM, kD + 1, rng)),
                           where<Map>("set_omega"), "omega");
    CHECK(map.omega() == before);
    CHECK_INVALID_ARGUMENT(map.set_omega(coulomb_test::gaussian<S>(kM, kD - 1, rng)),
                           where<Map>("set_omega"), "omega");
    CHECK(map.omega() == before);
    CHECK_INVALID_ARGUMENT(map.set_omega(Mat<S>(0, kD)), where<Map>("set_omega"), "omega");
    CHECK(map.omega() == before);
    if constexpr (coulomb::feature_map_traits<Map>::has_phases) {
      // A map with phases keeps its number of particles.
      const Vec<S> phases = map.phases();
      CHECK_INVALID_ARGUMENT(map.set_omega(coulomb_test::gaussian<S>(kM + 1, kD, rng)),
                             where<Map>("set_omega"), "omega");
      CHECK(map.omega() == before);
      CHECK(map.phases() == phases);
    } else {
      // The others may change it.
      const Mat<S> more = coulomb_test::gaussian<S>(kM + 2, kD, rng);
      map.set_omega(more);
      CHECK(map.omega() == more);
      CHECK(map.num_particles() == kM + 2);
      CHECK(map.output_dim() == coulomb::feature_map_traits<Map>::outputs_per_particle * (kM + 2));
      CHECK(map.map(X).cols() == map.output_dim());
      map.set_omega(before);
    }
    // The map still works as before.
    CHECK(map.omega() == before);
    CHECK(map.draw_policy() == draw_before);
    CHECK(map.map(X) == phi_before);
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_EmptyBatch", "[features][input]", COULOMB_TEST_EVERY_MAP,
                           (float, double)) {
  // n = 0 rows is a valid batch: a 0×D output, an empty shift vector, empty gradients.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("EmptyBatch/") + Map::name());
  const Map map = TestType::make(kD, kM, rng, Draw::orthogonal_chi);
  const Index D = map.output_dim();
  const Mat<S> empty(0, kD);
  for (const Stabilizer s : {Stabilizer::none, Stabilizer::per_row, Stabilizer::global}) {
    INFO("stabilizer " << coulomb::to_string(s));
    Mat<S> phi = Mat<S>::Ones(3, 2);  // resized by map
    Vec<S> log_scale = Vec<S>::Ones(5);
    map.map(empty, phi, s, log_scale);
    CHECK(phi.rows() == 0);
    CHECK(phi.cols() == D);
    CHECK(log_scale.size() == 0);
    Mat<S> phi2;
    map.map(empty, phi2, s);
    CHECK(phi2.rows() == 0);
    CHECK(phi2.cols() == D);
    const Mat<S> phi3 = map.map(empty, s);
    CHECK(phi3.rows() == 0);
    CHECK(phi3.cols() == D);
  }
  const Mat<S> Y = coulomb_test::gaussian<S>(2, kD, rng);
  const Mat<S> k1 = map.kernel_estimate(empty, Y);
  CHECK(k1.rows() == 0);
  CHECK(k1.cols() == 2);
  const Mat<S> k2 = map.kernel_estimate(Y, empty);
  CHECK(k2.rows() == 2);
  CHECK(k2.cols() == 0);

  const Mat<S> phi = map.map(empty);
  const Mat<S> dphi(0, D);
  Mat<S> dX = Mat<S>::Ones(2, 2);
  Mat<S> dOmega = Mat<S>::Ones(2, 2);
  map.backward_input(empty, phi, dphi, dX);
  map.backward_params(empty, phi, dphi, dOmega);
  CHECK(dX.rows() == 0);
  CHECK(dX.cols() == kD);
  CHECK(dOmega.rows() == kM);
  CHECK(dOmega.cols() == kD);
  CHECK(dOmega.isZero(0));
  Mat<S> dX2;
  Mat<S> dOmega2 = Mat<S>::Ones(kM, kD);
  map.backward(empty, phi, dphi, dX2, dOmega2);
  CHECK(dX2.rows() == 0);
  CHECK(dX2.cols() == kD);
  CHECK(dOmega2.rows() == kM);
  CHECK(dOmega2.cols() == kD);
  CHECK(dOmega2.isZero(0));
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_MapFiniteInputIsMapWithoutTheFinitenessCheck",
                           "[features][input]", COULOMB_TEST_EVERY_MAP, (float, double)) {
  // For a finite X, map_finite_input must give map's bits, shifts included, and refuse what map
  // refuses (the wrong columns; features that overflow for a huge but finite X).
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("MapFiniteInput/") + Map::name());
  const Map map = TestType::make(kD, kM, rng, Draw::orthogonal_chi);
  const S huge = std::is_same_v<S, float> ? S(1e30) : S(1e200);
  for (const S scale : {S(1), S(30), huge}) {
    const Mat<S> X = scale * coulomb_test::gaussian<S>(kN + 5, kD, rng);
    for (const Stabilizer s : {Stabilizer::none, Stabilizer::per_row, Stabilizer::global}) {
      INFO("scale " << scale << ", stabilizer " << coulomb::to_string(s));
      Mat<S> phi, phi_trusted;
      Vec<S> shifts, shifts_trusted;
      bool threw = false;
      try {
        map.map(X, phi, s, shifts);
      } catch (const coulomb::numerical_error&) {
        threw = true;
      }
      if (threw) {
        CHECK_THROWS_AS(map.map_finite_input(X, phi_trusted, s, &shifts_trusted),
                        coulomb::numerical_error);
        CHECK_THROWS_AS(map.map_finite_input(X, phi_trusted, s, nullptr), coulomb::numerical_error);
        continue;
      }
      map.map_finite_input(X, phi_trusted, s, &shifts_trusted);
      CHECK(phi_trusted == phi);
      CHECK(shifts_trusted == shifts);
      Mat<S> phi_plain;
      map.map(X, phi_plain, s);
      map.map_finite_input(X, phi_trusted, s, nullptr);
      CHECK(phi_trusted == phi_plain);
    }
  }
  Mat<S> phi;
  const Mat<S> bad = Mat<S>::Ones(kN, kD + 1);
  CHECK_INVALID_ARGUMENT(map.map_finite_input(bad, phi, Stabilizer::none, nullptr),
                         where<Map>("map"), "X");
}

TEST_CASE("DrawParticles_RejectsBadSizes", "[features][input][draw]") {
  coulomb::Rng rng = coulomb_test::test_rng("DrawParticles_RejectsBadSizes");
  for (const Draw draw : {Draw::iid, Draw::orthogonal_chi, Draw::orthogonal_sqrt_d}) {
    INFO("draw " << coulomb::to_string(draw));
    CHECK_INVALID_ARGUMENT(coulomb::draw_particles(0, 4, draw, rng), "coulomb::draw_particles",
                           "num_particles");
    CHECK_INVALID_ARGUMENT(coulomb::draw_particles(-2, 4, draw, rng), "coulomb::draw_particles",
                           "num_particles");
    CHECK_INVALID_ARGUMENT(coulomb::draw_particles(4, 0, draw, rng), "coulomb::draw_particles",
                           "input_dim");
    CHECK_INVALID_ARGUMENT(coulomb::draw_particles(4, -1, draw, rng), "coulomb::draw_particles",
                           "input_dim");
    // A failed call consumes nothing from the generator.
    coulomb::Rng before = rng;
    CHECK_THROWS(coulomb::draw_particles(0, 0, draw, rng));
    CHECK(rng == before);
  }
}

TEMPLATE_TEST_CASE("Rff_RejectsBadBandwidthAndPhases", "[features][input]", float, double) {
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("Rff_RejectsBadBandwidthAndPhases");
  const Mat<S> omega = coulomb_test::gaussian<S>(kM, kD, rng);
  const Vec<S> phases = Vec<S>::Constant(kM, S(0.5));
  for (const double bandwidth : {0.0, -1.0, -0.0, std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity()}) {
    INFO("bandwidth " << bandwidth);
    const coulomb::RffOptions options{bandwidth, Draw::iid};
    CHECK_INVALID_ARGUMENT(coulomb::Rff<S>(kD, kM, rng, options), "coulomb::Rff::constructor",
                           "options.bandwidth");
    CHECK_INVALID_ARGUMENT(coulomb::RffCosSin<S>(kD, kM, rng, options),
                           "coulomb::RffCosSin::constructor", "options.bandwidth");
    CHECK_INVALID_ARGUMENT(coulomb::Rff<S>(omega, rng, options), "coulomb::Rff::constructor",
                           "options.bandwidth");
    CHECK_INVALID_ARGUMENT(coulomb::Rff<S>(omega, phases, options), "coulomb::Rff::constructor",
                           "options.bandwidth");
    CHECK_INVALID_ARGUMENT(coulomb::RffCosSin<S>(omega, rng, options),
                           "coulomb::RffCosSin::constructor", "options.bandwidth");
  }

  coulomb::Rff<S> rff(omega, phases);
  CHECK(rff.phases() == phases);
  for (const Index size : {kM - 1, kM + 1, Index{0}}) {
    INFO("phases of size " << size);
    CHECK_INVALID_ARGUMENT(rff.set_phases(Vec<S>::Zero(size)), "coulomb::Rff::set_phases",
                           "phases");
    CHECK(rff.phases() == phases);
    CHECK_INVALID_ARGUMENT(coulomb::Rff<S>(omega, Vec<S>::Zero(size)), "coulomb::Rff::set_phases",
                           "phases");
  }
  for (const S bad_value : {kNaN<S>, kInf<S>, -kInf<S>}) {
    INFO("value " << bad_value);
    Vec<S> bad = phases;
    bad(kM - 1) = bad_value;
    CHECK_INVALID_ARGUMENT(rff.set_phases(bad), "coulomb::Rff::set_phases", "phases");
    CHECK(rff.phases() == phases);
  }
  // Valid phases are taken, as a row or a column.
  const Vec<S> other = Vec<S>::LinSpaced(kM, S(0), S(3));
  rff.set_phases(other.transpose());
  CHECK(rff.phases() == other);
}

TEMPLATE_TEST_CASE("Porf_RejectsBadEpsilon", "[features][input]", float, double) {
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("Porf_RejectsBadEpsilon");
  const Mat<S> omega = coulomb_test::gaussian<S>(kM, kD, rng);
  for (const double eps : {-1e-12, -0.1, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    INFO("epsilon " << eps);
    const coulomb::PorfOptions options{Draw::orthogonal_chi, eps};
    CHECK_INVALID_ARGUMENT(coulomb::PorfRelu<S>(kD, kM, rng, options),
                           "coulomb::PorfRelu::constructor", "options.epsilon");
    CHECK_INVALID_ARGUMENT(coulomb::PorfSoftplus<S>(kD, kM, rng, options),
                           "coulomb::PorfSoftplus::constructor", "options.epsilon");
    CHECK_INVALID_ARGUMENT(coulomb::PorfRelu<S>(omega, options), "coulomb::PorfRelu::constructor",
                           "options.epsilon");
    CHECK_INVALID_ARGUMENT(coulomb::PorfExp<S>(kD, kM, rng, options),
                           "coulomb::PorfExp::constructor", "options.epsilon");
  }
  // The exponential activation takes no floor at all.
  CHECK_INVALID_ARGUMENT(coulomb::PorfExp<S>(kD, kM, rng, {Draw::orthogonal_chi, 0.1}),
                         "coulomb::PorfExp::constructor", "options.epsilon");
  // ε >= 0 is accepted by relu and softplus.
  CHECK(coulomb::PorfRelu<S>(omega, {Draw::iid, 0.25}).epsilon() == 0.25);
  CHECK(coulomb::PorfSoftplus<S>(omega, {Draw::iid, 0.0}).epsilon() == 0.0);
}

TEST_CASE("Kernels_RejectBadArguments", "[features][input][kernel]") {
  const Mat<double> X = Mat<double>::Ones(3, 4);
  const Mat<double> Y = Mat<double>::Ones(2, 5);
  CHECK_INVALID_ARGUMENT(coulomb::gaussian_kernel(X, Y, 1.0), "coulomb::gaussian_kernel", "Y");
  CHECK_INVALID_ARGUMENT(coulomb::softmax_kernel(X, Y), "coulomb::softmax_kernel", "Y");
  CHECK_INVALID_ARGUMENT(coulomb::arccos1_kernel(X, Y), "coulomb::arccos1_kernel", "Y");
  for (const double bandwidth : {0.0, -2.0, std::numeric_limits<double>::quiet_NaN()}) {
    CHECK_INVALID_ARGUMENT(coulomb::gaussian_kernel(X, X, bandwidth), "coulomb::gaussian_kernel",
                           "bandwidth");
  }
}

TEST_CASE("UniformIndex_RejectsZero", "[random][input]") {
  coulomb::Rng rng = coulomb_test::test_rng("UniformIndex_RejectsZero");
  CHECK_INVALID_ARGUMENT(coulomb::uniform_index(0, rng), "coulomb::uniform_index", "n");
}

}  // namespace features_input_test
