// SPDX-License-Identifier: MIT
/// @file text/metrics.hpp
/// @brief Deprecated: the classification metrics moved to metrics/ (include
/// coulomb/metrics/evaluation.hpp, or metrics/classification.hpp and metrics/calibration.hpp).
#pragma once

#include "../metrics/evaluation.hpp"
