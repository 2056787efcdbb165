#include "dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <random>
#include <sstream>
#include <utility>

namespace gossamer {

namespace {
std::string dataWhat(const std::string& file, std::uint64_t offset, const std::string& msg) {
  return file + ": byte offset " + std::to_string(offset) + ": " + msg;
}
}  // namespace

DataError::DataError(std::string file, std::uint64_t offset, const std::string& msg)
    : Error(dataWhat(file, offset, msg)), file_(std::move(file)), offset_(offset) {}

namespace train {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // uint8 data, 3 dimensions.
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // uint8 data, 1 dimension.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 31;
constexpr std::size_t kReadChunk = std::size_t{4} << 20;
constexpr int kIdxClasses = 10;

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

// Sequential reader over one (usually gzip-compressed) file that tracks the
// decompressed byte offset for error messages.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    const auto st = std::filesystem::status(path_, ec);
    if (!std::filesystem::exists(st)) fail(0, "file not found");
    if (std::filesystem::is_directory(st)) fail(0, "is a directory, expected a file");
    errno = 0;
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      fail(0, std::string("cannot open: ") + (errno != 0 ? std::strerror(errno) : "out of memory in zlib"));
    }
  }
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t offset() const { return offset_; }

  [[noreturn]] void fail(std::uint64_t offset, const std::string& msg) const {
    throw DataError(path_, offset, msg);
  }

  // Reads up to n bytes; fewer only at the end of the data.
  std::size_t readSome(void* dst, std::size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const auto want = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(file_, out + done, want);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail(offset_, std::string("read error: ") + (msg != nullptr ? msg : "unknown"));
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
      offset_ += static_cast<std::uint64_t>(got);
    }
    return done;
  }

  // Reads exactly n bytes or throws, naming `what` was being read.
  void readExact(void* dst, std::size_t n, const std::string& what) {
    const std::uint64_t start = offset_;
    const std::size_t got = readSome(dst, n);
    if (got < n) {
      failTruncated(what + ": got " + std::to_string(got) + " of " + std::to_string(n) +
                    " bytes starting at offset " + std::to_string(start));
    }
  }

  std::uint32_t readU32(const std::string& what) {
    unsigned char b[4];
    readExact(b, sizeof b, what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  // Reads n payload bytes in chunks: memory grows only as data actually arrives,
  // so a lying header cannot make us allocate more than the file holds.
  std::vector<std::uint8_t> readPayload(std::uint64_t n, const std::string& what) {
    std::vector<std::uint8_t> buf;
    buf.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, kReadChunk)));
    while (buf.size() < n) {
      const std::size_t old = buf.size();
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kReadChunk, n - old));
      buf.resize(old + want);
      const std::size_t got = readSome(buf.data() + old, want);
      if (got < want) {
        failTruncated(what + ": got " + std::to_string(old + got) + " of " + std::to_string(n) + " bytes");
      }
    }
    return buf;
  }

  // Throws if any byte is left (called after reading the whole declared payload).
  void expectEnd() {
    unsigned char extra = 0;
    const std::uint64_t at = offset_;
    if (readSome(&extra, 1) != 0) {
      fail(at, "unexpected data after the payload declared by the header");
    }
  }

 private:
  [[noreturn]] void failTruncated(const std::string& detail) const {
    int code = Z_OK;
    gzerror(file_, &code);
    const char* why =
        code == Z_BUF_ERROR ? "compressed stream ends early (truncated .gz), " : "data ends early, ";
    fail(offset_, std::string("truncated file: ") + why + detail);
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::uint64_t offset_ = 0;
};

struct ImagesHeader {
  std::uint32_t count = 0;
  std::uint64_t features = 0;
};

ImagesHeader readImagesHeader(GzReader& in) {
  const std::uint32_t magic = in.readU32("magic number");
  if (magic != kImagesMagic) {
    in.fail(0, "bad magic " + hex32(magic) + ", expected " + hex32(kImagesMagic) +
                   " (IDX uint8 images, 3 dimensions)");
  }
  const std::uint32_t n = in.readU32("image count");
  const std::uint32_t rows = in.readU32("row count");
  const std::uint32_t cols = in.readU32("column count");
  if (n == 0) in.fail(4, "image count is 0");
  if (rows == 0 || cols == 0) {
    in.fail(rows == 0 ? 8 : 12, "zero image dimension " + std::to_string(rows) + "x" + std::to_string(cols));
  }
  const std::uint64_t features = std::uint64_t{rows} * cols;  // < 2^64, no overflow
  if (features > kMaxPayloadBytes || n > INT_MAX || n > kMaxPayloadBytes / features) {
    in.fail(4, "absurd dimensions " + std::to_string(n) + " x " + std::to_string(rows) + " x " +
                   std::to_string(cols) + ": payload above " + std::to_string(kMaxPayloadBytes) + " bytes");
  }
  return {n, features};
}

std::uint32_t readLabelsHeader(GzReader& in) {
  const std::uint32_t magic = in.readU32("magic number");
  if (magic != kLabelsMagic) {
    in.fail(0, "bad magic " + hex32(magic) + ", expected " + hex32(kLabelsMagic) +
                   " (IDX uint8 labels, 1 dimension)");
  }
  const std::uint32_t n = in.readU32("label count");
  if (n == 0) in.fail(4, "label count is 0");
  if (n > INT_MAX) in.fail(4, "absurd label count " + std::to_string(n));
  return n;
}

// ---- seeded sampling, independent of the standard library's distributions ----

class Sampler {
 public:
  explicit Sampler(std::uint64_t seed) : rng_(seed) {}

  // Uniform in the open interval (0, 1), from the 53 high bits.
  double uniformOpen() { return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1p-53; }

  // Uniform integer in [0, bound), bound >= 1, without modulo bias.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (std::uint64_t{0} - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t r = rng_();
      if (r >= threshold) return r % bound;
    }
  }

  // Standard normal (Marsaglia polar method).
  double normal() {
    for (;;) {
      const double u = 2.0 * uniformOpen() - 1.0;
      const double v = 2.0 * uniformOpen() - 1.0;
      const double s = u * u + v * v;
      if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
    }
  }

  // log of a Gamma(shape, 1) variate (Marsaglia-Tsang). Working in logs keeps
  // tiny shapes from underflowing to 0: G(a) = G(a + 1) * U^(1/a) for a < 1.
  double logGamma(double shape) {
    if (shape < 1.0) return logGamma(shape + 1.0) + std::log(uniformOpen()) / shape;
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = 0.0;
      double v = 0.0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniformOpen();
      const double x2 = x * x;
      if (u < 1.0 - 0.0331 * x2 * x2) return std::log(d * v);
      if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return std::log(d * v);
    }
  }

  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

Dataset loadIdx(const std::string& imagesGz, const std::string& labelsGz, int limit) {
  GOSSAMER_ENFORCE(limit >= 0, "limit=" << limit);
  GzReader images(imagesGz);
  const ImagesHeader header = readImagesHeader(images);
  GzReader labels(labelsGz);
  const std::uint32_t labelCount = readLabelsHeader(labels);
  if (labelCount != header.count) {
    labels.fail(4, "label count " + std::to_string(labelCount) + " does not match image count " +
                       std::to_string(header.count) + " of " + imagesGz);
  }

  const std::uint32_t keep =
      limit > 0 ? std::min(header.count, static_cast<std::uint32_t>(limit)) : header.count;
  Dataset data;
  data.numClasses = kIdxClasses;
  {
    const std::vector<std::uint8_t> pixels =
        images.readPayload(std::uint64_t{keep} * header.features, "image data");
    if (keep == header.count) images.expectEnd();
    using ByteMatrix = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const ByteMatrix> raw(pixels.data(), keep, static_cast<Eigen::Index>(header.features));
    data.images = raw.cast<float>() * (1.0f / 255.0f);
  }
  constexpr std::uint64_t kLabelsPayloadOffset = 8;
  data.labels = labels.readPayload(keep, "label data");
  if (keep == header.count) labels.expectEnd();
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    if (data.labels[i] >= kIdxClasses) {
      labels.fail(kLabelsPayloadOffset + i, "label value " + std::to_string(data.labels[i]) + " of sample " +
                                                std::to_string(i) + " out of range [0, 9]");
    }
  }
  return data;
}

FashionMnist loadFashionMnist(const std::string& dir, int trainLimit, int testLimit, bool standardize) {
  GOSSAMER_ENFORCE(trainLimit >= 0 && testLimit >= 0,
                   "trainLimit=" << trainLimit << " testLimit=" << testLimit);
  const std::filesystem::path base(dir);
  const std::string testImages = (base / "t10k-images-idx3-ubyte.gz").string();
  FashionMnist out;
  out.train = loadIdx((base / "train-images-idx3-ubyte.gz").string(),
                      (base / "train-labels-idx1-ubyte.gz").string(), trainLimit);
  out.test = loadIdx(testImages, (base / "t10k-labels-idx1-ubyte.gz").string(), testLimit);
  if (out.test.images.cols() != out.train.images.cols()) {
    throw DataError(testImages, 8,
                    "test images have " + std::to_string(out.test.images.cols()) +
                        " pixels each, training images " + std::to_string(out.train.images.cols()));
  }
  if (standardize) {
    const auto count = static_cast<double>(out.train.images.size());
    const double mean = out.train.images.cast<double>().sum() / count;
    const double var = (out.train.images.cast<double>().array() - mean).square().sum() / count;
    const double stddev = std::sqrt(var);
    const auto m = static_cast<float>(mean);
    const float scale = stddev > 1e-12 ? static_cast<float>(1.0 / stddev) : 1.0f;
    out.train.images = (out.train.images.array() - m) * scale;
    out.test.images = (out.test.images.array() - m) * scale;
    out.pixelMean = m;
    out.pixelStd = stddev > 1e-12 ? static_cast<float>(stddev) : 1.0f;
  }
  return out;
}

std::vector<std::vector<int>> partitionIndices(const std::vector<std::uint8_t>& labels, int numClasses,
                                               int worldSize, const std::string& kind, double dirichletAlpha,
                                               std::uint64_t seed) {
  GOSSAMER_ENFORCE(kind == "iid" || kind == "non_iid",
                   "unknown partition kind '" << kind << "' (expected iid or non_iid)");
  GOSSAMER_ENFORCE(worldSize >= 1, "worldSize=" << worldSize);
  GOSSAMER_ENFORCE(numClasses >= 1 && numClasses <= 256, "numClasses=" << numClasses);
  GOSSAMER_ENFORCE(labels.size() <= static_cast<std::size_t>(INT_MAX), "too many samples: " << labels.size());
  GOSSAMER_ENFORCE(labels.size() >= static_cast<std::size_t>(worldSize),
                   "fewer samples (" << labels.size() << ") than ranks (" << worldSize << ")");
  for (std::size_t i = 0; i < labels.size(); ++i) {
    GOSSAMER_ENFORCE(labels[i] < numClasses,
                     "label " << int{labels[i]} << " of sample " << i << " >= numClasses=" << numClasses);
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  const auto world = static_cast<std::size_t>(worldSize);
  Sampler sampler(seed);
  std::vector<std::vector<int>> shards(world);

  if (kind == "iid") {
    std::vector<int> all(labels.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    sampler.shuffle(all);
    for (std::size_t r = 0; r < world; ++r) {
      const std::int64_t begin = n * static_cast<std::int64_t>(r) / worldSize;
      const std::int64_t end = n * static_cast<std::int64_t>(r + 1) / worldSize;
      shards[r].assign(all.begin() + begin, all.begin() + end);
    }
  } else {
    GOSSAMER_ENFORCE(std::isfinite(dirichletAlpha) && dirichletAlpha > 0.0,
                     "dirichletAlpha=" << dirichletAlpha << " (must be finite and > 0)");
    std::vector<std::vector<int>> byClass(static_cast<std::size_t>(numClasses));
    for (std::size_t i = 0; i < labels.size(); ++i) {
      byClass[labels[i]].push_back(static_cast<int>(i));
    }
    std::vector<double> weight(world);
    for (auto& members : byClass) {
      sampler.shuffle(members);
      // Dirichlet(alpha) = normalised Gamma(alpha) draws, computed from logs.
      double maxLog = -HUGE_VAL;
      for (auto& w : weight) {
        w = sampler.logGamma(dirichletAlpha);
        maxLog = std::max(maxLog, w);
      }
      double total = 0.0;
      for (auto& w : weight) {
        w = std::exp(w - maxLog);
        total += w;
      }
      const auto size = static_cast<std::int64_t>(members.size());
      double cumulative = 0.0;
      std::int64_t begin = 0;
      for (std::size_t r = 0; r < world; ++r) {
        cumulative += weight[r] / total;
        std::int64_t end = size;
        if (r + 1 < world) {
          const auto cut = static_cast<std::int64_t>(std::llround(cumulative * static_cast<double>(size)));
          end = std::clamp(cut, begin, size);
        }
        shards[r].insert(shards[r].end(), members.begin() + begin, members.begin() + end);
        begin = end;
      }
    }
    // Every rank needs data: an empty rank takes one sample from the largest
    // shard (which has >= 2 since there are at least worldSize samples).
    for (auto& shard : shards) {
      if (!shard.empty()) continue;
      auto largest = std::max_element(shards.begin(), shards.end(),
                                      [](const auto& a, const auto& b) { return a.size() < b.size(); });
      shard.push_back(largest->back());
      largest->pop_back();
    }
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

}  // namespace train
}  // namespace gossamer
