// SPDX-License-Identifier: MIT
// The model file of io/model_file.hpp: round trips (float, double, empty tensors, blobs, odd
// metadata), the exact header bytes, the CRC-32C, rejection of wrong type / version / magic /
// duplicate names / absurd lengths / non-finite entries, atomic writes that fail without
// touching the previous file or leaving a temporary behind, parameters by name with shape
// checks, configuration checks, and a checkpoint that resumes training exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#define COULOMB_TEST_POSIX 1
#endif

#include <coulomb/core/random.hpp>
#include <coulomb/io/model_file.hpp>
#include <coulomb/io/parameters.hpp>
#include <coulomb/nn/parameter.hpp>
#include <coulomb/train/adamw.hpp>
#include <coulomb/train/checkpoint.hpp>
#include <coulomb/train/early_stopping.hpp>

#include "fifo_support.hpp"
#include "scratch_dir.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_model_file_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::io_error;
using coulomb::Matrix;
using coulomb::io::ModelFile;
using Bytes = std::vector<std::byte>;
namespace fs = std::filesystem;
using coulomb_test::ScratchDir;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::span<const std::byte> as_span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

/// Recomputes the CRC-32C trailer after a deliberate edit, so that the structural checks behind
/// the checksum are reached.
void fix_checksum(Bytes& image) {
  const std::size_t end = image.size() - 4;
  const std::uint32_t crc = coulomb::io::crc32c(std::span<const std::byte>(image).first(end));
  for (std::size_t i = 0; i < 4; ++i) image[end + i] = static_cast<std::byte>(crc >> (8 * i));
}

/// Offset of the first occurrence of `text` in `image`.
std::size_t find_text(const Bytes& image, std::string_view text) {
  const auto it = std::search(image.begin(), image.end(), text.begin(), text.end(),
                              [](std::byte b, char c) { return b == static_cast<std::byte>(c); });
  REQUIRE(it != image.end());
  return static_cast<std::size_t>(it - image.begin());
}

void put_u64(Bytes& image, std::size_t at, std::uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) image[at + i] = static_cast<std::byte>(v >> (8 * i));
}

template <typename S>
ModelFile<S> sample_file() {
  ModelFile<S> f;
  f.set_metadata("model.width", "64");
  f.set_metadata("odd", std::string("tab\there\nnewline \"quote\" = é € \x01\xFF", 31) +
                            std::string(1, '\0') + "after-nul");
  f.set_metadata("empty", "");
  f.set_metadata(std::string("key with spaces, ünïcode and \x7F"), "v");
  std::string all_bytes;
  for (int c = 0; c < 256; ++c) all_bytes.push_back(static_cast<char>(c));
  f.add_blob("vocabulary", all_bytes);
  f.add_blob("empty blob", "");
  Matrix<S> w(3, 5);
  for (Index k = 0; k < w.size(); ++k) w.data()[k] = static_cast<S>(0.1 * k - 0.7);
  w(0, 0) = S(-0.0);
  w(1, 0) = std::numeric_limits<S>::denorm_min();
  w(2, 0) = std::numeric_limits<S>::max();
  w(0, 1) = std::numeric_limits<S>::lowest();
  f.add_tensor("encoder.0.w", w);
  f.add_tensor("empty 0x0", Matrix<S>(0, 0));
  f.add_tensor("empty 0x3", Matrix<S>(0, 3));
  f.add_tensor("empty 4x0", Matrix<S>(4, 0));
  f.add_tensor("scalar", Matrix<S>::Constant(1, 1, S(42)));
  return f;
}

/// A buffer that accepts `budget` bytes, then fails every write.
class FailingBuffer : public std::streambuf {
 public:
  explicit FailingBuffer(std::size_t budget) : budget_(budget) {}

 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override {
    const auto take = std::min<std::streamsize>(n, static_cast<std::streamsize>(budget_));
    budget_ -= static_cast<std::size_t>(take);
    return take;
  }
  int_type overflow(int_type) override { return traits_type::eof(); }

 private:
  std::size_t budget_;
};

}  // namespace

TEMPLATE_TEST_CASE("ModelFile_RoundTrip", "[io][model_file]", float, double) {
  using S = TestType;
  const ModelFile<S> f = sample_file<S>();
  const Bytes image = coulomb::io::model_file_bytes(f);
  const ModelFile<S> g = coulomb::io::parse_model_file<S>(image, "memory");
  CHECK(g == f);
  CHECK(g.source() == "memory");
  CHECK(g.metadata_value("odd") == f.metadata_value("odd"));
  CHECK(g.blob("vocabulary").size() == 256);
  CHECK(g.tensor("empty 0x3").cols() == 3);
  CHECK(g.tensor("empty 4x0").rows() == 4);
  CHECK(std::signbit(g.tensor("encoder.0.w")(0, 0)));
  CHECK(g.tensors().front().name == "encoder.0.w");  // insertion order is kept
  // Deterministic: the same contents give the same bytes.
  CHECK(coulomb::io::model_file_bytes(g) == image);

  ScratchDir dir(std::string("roundtrip_") + (sizeof(S) == 4 ? "f" : "d"));
  const std::string path = dir.file("model.clmb");
  coulomb::io::save_model_file(path, f);
  const ModelFile<S> h = coulomb::io::load_model_file<S>(path);
  CHECK(h == f);
  CHECK(h.source() == path);
  const std::string on_disk = read_all(path);
  CHECK(Bytes(as_span(on_disk).begin(), as_span(on_disk).end()) == image);
  CHECK(dir.entries() == std::vector<std::string>{"model.clmb"});
  CHECK(coulomb::io::peek_scalar_type(as_span(on_disk), path) == coulomb::io::scalar_type_of<S>());
  CHECK(coulomb::io::peek_scalar_type(path) == coulomb::io::scalar_type_of<S>());
  CHECK_THROWS_WITH(coulomb::io::peek_scalar_type(dir.file("absent.clmb")),
                    Contains("absent.clmb': cannot open"));
  // Through a stream.
  std::ostringstream os;
  coulomb::io::write_model_file(os, f);
  CHECK(os.str() == on_disk);
}

TEST_CASE("ModelFile_HeaderBytesAndChecksum", "[io][model_file]") {
  // CRC-32C check value (RFC 3720 / the Castagnoli polynomial's catalogue entry).
  const std::string check = "123456789";
  CHECK(coulomb::io::crc32c(as_span(check)) == 0xE3069283u);
  CHECK(coulomb::io::crc32c({}) == 0u);
  // Incremental equals whole, across the 8-byte slicing boundary.
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text.push_back(static_cast<char>(i * 7 + 3));
  const auto whole = coulomb::io::crc32c(as_span(long_text));
  for (const std::size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u}) {
    const auto s = as_span(long_text);
    CHECK(coulomb::io::crc32c(s.subspan(cut), coulomb::io::crc32c(s.first(cut))) == whole);
  }

  ModelFile<float> f;
  f.add_tensor("t", Matrix<float>::Constant(1, 1, 1.0f));
  const Bytes b = coulomb::io::model_file_bytes(f);
  const unsigned char expected_header[] = {0x89, 'C', 'L', 'M', 'B', '\r', '\n', 0x1A,  // magic
                                           1,    0,   0,   0,                           // version 1
                                           4,    3,   2,   1,  // byte-order marker 0x01020304
                                           1,                  // float32
                                           0,    0,   0,   0,   0,   0,    0};  // reserved
  REQUIRE(b.size() == 56 + 8 + 8 + (8 + 4 + 1 + 1 + 16 + 4) + 4);
  for (std::size_t i = 0; i < sizeof expected_header; ++i) {
    INFO("byte " << i);
    CHECK(static_cast<unsigned char>(b[i]) == expected_header[i]);
  }
  CHECK(static_cast<unsigned char>(b[24]) == b.size());  // total length, little-endian
  CHECK(static_cast<unsigned char>(b[32]) == 8);         // empty metadata: the count only
  CHECK(static_cast<unsigned char>(b[40]) == 8);         // no blobs
  CHECK(static_cast<unsigned char>(b[48]) == 34);        // one 1×1 float tensor named "t"
  // 1.0f = 0x3F800000, little-endian, just before the trailer.
  CHECK(static_cast<unsigned char>(b[b.size() - 5]) == 0x3F);
  CHECK(static_cast<unsigned char>(b[b.size() - 6]) == 0x80);
}

TEST_CASE("ModelFile_RejectsWrongTypeVersionMagicAndByteOrder", "[io][model_file]") {
  const Bytes image = coulomb::io::model_file_bytes(sample_file<float>());
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<double>(image, "f.clmb"),
                    Contains("'f.clmb' offset 16: the file stores float32 tensors, the reader "
                             "expects float64"));
  Bytes v = image;
  v[8] = std::byte{2};
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<float>(v, "f.clmb"),
                    Contains("unsupported format version 2 (this build reads version 1)"));
  Bytes m = image;
  m[1] = std::byte{'X'};
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<float>(m, "f.clmb"),
                    Contains("offset 0: not a coulomb model file"));
  Bytes e = image;
  std::swap(e[12], e[15]);
  std::swap(e[13], e[14]);
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<float>(e, "f.clmb"),
                    Contains("bad byte-order marker"));
  Bytes t = image;
  t[16] = std::byte{9};
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<float>(t, "f.clmb"),
                    Contains("unknown scalar type code 9"));
  const std::string text = "label\tsentence\n1\thello\n";
  CHECK_THROWS_AS(coulomb::io::parse_model_file<float>(as_span(text), "data.tsv"), io_error);
  CHECK_THROWS_AS(coulomb::io::parse_model_file<float>({}, "empty"), io_error);
}

TEST_CASE("ModelFile_RejectsDuplicatesAndAbsurdLengthsBehindAValidChecksum", "[io][model_file]") {
  ModelFile<double> f;
  f.set_metadata("key1", "a");
  f.set_metadata("key2", "b");
  f.add_blob("blobA", "xyz");
  f.add_blob("blobB", "uvw");
  f.add_tensor("tensorA", Matrix<double>::Ones(2, 2));
  f.add_tensor("tensorB", Matrix<double>::Ones(2, 2));
  const Bytes image = coulomb::io::model_file_bytes(f);
  auto rejects = [](Bytes edited, const std::string& what) {
    fix_checksum(edited);
    CHECK_THROWS_WITH(coulomb::io::parse_model_file<double>(edited, "edited.clmb"),
                      Contains("'edited.clmb' offset") && Contains(what));
  };
  auto rename = [&](std::string_view from, char last) {
    Bytes e = image;
    e[find_text(e, from) + from.size() - 1] = static_cast<std::byte>(last);
    return e;
  };
  rejects(rename("key2", '1'), "duplicate metadata key 'key1'");
  rejects(rename("blobB", 'A'), "duplicate blob name 'blobA'");
  rejects(rename("tensorB", 'A'), "duplicate tensor name 'tensorA'");

  const std::size_t tensor_b = find_text(image, "tensorB");
  Bytes rows = image;  // 2^40 rows: refused before any allocation
  put_u64(rows, tensor_b + 7 + 1, std::uint64_t{1} << 40);
  rejects(rows, "over the limit of 2^31 - 1");
  Bytes big = image;  // 2^30 × 2^30 entries: more than the section holds
  put_u64(big, tensor_b + 7 + 1, std::uint64_t{1} << 30);
  put_u64(big, tensor_b + 7 + 9, std::uint64_t{1} << 30);
  rejects(big, "only");
  Bytes count = image;  // metadata count 2^60
  put_u64(count, 56, std::uint64_t{1} << 60);
  rejects(count, "metadata count 1152921504606846976 cannot fit");
  Bytes name = image;  // name length 0xFFFFFFFF
  const std::size_t key1 = find_text(image, "key1");
  for (std::size_t i = 0; i < 4; ++i) name[key1 - 4 + i] = std::byte{0xFF};
  rejects(name, "metadata key length 4294967295 is outside [1, 65535]");
  Bytes value = image;  // value length past the section
  put_u64(value, key1 + 4, 1000);
  rejects(value, "metadata value needs 1000 bytes");
  Bytes section = image;  // section lengths that do not add up
  put_u64(section, 32, 9);
  rejects(section, "do not fill");
  Bytes reserved = image;
  reserved[20] = std::byte{1};
  rejects(reserved, "reserved header byte is not zero");
  Bytes type = image;  // a float tensor inside a double file
  type[tensor_b + 7] = std::byte{1};
  rejects(type, "tensor 'tensorB' has scalar type float32, the file header says float64");
  // Checksum on: the same edits are caught by the CRC first; extra or missing bytes by the
  // length in the header.
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<double>(rows, "x"), Contains("checksum"));
  Bytes longer = image;
  longer.push_back(std::byte{0});
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<double>(longer, "x"),
                    Contains("the file has " + std::to_string(longer.size()) + " bytes"));
  Bytes shorter(image.begin(), image.end() - 1);
  CHECK_THROWS_WITH(coulomb::io::parse_model_file<double>(shorter, "x"),
                    Contains("truncated at " + std::to_string(shorter.size()) + " bytes"));
}

TEST_CASE("ModelFile_RefusesNonFiniteTensorsUnlessAllowed", "[io][model_file]") {
  ModelFile<float> f;
  Matrix<float> w = Matrix<float>::Zero(2, 3);
  w(1, 2) = std::numeric_limits<float>::quiet_NaN();
  f.add_tensor("encoder.1.w_v", w);
  ScratchDir dir("nonfinite");
  const std::string path = dir.file("model.clmb");
  CHECK_THROWS_AS(coulomb::io::save_model_file(path, f), coulomb::numerical_error);
  CHECK_THROWS_WITH(coulomb::io::save_model_file(path, f),
                    Contains("tensor 'encoder.1.w_v' has a non-finite entry nan at (1, 2)"));
  CHECK_FALSE(fs::exists(path));
  CHECK(dir.entries().empty());
  coulomb::io::WriteOptions allow;
  allow.allow_non_finite = true;
  coulomb::io::save_model_file(path, f, allow);
  CHECK_THROWS_WITH(coulomb::io::load_model_file<float>(path),
                    Contains("tensor 'encoder.1.w_v' has a non-finite entry nan at (1, 2)"));
  coulomb::io::ReadOptions read_allow;
  read_allow.allow_non_finite = true;
  CHECK(std::isnan(
      coulomb::io::load_model_file<float>(path, read_allow).tensor("encoder.1.w_v")(1, 2)));
}

TEST_CASE("ModelFile_AddAndLookUpErrors", "[io][model_file][input]") {
  ModelFile<double> f("somewhere.clmb");
  f.add_tensor("a", Matrix<double>::Zero(1, 1));
  CHECK_THROWS_AS(f.add_tensor("a", Matrix<double>::Zero(1, 1)), coulomb::invalid_argument);
  CHECK_THROWS_AS(f.add_tensor("", Matrix<double>::Zero(1, 1)), coulomb::invalid_argument);
  CHECK_THROWS_AS(f.add_blob(std::string(70000, 'n'), "x"), coulomb::invalid_argument);
  CHECK_THROWS_AS(f.set_metadata("", "x"), coulomb::invalid_argument);
  f.add_blob("a", "a blob and a tensor may share a name");
  CHECK_THROWS_WITH(f.tensor("b"), Contains("'somewhere.clmb': the file has no tensor 'b'"));
  CHECK_THROWS_AS(f.blob("b"), io_error);
  CHECK_THROWS_AS(f.metadata_value("b"), io_error);
  CHECK(f.find_tensor("b") == nullptr);
  CHECK_THROWS_WITH(coulomb::io::load_model_file<double>("/nonexistent/dir/model.clmb"),
                    Contains("'/nonexistent/dir/model.clmb': cannot open"));
}

TEST_CASE("AtomicWrite_FailureLeavesThePreviousFileAndNoTemporary", "[io][atomic]") {
  ScratchDir dir("atomic");
  const std::string path = dir.file("model.clmb");
  const ModelFile<float> old_file = sample_file<float>();
  coulomb::io::save_model_file(path, old_file);
  const std::string old_bytes = read_all(path);
  ModelFile<float> big;
  big.add_tensor("w", Matrix<float>::Ones(300, 300));  // 360 kB: written in several pieces

  SECTION("the producer throws midway") {
    CHECK_THROWS_AS(coulomb::write_file_atomically(path,
                                                   [](auto& sink) {
                                                     const std::string half = "partial contents";
                                                     sink(as_span(half));
                                                     throw coulomb::io_error("simulated failure");
                                                   }),
                    io_error);
  }
  SECTION("the target directory does not exist") {
    CHECK_THROWS_WITH(coulomb::io::save_model_file(dir.file("missing/model.clmb"), big),
                      Contains("cannot create the temporary file"));
  }
  SECTION("the target is a directory: refused before anything is written") {
    fs::create_directory(dir.file("a_directory"));
    CHECK_THROWS_WITH(coulomb::io::save_model_file(dir.file("a_directory"), big),
                      Contains("is a directory, not a regular file: it is never replaced"));
    CHECK(fs::is_directory(dir.file("a_directory")));
    fs::remove(dir.file("a_directory"));
  }
#ifdef COULOMB_TEST_POSIX
  SECTION("the disk fills up mid-write (RLIMIT_FSIZE)") {
    // A file-size limit makes write(2) fail with EFBIG after 64 kB: a real failure in the
    // middle of the data. SIGXFSZ is ignored for the duration.
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit small = saved;
    small.rlim_cur = 64 * 1024;
    auto* const previous = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      coulomb::io::save_model_file(path, big);
    } catch (const io_error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
    CHECK_THAT(message, Contains("write error on the temporary file") &&
                            Contains("the previous file is untouched"));
  }
#endif
  // The previous file is intact and nothing else is left in the directory.
  CHECK(read_all(path) == old_bytes);
  CHECK(coulomb::io::load_model_file<float>(path) == old_file);
  CHECK(dir.entries() == std::vector<std::string>{"model.clmb"});
}

#ifdef COULOMB_TEST_POSIX
TEST_CASE("AtomicWrite_SurvivesSigkillMidWrite", "[io][atomic]") {
  // A child process saves two different 1 MB files over the same path in a loop and is killed
  // with SIGKILL at a random moment after its first complete save. Whenever that happens, the
  // path must hold one of the two complete files. Temporary files of the killed writer
  // may remain: nothing can remove them after SIGKILL; they never replace the target.
  ScratchDir dir("sigkill");
  const std::string path = dir.file("model.clmb");
  ModelFile<float> a, b;
  a.add_tensor("w", Matrix<float>::Constant(512, 512, 1.0f));
  b.add_tensor("w", Matrix<float>::Constant(512, 512, 2.0f));
  coulomb::Rng rng(20261202);
  int found_a = 0, found_b = 0;
  for (int round = 0; round < 12; ++round) {
    // The child reports its first complete save through a pipe, so that the kill always lands
    // while it is saving over an existing file, however slow the machine (ASan, a busy host).
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(ready[0]);
      try {
        for (int i = 0;; ++i) {
          coulomb::io::save_model_file(path, i % 2 == 0 ? a : b);
          if (i == 0) {
            const char byte = 1;
            if (write(ready[1], &byte, 1) != 1) _exit(4);
            close(ready[1]);
          }
        }
      } catch (...) {
        _exit(3);  // a failing save shows as a normal exit, not as the expected SIGKILL
      }
    }
    close(ready[1]);
    char byte = 0;
    const ssize_t got = read(ready[0], &byte, 1);  // blocks until the first save completed
    close(ready[0]);
    REQUIRE(got == 1);
    usleep(static_cast<useconds_t>(coulomb::uniform_index(30000, rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    REQUIRE(fs::exists(path));
    const ModelFile<float> now = coulomb::io::load_model_file<float>(path);
    const bool is_a = now == a;
    const bool is_b = now == b;
    CHECK((is_a || is_b));
    found_a += is_a ? 1 : 0;
    found_b += is_b ? 1 : 0;
  }
  std::size_t leftovers = 0;
  for (const auto& name : dir.entries()) leftovers += name.find(".tmp.") != std::string::npos;
  INFO("rounds ending with file A: " << found_a << ", with file B: " << found_b
                                     << "; temporary files left by killed writers: " << leftovers);
  CHECK(found_a + found_b == 12);
}
#endif

TEST_CASE("AtomicWrite_ReplacesAndKeepsPermissions", "[io][atomic]") {
  ScratchDir dir("replace");
  const std::string path = dir.file("model.clmb");
  ModelFile<double> a;
  a.set_metadata("version", "a");
  coulomb::io::save_model_file(path, a);
#ifdef COULOMB_TEST_POSIX
  REQUIRE(chmod(path.c_str(), 0640) == 0);
#endif
  ModelFile<double> b;
  b.set_metadata("version", "b");
  coulomb::io::save_model_file(path, b);
  CHECK(coulomb::io::load_model_file<double>(path).metadata_value("version") == "b");
  CHECK(dir.entries() == std::vector<std::string>{"model.clmb"});
#ifdef COULOMB_TEST_POSIX
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
#endif
}

#ifdef COULOMB_TEST_HAVE_FIFO

TEST_CASE("ModelFile_LoadsFromAFifoAndNamesItWhenItsBytesAreWrong", "[io][model_file][fifo]") {
  // A named pipe can be read once: the loader reads it into memory and parses the image. The
  // feeding thread closes its end after the bytes, so a wrong stream fails instead of hanging.
  ScratchDir dir("fifo");
  const std::string fifo = dir.file("model.fifo");
  const ModelFile<double> f = sample_file<double>();
  const Bytes image = coulomb::io::model_file_bytes(f);
  const std::string bytes(reinterpret_cast<const char*>(image.data()), image.size());
  auto load_from_fifo = [&](const std::string& fed) {
    fs::remove(fifo);
    coulomb_test::FifoFeeder feeder(fifo, fed);
    REQUIRE(feeder.created());
    return coulomb::io::load_model_file<double>(fifo);
  };
  const ModelFile<double> loaded = load_from_fifo(bytes);
  CHECK(loaded == f);
  CHECK(loaded.source() == fifo);
  CHECK_THROWS_WITH(load_from_fifo("not a model file, but some text long enough\n"),
                    Contains("'" + fifo + "' offset 0") && Contains("wrong magic bytes"));
  CHECK_THROWS_WITH(load_from_fifo(bytes.substr(0, bytes.size() / 2)),
                    Contains("'" + fifo + "'") && Contains("file is truncated"));
  CHECK_THROWS_WITH(load_from_fifo(""), Contains("'" + fifo + "'"));
}

#endif

TEST_CASE("WriteModelFile_FailingStreamIsAnIoError", "[io][model_file]") {
  ModelFile<float> f;
  f.add_tensor("w", Matrix<float>::Ones(300, 300));
  FailingBuffer buffer(1000);
  std::ostream out(&buffer);
  CHECK_THROWS_WITH(coulomb::io::write_model_file(out, f, {}, "checkpoint stream"),
                    Contains("'checkpoint stream': write error"));
}

TEST_CASE("Parameters_SaveAndLoadByNameWithShapeChecks", "[io][parameters]") {
  using coulomb::nn::ParameterList;
  Matrix<float> w1 = Matrix<float>::Random(64, 128), b1 = Matrix<float>::Random(128, 1);
  Matrix<float> omega = Matrix<float>::Random(16, 8);
  const ParameterList<float> model{{"encoder.0.ffn.w1", &w1, nullptr, true, true},
                                   {"encoder.0.ffn.b1", &b1, nullptr, true, false},
                                   {"encoder.0.attention.omega", &omega, nullptr, false, true}};
  ModelFile<float> file("model.clmb");
  coulomb::io::add_parameters(file, model);
  CHECK(file.tensors().size() == 3);

  // Into a fresh model whose list has another order.
  Matrix<float> w1b = Matrix<float>::Zero(64, 128), b1b = Matrix<float>::Zero(128, 1);
  Matrix<float> omegab = Matrix<float>::Zero(16, 8);
  ParameterList<float> fresh{{"encoder.0.attention.omega", &omegab, nullptr, false, true},
                             {"encoder.0.ffn.b1", &b1b, nullptr, true, false},
                             {"encoder.0.ffn.w1", &w1b, nullptr, true, true}};
  coulomb::io::load_parameters(file, fresh);
  CHECK(w1b == w1);
  CHECK(b1b == b1);
  CHECK(omegab == omega);

  SECTION("a shape mismatch names the tensor and both shapes; nothing is loaded") {
    Matrix<float> w1_other = Matrix<float>::Zero(64, 256);
    ModelFile<float> other("other.clmb");
    const ParameterList<float> wide{{"encoder.0.ffn.w1", &w1_other, nullptr, true, true},
                                    {"encoder.0.ffn.b1", &b1, nullptr, true, false},
                                    {"encoder.0.attention.omega", &omega, nullptr, false, true}};
    coulomb::io::add_parameters(other, wide);
    b1b.setZero();
    CHECK_THROWS_WITH(coulomb::io::load_parameters(other, fresh),
                      Contains("coulomb::io::load_parameters: 'other.clmb': tensor "
                               "'encoder.0.ffn.w1' has shape 64×256 in the file, the model "
                               "expects 64×128"));
    CHECK((b1b.array() == 0.0f).all());  // checked before anything was copied
  }
  SECTION("a missing or an unused tensor is an error") {
    Matrix<float> extra = Matrix<float>::Zero(2, 2);
    ParameterList<float> bigger = fresh;
    bigger.push_back({"classifier.w", &extra, nullptr, true, true});
    CHECK_THROWS_WITH(coulomb::io::load_parameters(file, bigger),
                      Contains("parameter 'classifier.w' has no tensor 'classifier.w'"));
    ParameterList<float> smaller(fresh.begin(), fresh.begin() + 2);
    CHECK_THROWS_WITH(coulomb::io::load_parameters(file, smaller),
                      Contains("tensor 'encoder.0.ffn.w1' matches no parameter"));
    coulomb::io::LoadParametersOptions lenient;
    lenient.allow_unused_tensors = true;
    CHECK_NOTHROW(coulomb::io::load_parameters(file, smaller, {}, lenient));
  }
  SECTION("prefixes separate the model from other state") {
    ModelFile<float> ckpt("ckpt.clmb");
    coulomb::io::add_parameters(ckpt, model, "model.");
    ckpt.add_tensor("optimizer.first_moment.encoder.0.ffn.w1", w1);
    CHECK_NOTHROW(coulomb::io::load_parameters(ckpt, fresh, "model."));
    CHECK_THROWS_AS(coulomb::io::add_parameters(ckpt, model, "model."), coulomb::invalid_argument);
  }
}

TEST_CASE("Metadata_RequireRejectsAnotherConfiguration", "[io][parameters]") {
  ModelFile<double> f("model.clmb");
  f.set_metadata("model.width", "64");
  f.set_metadata("model.layers", "2");
  f.set_metadata("model.feature_map", "favor+");
  CHECK_NOTHROW(coulomb::io::require_metadata(f, "model.width", "64"));
  CHECK_THROWS_WITH(coulomb::io::require_metadata(f, "model.width", "128"),
                    Contains("'model.clmb': metadata 'model.width' is '64' in the file, expected "
                             "'128'"));
  CHECK_THROWS_WITH(coulomb::io::require_metadata(f, "model.heads", "4"),
                    Contains("the file has no metadata 'model.heads'"));
  const std::map<std::string, std::string> expected = {
      {"model.width", "64"}, {"model.layers", "4"}, {"model.feature_map", "porf-relu"}};
  try {
    coulomb::io::require_metadata(f, expected);
    FAIL("no exception");
  } catch (const io_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("2 configuration mismatches") &&
                         Contains("'model.layers' is '2' in the file, expected '4'") &&
                         Contains("'model.feature_map' is 'favor+' in the file, expected "
                                  "'porf-relu'"));
  }
}

TEST_CASE("Checkpoint_ResumesTrainingExactly", "[io][train][checkpoint]") {
  // Six AdamW steps with early stopping in one go, against three steps, a checkpoint file
  // (model, optimizer, early stopping), a fresh model, optimizer and tracker restored from it,
  // and three more steps: bitwise the same model, moments and tracker.
  using coulomb::nn::ParameterList;
  using coulomb::train::AdamW;
  using coulomb::train::EarlyStopping;
  struct Model {
    Matrix<double> w = Matrix<double>::Zero(3, 2), gw = Matrix<double>::Zero(3, 2);
    Matrix<double> omega = Matrix<double>::Identity(2, 2);
    ParameterList<double> params() {
      return {{"w", &w, &gw, true, true}, {"omega", &omega, nullptr, false, true}};
    }
    void gradient(Index t) {
      for (Index k = 0; k < w.size(); ++k) gw.data()[k] = w.data()[k] - std::sin(0.5 * (t + k));
    }
    double metric(Index t) const { return t == 1 ? 10.0 : w.sum(); }  // best at t = 1
  };
  auto run_epoch = [](Model& m, AdamW<double>& opt, EarlyStopping<double>& stop, Index t) {
    auto p = m.params();
    m.gradient(t);
    opt.step(p, 0.1);
    stop.update(t, m.metric(t), p);
  };
  Model ref;
  AdamW<double> opt_ref;
  EarlyStopping<double> stop_ref;
  for (Index t = 0; t < 6; ++t) run_epoch(ref, opt_ref, stop_ref, t);

  ScratchDir dir("checkpoint");
  const std::string path = dir.file("checkpoint.clmb");
  {
    Model first;
    AdamW<double> opt;
    EarlyStopping<double> stop;
    for (Index t = 0; t < 3; ++t) run_epoch(first, opt, stop, t);
    ModelFile<double> ckpt;
    ckpt.set_metadata("model.width", "2");
    coulomb::io::add_parameters(ckpt, first.params(), "model.");
    coulomb::train::add_optimizer_state(ckpt, opt);
    coulomb::train::add_early_stopping_state(ckpt, stop);
    coulomb::io::save_model_file(path, ckpt);
  }
  Model resumed;
  AdamW<double> opt;
  EarlyStopping<double> stop;
  const auto ckpt = coulomb::io::load_model_file<double>(path);
  coulomb::io::require_metadata(ckpt, "model.width", "2");
  auto p = resumed.params();
  coulomb::io::load_parameters(ckpt, p, "model.");
  coulomb::train::restore_optimizer_state(ckpt, opt, p);
  coulomb::train::restore_early_stopping_state(ckpt, stop);
  CHECK(opt.step_count() == 3);
  CHECK(stop.last_epoch() == 2);
  for (Index t = 3; t < 6; ++t) run_epoch(resumed, opt, stop, t);

  auto bits = [](const Matrix<double>& a, const Matrix<double>& b) {
    return a.size() == b.size() &&
           std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * 8) == 0;
  };
  CHECK(bits(resumed.w, ref.w));
  CHECK(bits(*opt.first_moment("w"), *opt_ref.first_moment("w")));
  CHECK(bits(*opt.second_moment("w"), *opt_ref.second_moment("w")));
  CHECK(stop.best_epoch() == stop_ref.best_epoch());
  CHECK(stop.best_value() == stop_ref.best_value());
  CHECK(stop.epochs_without_improvement() == stop_ref.epochs_without_improvement());
  Model best_ref, best;
  stop_ref.restore_best(best_ref.params());
  stop.restore_best(best.params());
  CHECK(bits(best.w, best_ref.w));

  SECTION("state that does not fit the model is an io_error naming the file") {
    struct Wider {
      Matrix<double> w = Matrix<double>::Zero(3, 3), gw = Matrix<double>::Zero(3, 3);
    } wider;
    const ParameterList<double> wp{{"w", &wider.w, &wider.gw, true, true}};
    AdamW<double> fresh;
    CHECK_THROWS_WITH(coulomb::train::restore_optimizer_state(ckpt, fresh, wp),
                      Contains("'" + path + "'") && Contains("is 3×2, parameter 'w' is 3×3"));
    CHECK(fresh.step_count() == 0);
    CHECK_THROWS_AS(coulomb::train::restore_optimizer_state(ckpt, fresh, wp, "missing."), io_error);
  }
}

}  // namespace io_model_file_test
