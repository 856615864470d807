// SPDX-License-Identifier: MIT
// TSV and gzip-TSV reading (text/tsv.hpp, text/dataset.hpp, text/gzip.hpp): the GLUE column
// layouts on small files in tests/data/, malformed rows, damaged gzip data, hostile bytes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <coulomb/text/gzip.hpp>

#include "fifo_support.hpp"
#include "scratch_dir.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace text_reader_test {

namespace {

using coulomb::Index;
using coulomb_test::ScratchDir;

const std::string data_dir = COULOMB_TEST_DATA_DIR;

std::string data_file(const std::string& name) {
  return data_dir + "/" + name;
}

std::string file_bytes(const std::string& path) {
  return coulomb::read_file(path, "test");
}

/// The message of the io_error thrown by f (fails the test if none is thrown).
template <typename F>
std::string io_error_message(F&& f) {
  try {
    f();
  } catch (const coulomb::io_error& e) {
    return e.what();
  }
  FAIL("no coulomb::io_error was thrown");
  return {};
}

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("Text_Sst2ReadsTheSameInGlueAndBundledColumnOrder", "[text][io]") {
  const auto glue = coulomb::read_text_dataset(data_file("text_sst2_glue.tsv"));
  const auto bundled =
      coulomb::read_text_dataset(data_file("text_sst2_bundled.tsv"), coulomb::TextColumns::sst2());
  REQUIRE(glue.size() == 4);
  REQUIRE(bundled.size() == 4);
  CHECK_FALSE(glue.is_pair);
  CHECK(glue.labels() == std::vector<int>{1, 0, 1, 0});
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(glue.examples[i].text_a == bundled.examples[i].text_a);
    CHECK(glue.examples[i].label == bundled.examples[i].label);
    CHECK(glue.examples[i].line == i + 2);
  }
  // Text is kept byte for byte, trailing space included.
  CHECK(glue.examples[0].text_a == "a gentle , funny film ");
  CHECK(glue.class_counts() == std::vector<Index>{2, 2});
}

TEST_CASE("Text_BundledBenchmarksReadCompletely", "[text][io][gzip]") {
  // data/ ships SST-2 and Rotten Tomatoes (data/README.md gives their rows and label counts).
  const std::string dir = data_dir + "/../../data";  // tests/data → data/
  const auto sst2 =
      coulomb::read_text_dataset_gz(dir + "/sst2/validation.tsv.gz", coulomb::TextColumns::sst2());
  CHECK(sst2.size() == 872);
  CHECK(sst2.class_counts() == std::vector<Index>{428, 444});
  CHECK(sst2.empty_texts == 0);
  const auto rt = coulomb::read_text_dataset_gz(dir + "/rotten_tomatoes/validation.tsv.gz",
                                                coulomb::TextColumns::rotten_tomatoes());
  CHECK(rt.size() == 1066);
  CHECK(rt.class_counts() == std::vector<Index>{533, 533});
  const auto rt_train = coulomb::read_text_dataset_gz(dir + "/rotten_tomatoes/train.tsv.gz",
                                                      coulomb::TextColumns::rotten_tomatoes());
  CHECK(rt_train.size() == 8530);
  CHECK(rt_train.class_counts() == std::vector<Index>{4265, 4265});
}

TEST_CASE("Text_QqpReadsAsGlueDistributesIt", "[text][io]") {
  // id, qid1, qid2, question1, question2, is_duplicate; CR LF line ends; quotes are ordinary.
  const auto qqp =
      coulomb::read_text_dataset(data_file("text_qqp_glue.tsv"), coulomb::TextColumns::qqp());
  REQUIRE(qqp.size() == 3);
  CHECK(qqp.is_pair);
  CHECK(qqp.labels() == std::vector<int>{1, 0, 1});
  CHECK(qqp.examples[0].text_a == "How do I learn to cook rice?");
  CHECK(qqp.examples[0].text_b == "What is the best way to cook rice?");
  CHECK(qqp.examples[2].text_a == "What is \"machine learning\"?");
  // The generic table keeps every column.
  const auto table = coulomb::read_tsv(data_file("text_qqp_glue.tsv"));
  CHECK(table.header ==
        std::vector<std::string>{"id", "qid1", "qid2", "question1", "question2", "is_duplicate"});
  REQUIRE(table.rows.size() == 3);
  CHECK(table.rows[1][table.column("qid2")] == "404");
  CHECK(table.line_numbers == std::vector<std::size_t>{2, 3, 4});
  CHECK_FALSE(table.find_column("label").has_value());
  CHECK_THROWS_AS(table.column("label"), coulomb::io_error);
}

TEST_CASE("Text_BrokenQqpRowsAreReportedOrSkipped", "[text][io][input]") {
  // A line break inside a question splits one row into two lines of 4 fields each.
  const std::string path = data_file("text_qqp_broken.tsv");
  const std::string msg = io_error_message(
      [&] { (void)coulomb::read_text_dataset(path, coulomb::TextColumns::qqp()); });
  CHECK_THAT(msg, Contains("text_qqp_broken.tsv") && Contains("line 3") && Contains("expected 6") &&
                      Contains("found 4"));

  coulomb::TextReadOptions options;
  options.malformed = coulomb::MalformedRows::skip;
  const auto qqp = coulomb::read_text_dataset(path, coulomb::TextColumns::qqp(), options);
  REQUIRE(qqp.size() == 2);
  CHECK(qqp.labels() == std::vector<int>{1, 0});
  CHECK(qqp.examples[1].line == 5);
  CHECK(qqp.report.skipped_rows == 2);
  CHECK(qqp.report.skipped_lines == std::vector<std::size_t>{3, 4});
}

TEST_CASE("Text_GzipTsvReadsLikePlainTsv", "[text][io][gzip]") {
  if (!coulomb::has_zlib()) {
    CHECK_THROWS_AS(
        coulomb::read_text_dataset_gz(data_file("text_mrpc.tsv.gz"), coulomb::TextColumns::mrpc()),
        coulomb::io_error);
    return;
  }
  const auto mrpc =
      coulomb::read_text_dataset_gz(data_file("text_mrpc.tsv.gz"), coulomb::TextColumns::mrpc());
  REQUIRE(mrpc.size() == 3);
  CHECK(mrpc.is_pair);
  CHECK(mrpc.labels() == std::vector<int>{1, 0, 1});
  CHECK(mrpc.examples[1].text_a == "Shares rose 3 % in early trading .");
  CHECK(mrpc.examples[2].text_b == "The museum will reopen in May , she said .");
  CHECK(mrpc.examples[2].line == 4);

  // The auto reader takes either; the plain reader refuses gzip with a pointer to gzip.hpp.
  const auto same =
      coulomb::read_text_dataset_auto(data_file("text_mrpc.tsv.gz"), coulomb::TextColumns::mrpc());
  CHECK(same.examples.size() == mrpc.examples.size());
  const auto plain = coulomb::read_text_dataset_auto(data_file("text_sst2_glue.tsv"));
  CHECK(plain.size() == 4);
  CHECK_THAT(io_error_message([] {
               (void)coulomb::read_text_dataset(data_file("text_mrpc.tsv.gz"),
                                                coulomb::TextColumns::mrpc());
             }),
             Contains("gzip-compressed") && Contains("gzip.hpp"));
  const auto table = coulomb::read_tsv_gz(data_file("text_mrpc.tsv.gz"));
  CHECK(table.header == std::vector<std::string>{"label", "sentence1", "sentence2"});
}

TEST_CASE("Text_ReadTextFileAutoDecidesByContentNotName", "[text][io][gzip]") {
  // A gzip file named .tsv and a plain file named .tsv.gz: the first two bytes decide. A tool
  // reads the text once, looks at the header line, and parses the same text.
  ScratchDir dir("auto_by_content");
  const std::string plain = file_bytes(data_file("text_sst2_glue.tsv"));
  const std::string plain_named_gz = dir.write("sst2.tsv.gz", plain);
  CHECK(coulomb::read_text_file_auto(plain_named_gz) == plain);
  const auto sst2 = coulomb::read_text_dataset_auto(plain_named_gz);
  CHECK(sst2.size() == 4);
  const auto parsed = coulomb::parse_text_dataset(coulomb::read_text_file_auto(plain_named_gz),
                                                  plain_named_gz, coulomb::TextColumns::sst2(), {});
  CHECK(parsed.labels() == sst2.labels());
  CHECK(parsed.source == plain_named_gz);
  CHECK_THAT(io_error_message(
                 [&] { (void)coulomb::read_text_file_auto((dir.path / "absent.tsv").string()); }),
             Contains("coulomb::read_text_file_auto") && Contains("absent.tsv'") &&
                 Contains("cannot open"));
  if (!coulomb::has_zlib()) return;

  const std::string gz = file_bytes(data_file("text_mrpc.tsv.gz"));
  const std::string text = coulomb::gunzip(gz, "mrpc");
  const std::string gzip_named_tsv = dir.write("mrpc.tsv", gz);
  const std::string read = coulomb::read_text_file_auto(gzip_named_tsv);
  CHECK(read == text);
  CHECK(read.substr(0, read.find('\n')) == "label\tsentence1\tsentence2");
  const auto mrpc =
      coulomb::parse_text_dataset(read, gzip_named_tsv, coulomb::TextColumns::mrpc(), {});
  CHECK(mrpc.size() == 3);
  CHECK(mrpc.examples[2].line == 4);
  CHECK(coulomb::read_text_dataset_auto(gzip_named_tsv, coulomb::TextColumns::mrpc()).size() == 3);
  // Damaged gzip data is an io_error naming the file, whatever its name.
  const std::string cut = dir.write("cut.tsv", gz.substr(0, gz.size() / 2));
  CHECK_THAT(io_error_message([&] { (void)coulomb::read_text_file_auto(cut); }),
             Contains("cut.tsv'") && Contains("truncated"));
}

#ifdef COULOMB_TEST_HAVE_FIFO

TEST_CASE("Text_ReadTextFileAutoReadsAFifoOnce", "[text][io][gzip][fifo]") {
  // A named pipe can be read once: plain or gzip, the text comes through whole.
  ScratchDir dir("auto_fifo");
  const std::string fifo = (dir.path / "data.fifo").string();
  auto through_fifo = [&](const std::string& fed, auto&& read) {
    std::filesystem::remove(fifo);
    coulomb_test::FifoFeeder feeder(fifo, fed);
    REQUIRE(feeder.created());
    return read(fifo);
  };
  const std::string plain = file_bytes(data_file("text_sst2_glue.tsv"));
  auto read_text = [](const std::string& path) { return coulomb::read_text_file_auto(path); };
  CHECK(through_fifo(plain, read_text) == plain);
  const auto sst2 = through_fifo(
      plain, [](const std::string& path) { return coulomb::read_text_dataset_auto(path); });
  CHECK(sst2.size() == 4);
  CHECK(sst2.source == fifo);
  if (!coulomb::has_zlib()) return;
  const std::string gz = file_bytes(data_file("text_mrpc.tsv.gz"));
  CHECK(through_fifo(gz, read_text) == coulomb::gunzip(gz, "mrpc"));
  CHECK_THAT(io_error_message([&] { (void)through_fifo(gz.substr(0, 40), read_text); }),
             Contains("'" + fifo + "'") && Contains("truncated"));
}

#endif

TEST_CASE("Text_DamagedGzipAlwaysThrowsIoError", "[text][io][gzip][input]") {
  if (!coulomb::has_zlib()) return;
  const std::string gz = file_bytes(data_file("text_mrpc.tsv.gz"));
  const std::string text = coulomb::gunzip(gz, "mrpc");
  REQUIRE(text.substr(0, 6) == "label\t");

  SECTION("every truncation") {
    for (std::size_t n = 0; n < gz.size(); ++n) {
      INFO("first " << n << " bytes");
      CHECK_THROWS_AS(coulomb::gunzip(gz.substr(0, n), "cut"), coulomb::io_error);
    }
    CHECK_THAT(io_error_message([&] { (void)coulomb::gunzip(gz.substr(0, gz.size() - 3), "c"); }),
               Contains("truncated"));
  }
  SECTION("every flipped bit of the compressed data and the trailer") {
    // Bytes 0-9 are the header (magic, method, flags, mtime, extra flags, OS); mtime, XFL and
    // OS are not checked by gzip, so the payload and the CRC-32/length trailer are flipped.
    for (std::size_t i = 10; i < gz.size(); ++i) {
      for (const int bit : {0, 7}) {
        std::string bad = gz;
        bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ (1U << bit));
        INFO("byte " << i << " bit " << bit);
        CHECK_THROWS_AS(coulomb::gunzip(bad, "flipped"), coulomb::io_error);
      }
    }
  }
  SECTION("concatenated members, trailing garbage, size limit, not gzip") {
    CHECK(coulomb::gunzip(gz + gz, "twice") == text + text);
    CHECK_THAT(io_error_message([&] { (void)coulomb::gunzip(gz + "xyz", "tail"); }),
               Contains("after the end of the gzip stream"));
    coulomb::GzipOptions limit;
    limit.max_bytes = text.size();
    CHECK(coulomb::gunzip(gz, "limit", limit) == text);
    limit.max_bytes = text.size() - 1;
    CHECK_THAT(io_error_message([&] { (void)coulomb::gunzip(gz, "limit", limit); }),
               Contains("max_bytes"));
    CHECK_THROWS_AS(coulomb::gunzip("label\tsentence\n", "plain"), coulomb::io_error);
    CHECK_THROWS_AS(coulomb::gunzip("", "empty"), coulomb::io_error);
  }
  SECTION("a truncated file names the file") {
    ScratchDir dir("gzip_cut");
    const auto path = dir.write("cut.tsv.gz", gz.substr(0, gz.size() / 2));
    CHECK_THAT(io_error_message([&] {
                 (void)coulomb::read_text_dataset_gz(path, coulomb::TextColumns::mrpc());
               }),
               Contains("cut.tsv.gz") && Contains("truncated"));
  }
}

TEST_CASE("Text_MalformedRowsNameFileAndLine", "[text][io][input]") {
  using coulomb::parse_text_dataset;
  const auto cols = coulomb::TextColumns::sst2();
  auto message = [&](const std::string& text) {
    return io_error_message([&] { (void)parse_text_dataset(text, "mem.tsv", cols); });
  };
  SECTION("wrong number of fields") {
    CHECK_THAT(message("label\tsentence\n1\tfine\n0\ttoo\tmany\n"),
               Contains("'mem.tsv' line 3") && Contains("expected 2") && Contains("found 3"));
    CHECK_THAT(message("label\tsentence\n1\tfine\n0\n"), Contains("line 3"));
  }
  SECTION("labels that are not 0 or 1") {
    for (const std::string bad : {"2", "-1", "x", "1.0", "", "01x", "99999999999999999999"}) {
      INFO("label '" << bad << "'");
      CHECK_THAT(message("label\tsentence\n1\tfine\n" + bad + "\tnot fine\n"),
                 Contains("line 3") && Contains("not an integer in [0, 2)"));
    }
    // Spaces around a label are accepted; three classes allow 2.
    CHECK(parse_text_dataset("label\tsentence\n 1 \tok\n", "m", cols).examples[0].label == 1);
    coulomb::TextReadOptions three;
    three.num_classes = 3;
    CHECK(parse_text_dataset("label\tsentence\n2\tok\n", "m", cols, three).examples[0].label == 2);
    three.num_classes = 1;
    CHECK_THROWS_AS(parse_text_dataset("label\tsentence\n0\tok\n", "m", cols, three),
                    coulomb::invalid_argument);
  }
  SECTION("missing, duplicated and absent header") {
    CHECK_THAT(message("lab\tsentence\n1\tx\n"),
               Contains("no column 'label'") && Contains("line 1"));
    CHECK_THAT(message("label\tsentence\tlabel\n1\tx\t0\n"), Contains("more than once"));
    CHECK_THAT(message(""), Contains("no header"));
    CHECK_THAT(message("\n\r\n\n"), Contains("no header"));
  }
  SECTION("byte-order mark, CR LF, blank lines, no final newline, empty text") {
    const auto d = parse_text_dataset("\xEF\xBB\xBFlabel\tsentence\r\n1\tone\r\n\n0\t  \r\n1\tlast",
                                      "m", cols);
    REQUIRE(d.size() == 3);
    CHECK(d.examples[0].text_a == "one");
    CHECK(d.examples[1].line == 4);
    CHECK(d.examples[2].text_a == "last");
    CHECK(d.report.blank_lines == 1);
    CHECK(d.empty_texts == 1);
  }
  SECTION("unlabelled files") {
    coulomb::TextColumns test_split{"", "sentence", ""};
    const auto d = parse_text_dataset("index\tsentence\n0\tno label here\n", "m", test_split);
    CHECK_FALSE(d.is_labelled);
    CHECK(d.labels() == std::vector<int>{-1});
  }
  SECTION("unreadable files") {
    CHECK_THAT(io_error_message([] { (void)coulomb::read_text_dataset("/nonexistent/x.tsv"); }),
               Contains("/nonexistent/x.tsv") && Contains("cannot open"));
    CHECK_THAT(io_error_message([] { (void)coulomb::read_text_dataset(data_dir); }),
               Contains("directory"));
    CHECK_THROWS_AS(coulomb::read_text_dataset_auto("/nonexistent/x.tsv.gz"), coulomb::io_error);
  }
}

TEST_CASE("Text_HostileBytesParseOrThrowIoError", "[text][io][input]") {
  // Random byte strings rich in TAB, LF, CR, NUL, digits and high bytes: the readers either
  // return a consistent result or throw coulomb::io_error, never anything else.
  auto rng = coulomb_test::test_rng("Text_HostileBytesParseOrThrowIoError");
  const std::string alphabet = std::string("\t\n\r\n\t01 a\xEF\xBB\xBF\xFF\x80", 15) + '\0';
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto len = static_cast<std::size_t>(coulomb::uniform_index(120, rng));
    std::string text;
    if (trial % 2 == 0) text = "label\tsentence\n";
    for (std::size_t k = 0; k < len; ++k) {
      text += alphabet[static_cast<std::size_t>(coulomb::uniform_index(alphabet.size(), rng))];
    }
    try {
      const auto table = coulomb::parse_tsv(text, "fuzz");
      for (const auto& row : table.rows) REQUIRE(row.size() == table.header.size());
      REQUIRE(table.rows.size() == table.line_numbers.size());
    } catch (const coulomb::io_error&) {
    }
    try {
      coulomb::TextReadOptions options;
      options.malformed =
          trial % 3 == 0 ? coulomb::MalformedRows::skip : coulomb::MalformedRows::error;
      const auto d =
          coulomb::parse_text_dataset(text, "fuzz", coulomb::TextColumns::sst2(), options);
      for (const auto& e : d.examples) REQUIRE((e.label == 0 || e.label == 1));
      ++parsed;
    } catch (const coulomb::io_error&) {
    }
    if (coulomb::has_zlib()) {
      try {
        (void)coulomb::gunzip(std::string("\x1F\x8B", 2) + text, "fuzz");
      } catch (const coulomb::io_error&) {
      }
    }
  }
  CHECK(parsed > 0);
}

TEST_CASE("Text_BundledDatasetsMatchTheirProvenanceNotes", "[text][io][gzip][data]") {
  // The shared data directory (../shared/data from the repository) is optional; when it is
  // there, its files must read with the row and label counts its README gives.
  const std::filesystem::path shared =
      std::filesystem::path(data_dir).parent_path().parent_path().parent_path() / "shared" / "data";
  if (!coulomb::has_zlib() || !std::filesystem::exists(shared / "rotten_tomatoes")) {
    WARN("shared data not found next to the repository; skipped");
    return;
  }
  const auto rt =
      coulomb::read_text_dataset_gz((shared / "rotten_tomatoes/validation.tsv.gz").string(),
                                    coulomb::TextColumns::rotten_tomatoes());
  CHECK(rt.size() == 1066);
  CHECK(rt.class_counts() == std::vector<Index>{533, 533});
  const auto mrpc = coulomb::read_text_dataset_gz((shared / "mrpc/validation.tsv.gz").string(),
                                                  coulomb::TextColumns::mrpc());
  CHECK(mrpc.size() == 408);
  CHECK(mrpc.class_counts() == std::vector<Index>{129, 279});
  const auto sst = coulomb::read_text_dataset_gz((shared / "sst2/validation.tsv.gz").string(),
                                                 coulomb::TextColumns::sst2());
  CHECK(sst.size() == 872);
  CHECK(sst.class_counts() == std::vector<Index>{428, 444});
}

TEST_CASE("Text_SwappedPairsAppendEveryPairInTheOtherOrder", "[text][data]") {
  coulomb::TextDataset pairs;
  pairs.source = "pairs.tsv";
  pairs.is_pair = true;
  pairs.examples = {{"a b", "c", 1, 2}, {"d", "e f", 0, 3}, {"", "g", 1, 4}};
  const coulomb::TextDataset both = coulomb::with_swapped_pairs(pairs);
  REQUIRE(both.size() == 6);
  CHECK(both.is_pair);
  CHECK(both.source == pairs.source);
  for (Index i = 0; i < 3; ++i) {
    const auto& e = pairs.examples[static_cast<std::size_t>(i)];
    const auto& kept = both.examples[static_cast<std::size_t>(i)];
    const auto& swapped = both.examples[static_cast<std::size_t>(i + 3)];
    CHECK((kept.text_a == e.text_a && kept.text_b == e.text_b));
    CHECK((swapped.text_a == e.text_b && swapped.text_b == e.text_a));
    CHECK((swapped.label == e.label && swapped.line == e.line));
  }
  CHECK(both.class_counts() == std::vector<Index>{2, 4});

  coulomb::TextDataset single;
  single.source = "single.tsv";
  single.examples = {{"a", "", 0, 2}};
  CHECK_THROWS_AS(coulomb::with_swapped_pairs(single), coulomb::invalid_argument);
  CHECK_THROWS_WITH(
      coulomb::with_swapped_pairs(single),
      Catch::Matchers::Contains("single.tsv") && Catch::Matchers::Contains("single sentences"));
}

}  // namespace text_reader_test
