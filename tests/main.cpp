// SPDX-License-Identifier: MIT
// Catch2 runner of the coulomb unit tests. Prints the base seed of the run (from the
// environment variable COULOMB_TEST_SEED, or the fixed default), so that a failing randomized
// test can be reproduced with COULOMB_TEST_SEED=<seed>, then runs Catch.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>

#include "test_support.hpp"

int main(int argc, char* argv[]) {
  Catch::Session session;
  const int parse_status = session.applyCommandLine(argc, argv);
  if (parse_status != 0) return parse_status;

  std::uint64_t seed = 0;
  try {
    seed = coulomb_test::base_seed();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coulomb_tests: %s\n", e.what());
    return 2;
  }

  // Test discovery (catch_discover_tests runs --list-test-names-only) parses stdout line by
  // line, so the seed line is printed only when tests actually run.
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags ||
                       config.listReporters || config.showHelp;
  if (!listing) {
    std::printf("coulomb_tests: base seed %llu (%s; set COULOMB_TEST_SEED to change it)\n",
                static_cast<unsigned long long>(seed),
                coulomb_test::base_seed_from_env() ? "from COULOMB_TEST_SEED" : "default");
    std::fflush(stdout);
  }
  return session.run();
}
