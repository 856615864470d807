// SPDX-License-Identifier: MIT
// Writes the seed corpus of fuzz_model_file into the directory given as argument: a few small,
// valid model files (float and double; metadata, blobs, empty and non-empty tensors), and three
// tiny text models for what the fixtures of tests/data do not cover (softmax attention with the
// pair head, which is text-model version 2; FAVOR+ with the pair head's overlap features,
// version 3; SoftmaxFeat in double with shared Ω and Q = K).
// Built with the fuzzers; the files it writes are kept in fuzz/corpus/model_file/ (with copies
// of the text-model fixtures of tests/data, see fuzz/CMakeLists.txt).
#include <cstdio>
#include <string>

#include <coulomb/features/softmax_features.hpp>
#include <coulomb/io/model_file.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/nn/text_classifier.hpp>
#include <coulomb/text/vocabulary.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using coulomb::Matrix;
  coulomb::io::ModelFile<float> empty;
  coulomb::io::save_model_file(dir + "/empty_float.clmb", empty);

  coulomb::io::ModelFile<float> small;
  small.set_metadata("model.width", "8");
  small.set_metadata("model.feature_map", "favor+");
  small.add_blob("vocabulary", "coulomb-vocabulary 1\nlowercase 1\nsplit_punctuation 1\n");
  Matrix<float> w(2, 3);
  w << 1, -2, 0.5f, 3.25f, -0.0f, 7;
  small.add_tensor("encoder.0.w", w);
  small.add_tensor("encoder.0.b", Matrix<float>::Constant(3, 1, 0.125f));
  small.add_tensor("empty", Matrix<float>(0, 4));
  coulomb::io::save_model_file(dir + "/small_float.clmb", small);

  coulomb::io::ModelFile<double> dbl;
  dbl.set_metadata("optimizer.step", "12");
  dbl.add_blob("empty blob", "");
  dbl.add_tensor("omega", Matrix<double>::Identity(3, 2));
  dbl.add_tensor("scalar", Matrix<double>::Constant(1, 1, -1.5));
  coulomb::io::save_model_file(dir + "/small_double.clmb", dbl);

  // Text models: a vocabulary of a few words, the smallest widths.
  coulomb::VocabularyBuilder words;
  words.add_text("a fine , funny film ; the plot goes nowhere");
  const coulomb::Vocabulary vocab = words.build();
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = vocab.size();
  c.max_length = 8;
  c.d_model = 4;
  c.num_heads = 2;
  c.d_ff = 4;
  c.num_layers = 1;
  c.num_features = 3;
  c.num_threads = 1;

  coulomb::nn::TextClassifierConfig pair_head = c;
  pair_head.attention = coulomb::nn::AttentionKind::softmax;
  pair_head.use_segments = true;
  pair_head.pooling = coulomb::nn::PoolingKind::pair;
  pair_head.pair_hidden = 3;
  const coulomb::nn::TextClassifier<coulomb::FavorPlus<float>> softmax_model(pair_head, 5);
  coulomb::io::save_text_model(dir + "/text_model_softmax_pair_head.clmb", softmax_model, vocab,
                               {8, true}, {{"purpose", "fuzz seed"}});

  coulomb::nn::TextClassifierConfig overlap = c;
  overlap.use_segments = true;
  overlap.pooling = coulomb::nn::PoolingKind::pair;
  overlap.pair_overlap = true;
  coulomb::nn::TextClassifier<coulomb::FavorPlus<float>> overlap_model(overlap, 7);
  Eigen::ArrayXd mean(6), sd(6);
  mean << 0.7, 0.7, 0.5, 0.5, 0.4, 0.4;
  sd << 0.15, 0.15, 0.2, 0.2, 0.2, 0.2;
  overlap_model.set_overlap_standardization(mean, sd);
  coulomb::io::save_text_model(dir + "/text_model_pair_overlap.clmb", overlap_model, vocab,
                               {8, false});

  coulomb::nn::TextClassifierConfig shared = c;
  shared.shared_omega = true;
  shared.tied_qk = true;
  const coulomb::nn::TextClassifier<coulomb::SoftmaxFeat<double>> feat_model(shared, 6);
  coulomb::io::save_text_model(dir + "/text_model_softmax_feat_f64.clmb", feat_model, vocab,
                               {6, false});
  return 0;
}
