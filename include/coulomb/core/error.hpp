// SPDX-License-Identifier: MIT
/// @file core/error.hpp
/// @brief The exception hierarchy of coulomb.
///
/// Every error a user can trigger is reported by throwing one of these types; the message names
/// the function and the offending argument (or file and line). `assert` is used only for
/// internal invariants that no input can break.
///
///     std::runtime_error
///      └─ coulomb::error              catch-all for the library
///          ├─ coulomb::invalid_argument   bad shapes, sizes, parameters, non-finite inputs
///          ├─ coulomb::numerical_error    a computation produced NaN/Inf or cannot proceed
///          └─ coulomb::io_error           unreadable, malformed or corrupted files
#pragma once

#include <stdexcept>
#include <string>

namespace coulomb {

/// Base class of all exceptions thrown by coulomb.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An argument has the wrong shape, size or value, or contains NaN/Inf.
class invalid_argument : public error {
 public:
  using error::error;
};

/// A computation produced a non-finite value or cannot continue.
class numerical_error : public error {
 public:
  using error::error;
};

/// A file cannot be read or written, or its contents are malformed.
class io_error : public error {
 public:
  using error::error;
};

}  // namespace coulomb
