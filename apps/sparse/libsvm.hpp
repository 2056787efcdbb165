// A validating reader of LIBSVM / SVMlight text files into CSR matrices: the
// sparse data format of the datasets of Wang et al. (2023), "A Communication
// Efficient ADMM-based Distributed Algorithm Using Two-Dimensional Torus
// Grouping AllReduce" (Sec. 5.2, Table 3: url, webspam) and Yokoyama and Araki,
// "Efficient Distributed Machine Learning for Large-scale Models by Reducing
// Redundant Communication" (Sec. VI-B: news20, url, criteo), and of
// scripts/spam_features.py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../train/dataset.hpp"  // DataError (the name alone would find tests/support/dataset.hpp in tests)
#include "csr.hpp"

namespace gossamer::sparse {

/// A malformed LIBSVM file: a DataError (apps/train/dataset.hpp) that also
/// knows the 1-based line and column of the problem.
///
/// `file()` is the name given to the reader, `offset()` the byte offset of the
/// problem within the file, `line()` and `column()` its 1-based line and
/// column in bytes (both 0 when the file cannot be read at all). what() reads
/// "<file>: byte offset <offset>: line <line>, column <column>: <message>".
class LibsvmError : public DataError {
 public:
  /// @param offset  byte offset of the problem in the file
  /// @param line     1-based line, or 0 when the file cannot be read
  /// @param column   1-based column in bytes, or 0 with line 0
  LibsvmError(std::string file, std::uint64_t offset, int line, int column, const std::string& msg);
  /// 1-based line of the problem; 0 when the file could not be read.
  int line() const noexcept { return line_; }
  /// 1-based byte column of the problem within its line; 0 with line 0.
  int column() const noexcept { return column_; }

 private:
  int line_;
  int column_;
};

/// The most features (columns) a LIBSVM data set may have: 2^30, the bound
/// of sparse.features; an index above it is an error.
inline constexpr int kMaxLibsvmFeatures = 1 << 30;

/// Parses LIBSVM text held in memory: one sample per line,
/// "<label> <index>:<value> <index>:<value> ... [# comment]".
///
/// Format: fields are separated by spaces or tabs (leading and trailing ones
/// are allowed); the label is -1 or +1 (also written 1, -1.0, +1e0: any
/// decimal number equal to -1 or +1); an index is a decimal integer >= 1
/// (LIBSVM indices are 1-based) and becomes column index-1; indices increase
/// strictly along a line; a value is a finite decimal number (explicit zeros
/// are kept as stored entries); "#" starts a comment that runs to the end of
/// the line. Lines end with "\n" or "\r\n"; the last one may lack it. A line
/// with only a label is a sample without features; an empty line is an error.
///
/// @param text      the file contents
/// @param name      the file name used in errors
/// @param features  number of columns of the result; every index must be
///                  <= features. 0 sizes the matrix to the largest index
///                  present (0 columns when no line has features).
/// @return          rows = lines, cols = features (or the largest index),
///                  double values, labels in {-1.0, +1.0}
/// @throws LibsvmError naming name, line and column when a line is empty, the
///         label is not a number equal to -1 or +1, a feature is not
///         "<index>:<value>", an index is 0, out of range (> features, or
///         above kMaxLibsvmFeatures), not above the previous index of its line, a value
///         is not a number or not finite (nan, inf, or overflowing a double),
///         or anything but a comment follows the last feature of a field
///         (trailing garbage such as "3:1.5x").
/// @throws InvalidArgument if features < 0.
SparseDataset parseLibsvm(std::string_view text, const std::string& name, int features = 0);

/// Reads a LIBSVM file from disk with parseLibsvm() (the format and errors
/// are those of parseLibsvm, with the path as the name).
/// @param path      file to read (plain text, not compressed)
/// @param features  as for parseLibsvm: the number of columns, or 0
/// @throws LibsvmError (line 0, column 0) if the file is missing, a
///         directory or unreadable; otherwise as parseLibsvm.
/// @throws InvalidArgument if features < 0.
SparseDataset readLibsvm(const std::string& path, int features = 0);

}  // namespace gossamer::sparse
