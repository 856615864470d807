// SPDX-License-Identifier: MIT
/// @file core/precision.hpp
/// @brief The arithmetic of inference (fp32, the default and the reference, or bf16 weights and
/// activations with fp32 accumulation), the run-time detection of the CPU's AVX512-BF16, and the
/// fallback to fp32 where it is missing. Documented in docs/model.md ("bf16 inference").
///
/// bf16 (bfloat16) keeps the 8-bit exponent of fp32 and 8 bits of significand (unit roundoff
/// u = 2⁻⁸). With InferencePrecision::bf16 the affine layers of a model's evaluation forward
/// round their weights and inputs to bf16 (round to nearest, ties to even) and accumulate the
/// products in fp32 (the `VDPBF16PS` instruction of AVX512-BF16); everything else (embeddings,
/// layer norms, attention features and sums, GELU, pooling) stays fp32. The instruction set is
/// chosen at run time, so the library never needs `-march` from its users: on a CPU without
/// AVX512-BF16 (or with the environment variable COULOMB_DISABLE_BF16 set to anything but 0 or
/// empty) a bf16 request falls back to fp32 and says so in a one-line notice.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

#include "error.hpp"

namespace coulomb {

/// The arithmetic of a model's evaluation forward. Training is always fp32.
enum class InferencePrecision {
  fp32,  ///< every product in the model's scalar type (the default and the reference)
  bf16   ///< affine layers with bf16 weights and inputs, fp32 accumulation (AVX512-BF16)
};

/// Name of an InferencePrecision value ("fp32" or "bf16").
inline const char* to_string(InferencePrecision precision) noexcept {
  return precision == InferencePrecision::bf16 ? "bf16" : "fp32";
}

/// The precision named `name` ("fp32" or "bf16"). Throws invalid_argument for any other name,
/// saying which are valid.
inline InferencePrecision parse_inference_precision(std::string_view name) {
  if (name == "fp32") return InferencePrecision::fp32;
  if (name == "bf16") return InferencePrecision::bf16;
  throw invalid_argument("coulomb::parse_inference_precision: unknown precision '" +
                         std::string(name) + "', expected fp32 or bf16");
}

/// What a request for a precision gives: the precision used and, when it differs from the one
/// requested, a one-line notice saying why (empty otherwise).
struct PrecisionChoice {
  InferencePrecision used = InferencePrecision::fp32;  ///< the precision the forward will use
  std::string notice;  ///< why the request fell back to fp32; empty when granted
};

namespace detail {

/// Whether this CPU executes AVX512-BF16 (with AVX512F/BW/VL), asked once per process
/// (`__builtin_cpu_supports`); false on other architectures and compilers.
inline bool cpu_has_avx512_bf16() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
#else
  return false;
#endif
}

/// Whether COULOMB_DISABLE_BF16 asks to ignore AVX512-BF16 (set, not empty, not "0"): how a
/// tool's fallback is tested on a CPU that has it.
inline bool bf16_disabled_by_environment() noexcept {
  const char* value = std::getenv("COULOMB_DISABLE_BF16");
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

}  // namespace detail

/// Whether the bf16 kernels can run here: the CPU has AVX512-BF16 and COULOMB_DISABLE_BF16 does
/// not disable it.
inline bool bf16_available() noexcept {
  return detail::cpu_has_avx512_bf16() && !detail::bf16_disabled_by_environment();
}

/// The precision a model of scalar type `Scalar` uses for `requested`: bf16 only for float
/// models where `available` (by default bf16_available(); pass false to force the fallback),
/// otherwise fp32 with a notice.
template <typename Scalar>
PrecisionChoice choose_inference_precision(InferencePrecision requested,
                                           bool available = bf16_available()) {
  if (requested == InferencePrecision::fp32) return {InferencePrecision::fp32, {}};
  if (!std::is_same_v<Scalar, float>)
    return {InferencePrecision::fp32,
            "bf16 inference needs a float model; this one is double: using fp32"};
  if (!available)
    return {InferencePrecision::fp32,
            detail::cpu_has_avx512_bf16()
                ? "AVX512-BF16 disabled (COULOMB_DISABLE_BF16 or forced): using fp32, not bf16"
                : "this CPU has no AVX512-BF16: using fp32, not bf16"};
  return {InferencePrecision::bf16, {}};
}

}  // namespace coulomb
