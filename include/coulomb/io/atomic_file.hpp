// SPDX-License-Identifier: MIT
/// @file io/atomic_file.hpp
/// @brief Forwarder: crash-safe file replacement moved to core/atomic_file.hpp (text/ and io/
/// both use it); its functions stay available under coulomb::io.
#pragma once

#include "../core/atomic_file.hpp"

namespace coulomb::io {

using coulomb::check_output_path;
using coulomb::read_file;
using coulomb::resolve_output_path;
using coulomb::standard_stream_of;
using coulomb::write_file_atomically;

}  // namespace coulomb::io
