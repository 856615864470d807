// SPDX-License-Identifier: MIT
// Compile-time checks: every map satisfies coulomb::FeatureMap, and feature_map_traits reports
// the documented capabilities. The runtime cases check that output_dim() agrees with
// outputs_per_particle and that Stabilizer/Draw names are stable.
#include <catch2/catch.hpp>

#include <string>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace features_traits_test {

namespace {

using coulomb::feature_map_traits;
using coulomb::FeatureMap;
using coulomb::KernelFeatureMap;
using coulomb_test::Index;

/// Expected capability flags of a map type.
template <typename Map, bool Positive, bool ClosedForm, bool Phases, bool Stabilizable,
          Index PerParticle>
constexpr bool traits_are() {
  using T = feature_map_traits<Map>;
  return T::is_positive == Positive && T::has_closed_form_kernel == ClosedForm &&
         T::has_phases == Phases && T::is_stabilizable == Stabilizable &&
         T::outputs_per_particle == PerParticle;
}

template <typename S>
constexpr bool all_traits_as_documented() {
  //                                              positive closed phases stab. D/m
  static_assert(traits_are<coulomb::Rff<S>, false, true, true, false, 1>());
  static_assert(traits_are<coulomb::RffCosSin<S>, false, true, false, false, 2>());
  static_assert(traits_are<coulomb::FavorPlus<S>, true, true, false, true, 1>());
  static_assert(traits_are<coulomb::FavorHyperbolic<S>, true, true, false, true, 2>());
  static_assert(traits_are<coulomb::PorfExp<S>, true, true, false, true, 1>());
  static_assert(traits_are<coulomb::PorfSoftplus<S>, true, false, false, false, 1>());
  static_assert(traits_are<coulomb::PorfRelu<S>, true, true, false, false, 1>());
  static_assert(traits_are<coulomb::SoftmaxFeat<S>, true, false, false, false, 1>());
  static_assert(traits_are<coulomb::SoftmaxFeatJoint<S>, true, false, false, false, 2>());
  static_assert(traits_are<coulomb::SoftmaxFeatSeparate<S>, true, false, false, false, 2>());
  return true;
}

template <typename S>
constexpr bool all_satisfy_concepts() {
  static_assert(FeatureMap<coulomb::Rff<S>>);
  static_assert(FeatureMap<coulomb::RffCosSin<S>>);
  static_assert(FeatureMap<coulomb::FavorPlus<S>>);
  static_assert(FeatureMap<coulomb::FavorHyperbolic<S>>);
  static_assert(FeatureMap<coulomb::PorfExp<S>>);
  static_assert(FeatureMap<coulomb::PorfSoftplus<S>>);
  static_assert(FeatureMap<coulomb::PorfRelu<S>>);
  static_assert(FeatureMap<coulomb::SoftmaxFeat<S>>);
  static_assert(FeatureMap<coulomb::SoftmaxFeatJoint<S>>);
  static_assert(FeatureMap<coulomb::SoftmaxFeatSeparate<S>>);
  // exact_kernel exists exactly for the maps with a closed-form kernel.
  static_assert(KernelFeatureMap<coulomb::Rff<S>>);
  static_assert(KernelFeatureMap<coulomb::RffCosSin<S>>);
  static_assert(KernelFeatureMap<coulomb::FavorPlus<S>>);
  static_assert(KernelFeatureMap<coulomb::FavorHyperbolic<S>>);
  static_assert(KernelFeatureMap<coulomb::PorfExp<S>>);
  static_assert(KernelFeatureMap<coulomb::PorfRelu<S>>);
  static_assert(!KernelFeatureMap<coulomb::PorfSoftplus<S>>);
  static_assert(!KernelFeatureMap<coulomb::SoftmaxFeat<S>>);
  static_assert(!KernelFeatureMap<coulomb::SoftmaxFeatJoint<S>>);
  static_assert(!KernelFeatureMap<coulomb::SoftmaxFeatSeparate<S>>);
  static_assert(!requires(const coulomb::PorfSoftplus<S>& m, const coulomb::Matrix<S>& x) {
    m.exact_kernel(x, x);
  });
  static_assert(requires(const coulomb::PorfRelu<S>& m, const coulomb::Matrix<S>& x) {
    m.exact_kernel(x, x);
  });
  // Phases can be set only on the map that has them.
  static_assert(requires(coulomb::Rff<S> & m, const coulomb::Vector<S>& b) { m.set_phases(b); });
  static_assert(
      !requires(coulomb::RffCosSin<S> & m, const coulomb::Vector<S>& b) { m.set_phases(b); });
  return true;
}

static_assert(all_traits_as_documented<float>());
static_assert(all_traits_as_documented<double>());
static_assert(all_satisfy_concepts<float>());
static_assert(all_satisfy_concepts<double>());

// The documented compile-time check macro.
COULOMB_ASSERT_FEATURE_MAP(coulomb::FavorPlus<double>);
COULOMB_ASSERT_FEATURE_MAP(coulomb::SoftmaxFeatSeparate<float>);

// Types that are not feature maps.
struct NotAMap {
  using Scalar = double;
};
static_assert(!FeatureMap<int>);
static_assert(!FeatureMap<NotAMap>);
static_assert(!FeatureMap<coulomb::Matrix<double>>);

// A user-defined map satisfies the concept by providing the members; the flags it declares
// are read by feature_map_traits, and the ones it does not declare read as false (1 for
// outputs_per_particle) instead of failing to compile.
struct UserMapNoFlags {
  using Scalar = double;
  using MatrixType = coulomb::Matrix<double>;
  using VectorType = coulomb::Vector<double>;
  Index input_dim() const { return 1; }
  Index num_particles() const { return 1; }
  Index output_dim() const { return 1; }
  const MatrixType& omega() const { return omega_; }
  void set_omega(const MatrixType& o) { omega_ = o; }
  void map(const MatrixType&, MatrixType&, coulomb::Stabilizer) const {}
  void map(const MatrixType&, MatrixType&, coulomb::Stabilizer, VectorType&) const {}
  MatrixType map(const MatrixType& x) const { return x; }
  void backward_input(const MatrixType&, const MatrixType&, const MatrixType&, MatrixType&) const {}
  void backward_params(const MatrixType&, const MatrixType&, const MatrixType&, MatrixType&) const {
  }
  void backward(const MatrixType&, const MatrixType&, const MatrixType&, MatrixType&,
                MatrixType&) const {}
  void redraw(coulomb::Rng&) {}
  MatrixType omega_;
};
static_assert(FeatureMap<UserMapNoFlags>);
static_assert(traits_are<UserMapNoFlags, false, false, false, false, 1>());

struct UserMap : UserMapNoFlags {
  static constexpr bool is_positive = true;
  static constexpr bool has_closed_form_kernel = false;
  static constexpr bool has_phases = false;
  static constexpr bool is_stabilizable = true;
  static constexpr Index outputs_per_particle = 2;
};
static_assert(FeatureMap<UserMap>);
static_assert(traits_are<UserMap, true, false, false, true, 2>());
static_assert(!KernelFeatureMap<UserMap>);

// The closed-form flag alone does not make a KernelFeatureMap: exact_kernel must exist too.
struct UserMapClaimsKernel : UserMapNoFlags {
  static constexpr bool has_closed_form_kernel = true;
};
static_assert(FeatureMap<UserMapClaimsKernel> && !KernelFeatureMap<UserMapClaimsKernel>);
struct UserKernelMap : UserMapClaimsKernel {
  MatrixType exact_kernel(const MatrixType& x, const MatrixType& y) const {
    return x * y.transpose();
  }
};
static_assert(KernelFeatureMap<UserKernelMap>);

// Without the combined backward the type is not a feature map.
struct UserMapNoBackward {
  using Scalar = double;
  using MatrixType = coulomb::Matrix<double>;
  using VectorType = coulomb::Vector<double>;
  Index input_dim() const { return 1; }
  Index num_particles() const { return 1; }
  Index output_dim() const { return 1; }
  const MatrixType& omega() const { return omega_; }
  void set_omega(const MatrixType& o) { omega_ = o; }
  void map(const MatrixType&, MatrixType&, coulomb::Stabilizer) const {}
  void map(const MatrixType&, MatrixType&, coulomb::Stabilizer, VectorType&) const {}
  MatrixType map(const MatrixType& x) const { return x; }
  void backward_input(const MatrixType&, const MatrixType&, const MatrixType&, MatrixType&) const {}
  void backward_params(const MatrixType&, const MatrixType&, const MatrixType&, MatrixType&) const {
  }
  void redraw(coulomb::Rng&) {}
  MatrixType omega_;
};
static_assert(!FeatureMap<UserMapNoBackward>);

// Rng and the scalar restriction.
static_assert(coulomb::RealScalar<float> && coulomb::RealScalar<double>);
static_assert(!coulomb::RealScalar<long double> && !coulomb::RealScalar<int>);

}  // namespace

using namespace coulomb_test::cases;

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_OutputDimMatchesTraits", "[features][traits]",
                           COULOMB_TEST_EVERY_MAP, (float, double)) {
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("OutputDim/") + Map::name());
  const Map map = TestType::make(5, 7, rng);
  CHECK(map.input_dim() == 5);
  CHECK(map.num_particles() == 7);
  CHECK(map.output_dim() == feature_map_traits<Map>::outputs_per_particle * 7);
  const coulomb::Matrix<S> phi = map.map(coulomb_test::gaussian<S>(3, 5, rng));
  CHECK(phi.rows() == 3);
  CHECK(phi.cols() == map.output_dim());
  // Positive maps give non-negative features; RFF features take both signs.
  if constexpr (feature_map_traits<Map>::is_positive) {
    CHECK((phi.array() >= S(0)).all());
  } else {
    CHECK((phi.array() < S(0)).any());
    CHECK((phi.array() > S(0)).any());
  }
  CHECK(std::string(Map::name()).size() > 0);
}

TEST_CASE("Enums_HaveStableNames", "[features][traits]") {
  CHECK(std::string(coulomb::to_string(coulomb::Stabilizer::none)) == "none");
  CHECK(std::string(coulomb::to_string(coulomb::Stabilizer::per_row)) == "per_row");
  CHECK(std::string(coulomb::to_string(coulomb::Stabilizer::global)) == "global");
  CHECK(std::string(coulomb::to_string(coulomb::Draw::iid)) == "iid");
  CHECK(std::string(coulomb::to_string(coulomb::Draw::orthogonal_chi)) == "orthogonal_chi");
  CHECK(std::string(coulomb::to_string(coulomb::Draw::orthogonal_sqrt_d)) == "orthogonal_sqrt_d");
  CHECK(std::string(coulomb::version_string()) == "0.1.0");
}

}  // namespace features_traits_test
