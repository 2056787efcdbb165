// Data loading for the example training job: gzip-compressed IDX files (the
// MNIST / Fashion-MNIST format), input standardisation and the split of a
// training set into per-rank shards (IID or Dirichlet label skew).
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"

namespace gossamer {

/// A malformed, truncated or unreadable data file.
///
/// `file()` is the path as given by the caller and `offset()` the byte offset
/// of the problem within the decompressed file (0 when the file cannot be
/// opened at all). what() reads "<file>: byte offset <offset>: <message>".
class DataError : public Error {
 public:
  DataError(std::string file, std::uint64_t offset, const std::string& msg);
  const std::string& file() const noexcept { return file_; }
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string file_;
  std::uint64_t offset_;
};

namespace train {

/// Dense row-major float matrix: one sample per row.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A labelled image set held in memory.
struct Dataset {
  /// samples x features (784 for 28x28 images); pixels in [0, 1] as loaded,
  /// or standardised by loadFashionMnist.
  RowMatrix images;
  /// One label per row of `images`, each in [0, numClasses).
  std::vector<std::uint8_t> labels;
  /// Number of classes the labels range over.
  int numClasses = 10;

  /// Number of samples (rows).
  int size() const { return static_cast<int>(labels.size()); }
};

/// Loads an IDX image file and its IDX label file, both gzip-compressed (a
/// file that is not gzip is read as plain bytes).
///
/// Images: big-endian magic 0x00000803, then u32 n, rows, cols, then n*rows*cols
/// bytes. Labels: magic 0x00000801, u32 n, then n bytes, each <= 9. Pixels are
/// scaled to [0, 1]; the result has rows*cols features and numClasses = 10.
/// @param limit  if > 0, keep only the first min(limit, n) samples (the rest of
///               the files is not read); 0 keeps all.
/// @throws DataError naming the file and byte offset when a file is missing or
///         unreadable, a magic number is wrong, a dimension is zero or absurd
///         (image payload above 2 GiB), the data ends early, there are bytes
///         after the payload (when reading it all), the two counts differ, or a
///         label exceeds 9.
/// @throws InvalidArgument if limit < 0.
Dataset loadIdx(const std::string& imagesGz, const std::string& labelsGz, int limit);

/// Fashion-MNIST train and test sets.
struct FashionMnist {
  Dataset train;
  Dataset test;
  /// Scalar mean and standard deviation of the training pixels (in [0, 1]
  /// units) that were applied when standardising; 0 and 1 otherwise.
  float pixelMean = 0.0f;
  float pixelStd = 1.0f;
};

/// Loads the four Fashion-MNIST files from `dir`: train-images-idx3-ubyte.gz,
/// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz.
///
/// @param trainLimit  keep the first N training samples (0 = all), see loadIdx.
/// @param testLimit   keep the first N test samples (0 = all).
/// @param standardize if true, one scalar mean and std are computed over all
///                    pixels of the (limited) training set and (x - mean) / std
///                    is applied to train and test. A zero std leaves the
///                    scale unchanged (only the mean is removed).
/// @throws DataError as loadIdx, or when train and test differ in feature count.
/// @throws InvalidArgument if a limit is negative.
FashionMnist loadFashionMnist(const std::string& dir, int trainLimit, int testLimit, bool standardize);

/// Splits sample indices 0..labels.size()-1 into `worldSize` disjoint shards
/// that together cover every index exactly once; each shard is sorted ascending
/// (shuffle it per epoch yourself).
///
/// kind "iid": a seeded shuffle cut into worldSize parts whose sizes differ by
/// at most one. kind "non_iid": for every class, proportions over the ranks are
/// drawn from Dirichlet(dirichletAlpha) and that class's (shuffled) indices are
/// cut accordingly; smaller alpha means stronger label skew. Afterwards any
/// empty rank takes one sample from the currently largest shard, so every rank
/// is non-empty. The result depends only on the arguments: mt19937_64 with our
/// own uniform, normal (Marsaglia polar) and gamma (Marsaglia-Tsang) samplers,
/// so it matches across standard libraries (up to libm rounding of log/sqrt).
/// @param labels          one label per sample, each in [0, numClasses).
/// @param dirichletAlpha  concentration (> 0, finite); used by "non_iid" only.
/// @return result[r] = the indices of rank r's shard, r in [0, worldSize).
/// @throws InvalidArgument for an unknown kind, numClasses < 1, worldSize < 1,
///         fewer samples than ranks, a label out of range, or a bad alpha.
std::vector<std::vector<int>> partitionIndices(const std::vector<std::uint8_t>& labels, int numClasses,
                                               int worldSize, const std::string& kind, double dirichletAlpha,
                                               std::uint64_t seed);

}  // namespace train
}  // namespace gossamer
