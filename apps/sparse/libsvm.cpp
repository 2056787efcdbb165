// A validating reader of LIBSVM text files into CSR matrices (libsvm.hpp):
// one pass over the text, building the row pointers, column indices and
// values of the CSR arrays directly. The file format of the sparse datasets
// of Wang et al., "A Communication Efficient ADMM-based Distributed
// Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023), Sec. 5.2,
// Table 3, and Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Sec. VI-B.
#include "libsvm.hpp"

#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

namespace gossamer::sparse {
namespace {

std::string libsvmWhat(int line, int column, const std::string& msg) {
  if (line == 0) return msg;
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + msg;
}

bool isBlank(char c) { return c == ' ' || c == '\t'; }

// Parses a decimal number (optionally with one leading '+', which
// std::from_chars does not take) from the front of s. Returns the number of
// bytes consumed (0: not a number) and sets `range` when it overflows or
// underflows a double.
std::size_t parseNumber(std::string_view s, double& out, bool& range) {
  std::size_t skip = 0;
  if (!s.empty() && s[0] == '+' && (s.size() == 1 || (s[1] != '-' && s[1] != '+'))) skip = 1;
  const char* begin = s.data() + skip;
  const auto [ptr, ec] = std::from_chars(begin, s.data() + s.size(), out);
  if (ec == std::errc::invalid_argument) return 0;
  range = ec == std::errc::result_out_of_range;
  return static_cast<std::size_t>(ptr - s.data());
}

// The CSR arrays under construction and the position of the current line.
class Parser {
 public:
  Parser(std::string_view text, const std::string& name, int features)
      : text_(text), name_(name), features_(features) {
    rowPtr_.push_back(0);
  }

  SparseDataset run() {
    std::size_t pos = 0;
    while (pos < text_.size()) {
      std::size_t eol = text_.find('\n', pos);
      if (eol == std::string_view::npos) eol = text_.size();
      std::string_view line = text_.substr(pos, eol - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lineStart_ = pos;
      if (lineNo_ == INT_MAX) fail(0, "too many lines (more than 2^31-1)");
      ++lineNo_;
      parseLine(line);
      pos = eol + 1;
    }
    const int cols = features_ > 0 ? features_ : maxIndex_;
    const int rows = static_cast<int>(labels_.size());
    SparseDataset out;
    out.x = Eigen::Map<const CsrMatrix>(rows, cols, static_cast<Eigen::Index>(values_.size()), rowPtr_.data(),
                                        cols_.data(), values_.data());
    out.y = Eigen::Map<const Eigen::VectorXd>(labels_.data(), rows);
    return out;
  }

 private:
  [[noreturn]] void fail(std::size_t col, const std::string& msg) const {
    throw LibsvmError(name_, lineStart_ + col, lineNo_, static_cast<int>(col) + 1, msg);
  }

  // The end of the field starting at i: the next blank, '#' or the line's end.
  static std::size_t fieldEnd(std::string_view line, std::size_t i) {
    while (i < line.size() && !isBlank(line[i]) && line[i] != '#') ++i;
    return i;
  }

  static std::size_t skipBlanks(std::string_view line, std::size_t i) {
    while (i < line.size() && isBlank(line[i])) ++i;
    return i;
  }

  void parseLine(std::string_view line) {
    std::size_t i = skipBlanks(line, 0);
    if (i == line.size() || line[i] == '#') fail(i, "expected a label (-1 or +1), found an empty line");
    std::size_t end = fieldEnd(line, i);
    const std::string_view labelField = line.substr(i, end - i);
    double label = 0;
    bool range = false;
    const std::size_t used = parseNumber(labelField, label, range);
    if (used != labelField.size() || range || (label != 1.0 && label != -1.0)) {
      fail(i, "bad label '" + std::string(labelField) + "': expected -1 or +1");
    }
    int previous = 0;
    for (i = skipBlanks(line, end); i < line.size() && line[i] != '#'; i = skipBlanks(line, end)) {
      end = fieldEnd(line, i);
      previous = parseFeature(line.substr(i, end - i), i, previous);
    }
    if (labels_.size() == static_cast<std::size_t>(INT_MAX)) fail(0, "too many samples (more than 2^31-1)");
    labels_.push_back(label);
    rowPtr_.push_back(static_cast<int>(cols_.size()));
  }

  // Parses "<index>:<value>" starting at column `at`; returns the index.
  int parseFeature(std::string_view field, std::size_t at, int previous) {
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos) {
      fail(at, "expected <index>:<value>, found '" + std::string(field) + "'");
    }
    const std::string_view indexText = field.substr(0, colon);
    std::int64_t index = 0;
    const auto [iptr, iec] = std::from_chars(indexText.data(), indexText.data() + indexText.size(), index);
    if (indexText.empty() || indexText[0] == '-' || iec == std::errc::invalid_argument ||
        iptr != indexText.data() + indexText.size()) {
      fail(at, "bad index '" + std::string(indexText) + "': expected a decimal integer >= 1");
    }
    // (A width taken from the file sizes the model's tables: one index of
    // 2^31-1 would ask for 16 GiB of weights.)
    if (iec == std::errc::result_out_of_range || index > kMaxLibsvmFeatures) {
      fail(at, "index " + std::string(indexText) + " out of range (above 2^30)");
    }
    if (index == 0) fail(at, "index 0: LIBSVM indices start at 1");
    if (features_ > 0 && index > features_) {
      fail(at, "index " + std::to_string(index) + " out of range: the data has " + std::to_string(features_) +
                   " features (indices 1.." + std::to_string(features_) + ")");
    }
    if (index <= previous) {
      fail(at, "index " + std::to_string(index) + " after index " + std::to_string(previous) +
                   ": indices must increase along a line");
    }
    const std::string_view valueText = field.substr(colon + 1);
    const std::size_t valueAt = at + colon + 1;
    if (valueText.empty()) fail(valueAt, "missing value after '" + std::string(indexText) + ":'");
    double value = 0;
    bool range = false;
    const std::size_t used = parseNumber(valueText, value, range);
    if (used == 0) fail(valueAt, "bad value '" + std::string(valueText) + "': expected a number");
    if (range || !std::isfinite(value)) {
      fail(valueAt, "value '" + std::string(valueText.substr(0, used)) +
                        "' is not finite (or out of the range of a double)");
    }
    if (used != valueText.size()) {
      fail(valueAt + used, "trailing garbage '" + std::string(valueText.substr(used)) + "' after the value");
    }
    if (cols_.size() == static_cast<std::size_t>(INT_MAX)) fail(at, "too many non-zeros (more than 2^31-1)");
    cols_.push_back(static_cast<int>(index - 1));
    values_.push_back(value);
    if (index > maxIndex_) maxIndex_ = static_cast<int>(index);
    return static_cast<int>(index);
  }

  std::string_view text_;
  const std::string& name_;
  int features_;
  std::size_t lineStart_ = 0;
  int lineNo_ = 0;
  int maxIndex_ = 0;
  std::vector<int> rowPtr_;
  std::vector<int> cols_;
  std::vector<double> values_;
  std::vector<double> labels_;
};

}  // namespace

LibsvmError::LibsvmError(std::string file, std::uint64_t offset, int line, int column, const std::string& msg)
    : DataError(std::move(file), offset, libsvmWhat(line, column, msg)), line_(line), column_(column) {}

SparseDataset parseLibsvm(std::string_view text, const std::string& name, int features) {
  GOSSAMER_ENFORCE(features >= 0, "features=" << features);
  return Parser(text, name, features).run();
}

SparseDataset readLibsvm(const std::string& path, int features) {
  GOSSAMER_ENFORCE(features >= 0, "features=" << features);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw LibsvmError(path, 0, 0, 0, "file not found");
  if (std::filesystem::is_directory(status))
    throw LibsvmError(path, 0, 0, 0, "is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LibsvmError(path, 0, 0, 0, "cannot open for reading");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw LibsvmError(path, 0, 0, 0, "read error");
  const std::string text = std::move(contents).str();
  return parseLibsvm(text, path, features);
}

}  // namespace gossamer::sparse
