// SPDX-License-Identifier: MIT
// examples/common/text_experiment_favor.cpp: the FAVOR+ instantiation of
// run_text_experiment_with (text_experiment.hpp), compiled once for every example that runs
// experiments (the static library coulomb_text_experiment of examples/CMakeLists.txt).
#include "common/text_experiment.hpp"

namespace coulomb_examples {

template TextExperimentResult run_text_experiment_with<coulomb::FavorPlus<float>>(
    const TextExperimentConfig&, const TextExperimentHooks&);

}  // namespace coulomb_examples
