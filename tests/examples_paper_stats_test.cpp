// Tests of examples/common/paper_stats.hpp: the run table and the statistics of the
// reproduce_paper driver (resuming from its CSV, mean ± sd, paired 95 % intervals).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../examples/common/paper_stats.hpp"

namespace examples_paper_stats_test {

namespace paper = coulomb_examples::paper;

std::string temp_csv(const char* name) {
  const auto p = std::filesystem::temp_directory_path() /
                 (std::string("coulomb_paper_stats_") + name + ".csv");
  std::filesystem::remove(p);
  return p.string();
}

TEST_CASE("PaperStats_StudentQuantileMatchesTablesAndIsContinuous", "[examples]") {
  CHECK(paper::student_t_975(1) == Approx(12.706).epsilon(1e-4));
  CHECK(paper::student_t_975(4) == Approx(2.776).epsilon(1e-4));
  // Beyond the table the expansion takes over: the published 2.021 (df = 40), 2.000 (60),
  // 1.980 (120), decreasing towards the normal 1.960 with no jump at df = 30 → 31.
  CHECK(paper::student_t_975(40) == Approx(2.021).margin(1e-3));
  CHECK(paper::student_t_975(60) == Approx(2.000).margin(1e-3));
  CHECK(paper::student_t_975(120) == Approx(1.980).margin(1e-3));
  CHECK(paper::student_t_975(31) < paper::student_t_975(30));
  CHECK(paper::student_t_975(30) - paper::student_t_975(31) < 0.005);
  CHECK(paper::student_t_975(100000) == Approx(1.95996).margin(1e-4));
  CHECK_THROWS_WITH(paper::student_t_975(0), Catch::Contains("df must be at least 1"));
}

TEST_CASE("PaperStats_SummaryAndPairedInterval", "[examples]") {
  const std::vector<double> x{1.0, 2.0, 3.0, 4.0};
  const auto s = paper::summarize(x);
  CHECK(s.n == 4);
  CHECK(s.mean == Approx(2.5));
  CHECK(s.sd == Approx(std::sqrt(5.0 / 3.0)));

  // b − a = {0.5, 1.5, 1.0}: mean 1, sd 0.5, half-width t(2) · 0.5 / √3.
  const std::vector<double> a{1.0, 2.0, 3.0}, b{1.5, 3.5, 4.0};
  const auto p = paper::paired_difference(a, b);
  CHECK(p.n == 3);
  CHECK(p.mean == Approx(1.0));
  CHECK(p.sd == Approx(0.5));
  const double half = 4.303 * 0.5 / std::sqrt(3.0);
  CHECK(p.lo == Approx(1.0 - half));
  CHECK(p.hi == Approx(1.0 + half));
  // Pairing matters: the same samples shuffled against each other give another sd.
  const std::vector<double> b2{4.0, 1.5, 3.5};
  CHECK(paper::paired_difference(a, b2).sd != Approx(0.5));
  // One pair: a mean, no interval.
  const auto one = paper::paired_difference(std::vector<double>{1.0}, std::vector<double>{3.0});
  CHECK(one.mean == 2.0);
  CHECK(std::isnan(one.lo));
  CHECK_THROWS_WITH(paper::paired_difference(a, std::vector<double>{1.0}),
                    Catch::Contains("paired one to one"));
}

TEST_CASE("PaperStats_RunTableRoundTripsAndResumes", "[examples]") {
  const std::string path = temp_csv("roundtrip");
  {
    paper::RunTable t({"dataset", "seed"}, {"accuracy", "seconds"});
    t.append(path, {{"rt", "1"}, {0.75, 12.5}});
    t.append(path, {{"rt", "2"}, {0.1 + 0.2, 1e-300}});  // values round-trip exactly
  }
  // A run killed while writing leaves a torn last line: it is ignored on reload.
  { std::ofstream(path, std::ios::app) << "rt,3,0.7"; }
  paper::RunTable t({"dataset", "seed"}, {"accuracy", "seconds"});
  REQUIRE(t.load(path) == 2);
  CHECK(t.contains({"rt", "1"}));
  CHECK(t.contains({"rt", "2"}));
  CHECK_FALSE(t.contains({"rt", "3"}));
  CHECK(t.rows()[1].values[0] == 0.1 + 0.2);
  CHECK(t.rows()[1].values[1] == 1e-300);
  const auto acc = t.select({"rt", ""}, "accuracy", 1);
  REQUIRE(acc.size() == 2);
  CHECK(acc.at("1") == 0.75);
  std::filesystem::remove(path);
}

TEST_CASE("PaperStats_RunTableRejectsWhatItCannotReadBack", "[examples]") {
  const std::string path = temp_csv("reject");
  paper::RunTable t({"dataset", "seed"}, {"accuracy"});
  CHECK_THROWS_WITH(t.append(path, {{"a,b", "1"}, {0.5}}), Catch::Contains("comma"));
  CHECK_THROWS_WITH(t.append(path, {{"rt"}, {0.5}}), Catch::Contains("1 keys"));
  CHECK_THROWS_WITH(t.value_index("f1"), Catch::Contains("no value column 'f1'"));
  t.append(path, {{"rt", "1"}, {0.5}});
  // A table of other columns refuses the file instead of misreading it.
  paper::RunTable other({"dataset", "seed"}, {"f1"});
  CHECK_THROWS_WITH(other.load(path), Catch::Contains(":1: the columns differ"));
  // A damaged value is reported with its line and column.
  { std::ofstream(path, std::ios::app) << "rt,2,zero\n"; }
  paper::RunTable again({"dataset", "seed"}, {"accuracy"});
  CHECK_THROWS_WITH(again.load(path), Catch::Contains(":3: column 'accuracy' is not a number"));
  std::filesystem::remove(path);
}

}  // namespace examples_paper_stats_test
