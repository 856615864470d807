// SPDX-License-Identifier: MIT
/// @file coulomb.hpp
/// @brief Umbrella header: everything coulomb offers.
///
/// coulomb learns the random-feature kernel of linear attention from labels (Badiei Khuzani et
/// al., *A Coulomb Particle Model for Learning Kernel Attention in Transformers*, 2026).
/// Folders follow the paper: features/ (random feature maps, §1), particles/ (alignment,
/// Riesz repulsion, the Hamiltonian and projected Langevin dynamics, §2–3), and, as they land,
/// attention/, nn/, train/; text/ stands beside them (TSV datasets, tokenizer, vocabulary,
/// batching, perturbations), and so do metrics/ (accuracy, MCC, F1, ECE, log loss, Brier) and
/// data/ (generated sequence tasks: ListOps, MQAR). text/gzip.hpp needs zlib and is not
/// included here: include it yourself and link coulomb::gzip.
#pragma once

#include "attention/layout.hpp"
#include "attention/linear_attention.hpp"
#include "attention/softmax_attention.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "data/listops.hpp"
#include "data/mqar.hpp"
#include "data/token_sequences.hpp"
#include "features/draw.hpp"
#include "features/favor.hpp"
#include "features/feature_map.hpp"
#include "features/kernels.hpp"
#include "features/porf.hpp"
#include "features/rff.hpp"
#include "features/softmax_features.hpp"
#include "io/atomic_file.hpp"
#include "io/crc32c.hpp"
#include "io/model_file.hpp"
#include "io/parameters.hpp"
#include "io/text_model.hpp"
#include "metrics/calibration.hpp"
#include "metrics/classification.hpp"
#include "metrics/evaluation.hpp"
#include "nn/attention_block.hpp"
#include "nn/embedding.hpp"
#include "nn/encoder.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"
#include "nn/parameter.hpp"
#include "nn/pooling.hpp"
#include "nn/text_classifier.hpp"
#include "particles/alignment.hpp"
#include "particles/baselines.hpp"
#include "particles/callbacks.hpp"
#include "particles/hamiltonian.hpp"
#include "particles/importance_sampling.hpp"
#include "particles/langevin.hpp"
#include "particles/riesz.hpp"
#include "particles/tilted_langevin.hpp"
#include "text/batching.hpp"
#include "text/dataset.hpp"
#include "text/encoder.hpp"
#include "text/overlap.hpp"
#include "text/perturb.hpp"
#include "text/tokenizer.hpp"
#include "text/tsv.hpp"
#include "text/vocabulary.hpp"
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/early_stopping.hpp"
#include "train/gradients.hpp"
#include "train/overlap_head.hpp"
#include "train/parameter_snapshot.hpp"
#include "train/phase_a.hpp"
#include "train/phase_b.hpp"
#include "train/progress.hpp"
#include "train/resume.hpp"
#include "train/schedule.hpp"
