// SPDX-License-Identifier: MIT
/// @file coulomb.hpp
/// @brief Umbrella header: everything coulomb offers.
///
/// coulomb learns the random-feature kernel of linear attention from labels (Badiei Khuzani et
/// al., *A Coulomb Particle Model for Learning Kernel Attention in Transformers*, 2026).
/// Folders follow the paper: features/ (random feature maps, §1), particles/ (alignment,
/// Riesz repulsion, the Hamiltonian and projected Langevin dynamics, §2–3), and, as they land,
/// attention/, nn/, train/.
#pragma once

#include "attention/layout.hpp"
#include "attention/linear_attention.hpp"
#include "attention/softmax_attention.hpp"
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
#include "particles/alignment.hpp"
#include "particles/baselines.hpp"
#include "particles/callbacks.hpp"
#include "particles/hamiltonian.hpp"
#include "particles/importance_sampling.hpp"
#include "particles/langevin.hpp"
#include "particles/riesz.hpp"
