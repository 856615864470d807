// SPDX-License-Identifier: MIT
/// @file features.hpp
/// @brief The random-feature maps only (core + features/), for code that needs nothing else.
#pragma once

#include "core/check.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "features/draw.hpp"
#include "features/favor.hpp"
#include "features/feature_map.hpp"
#include "features/kernels.hpp"
#include "features/porf.hpp"
#include "features/rff.hpp"
#include "features/softmax_features.hpp"
