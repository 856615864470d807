// SPDX-License-Identifier: MIT
/// @file core/random.hpp
/// @brief Seeded, platform-independent random numbers.
///
/// The C++ standard fixes the engines but not the distributions (`std::normal_distribution`
/// differs between libstdc++, libc++ and MSVC), so coulomb draws its uniforms and Gaussians
/// itself from the integer stream. The integer stream, uniform01 and uniform_index are the same
/// bits everywhere; Gaussian draws also go through the C library's log, cos and sin, and
/// orthogonal draws through Eigen's QR, whose last bits depend on the instruction set. So a
/// given seed reproduces the same bits for the same build (compiler, flags, thread count), and
/// the same values to rounding across builds (docs/random.md). Nothing in coulomb uses a hidden
/// global generator; every draw takes a generator argument.
///
/// - coulomb::Rng is xoshiro256++ (Blackman & Vigna, 2019), seeded through splitmix64. It
///   satisfies std::uniform_random_bit_generator, so it also works with the standard library.
/// - Any other std::uniform_random_bit_generator (std::mt19937_64, ...) is accepted by the
///   sampling functions below.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <utility>

#include "config.hpp"
#include "error.hpp"

namespace coulomb {

/// xoshiro256++ pseudo-random generator: 256-bit state, period 2^256 - 1, 64-bit outputs.
class Rng {
 public:
  using result_type = std::uint64_t;  ///< 64-bit outputs (UniformRandomBitGenerator)

  /// Seeds the four state words from `seed` with splitmix64 (never all zero).
  explicit Rng(std::uint64_t seed = 0x9E3779B97F4A7C15ULL) noexcept { reseed(seed); }

  /// Restarts the stream from `seed`.
  void reseed(std::uint64_t seed) noexcept {
    std::uint64_t x = seed;
    for (auto& word : state_) word = splitmix64(x);
  }

  /// Smallest output, 0.
  static constexpr result_type min() noexcept { return 0; }
  /// Largest output, 2^64 − 1.
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// The next 64 random bits; advances the state.
  result_type operator()() noexcept {
    const std::uint64_t result = std::rotl(state_[0] + state_[3], 23) + state_[0];
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }

  /// A generator for an independent sub-stream, derived deterministically from this one's next
  /// output and `stream` (for example a thread, head or layer index).
  [[nodiscard]] Rng split(std::uint64_t stream) noexcept {
    std::uint64_t x = (*this)() ^ (0xD1B54A32D192ED03ULL * (stream + 1));
    return Rng(splitmix64(x));
  }

  /// Two generators are equal when their states are (they produce the same stream).
  friend bool operator==(const Rng&, const Rng&) = default;

  /// The four state words, so that a checkpoint can save the generator and continue its
  /// stream exactly later (set_state).
  std::array<std::uint64_t, 4> state() const noexcept { return state_; }

  /// Continues the stream from `state` (as returned by state()): the next outputs are those
  /// the saved generator would have produced. Throws invalid_argument for the all-zero state,
  /// which xoshiro256++ never reaches (it would output zeros for ever).
  void set_state(const std::array<std::uint64_t, 4>& state) {
    if (state[0] == 0 && state[1] == 0 && state[2] == 0 && state[3] == 0) {
      throw invalid_argument(
          "coulomb::Rng::set_state: argument 'state' is all zero, which no generator reaches");
    }
    state_ = state;
  }

 private:
  static std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  std::array<std::uint64_t, 4> state_{};
};

namespace detail {

/// 64 random bits from any uniform random bit generator (combining calls if its range is
/// narrower), so the helpers below behave the same for every engine with a full 32- or
/// 64-bit range.
template <std::uniform_random_bit_generator G>
std::uint64_t random_bits64(G& g) {
  using R = typename G::result_type;
  constexpr auto lo = G::min();
  constexpr auto hi = G::max();
  if constexpr (lo == 0 && hi == std::numeric_limits<std::uint64_t>::max()) {
    return static_cast<std::uint64_t>(g());
  } else if constexpr (lo == 0 && static_cast<std::uint64_t>(hi) ==
                                      std::numeric_limits<std::uint32_t>::max()) {
    const std::uint64_t a = static_cast<std::uint64_t>(static_cast<R>(g()));
    const std::uint64_t b = static_cast<std::uint64_t>(static_cast<R>(g()));
    return (a << 32) | b;
  } else {
    static_assert(
        lo == 0 && (hi == std::numeric_limits<std::uint64_t>::max() ||
                    static_cast<std::uint64_t>(hi) == std::numeric_limits<std::uint32_t>::max()),
        "coulomb: random generators must produce the full 32- or 64-bit range "
        "(for example coulomb::Rng, std::mt19937 or std::mt19937_64)");
    return 0;
  }
}

}  // namespace detail

/// Uniform double in [0, 1) with 53 random bits.
template <std::uniform_random_bit_generator G>
double uniform01(G& g) {
  return static_cast<double>(detail::random_bits64(g) >> 11) * 0x1.0p-53;
}

/// Uniform double in (0, 1]: never 0, so its logarithm is finite.
template <std::uniform_random_bit_generator G>
double uniform_open0(G& g) {
  return (static_cast<double>(detail::random_bits64(g) >> 11) + 1.0) * 0x1.0p-53;
}

/// Fills `out` (in column-major order, whatever its storage order) with independent N(0, 1) draws
/// by the Box-Muller transform, computed in double and rounded to Scalar.
template <typename Derived, std::uniform_random_bit_generator G>
void fill_standard_normal(Eigen::DenseBase<Derived>& out, G& g) {
  using Scalar = typename Derived::Scalar;
  const Index size = out.size();
  auto draw_pair = [&g](double& z0, double& z1) {
    const double radius = std::sqrt(-2.0 * std::log(uniform_open0(g)));
    const double angle = 2.0 * std::numbers::pi * uniform01(g);
    z0 = radius * std::cos(angle);
    z1 = radius * std::sin(angle);
  };
  auto& m = out.derived();
  Index k = 0;
  double z0 = 0.0;
  double z1 = 0.0;
  for (; k + 1 < size; k += 2) {
    draw_pair(z0, z1);
    m(k % m.rows(), k / m.rows()) = static_cast<Scalar>(z0);
    m((k + 1) % m.rows(), (k + 1) / m.rows()) = static_cast<Scalar>(z1);
  }
  if (k < size) {
    draw_pair(z0, z1);
    m(k % m.rows(), k / m.rows()) = static_cast<Scalar>(z0);
  }
}

/// One N(0, 1) draw.
template <std::uniform_random_bit_generator G>
double standard_normal(G& g) {
  Eigen::Matrix<double, 1, 1> z;
  fill_standard_normal(z, g);
  return z(0);
}

/// Fills `out` with independent U[lo, hi) draws, in column-major order.
template <typename Derived, std::uniform_random_bit_generator G>
void fill_uniform(Eigen::DenseBase<Derived>& out, double lo, double hi, G& g) {
  using Scalar = typename Derived::Scalar;
  auto& m = out.derived();
  for (Index j = 0; j < m.cols(); ++j)
    for (Index i = 0; i < m.rows(); ++i)
      m(i, j) = static_cast<Scalar>(lo + (hi - lo) * uniform01(g));
}

/// Uniform integer in [0, n) without modulo bias (rejection of the incomplete last block).
/// Throws invalid_argument for n = 0.
template <std::uniform_random_bit_generator G>
std::uint64_t uniform_index(std::uint64_t n, G& g) {
  if (n == 0) throw invalid_argument("coulomb::uniform_index: argument 'n' must be positive");
  constexpr std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = top - (top % n + 1) % n;  // largest multiple of n, minus one
  std::uint64_t r = detail::random_bits64(g);
  while (r > limit) r = detail::random_bits64(g);
  return r % n;
}

/// Shuffles `v` in place by Fisher–Yates from the back (entry i − 1 swaps with a uniform index
/// in [0, i), for i = n … 2): every permutation equally likely, the same on every platform for
/// the same generator state.
template <typename T, std::uniform_random_bit_generator G>
void shuffle(std::span<T> v, G& rng) {
  for (std::size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[static_cast<std::size_t>(uniform_index(i, rng))]);
}

/// Partial Fisher–Yates from the front: afterwards v[0 … k) is a uniform sample of the entries
/// without replacement, in random order (entry j swaps with a uniform index in [j, n)). k ≤ n.
template <typename T, std::uniform_random_bit_generator G>
void partial_shuffle(std::span<T> v, std::size_t k, G& rng) {
  for (std::size_t j = 0; j < k && j < v.size(); ++j)
    std::swap(v[j], v[j + static_cast<std::size_t>(uniform_index(v.size() - j, rng))]);
}

}  // namespace coulomb
