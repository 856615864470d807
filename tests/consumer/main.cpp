// Downstream consumer of the installed coulomb package (see
// run_consumer_test.cmake). Built from two translation units that both include
// the umbrella header, so any non-inline definition in a header fails to link.
#include <coulomb/coulomb.hpp>

#include <cstdio>
#include <string_view>

// Defined in second_tu.cpp.
const char* coulomb_consumer_second_tu_version();

int main() {
  const std::string_view version = coulomb::version_string();
  const std::string_view version_second_tu = coulomb_consumer_second_tu_version();
  if (version.empty() || version != version_second_tu) {
    std::fprintf(stderr, "consumer: inconsistent version strings '%s' / '%s'\n",
                 coulomb::version_string(), coulomb_consumer_second_tu_version());
    return 1;
  }
#ifdef COULOMB_CONSUMER_EXPECTED_VERSION
  if (version.find(COULOMB_CONSUMER_EXPECTED_VERSION) == std::string_view::npos) {
    std::fprintf(stderr, "consumer: version_string() '%s' does not contain package version %s\n",
                 coulomb::version_string(), COULOMB_CONSUMER_EXPECTED_VERSION);
    return 1;
  }
#endif

  coulomb::Rng rng(42);
  coulomb::FavorPlus<double> fm(/*input_dim=*/8, /*num_particles=*/16, rng);
  Eigen::MatrixXd X = Eigen::MatrixXd::Random(4, 8);
  Eigen::MatrixXd Phi = fm.map(X);
  if (!(Phi.rows() == 4 && Phi.cols() == 16 && (Phi.array() > 0).all())) {
    std::fprintf(stderr,
                 "consumer: FavorPlus::map returned a %ldx%ld matrix (expected 4x16, > 0)\n",
                 static_cast<long>(Phi.rows()), static_cast<long>(Phi.cols()));
    return 1;
  }

  std::printf("coulomb consumer OK (coulomb %s)\n", coulomb::version_string());
  return 0;
}
