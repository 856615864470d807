// SPDX-License-Identifier: MIT
// examples/common/text_experiment_instances.cpp: the instantiations of run_text_experiment_with
// (text_experiment.hpp), one per registered feature map, compiled once for every example that
// runs experiments (the static library coulomb_text_experiment of examples/CMakeLists.txt). They
// stay in one translation unit on purpose: most of what they instantiate (the Transformer's
// layers, Phase B, Eigen's float products) does not depend on the map, and one unit compiles it
// once where seven would compile it seven times.
#include "common/text_experiment.hpp"

namespace coulomb_examples {

template TextExperimentResult run_text_experiment_with<coulomb::FavorPlus<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Exp>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Softplus>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Relu>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::Rff<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::RffCosSin<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
template TextExperimentResult run_text_experiment_with<coulomb::SoftmaxFeat<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);

}  // namespace coulomb_examples
