// SPDX-License-Identifier: MIT
// Progress reporting (train/progress.hpp): the lines and terminal modes driven by a fake clock,
// throughput and ETA, the JSON-lines log (checked with a small JSON parser written here),
// escaping, errors, and the LangevinProgress callback on a real ProjectedLangevin run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <coulomb/core/json.hpp>
#include <coulomb/particles/langevin.hpp>
#include <coulomb/train/callbacks.hpp>
#include <coulomb/train/progress.hpp>

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_progress_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::train::LangevinProgress;
using coulomb::train::ProgressMode;
using coulomb::train::ProgressOptions;
using coulomb::train::ProgressReporter;
using coulomb::train::ProgressValue;

/// A clock the test moves by hand.
struct FakeClock {
  double now = 100.0;  // an arbitrary origin: the reporter must only use differences
  coulomb::train::ProgressClock clock() {
    return [this] { return now; };
  }
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::size_t count(std::string_view text, char c) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), c));
}

// ---------------------------------------------------------------------------------------------
// A small JSON parser (RFC 8259 syntax; enough to check the log's structure and escapes).
// ---------------------------------------------------------------------------------------------

struct Json {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  std::string string{};
  std::vector<std::string> keys{};  // object: keys[i] ↦ items[i]
  std::vector<Json> items{};        // array elements or object values

  const Json& at(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return items[i];
    throw std::runtime_error("no key " + std::string(key));
  }
  bool has(std::string_view key) const {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  /// Parses one complete value; throws std::runtime_error on any syntax error or trailing text.
  Json parse_document() {
    Json v = value();
    space();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  Json value() {
    space();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++i_;
      space();
      if (consume("}")) return v;
      for (;;) {
        space();
        if (i_ >= s_.size() || s_[i_] != '"') fail("expected a key");
        v.keys.push_back(string());
        space();
        if (!consume(":")) fail("expected ':'");
        v.items.push_back(value());
        space();
        if (consume("}")) return v;
        if (!consume(",")) fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::array;
      ++i_;
      space();
      if (consume("]")) return v;
      for (;;) {
        v.items.push_back(value());
        space();
        if (consume("]")) return v;
        if (!consume(",")) fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::string;
      v.string = string();
      return v;
    }
    if (consume("null")) return v;
    if (consume("true") || consume("false")) {
      v.kind = Json::Kind::boolean;
      v.boolean = s_[i_ - 4] == 't';
      return v;
    }
    v.kind = Json::Kind::number;
    v.number = number();
    return v;
  }
  double number() {
    const std::size_t start = i_;
    consume("-");
    if (consume("0")) {
    } else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    } else {
      fail("bad number");
    }
    if (consume(".")) {
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("digit expected after '.'");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!consume("+")) consume("-");
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("digit expected in exponent");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    return std::stod(std::string(s_.substr(start, i_ - start)));
  }
  /// A string; \uXXXX escapes are decoded to UTF-8 (no surrogate pairs needed here).
  std::string string() {
    ++i_;  // the opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          const unsigned code =
              static_cast<unsigned>(std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16));
          i_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

Json parse_json(std::string_view text) {
  return JsonParser(text).parse_document();
}

/// A tiny objective for ProjectedLangevin: H(Ω) = ½‖Ω‖², with the terms() of a Hamiltonian.
struct Quadratic {
  struct Terms {
    double alignment = 0.0;
    double repulsion = 0.0;
  } last{};
  double evaluate_with_gradient(const coulomb::Matrix<double>& omega,
                                coulomb::Matrix<double>& gradient) {
    gradient = omega;
    last.alignment = 0.5 * omega.squaredNorm();
    last.repulsion = 0.0;
    return last.alignment;
  }
  const Terms& terms() const { return last; }
};

}  // namespace

TEST_CASE("Progress_LinesModeEveryKSteps", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 100,
                            {.label = "phase A",
                             .mode = ProgressMode::lines,
                             .line_every_steps = 10,
                             .line_every_seconds = 0.0},
                            time.clock());
  CHECK_FALSE(progress.terminal());
  for (Index step = 1; step <= 100; ++step) {
    time.now += 0.5;
    progress.update(step, {{"loss", 1.0 / static_cast<double>(step)}});
  }
  CHECK(split_lines(out.str()).size() == 10);
  progress.finish();
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == 11);
  CHECK(count(out.str(), '\r') == 0);
  CHECK_THAT(lines[0], Contains("phase A  10/100 (10%)  loss 0.1  "));
  CHECK_THAT(lines[9], Contains("100/100 (100%)"));
  CHECK_THAT(lines[10], Contains("phase A  done: 100 steps in 50s (2 steps/s)  loss 0.01"));
  progress.finish();  // a second call does nothing
  CHECK(split_lines(out.str()).size() == 11);
}

TEST_CASE("Progress_LinesModeEveryTSeconds", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 0, {.mode = ProgressMode::lines, .line_every_seconds = 10.0},
                            time.clock());
  for (Index step = 1; step <= 95; ++step) {
    time.now += 1.0;
    progress.update(step);
  }
  // Lines at t = 10, 20, …, 90 s.
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == 9);
  CHECK(lines[0].rfind("10  ", 0) == 0);  // no label, no total: the step comes first
  CHECK_THAT(lines[0], !Contains("%") && !Contains("ETA"));
  CHECK_THAT(lines[8], Contains("elapsed 1m30s"));
}

TEST_CASE("Progress_LinesModeBothPeriodsWhicheverComesFirst", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(
      out, 1000, {.mode = ProgressMode::lines, .line_every_steps = 100, .line_every_seconds = 5.0},
      time.clock());
  // 50 slow steps (1 s each: a line every 5 steps), then 500 fast ones (1 ms each: every 100).
  Index step = 0;
  for (int i = 0; i < 50; ++i) {
    time.now += 1.0;
    progress.update(++step);
  }
  CHECK(split_lines(out.str()).size() == 10);
  for (int i = 0; i < 500; ++i) {
    time.now += 0.001;
    progress.update(++step);
  }
  CHECK(split_lines(out.str()).size() == 15);
}

TEST_CASE("Progress_TerminalModeOneLineRateLimited", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 100, {.label = "bench", .mode = ProgressMode::terminal},
                            time.clock());
  CHECK(progress.terminal());
  // 100 steps of 10 ms: 1 s in all; at most 10 redraws per second, plus the first and the last.
  for (Index step = 1; step <= 100; ++step) {
    time.now += 0.01;
    progress.update(step, {{"loss", 0.5}});
  }
  const std::string shown = out.str();
  CHECK(count(shown, '\n') == 0);  // one line, never ended while running
  const std::size_t redraws = count(shown, '\r');
  CHECK(redraws >= 10);
  CHECK(redraws <= 12);
  CHECK(shown.front() == '\r');
  // The last redraw shows the last step.
  const std::string last = shown.substr(shown.rfind('\r') + 1);
  CHECK_THAT(last, Contains("bench  100/100 (100%)  loss 0.5"));
  progress.finish();
  const std::string all = out.str();
  CHECK(count(all, '\n') == 1);
  CHECK(all.back() == '\n');
  CHECK_THAT(all.substr(all.rfind('\r') + 1), Contains("bench  done: 100 steps in "));
}

TEST_CASE("Progress_TerminalModeBlanksTheRestOfALongerPreviousLine", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 0, {.mode = ProgressMode::terminal, .min_redraw_interval = 0.0},
                            time.clock());
  time.now += 1.0;
  progress.update(1, {{"a very long value name", 1.0}});
  const std::size_t first = out.str().size() - 1;  // without the '\r'
  time.now += 1.0;
  progress.update(2);
  const std::string second = out.str().substr(first + 1);
  REQUIRE(second.front() == '\r');
  CHECK(second.size() - 1 == first);  // padded with blanks to the width of the first line
  CHECK(second.back() == ' ');
}

TEST_CASE("Progress_TerminalModeCutsToMaxWidth", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 10,
                            {.label = "λ-sweep",
                             .mode = ProgressMode::terminal,
                             .min_redraw_interval = 0.0,
                             .max_width = 20},
                            time.clock());
  for (Index step = 1; step <= 10; ++step) {
    time.now += 1.0;
    progress.update(step, {{"énergie", -1.5}, {"loss", 2.0}});
  }
  std::string shown = out.str();
  std::size_t pos = 0;
  while ((pos = shown.find('\r', pos)) != std::string::npos) {
    const std::size_t next = std::min(shown.find('\r', pos + 1), shown.size());
    const std::string segment = shown.substr(pos + 1, next - pos - 1);
    CHECK(coulomb::train::detail::display_width(segment) <= 20);
    pos = next;
  }
  CHECK_THAT(shown, Contains("λ-sweep  10/10 (100%"));
}

TEST_CASE("Progress_MessageGoesAboveTheTerminalLine", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 4, {.mode = ProgressMode::terminal}, time.clock());
  time.now += 1.0;
  progress.update(1);
  progress.message("job 1 finished");
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == 2);
  // The progress line was blanked, the message printed on its own line, the progress redrawn.
  CHECK(lines[0].substr(lines[0].rfind('\r') + 1) == "job 1 finished");
  CHECK_THAT(lines[1], Contains("1/4 (25%)"));
  CHECK(lines[1].front() == '\r');

  std::ostringstream plain;
  ProgressReporter lines_mode(plain, 4, {.mode = ProgressMode::lines}, time.clock());
  lines_mode.message("job 1 finished");
  CHECK(plain.str() == "job 1 finished\n");
}

TEST_CASE("Progress_MessagesOffSilencesMessageInEveryMode", "[train][progress]") {
  // A quiet run (a tool's -q): mode off and messages off print nothing at all; messages off
  // alone keeps the progress lines but drops the per-epoch messages.
  FakeClock time;
  for (const ProgressMode mode : {ProgressMode::off, ProgressMode::lines, ProgressMode::terminal}) {
    INFO("mode " << coulomb::train::to_string(mode));
    std::ostringstream out;
    ProgressReporter progress(out, 2, {.mode = mode, .messages = false, .line_every_steps = 1},
                              time.clock());
    time.now += 1.0;
    progress.update(1);
    progress.message("epoch 1/2: train loss 0.5");
    progress.finish();
    CHECK_THAT(out.str(), !Contains("epoch 1/2"));
    if (mode == ProgressMode::off) CHECK(out.str().empty());
  }
  // By default a message is printed even in mode off.
  std::ostringstream loud;
  ProgressReporter progress(loud, 2, {.mode = ProgressMode::off}, time.clock());
  progress.message("epoch 1/2: train loss 0.5");
  CHECK(loud.str() == "epoch 1/2: train loss 0.5\n");
}

TEST_CASE("Progress_AutomaticModeOnAStringStreamIsLines", "[train][progress]") {
  std::ostringstream out;
  ProgressReporter progress(out, 10);
  CHECK_FALSE(progress.terminal());
  ProgressReporter off(out, 10, {.mode = ProgressMode::off});
  CHECK_FALSE(off.terminal());
  off.update(5);
  off.finish();
  CHECK(out.str().empty());
  CHECK(coulomb::train::progress_mode_from_string("auto") == ProgressMode::automatic);
  CHECK(coulomb::train::progress_mode_from_string("terminal") == ProgressMode::terminal);
  CHECK(coulomb::train::progress_mode_from_string("lines") == ProgressMode::lines);
  CHECK(coulomb::train::progress_mode_from_string("off") == ProgressMode::off);
  CHECK_THROWS_WITH(
      coulomb::train::progress_mode_from_string("fancy"),
      Contains("progress_mode_from_string") && Contains("'name'") && Contains("fancy"));
}

TEST_CASE("Progress_ThroughputAndEta", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 100, {.mode = ProgressMode::lines, .line_every_seconds = 0.0},
                            time.clock());
  CHECK(std::isnan(progress.throughput(time.now)));
  CHECK(std::isnan(progress.eta_seconds(time.now)));
  time.now += 10.0;
  progress.update(25);
  CHECK(progress.throughput(time.now) == Approx(2.5));
  CHECK(progress.eta_seconds(time.now) == Approx(30.0));
  CHECK_THAT(progress.line(time.now), Contains("25/100 (25%)  2.5 steps/s  elapsed 10s  ETA 30s"));
  time.now += 10.0;  // no update: the rate falls, the ETA grows
  CHECK(progress.throughput(time.now) == Approx(1.25));
  CHECK(progress.eta_seconds(time.now) == Approx(60.0));
  progress.update(100);
  CHECK(progress.eta_seconds(time.now) == Approx(0.0));

  // Items (tokens) with a known total: the throughput and the ETA count tokens.
  FakeClock t2;
  std::ostringstream out2;
  ProgressReporter tokens(
      out2, 10, {.unit = "tokens", .mode = ProgressMode::lines, .total_items = 40000}, t2.clock());
  t2.now += 2.0;
  tokens.update(1, 1000.0, {{"loss", 0.7}});  // 500 tokens/s
  CHECK(tokens.throughput(t2.now) == Approx(500.0));
  CHECK(tokens.eta_seconds(t2.now) == Approx(78.0));  // 39000 tokens at 500/s, not 9 steps × 2 s
  CHECK_THAT(tokens.line(t2.now), Contains("500 tokens/s"));
  t2.now += 18.0;
  tokens.update(10, 25000.0, {{"loss", 0.5}});
  CHECK_THAT(tokens.line(t2.now), Contains("1250 tokens/s"));
  tokens.finish();
  CHECK_THAT(out2.str(), Contains("done: 10 steps, 25000 tokens in 20s (1250 tokens/s)"));
}

TEST_CASE("Progress_ResumedRunCountsOnlyTheNewWork", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  // Training resumed from a checkpoint at step 50 of 100.
  ProgressReporter progress(out, 100, {.mode = ProgressMode::lines, .start_step = 50},
                            time.clock());
  CHECK(progress.step() == 50);
  CHECK_THROWS_WITH(progress.update(49), Contains("'step'"));
  time.now += 10.0;
  progress.update(75);
  CHECK(progress.throughput(time.now) == Approx(2.5));  // 25 steps in 10 s, not 75
  CHECK(progress.eta_seconds(time.now) == Approx(10.0));
  CHECK_THAT(progress.line(time.now), Contains("75/100 (75%)  2.5 steps/s  elapsed 10s  ETA 10s"));
  CHECK_THROWS_WITH(progress.update(80, 90.0, {}), Contains("one form of update()"));

  FakeClock t2;
  ProgressReporter tokens(out, 0,
                          {.unit = "tokens",
                           .mode = ProgressMode::lines,
                           .total_items = 3000,
                           .start_step = 10,
                           .start_items = 1000.0},
                          t2.clock());
  CHECK_THROWS_WITH(tokens.update(11, 999.0, {}), Contains("'items'") && Contains("999"));
  t2.now += 5.0;
  tokens.update(12, 1500.0, {});
  CHECK(tokens.throughput(t2.now) == Approx(100.0));
  CHECK(tokens.eta_seconds(t2.now) == Approx(15.0));  // 1500 tokens left at 100 per second

  CHECK_THROWS_WITH(ProgressReporter(out, 10, {.start_step = -1}), Contains("start_step"));
  CHECK_THROWS_WITH(ProgressReporter(out, 10, {.start_items = -1.0}), Contains("start_items"));
}

TEST_CASE("Progress_FinishLineCountsInTheUnit", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  ProgressReporter progress(out, 4, {.label = "bench", .unit = "jobs", .mode = ProgressMode::lines},
                            time.clock());
  time.now += 8.0;
  progress.update(4, {{"gain", 0.25}});
  progress.finish();
  CHECK(out.str() == "bench  done: 4 jobs in 8.0s (0.5 jobs/s)  gain 0.25\n");
}

TEST_CASE("Progress_Formatting", "[train][progress]") {
  using coulomb::train::format_duration;
  using coulomb::train::format_rate;
  CHECK(format_duration(0.25) == "0.25s");
  CHECK(format_duration(9.84) == "9.8s");
  CHECK(format_duration(42.7) == "42s");
  CHECK(format_duration(185.0) == "3m05s");
  CHECK(format_duration(7380.0) == "2h03m");
  CHECK(format_duration(-1.0) == "0.00s");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "?");
  CHECK(format_rate(0.125) == "0.125");
  CHECK(format_rate(48.83) == "48.8");
  CHECK(format_rate(1234.4) == "1234");
  CHECK(format_rate(12345.0) == "12.3k");
  CHECK(format_rate(4.56e7) == "45.6M");
  CHECK(format_rate(std::numeric_limits<double>::quiet_NaN()) == "?");
}

TEST_CASE("Json_ObjectWriterNestsAndEscapes", "[train][progress]") {
  std::string s = "x";
  coulomb::detail::JsonObjectWriter o(s);
  o.string("a\"b", "line\n").integer("n", -3).null("none");
  o.number("inf", std::numeric_limits<double>::infinity()).number("half", 0.5);
  o.object("inner").number("v", 1e-300).close();
  o.object("empty").close();
  o.close();
  CHECK(s ==
        "x{\"a\\\"b\":\"line\\n\",\"n\":-3,\"none\":null,\"inf\":null,\"half\":0.5,"
        "\"inner\":{\"v\":1e-300},\"empty\":{}}");
  CHECK(parse_json(s.substr(1)).at("inner").at("v").number == 1e-300);
}

TEST_CASE("Progress_JsonLinesParseAndHoldTheState", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  std::ostringstream json;
  ProgressReporter progress(
      out, 10, {.label = "phase B", .unit = "tokens", .mode = ProgressMode::off, .json = &json},
      time.clock());
  double tokens = 0.0;
  for (Index step = 1; step <= 10; ++step) {
    time.now += 0.5;
    tokens += 100.0;
    progress.update(step, tokens, {{"loss", 1.0 / static_cast<double>(step)}, {"acc", 0.5}});
  }
  progress.finish();
  CHECK(out.str().empty());  // mode off: nothing on the stream, but the log is written
  const std::vector<std::string> lines = split_lines(json.str());
  REQUIRE(lines.size() == 11);  // one per update and the finish object
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO("line " << i << ": " << lines[i]);
    const Json j = parse_json(lines[i]);
    REQUIRE(j.kind == Json::Kind::object);
    CHECK(j.keys == std::vector<std::string>{"event", "label", "step", "total", "items",
                                             "elapsed_s", "rate", "unit", "eta_s", "values"});
    CHECK(j.at("event").string == (i + 1 < lines.size() ? "update" : "finish"));
    CHECK(j.at("label").string == "phase B");
    CHECK(j.at("unit").string == "tokens");
    const double step = static_cast<double>(std::min<std::size_t>(i + 1, 10));
    CHECK(j.at("step").number == step);
    CHECK(j.at("total").number == 10.0);
    CHECK(j.at("items").number == 100.0 * step);
    CHECK(j.at("elapsed_s").number == Approx(0.5 * step));
    CHECK(j.at("rate").number == Approx(200.0));
    CHECK(j.at("eta_s").number == Approx(0.5 * (10.0 - step)));
    const Json& values = j.at("values");
    REQUIRE(values.kind == Json::Kind::object);
    CHECK(values.keys == std::vector<std::string>{"loss", "acc"});
    CHECK(values.at("loss").number == 1.0 / step);  // shortest round-trip form: exact
    CHECK(values.at("acc").number == 0.5);
  }
}

TEST_CASE("Progress_JsonEscapesNamesAndNullsNonFiniteNumbers", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  std::ostringstream json;
  const std::string label = "run \"A\"\nback\\slash\ttab\x01";
  ProgressReporter progress(out, 0, {.label = label, .mode = ProgressMode::lines, .json = &json},
                            time.clock());
  // Nothing has happened yet: no rate, no ETA, total unknown -> null.
  progress.update(0, {{"q\"uote", std::numeric_limits<double>::quiet_NaN()},
                      {"new\nline", std::numeric_limits<double>::infinity()},
                      {"λ", -std::numeric_limits<double>::infinity()},
                      {std::string("bad\xff") + "utf8", 1e-300},
                      {"big", 1.7976931348623157e308}});
  const std::string text = json.str();
  REQUIRE(count(text, '\n') == 1);  // the newline in the names is escaped, not written
  const Json j = parse_json(split_lines(text).at(0));
  CHECK(j.at("label").string == label);
  CHECK(j.at("total").kind == Json::Kind::null);
  CHECK(j.at("rate").kind == Json::Kind::null);
  CHECK(j.at("eta_s").kind == Json::Kind::null);
  const Json& values = j.at("values");
  REQUIRE(values.keys.size() == 5);
  CHECK(values.keys[0] == "q\"uote");
  CHECK(values.keys[1] == "new\nline");
  CHECK(values.keys[2] == "λ");                    // valid UTF-8 passes through
  CHECK(values.keys[3] == "bad\xef\xbf\xbdutf8");  // an invalid byte becomes U+FFFD
  CHECK(values.items[0].kind == Json::Kind::null);
  CHECK(values.items[1].kind == Json::Kind::null);
  CHECK(values.items[2].kind == Json::Kind::null);
  CHECK(values.items[3].number == 1e-300);
  CHECK(values.items[4].number == 1.7976931348623157e308);
  CHECK_THAT(text, Contains("\\\"") && Contains("\\n") && Contains("\\t") && Contains("\\u0001") &&
                       Contains("\\\\"));
  // On the text line, the control characters are escaped too, so it stays one line.
  time.now += 1.0;
  progress.finish();
  CHECK(split_lines(out.str()).size() == 1);
  CHECK_THAT(out.str(), Contains("q\"uote nan") && Contains("new\\nline inf") &&
                            Contains("λ -inf") && Contains("\\x01  done: 0 steps"));
}

TEST_CASE("Progress_JsonThinnedAndToAFile", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "coulomb_train_progress_test.jsonl";
  {
    ProgressReporter progress(out, 100,
                              {.mode = ProgressMode::off,
                               .json_path = path.string(),
                               .json_every_steps = 10,
                               .json_min_interval = 0.0},
                              time.clock());
    for (Index step = 1; step <= 100; ++step) {
      time.now += 0.1;
      progress.update(step);
    }
    progress.finish();
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<std::string> lines = split_lines(text.str());
  REQUIRE(lines.size() == 11);  // steps 10, 20, …, 100 and the finish object
  for (const std::string& line : lines) CHECK_NOTHROW(parse_json(line));
  CHECK(parse_json(lines[0]).at("step").number == 10.0);
  CHECK(parse_json(lines[10]).at("event").string == "finish");
  std::filesystem::remove(path);

  CHECK_THROWS_AS(ProgressReporter(out, 10, {.json_path = "/nonexistent-dir/x/log.jsonl"}),
                  coulomb::io_error);
  CHECK_THROWS_WITH(ProgressReporter(out, 10, {.json_path = "/nonexistent-dir/x/log.jsonl"}),
                    Contains("json_path") && Contains("/nonexistent-dir/x/log.jsonl"));
}

TEST_CASE("Progress_InvalidArguments", "[train][progress]") {
  std::ostringstream out;
  using coulomb::invalid_argument;
  CHECK_THROWS_WITH(ProgressReporter(out, -1), Contains("ProgressReporter") && Contains("'total'"));
  CHECK_THROWS_WITH(ProgressReporter(out, 1, {.min_redraw_interval = -1.0}),
                    Contains("min_redraw_interval"));
  CHECK_THROWS_WITH(ProgressReporter(out, 1, {.line_every_steps = -2}),
                    Contains("line_every_steps"));
  CHECK_THROWS_WITH(ProgressReporter(out, 1, {.precision = 0}), Contains("precision"));
  CHECK_THROWS_WITH(ProgressReporter(out, 1, {.json_every_steps = 0}),
                    Contains("json_every_steps"));
  std::ostringstream json;
  CHECK_THROWS_WITH(ProgressReporter(out, 1, {.json = &json, .json_path = "x.jsonl"}),
                    Contains("'json'") && Contains("'json_path'"));
  CHECK_THROWS_AS(ProgressReporter(out, 1, {}, coulomb::train::ProgressClock{}), invalid_argument);

  FakeClock time;
  ProgressReporter progress(out, 10, {.mode = ProgressMode::lines}, time.clock());
  progress.update(5);
  CHECK_THROWS_WITH(progress.update(4),
                    Contains("ProgressReporter::update") && Contains("'step'") && Contains("4"));
  CHECK_THROWS_WITH(progress.update(6, {{"loss", 1.0}, {"loss", 2.0}}),
                    Contains("'values'") && Contains("loss"));
  CHECK_THROWS_WITH(progress.update(6, std::numeric_limits<double>::quiet_NaN(), {}),
                    Contains("'items'"));
  CHECK_THROWS_WITH(progress.set_total(-3), Contains("set_total") && Contains("'total'"));
  progress.finish();
  CHECK_THROWS_WITH(progress.update(7), Contains("finish()"));
}

TEST_CASE("Progress_LangevinCallbackReportsEveryStep", "[train][progress]") {
  FakeClock time;
  std::ostringstream out;
  std::ostringstream json;
  ProgressReporter progress(out, 0,  // total unknown: taken from the optimizer
                            {.label = "phase A",
                             .mode = ProgressMode::lines,
                             .line_every_steps = 5,
                             .line_every_seconds = 0.0,
                             .json = &json},
                            time.clock());
  coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(
      {.max_iterations = 20, .seed = 3}, {.radius = 10.0}, {.step_size = 0.01});
  coulomb::Matrix<double> omega = coulomb::Matrix<double>::Ones(4, 2);
  Quadratic objective;
  langevin.optimize(objective, omega, LangevinProgress{progress});
  CHECK(progress.total() == 20);
  CHECK(progress.step() == 20);
  CHECK(progress.finished());
  const std::vector<std::string> lines = split_lines(out.str());
  REQUIRE(lines.size() == 5);  // steps 5, 10, 15, 20 and the finish line
  CHECK_THAT(lines[0], Contains("phase A  5/20 (25%)  energy ") && Contains("alignment") &&
                           Contains("repulsion 0") && Contains("eta 0.01") && Contains("|grad|"));
  CHECK_THAT(lines[4], Contains("phase A  done: 20 steps"));
  const std::vector<std::string> logged = split_lines(json.str());
  REQUIRE(logged.size() == 21);
  // Step 1 reports the energy before the first step: ½‖Ω₀‖² = 4.
  const Json first = parse_json(logged[0]);
  CHECK(first.at("step").number == 1.0);
  CHECK(first.at("values").at("energy").number == Approx(4.0));
  CHECK(first.at("values").at("|grad|").number == Approx(std::sqrt(8.0)));
  // The energy decreases along the run (gradient descent on a quadratic, no noise).
  CHECK(parse_json(logged[19]).at("values").at("energy").number < 4.0);
}

}  // namespace train_progress_test
