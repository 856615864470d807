// SPDX-License-Identifier: MIT
/// @file io/model_file.hpp
/// @brief coulomb's model and checkpoint file: a versioned, self-describing, checksummed
/// container of metadata (string → string), named blobs (bytes) and named tensors (matrices).
///
/// Layout, version 1 (all integers little-endian; byte by byte in docs/file_format.md):
///
///     header (56 bytes)   magic "\x89CLMB\r\n\x1A", version, byte-order marker, scalar type,
///                         reserved zeros, total file length, lengths of the three sections
///     metadata section    count, then (key, value) pairs, keys unique
///     blob section        count, then (name, bytes) pairs, names unique
///     tensor section      count, then (name, scalar type, rows, cols, column-major data)
///     trailer (4 bytes)   CRC-32C of every byte before it
///
/// The container in memory (ModelFile) is io/model_file_container.hpp; the reader, which trusts
/// nothing (parse_model_file, load_model_file, peek_scalar_type), io/model_file_reader.hpp; the
/// deterministic, atomic writer (write_model_file, model_file_bytes, save_model_file),
/// io/model_file_writer.hpp. Non-finite tensor entries are refused on both sides by default, so
/// that a NaN never reaches a saved model unnoticed.
#pragma once

#include "model_file_container.hpp"
#include "model_file_reader.hpp"
#include "model_file_writer.hpp"
