// SPDX-License-Identifier: MIT
// Writes the seed corpus of fuzz_model_file into the directory given as argument: a few small,
// valid model files (float and double; metadata, blobs, empty and non-empty tensors). Built with
// the fuzzers; the files it writes are kept in fuzz/corpus/model_file/.
#include <cstdio>
#include <string>

#include <coulomb/io/model_file.hpp>

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
  return 0;
}
