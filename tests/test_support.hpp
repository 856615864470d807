// SPDX-License-Identifier: MIT
/// @file tests/test_support.hpp
/// @brief Shared helpers of the coulomb unit tests: the base seed, per-test generators,
/// tolerances derived from machine epsilon, random inputs, small statistics, and the list of
/// feature-map "cases" that the templated tests run over.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include <coulomb/coulomb.hpp>

namespace coulomb_test {

using coulomb::Index;
template <typename S>
using Mat = coulomb::Matrix<S>;
template <typename S>
using Vec = coulomb::Vector<S>;

/// A column vector of `values`, for test data written inline.
inline Eigen::VectorXd column(std::initializer_list<double> values) {
  Eigen::VectorXd v(static_cast<Eigen::Index>(values.size()));
  Eigen::Index i = 0;
  for (const double x : values) v(i++) = x;
  return v;
}

// ---------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------

/// Base seed used when COULOMB_TEST_SEED is not set.
inline constexpr std::uint64_t default_base_seed = 20260417ULL;

/// Parses a seed written in decimal, or in hexadecimal with a 0x prefix.
inline std::optional<std::uint64_t> parse_seed(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    std::uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint64_t>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint64_t>(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint64_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    if (digit >= static_cast<std::uint64_t>(base)) return std::nullopt;
    const std::uint64_t b = static_cast<std::uint64_t>(base);
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / b) return std::nullopt;
    value = value * b + digit;
  }
  return value;
}

/// The base seed of this run: the environment variable COULOMB_TEST_SEED if set (decimal or
/// 0x-hex), default_base_seed otherwise. Throws std::invalid_argument for an unparsable value.
inline std::uint64_t base_seed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("COULOMB_TEST_SEED");
    if (env == nullptr || *env == '\0') return default_base_seed;
    const auto parsed = parse_seed(env);
    if (!parsed) {
      throw std::invalid_argument(std::string("COULOMB_TEST_SEED='") + env +
                                  "' is not a decimal or 0x-hexadecimal 64-bit integer");
    }
    return *parsed;
  }();
  return seed;
}

/// Whether base_seed() came from the environment.
inline bool base_seed_from_env() {
  const char* env = std::getenv("COULOMB_TEST_SEED");
  return env != nullptr && *env != '\0';
}

/// FNV-1a hash, to derive one stream per test from its name.
constexpr std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h ^= static_cast<std::uint64_t>(static_cast<unsigned char>(c));
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// The generator of one test: fixed for a given base seed and test name, different between
/// tests.
inline coulomb::Rng test_rng(std::string_view test_name) {
  return coulomb::Rng(base_seed() ^ fnv1a(test_name));
}

// ---------------------------------------------------------------------------------------------
// Tolerances
// ---------------------------------------------------------------------------------------------

/// Tolerances for scalar type S, derived from its machine epsilon.
template <typename S>
struct tol {
  /// Machine epsilon of S.
  static constexpr double eps = std::numeric_limits<S>::epsilon();
  /// Relative error of a short computation (a product, an exp, a sum of a few dozen terms).
  static constexpr double tight = 64 * eps;
  /// Relative error of a longer chain (a GEMM of a few hundred terms followed by exp and a
  /// ratio of sums): float ≈ 5e-4, double ≈ 9e-13.
  static constexpr double loose = 4096 * eps;
};

// ---------------------------------------------------------------------------------------------
// Random inputs
// ---------------------------------------------------------------------------------------------

/// rows x cols matrix of independent N(0, 1) entries (drawn in double, rounded to S).
template <typename S = double>
Mat<S> gaussian(Index rows, Index cols, coulomb::Rng& rng) {
  Mat<double> g(rows, cols);
  coulomb::fill_standard_normal(g, rng);
  return g.cast<S>();
}

/// n x d matrix whose rows point in uniformly random directions and have norms drawn
/// uniformly in [norm_lo, norm_hi].
inline Mat<double> rows_with_norms(Index n, Index d, double norm_lo, double norm_hi,
                                   coulomb::Rng& rng) {
  Mat<double> x = gaussian(n, d, rng);
  for (Index i = 0; i < n; ++i) {
    const double norm = norm_lo + (norm_hi - norm_lo) * coulomb::uniform01(rng);
    x.row(i) *= norm / x.row(i).norm();
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// Small numerics and statistics
// ---------------------------------------------------------------------------------------------

/// ‖a − b‖ / max(‖b‖, tiny), in double.
template <typename DA, typename DB>
double rel_diff(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b) {
  const double num = (a.template cast<double>() - b.template cast<double>()).norm();
  const double den = std::max(b.template cast<double>().norm(), 1e-300);
  return num / den;
}

/// Least-squares slope of y against x.
inline double ls_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double mx = 0.0;
  double my = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  double sxy = 0.0;
  double sxx = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxy / sxx;
}

/// Sample mean, standard deviation and standard error of the mean.
struct Summary {
  double mean = 0.0;
  double sd = 0.0;
  double se = 0.0;
};

inline Summary summarize(const std::vector<double>& v) {
  Summary s;
  const double n = static_cast<double>(v.size());
  for (const double x : v) s.mean += x;
  s.mean /= n;
  double ss = 0.0;
  for (const double x : v) ss += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(ss / (n - 1.0));
  s.se = s.sd / std::sqrt(n);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Feature-map cases: one small struct template per map (and per notable option), so that
// TEMPLATE_PRODUCT_TEST_CASE(..., (FavorPlus, PorfRelu, ...), (float, double)) produces test
// names such as "FeatureMap_EmptyBatch - FavorPlus<float>". Each provides
//   Map                  the coulomb type;
//   rebind<T>            the same case with scalar T;
//   make(d, m, rng, draw) a map with its test options (RFF bandwidth 1.5, PORF-relu ε).
// ---------------------------------------------------------------------------------------------
namespace cases {

using coulomb::Draw;

template <typename S>
struct Rff {
  template <typename T>
  using rebind = Rff<T>;
  using Map = coulomb::Rff<S>;
  static constexpr double bandwidth = 1.5;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::iid) {
    return Map(d, m, rng, coulomb::RffOptions{bandwidth, draw});
  }
};

template <typename S>
struct RffCosSin {
  template <typename T>
  using rebind = RffCosSin<T>;
  using Map = coulomb::RffCosSin<S>;
  static constexpr double bandwidth = 1.5;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::iid) {
    return Map(d, m, rng, coulomb::RffOptions{bandwidth, draw});
  }
};

template <typename S>
struct FavorPlus {
  template <typename T>
  using rebind = FavorPlus<T>;
  using Map = coulomb::FavorPlus<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::FavorOptions{draw});
  }
};

template <typename S>
struct FavorHyperbolic {
  template <typename T>
  using rebind = FavorHyperbolic<T>;
  using Map = coulomb::FavorHyperbolic<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::FavorOptions{draw});
  }
};

template <typename S>
struct PorfExp {
  template <typename T>
  using rebind = PorfExp<T>;
  using Map = coulomb::PorfExp<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::PorfOptions{draw, 0.0});
  }
};

template <typename S>
struct PorfSoftplus {
  template <typename T>
  using rebind = PorfSoftplus<T>;
  using Map = coulomb::PorfSoftplus<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::PorfOptions{draw, 0.0});
  }
};

/// PORF-relu with ε = 0: rows can be all zero.
template <typename S>
struct PorfRelu {
  template <typename T>
  using rebind = PorfRelu<T>;
  using Map = coulomb::PorfRelu<S>;
  static constexpr double epsilon = 0.0;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::PorfOptions{draw, epsilon});
  }
};

/// PORF-relu with ε = 0.1: every entry positive.
template <typename S>
struct PorfReluEps {
  template <typename T>
  using rebind = PorfReluEps<T>;
  using Map = coulomb::PorfRelu<S>;
  static constexpr double epsilon = 0.1;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::PorfOptions{draw, epsilon});
  }
};

template <typename S>
struct SoftmaxFeat {
  template <typename T>
  using rebind = SoftmaxFeat<T>;
  using Map = coulomb::SoftmaxFeat<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::SoftmaxFeatOptions{draw});
  }
};

template <typename S>
struct SoftmaxFeatJoint {
  template <typename T>
  using rebind = SoftmaxFeatJoint<T>;
  using Map = coulomb::SoftmaxFeatJoint<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::SoftmaxFeatOptions{draw});
  }
};

template <typename S>
struct SoftmaxFeatSeparate {
  template <typename T>
  using rebind = SoftmaxFeatSeparate<T>;
  using Map = coulomb::SoftmaxFeatSeparate<S>;
  static Map make(Index d, Index m, coulomb::Rng& rng, Draw draw = Draw::orthogonal_chi) {
    return Map(d, m, rng, coulomb::SoftmaxFeatOptions{draw});
  }
};

}  // namespace cases

/// The case of every map, for TEMPLATE_PRODUCT_TEST_CASE(name, tags, COULOMB_TEST_EVERY_MAP,
/// (float, double)) in a file that uses namespace coulomb_test::cases.
#define COULOMB_TEST_EVERY_MAP                                                               \
  (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus, PorfRelu, SoftmaxFeat, \
   SoftmaxFeatJoint, SoftmaxFeatSeparate)

/// Name of a case for messages and per-test seeds: `prefix`, the map's name(), plus ε for
/// PORF-relu. (Built with a stream: GCC 12 gives a bogus -Warray-bounds for some
/// std::string + std::string at -O3.)
template <typename Case>
std::string label(std::string_view prefix = {}) {
  std::ostringstream text;
  text << prefix << Case::Map::name();
  if constexpr (requires { Case::epsilon; }) text << " (epsilon " << Case::epsilon << ")";
  return text.str();
}

}  // namespace coulomb_test
