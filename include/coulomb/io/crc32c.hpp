// SPDX-License-Identifier: MIT
/// @file io/crc32c.hpp
/// @brief CRC-32C (Castagnoli), the checksum of coulomb's model files.
///
/// The cyclic redundancy check with the reflected Castagnoli polynomial 0x82F63B78
/// (Castagnoli, Bräuer & Herrmann, "Optimization of cyclic redundancy-check codes with 24 and 32
/// parity bits", IEEE Trans. Commun. 41(6), 1993), initial value and final XOR 0xFFFFFFFF, as
/// used by iSCSI (RFC 3720), ext4 and SSE4.2's `crc32` instruction. It detects every error burst
/// of at most 32 bits, so every corrupted byte and every pair of corrupted bytes less than 4 bytes
/// apart; other corruptions escape with probability 2⁻³². It guards against accidents (disk,
/// transfer, truncation), not against tampering.
///
/// The implementation is portable table code, "slicing by 8" (Kounavis & Berry, 2005): eight
/// 256-entry tables built at compile time let one step consume 8 bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace coulomb::io {

namespace detail {

/// The eight slicing tables: table[0] is the classic byte table, table[k][b] is the CRC of byte
/// b followed by k zero bytes.
inline constexpr std::array<std::array<std::uint32_t, 256>, 8> crc32c_tables = [] {
  constexpr std::uint32_t polynomial = 0x82F63B78u;  // x³² + x²⁸ + … + 1, bit-reversed
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) != 0 ? polynomial : 0u);
    t[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}();

}  // namespace detail

/// Continues a CRC-32C over `bytes`. Start with `crc = 0`; feeding a message in pieces gives the
/// same value as feeding it whole: `crc32c(b, crc32c(a)) == crc32c(a ‖ b)`.
inline std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept {
  const auto& t = detail::crc32c_tables;
  std::uint32_t c = ~crc;
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  auto byte_at = [&p](std::size_t i) { return static_cast<std::uint32_t>(p[i]); };
  while (n >= 8) {
    // Little-endian assembly of the first 4 bytes, independent of the host's byte order.
    const std::uint32_t lo =
        c ^ (byte_at(0) | (byte_at(1) << 8) | (byte_at(2) << 16) | (byte_at(3) << 24));
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][byte_at(4)] ^ t[2][byte_at(5)] ^ t[1][byte_at(6)] ^ t[0][byte_at(7)];
    p += 8;
    n -= 8;
  }
  for (std::size_t i = 0; i < n; ++i) c = (c >> 8) ^ t[0][(c ^ byte_at(i)) & 0xFFu];
  return ~c;
}

}  // namespace coulomb::io
