#include "dataset.hpp"

#include <libdeflate.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
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
// The largest file read in full: an IDX header and the largest payload.
constexpr std::size_t kMaxFileBytes = 16 + std::size_t{kMaxPayloadBytes};
constexpr std::size_t kReadChunk = std::size_t{4} << 20;
constexpr int kIdxClasses = 10;

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

// Sequential reader over one (usually gzip-compressed) file that tracks the
// decompressed byte offset for error messages. A file read in full is
// inflated in one call by libdeflate (about twice zlib's speed); a file read
// only in part (a limit), or one libdeflate refuses, is streamed through
// zlib, which also names the offset where a corrupt stream breaks.
class GzReader {
  using Buffer = std::unique_ptr<unsigned char, decltype(&std::free)>;

 public:
  GzReader(std::string path, bool whole) : path_(std::move(path)) {
    std::error_code ec;
    const auto st = std::filesystem::status(path_, ec);
    if (!std::filesystem::exists(st)) fail(0, "file not found");
    if (std::filesystem::is_directory(st)) fail(0, "is a directory, expected a file");
    if (whole && inflateWhole()) return;
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
    if (file_ == nullptr) {  // inflated in full
      const std::size_t got = std::min<std::size_t>(n, inflatedBytes_ - static_cast<std::size_t>(offset_));
      if (got > 0) std::memcpy(out, inflated_.get() + offset_, got);
      offset_ += got;
      return got;
    }
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
  // so a lying header cannot make us allocate more than the file holds. A file
  // inflated in full bounds n by what is left of it: one allocation of that
  // size (growing through 4, 8 and 16 MiB steps left them, freed, on the heap,
  // under the trim threshold glibc raises after freeing a large block: about
  // 17 MiB resident per process for Fashion-MNIST).
  std::vector<std::uint8_t> readPayload(std::uint64_t n, const std::string& what) {
    std::vector<std::uint8_t> buf;
    const std::uint64_t left = inflated_ ? inflatedBytes_ - offset_ : kReadChunk;
    buf.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, left)));
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
  // Inflates the whole file into inflated_ with libdeflate: every gzip
  // member in turn, or the bytes as they are when the file is not gzip.
  // The output starts at the last member's stated size (ISIZE, capped by
  // deflate's largest ratio, 1032:1) and doubles as needed up to
  // kMaxFileBytes; it is not zeroed, so a lying ISIZE costs address space,
  // not memory. False (nothing kept) when libdeflate finds the data bad or
  // too large: the zlib stream then reports where.
  bool inflateWhole() {
    std::ifstream in(path_, std::ios::binary);
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path_, ec);
    if (!in || ec || size > kMaxFileBytes) return false;  // gzopen says why
    std::vector<unsigned char> packed(static_cast<std::size_t>(size));
    if (!in.read(reinterpret_cast<char*>(packed.data()), static_cast<std::streamsize>(size))) return false;
    if (size < 2 || packed[0] != 0x1f || packed[1] != 0x8b) {  // not gzip: the bytes themselves
      inflated_.reset(static_cast<unsigned char*>(std::malloc(std::max<std::size_t>(packed.size(), 1))));
      if (!inflated_) return false;
      std::memcpy(inflated_.get(), packed.data(), packed.size());
      inflatedBytes_ = packed.size();
      return true;
    }
    if (size < 18) return false;  // shorter than a gzip header and trailer
    const std::size_t stated = std::size_t{packed[size - 4]} | std::size_t{packed[size - 3]} << 8 |
                               std::size_t{packed[size - 2]} << 16 | std::size_t{packed[size - 1]} << 24;
    std::size_t capacity =
        std::clamp<std::size_t>(stated, 4096, std::min(1032 * packed.size(), kMaxFileBytes));
    Buffer out(static_cast<unsigned char*>(std::malloc(capacity)), &std::free);
    std::unique_ptr<libdeflate_decompressor, decltype(&libdeflate_free_decompressor)> inflater(
        libdeflate_alloc_decompressor(), &libdeflate_free_decompressor);
    if (!out || !inflater) return false;
    std::size_t read = 0, written = 0;
    while (read < packed.size()) {
      std::size_t inBytes = 0, outBytes = 0;
      const libdeflate_result r =
          libdeflate_gzip_decompress_ex(inflater.get(), packed.data() + read, packed.size() - read,
                                        out.get() + written, capacity - written, &inBytes, &outBytes);
      if (r == LIBDEFLATE_INSUFFICIENT_SPACE && capacity < kMaxFileBytes) {
        capacity = std::min(capacity * 2, kMaxFileBytes);
        auto* grown = static_cast<unsigned char*>(std::realloc(out.get(), capacity));
        if (grown == nullptr) return false;
        out.release();
        out.reset(grown);
        continue;
      }
      if (r != LIBDEFLATE_SUCCESS) return false;
      read += inBytes;
      written += outBytes;
    }
    inflated_ = std::move(out);
    inflatedBytes_ = written;
    return true;
  }

  [[noreturn]] void failTruncated(const std::string& detail) const {
    if (file_ == nullptr) fail(offset_, "truncated file: data ends early, " + detail);
    int code = Z_OK;
    gzerror(file_, &code);
    const char* why =
        code == Z_BUF_ERROR ? "compressed stream ends early (truncated .gz), " : "data ends early, ";
    fail(offset_, std::string("truncated file: ") + why + detail);
  }

  std::string path_;
  gzFile file_ = nullptr;                 // the zlib stream, or null when inflated in full
  Buffer inflated_{nullptr, &std::free};  // the whole file, inflated
  std::size_t inflatedBytes_ = 0;
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

// An IDX image set as stored: one byte per pixel, samples x features.
struct RawIdx {
  std::vector<std::uint8_t> pixels;
  std::uint64_t features = 0;
  std::vector<std::uint8_t> labels;
};

RawIdx readIdx(const std::string& imagesGz, const std::string& labelsGz, int limit) {
  GOSSAMER_ENFORCE(limit >= 0, "limit=" << limit);
  GzReader images(imagesGz, limit == 0);
  const ImagesHeader header = readImagesHeader(images);
  GzReader labels(labelsGz, limit == 0);
  const std::uint32_t labelCount = readLabelsHeader(labels);
  if (labelCount != header.count) {
    labels.fail(4, "label count " + std::to_string(labelCount) + " does not match image count " +
                       std::to_string(header.count) + " of " + imagesGz);
  }

  const std::uint32_t keep =
      limit > 0 ? std::min(header.count, static_cast<std::uint32_t>(limit)) : header.count;
  RawIdx raw;
  raw.features = header.features;
  raw.pixels = images.readPayload(std::uint64_t{keep} * header.features, "image data");
  if (keep == header.count) images.expectEnd();
  constexpr std::uint64_t kLabelsPayloadOffset = 8;
  raw.labels = labels.readPayload(keep, "label data");
  if (keep == header.count) labels.expectEnd();
  for (std::size_t i = 0; i < raw.labels.size(); ++i) {
    if (raw.labels[i] >= kIdxClasses) {
      labels.fail(kLabelsPayloadOffset + i, "label value " + std::to_string(raw.labels[i]) + " of sample " +
                                                std::to_string(i) + " out of range [0, 9]");
    }
  }
  return raw;
}

// The float each byte value becomes.
using PixelTable = std::array<float, 256>;

// p / 255, as float(p) * (1 / 255).
PixelTable unitScale() {
  PixelTable t{};
  for (std::size_t p = 0; p < t.size(); ++p) t[p] = static_cast<float>(p) * (1.0f / 255.0f);
  return t;
}

// One pass over the bytes: every pixel through the table.
Dataset toDataset(RawIdx raw, const PixelTable& table) {
  Dataset data;
  data.numClasses = kIdxClasses;
  const auto rows = static_cast<Eigen::Index>(raw.labels.size());
  data.images.resize(rows, static_cast<Eigen::Index>(raw.features));
  float* out = data.images.data();
  for (std::size_t i = 0; i < raw.pixels.size(); ++i) out[i] = table[raw.pixels[i]];
  data.labels = std::move(raw.labels);
  return data;
}

// How many times each byte value occurs. Four tables: a run of equal bytes
// (blank image borders) then updates four counters in turn instead of
// waiting on one.
std::array<std::uint64_t, 256> byteCounts(const std::vector<std::uint8_t>& bytes) {
  std::array<std::array<std::uint64_t, 256>, 4> counts{};
  const std::uint8_t* px = bytes.data();
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++counts[0][px[i]];
    ++counts[1][px[i + 1]];
    ++counts[2][px[i + 2]];
    ++counts[3][px[i + 3]];
  }
  for (; i < n; ++i) ++counts[0][px[i]];
  for (std::size_t t = 1; t < counts.size(); ++t)
    for (std::size_t v = 0; v < 256; ++v) counts[0][v] += counts[t][v];
  return counts[0];
}

}  // namespace

Dataset loadIdx(const std::string& imagesGz, const std::string& labelsGz, int limit) {
  return toDataset(readIdx(imagesGz, labelsGz, limit), unitScale());
}

FashionMnist loadFashionMnist(const std::string& dir, int trainLimit, int testLimit, bool standardize) {
  GOSSAMER_ENFORCE(trainLimit >= 0 && testLimit >= 0,
                   "trainLimit=" << trainLimit << " testLimit=" << testLimit);
  const std::filesystem::path base(dir);
  const std::string testImages = (base / "t10k-images-idx3-ubyte.gz").string();
  RawIdx train = readIdx((base / "train-images-idx3-ubyte.gz").string(),
                         (base / "train-labels-idx1-ubyte.gz").string(), trainLimit);
  RawIdx test = readIdx(testImages, (base / "t10k-labels-idx1-ubyte.gz").string(), testLimit);
  if (test.features != train.features) {
    throw DataError(testImages, 8,
                    "test images have " + std::to_string(test.features) + " pixels each, training images " +
                        std::to_string(train.features));
  }
  FashionMnist out;
  PixelTable table = unitScale();
  if (standardize) {
    // The mean and variance of the scaled training pixels from the count of
    // each byte value: 256 terms in double instead of one per pixel.
    const std::array<std::uint64_t, 256> counts = byteCounts(train.pixels);
    const auto count = static_cast<double>(train.pixels.size());
    double sum = 0;
    for (std::size_t p = 0; p < table.size(); ++p) sum += static_cast<double>(counts[p]) * table[p];
    const double mean = sum / count;
    double squares = 0;
    for (std::size_t p = 0; p < table.size(); ++p) {
      const double d = table[p] - mean;
      squares += static_cast<double>(counts[p]) * d * d;
    }
    const double stddev = std::sqrt(squares / count);
    const auto m = static_cast<float>(mean);
    const float scale = stddev > 1e-12 ? static_cast<float>(1.0 / stddev) : 1.0f;
    for (float& v : table) v = (v - m) * scale;
    out.pixelMean = m;
    out.pixelStd = stddev > 1e-12 ? static_cast<float>(stddev) : 1.0f;
  }
  out.train = toDataset(std::move(train), table);
  out.test = toDataset(std::move(test), table);
#ifdef __GLIBC__
  // The file and byte buffers freed above lie on the heap below the trim
  // threshold that freeing the large ones raised (about 20 MiB for
  // Fashion-MNIST): give them back rather than keep them resident all run.
  malloc_trim(0);
#endif
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
