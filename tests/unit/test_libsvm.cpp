// Tests of the LIBSVM reader of apps/sparse (libsvm.hpp): what it reads,
// every kind of malformed line it rejects with file, line and column, and the
// SpamAssassin files of scripts/spam-data.sh (the 2D-TGA-ADMM paper (Wang et al.) Sec. 5.2 and paper
// 001 Sec. VI-B train on such data).
#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "dataset.hpp"
#include "gossamer/errors.hpp"
#include "libsvm.hpp"

namespace {

using gossamer::InvalidArgument;
using gossamer::sparse::LibsvmError;
using gossamer::sparse::parseLibsvm;
using gossamer::sparse::readLibsvm;
using gossamer::sparse::SparseDataset;

/// Parses `text` (named "bad.svm"), requires a LibsvmError at 1-based line and
/// column whose message contains `words`, and checks that its byte offset
/// points at that line and column of the text.
void expectError(const std::string& text, int line, int column, const std::string& words, int features = 0) {
  INFO("text: " << text);
  try {
    parseLibsvm(text, "bad.svm", features);
    FAIL("no LibsvmError");
  } catch (const LibsvmError& e) {
    INFO("what(): " << e.what());
    CHECK(e.file() == "bad.svm");
    CHECK(e.line() == line);
    CHECK(e.column() == column);
    const std::string what = e.what();
    CHECK(what.find("bad.svm") != std::string::npos);
    CHECK(what.find("line " + std::to_string(line) + ", column " + std::to_string(column)) !=
          std::string::npos);
    CHECK(what.find(words) != std::string::npos);
    // The offset is that of the line's start plus column - 1.
    std::size_t start = 0;
    for (int l = 1; l < line; ++l) start = text.find('\n', start) + 1;
    CHECK(e.offset() == start + static_cast<std::size_t>(column - 1));
  }
}

Eigen::MatrixXd dense(const SparseDataset& d) { return Eigen::MatrixXd(d.x); }

}  // namespace

TEST_CASE("parseLibsvm reads labels, 1-based indices, values, comments and line endings",
          "[sparse][libsvm]") {
  const std::string text =
      "+1 1:0.5 3:-2 7:1e-3\r\n"
      "-1\t2:4   5:+1.5 # a comment\n"
      "1.0\n"
      " -1 7:0 # explicit zero\n";
  const SparseDataset d = parseLibsvm(text, "ok.svm");
  REQUIRE(d.rows() == 4);
  REQUIRE(d.features() == 7);  // the largest index
  CHECK(d.x.isCompressed());
  CHECK(d.x.nonZeros() == 6);  // the explicit zero is kept
  Eigen::MatrixXd want = Eigen::MatrixXd::Zero(4, 7);
  want(0, 0) = 0.5;
  want(0, 2) = -2;
  want(0, 6) = 1e-3;
  want(1, 1) = 4;
  want(1, 4) = 1.5;
  CHECK(dense(d) == want);
  CHECK(d.y == Eigen::Vector4d(1, -1, 1, -1));
  CHECK(d.x.row(3).nonZeros() == 1);
  CHECK(d.x.row(2).nonZeros() == 0);
}

TEST_CASE("parseLibsvm sizes the matrix to `features` and reads empty input as no samples",
          "[sparse][libsvm]") {
  const SparseDataset d = parseLibsvm("1 2:1\n-1 3:1", "ok.svm", 10);  // no final newline
  CHECK(d.rows() == 2);
  CHECK(d.features() == 10);
  const SparseDataset none = parseLibsvm("", "empty.svm", 4);
  CHECK(none.rows() == 0);
  CHECK(none.features() == 4);
  CHECK(parseLibsvm("-1\n", "labels-only.svm").features() == 0);
  CHECK_THROWS_AS(parseLibsvm("1 1:1", "x.svm", -1), InvalidArgument);
}

TEST_CASE("parseLibsvm rejects a bad label", "[sparse][libsvm]") {
  expectError("2 1:1\n", 1, 1, "bad label '2'");
  expectError("1 1:1\n0 2:1\n", 2, 1, "bad label '0'");
  expectError("  spam 1:1\n", 1, 3, "bad label 'spam'");
  expectError("1x 1:1\n", 1, 1, "bad label '1x'");
  expectError("nan 1:1\n", 1, 1, "bad label 'nan'");
  expectError("++1 1:1\n", 1, 1, "bad label '++1'");
}

TEST_CASE("parseLibsvm rejects an empty line", "[sparse][libsvm]") {
  expectError("1 1:1\n\n-1 2:1\n", 2, 1, "empty line");
  expectError("1 1:1\n   \n", 2, 4, "empty line");
  expectError("# only a comment\n", 1, 1, "empty line");
}

TEST_CASE("parseLibsvm rejects a bad index:value pair", "[sparse][libsvm]") {
  expectError("1 3\n", 1, 3, "expected <index>:<value>, found '3'");
  expectError("1 1:1 a:2\n", 1, 7, "bad index 'a'");
  expectError("1 :2\n", 1, 3, "bad index ''");
  expectError("1 -2:1\n", 1, 3, "bad index '-2'");
  expectError("1 +2:1\n", 1, 3, "bad index '+2'");
  expectError("1 2.5:1\n", 1, 3, "bad index '2.5'");
  expectError("1 3:\n", 1, 5, "missing value after '3:'");
  expectError("-1 3:abc\n", 1, 6, "bad value 'abc'");
}

TEST_CASE("parseLibsvm rejects index 0 and indices out of range", "[sparse][libsvm]") {
  expectError("1 0:1\n", 1, 3, "index 0: LIBSVM indices start at 1");
  expectError("1 2:1\n-1 4:1 6:1\n", 2, 8, "index 6 out of range: the data has 5 features", 5);
  expectError("1 99999999999:1\n", 1, 3, "out of range (above 2^30)");
  expectError("1 2147483648:1\n", 1, 3, "out of range (above 2^30)");
  expectError("1 1073741825:1\n", 1, 3, "out of range (above 2^30)");  // 2^30 + 1: 8 GiB of weights
}

TEST_CASE("parseLibsvm rejects indices that do not increase", "[sparse][libsvm]") {
  expectError("1 3:1 3:2\n", 1, 7, "index 3 after index 3");
  expectError("1 1:1\n-1 5:1 2:1\n", 2, 8, "index 2 after index 5: indices must increase");
}

TEST_CASE("parseLibsvm rejects non-finite values", "[sparse][libsvm]") {
  expectError("1 2:nan\n", 1, 5, "value 'nan' is not finite");
  expectError("1 2:inf\n", 1, 5, "value 'inf' is not finite");
  expectError("1 2:-infinity\n", 1, 5, "is not finite");
  expectError("1 2:1e400\n", 1, 5, "value '1e400' is not finite");
}

TEST_CASE("parseLibsvm rejects trailing garbage after a value", "[sparse][libsvm]") {
  expectError("1 2:1.5x\n", 1, 8, "trailing garbage 'x'");
  expectError("1 2:1:3\n", 1, 6, "trailing garbage ':3'");
  expectError("1 1:1\n-1 2:0.25,3:1\n", 2, 10, "trailing garbage ',3:1'");
  expectError("-1 4:2 qid:3\n", 1, 8, "bad index 'qid'");
}

TEST_CASE("readLibsvm reads a file and names it in errors", "[sparse][libsvm]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gossamer-libsvm-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.svm").string();
  const std::string bad = (dir / "bad.svm").string();
  std::ofstream(good) << "1 2:1\n-1 1:3 4:2\n";
  std::ofstream(bad) << "1 2:1\n-1 4:1 1:3\n";
  const SparseDataset d = readLibsvm(good, 4);
  CHECK(d.rows() == 2);
  CHECK(d.features() == 4);
  CHECK(d.x.coeff(1, 3) == 2);
  try {
    readLibsvm(bad);
    FAIL("no LibsvmError");
  } catch (const LibsvmError& e) {
    CHECK(e.file() == bad);
    CHECK(e.line() == 2);
    CHECK(e.column() == 8);
  }
  try {
    readLibsvm((dir / "missing.svm").string());
    FAIL("no LibsvmError");
  } catch (const LibsvmError& e) {
    CHECK(e.line() == 0);
    CHECK(std::string(e.what()).find("file not found") != std::string::npos);
  }
  CHECK_THROWS_AS(readLibsvm(dir.string()), LibsvmError);
  // A LibsvmError is a DataError, like the other data-file errors.
  CHECK_THROWS_AS(readLibsvm(bad), gossamer::DataError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the SpamAssassin LIBSVM files read back with the counts the converter wrote",
          "[sparse][libsvm][spam]") {
  gossamer::testing::requireSpamData();
  const std::filesystem::path dir = gossamer::testing::spamDataDir();
  const nlohmann::json stats = nlohmann::json::parse(std::ifstream(dir / "spam-stats.json"));
  const int features = stats.at("features").get<int>();
  REQUIRE(features == 1 << stats.at("bits").get<int>());
  int messages = 0;
  for (const char* part : {"train", "test"}) {
    const SparseDataset d = readLibsvm((dir / (std::string("spam-") + part + ".libsvm")).string(), features);
    INFO(part);
    CHECK(d.rows() == stats.at(part).at("messages").get<int>());
    CHECK(d.features() == features);
    CHECK(d.x.nonZeros() == stats.at(part).at("nnz").get<long>());
    CHECK((d.y.array() > 0).count() == stats.at(part).at("spam").get<long>());
    CHECK((d.x.coeffs().array() == 1.0).all());  // binary features
    messages += d.rows();
  }
  CHECK(messages == stats.at("messages").get<int>());
}
