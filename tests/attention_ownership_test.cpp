// SPDX-License-Identifier: MIT
// Who owns the feature map of a LinearAttention: a map passed by value is the attention's own
// copy (changing the caller's map afterwards changes nothing, changing feature_map() does), a
// moved map is not copied, and a map passed as std::ref(map) is used itself, so that the
// caller's set_omega reaches the attention (docs/attention.md, "Who owns the feature map").
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_reference.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace attention_ownership_test {

namespace {

using coulomb::AttentionOptions;
using coulomb::Index;
using coulomb::LinearAttention;
using coulomb_test::Mat;
using coulomb_test::tol;

constexpr Index length = 9, dk = 4, dv = 3, m = 16;

template <typename S>
struct Inputs {
  Mat<S> Q, K, V;
  explicit Inputs(coulomb::Rng& rng)
      : Q(coulomb_test::gaussian<S>(length, dk, rng)),
        K(coulomb_test::gaussian<S>(length, dk, rng)),
        V(coulomb_test::gaussian<S>(length, dv, rng)) {}
};

AttentionOptions causal_options() {
  AttentionOptions opt;
  opt.causal = true;
  opt.block_size = 4;
  return opt;
}

/// The quadratic reference of causal attention with the map whose Ω is `omega`.
template <typename Map>
Mat<typename Map::Scalar> expected(const Mat<typename Map::Scalar>& omega,
                                   const Inputs<typename Map::Scalar>& in) {
  const double scale = std::pow(static_cast<double>(dk), -0.25);
  return coulomb_test::quadratic_linear_attention(std::vector<Map>{Map(omega)}, in.Q, in.K, in.V, 1,
                                                  1, true, nullptr, scale);
}

template <typename S>
bool close(const Mat<S>& a, const Mat<S>& b) {
  return (a - b).cwiseAbs().maxCoeff() <= tol<S>::loose * (1 + b.cwiseAbs().maxCoeff());
}

using FavorD = coulomb::FavorPlus<double>;
static_assert(std::is_constructible_v<LinearAttention<FavorD>, std::reference_wrapper<FavorD>,
                                      AttentionOptions>,
              "std::ref(map) borrows the map");
static_assert(!std::is_constructible_v<LinearAttention<FavorD>,
                                       std::reference_wrapper<const FavorD>, AttentionOptions>,
              "std::cref(map) must not compile: it could only copy the map silently");

}  // namespace

TEMPLATE_TEST_CASE("LinearAttention_BorrowedMapSeesTheCallersSetOmega",
                   "[attention][linear][ownership]", float, double) {
  using S = TestType;
  using Map = coulomb::FavorPlus<S>;
  auto rng = coulomb_test::test_rng("LinearAttention_BorrowedMapSeesTheCallersSetOmega");
  const Inputs<S> in(rng);
  Map map(dk, m, rng);
  const Mat<S> omega1 = map.omega();
  const Mat<S> omega2 = Map(dk, m, rng).omega();

  const LinearAttention<Map> attn(std::ref(map), causal_options());
  CHECK(attn.borrows_maps());
  CHECK(&attn.feature_map() == &map);
  const Mat<S> before = attn.forward(in.Q, in.K, in.V);
  CHECK(close(before, expected<Map>(omega1, in)));

  // The caller changes its own map: the attention must see it (a silent copy would not).
  map.set_omega(omega2);
  const Mat<S> after = attn.forward(in.Q, in.K, in.V);
  CHECK(close(after, expected<Map>(omega2, in)));
  CHECK_FALSE(close(after, before));

  // A copy of a borrowing attention borrows the same map.
  const LinearAttention<Map> copy = attn;
  CHECK(&copy.feature_map() == &map);
}

TEST_CASE("LinearAttention_OwnedMapIsChangedThroughFeatureMap", "[attention][linear][ownership]") {
  using Map = FavorD;
  auto rng = coulomb_test::test_rng("LinearAttention_OwnedMapIsChangedThroughFeatureMap");
  const Inputs<double> in(rng);
  Map map(dk, m, rng);
  const Mat<double> omega1 = map.omega();
  const Mat<double> omega2 = Map(dk, m, rng).omega();
  const Mat<double> omega3 = Map(dk, m, rng).omega();

  LinearAttention<Map> attn(map, causal_options());
  CHECK_FALSE(attn.borrows_maps());
  CHECK(&attn.feature_map() != &map);
  CHECK(attn.feature_map().omega().data() != map.omega().data());

  // The attention's copy is independent of the caller's map, as documented ...
  map.set_omega(omega2);
  CHECK(attn.feature_map().omega() == omega1);
  CHECK(close(attn.forward(in.Q, in.K, in.V), expected<Map>(omega1, in)));

  // ... and Ω is changed through the attention's own map.
  attn.feature_map().set_omega(omega3);
  CHECK(close(attn.forward(in.Q, in.K, in.V), expected<Map>(omega3, in)));
  CHECK(map.omega() == omega2);
}

TEST_CASE("LinearAttention_MovedMapIsNotCopied", "[attention][linear][ownership]") {
  using Map = FavorD;
  auto rng = coulomb_test::test_rng("LinearAttention_MovedMapIsNotCopied");
  Map map(dk, m, rng);
  const double* storage = map.omega().data();
  const LinearAttention<Map> attn(std::move(map), causal_options());
  CHECK_FALSE(attn.borrows_maps());
  CHECK(attn.feature_map().omega().data() == storage);
}

}  // namespace attention_ownership_test
