// SPDX-License-Identifier: MIT
// examples/common/text_experiment_porf_relu.cpp: the PORF-relu instantiation of
// run_text_experiment_with (text_experiment.hpp), compiled once for every example that runs
// experiments (the static library coulomb_text_experiment of examples/CMakeLists.txt).
#include "common/text_experiment.hpp"

namespace coulomb_examples {

template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Relu>>(
    const TextExperimentConfig&, const TextExperimentHooks&);

}  // namespace coulomb_examples
