// Unit tests of the example job's data loading and models (gossamer_train_core):
// gradients against finite differences, the IDX loader on gz files written
// here, shard partitioning, and a short softmax training run on Fashion-MNIST.
#include <zlib.h>
#include <catch2/catch.hpp>

#include "dataset.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dataset.hpp"
#include "gossamer/store.hpp"
#include "model.hpp"
#include "process.hpp"
#include "registry.hpp"
#include "summary_file.hpp"
#include "trainer.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using gossamer::DataError;
using gossamer::InvalidArgument;
using gossamer::train::Dataset;
using gossamer::train::loadFashionMnist;
using gossamer::train::loadIdx;
using gossamer::train::Model;
using gossamer::train::partitionIndices;
using gossamer::train::RowMatrix;

using Bytes = std::vector<std::uint8_t>;

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("gossamer_train_core_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void putU32(Bytes& out, std::uint32_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 24));
  out.push_back(static_cast<std::uint8_t>(v >> 16));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

Bytes imagesFile(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes out;
  putU32(out, magic);
  putU32(out, n);
  putU32(out, rows);
  putU32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes labelsFile(std::uint32_t n, const Bytes& labels, std::uint32_t magic = 0x00000801) {
  Bytes out;
  putU32(out, magic);
  putU32(out, n);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void writeGz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(f) == Z_OK);
}

// Pixel value of sample s, feature f in the synthetic files.
std::uint8_t pixel(int s, int f) { return static_cast<std::uint8_t>((s * 37 + f * 11) % 256); }

Bytes pixelsFor(int n, int features) {
  Bytes px;
  for (int s = 0; s < n; ++s) {
    for (int f = 0; f < features; ++f) px.push_back(pixel(s, f));
  }
  return px;
}

// Runs fn, requires a DataError naming `file` and containing `fragment`.
template <class Fn>
gossamer::DataError requireDataError(Fn&& fn, const std::string& file, const std::string& fragment) {
  try {
    fn();
  } catch (const DataError& e) {
    INFO(e.what());
    CHECK(e.file() == file);
    CHECK_THAT(e.what(), Contains(file) && Contains("byte offset") && Contains(fragment));
    return e;
  }
  FAIL("expected gossamer::DataError mentioning " << file);
  throw std::logic_error("unreachable");
}

// Deterministic pseudo-random floats in [lo, hi).
std::vector<float> randomFloats(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

RowMatrix randomMatrix(int rows, int cols, std::uint64_t seed, float lo, float hi) {
  const auto v = randomFloats(static_cast<std::size_t>(rows) * cols, seed, lo, hi);
  return Eigen::Map<const RowMatrix>(v.data(), rows, cols);
}

Bytes randomLabels(std::size_t n, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes labels(n);
  for (auto& l : labels) l = static_cast<std::uint8_t>(rng() % static_cast<unsigned>(classes));
  return labels;
}

// Independent double-precision forward pass that reads the flat layout as
// documented in model.hpp (W_l row-major out x in, then b_l).
struct Reference {
  double loss = 0.0;          // mean cross-entropy
  double minAbsPreact = 0.0;  // distance of the nearest hidden pre-activation to the ReLU kink
};

Reference referenceForward(const Model& model, const std::vector<double>& p, const RowMatrix& x,
                           const Bytes& labels) {
  const std::vector<int>& widths = model.widths();
  const std::size_t layers = widths.size() - 1;
  Reference ref;
  ref.minAbsPreact = std::numeric_limits<double>::infinity();
  for (Eigen::Index s = 0; s < x.rows(); ++s) {
    std::vector<double> a(x.row(s).data(), x.row(s).data() + x.cols());
    std::size_t off = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      const auto in = static_cast<std::size_t>(widths[l]);
      const auto out = static_cast<std::size_t>(widths[l + 1]);
      std::vector<double> z(out);
      for (std::size_t o = 0; o < out; ++o) {
        z[o] = p[off + in * out + o];
        for (std::size_t i = 0; i < in; ++i) z[o] += p[off + o * in + i] * a[i];
        if (l + 1 < layers) {
          ref.minAbsPreact = std::min(ref.minAbsPreact, std::abs(z[o]));
          z[o] = std::max(z[o], 0.0);
        }
      }
      off += in * out + out;
      a = std::move(z);
    }
    const double m = *std::max_element(a.begin(), a.end());
    double sum = 0.0;
    for (const double v : a) sum += std::exp(v - m);
    ref.loss += m + std::log(sum) - a[labels[static_cast<std::size_t>(s)]];
  }
  ref.loss /= static_cast<double>(x.rows());
  return ref;
}

// Checks every coordinate of the analytic gradient against central differences
// of the double-precision reference loss (which must match the model's loss).
void checkGradient(Model model, std::uint64_t seed) {
  const int batch = 6;
  std::vector<float> params(model.numParams());
  model.init(params, seed);
  // Non-zero biases, so that their effect is exercised too.
  const auto noise = randomFloats(params.size(), seed + 1, -0.2f, 0.2f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  const RowMatrix x = randomMatrix(batch, model.inputs(), seed + 2, -1.0f, 1.0f);
  const Bytes labels = randomLabels(batch, model.classes(), seed + 3);

  std::vector<float> grad(params.size());
  const float loss = model.lossAndGradient(params, x, labels.data(), grad);
  REQUIRE(std::isfinite(loss));

  std::vector<double> p(params.begin(), params.end());
  const Reference ref = referenceForward(model, p, x, labels);
  CHECK(loss == Approx(ref.loss).epsilon(1e-5));
  // Finite differences are meaningless across a ReLU kink: the data must keep
  // every hidden pre-activation well away from 0 compared with the step h.
  const double h = 1e-6;
  REQUIRE(ref.minAbsPreact > 100.0 * h);

  // loss() over the same samples agrees with lossAndGradient().
  Dataset data;
  data.images = x;
  data.labels = labels;
  data.numClasses = model.classes();
  CHECK(model.loss(params, data) == Approx(loss).epsilon(1e-5));

  std::size_t offset = 0;
  int tensor = 0;
  for (const std::size_t size : model.tensorSizes()) {
    for (std::size_t k = offset; k < offset + size; ++k) {
      const double saved = p[k];
      p[k] = saved + h;
      const double up = referenceForward(model, p, x, labels).loss;
      p[k] = saved - h;
      const double down = referenceForward(model, p, x, labels).loss;
      p[k] = saved;
      const double numeric = (up - down) / (2.0 * h);
      INFO("tensor " << tensor << " coordinate " << k - offset << ": analytic " << grad[k] << " numeric "
                     << numeric);
      CHECK(std::abs(numeric - grad[k]) <= 1e-5 + 1e-3 * std::abs(numeric));
    }
    offset += size;
    ++tensor;
  }
  CHECK(offset == model.numParams());

  // Scratch reuse across batch sizes gives identical results.
  std::vector<float> grad2(params.size());
  model.lossAndGradient(params, x.topRows(2), labels.data(), grad2);
  const float again = model.lossAndGradient(params, x, labels.data(), grad2);
  CHECK(again == loss);
  CHECK(grad2 == grad);
}

}  // namespace

TEST_CASE("train_core: MLP gradient matches finite differences", "[train_core]") {
  SECTION("one hidden layer 5-4-3") { checkGradient(Model::mlp(5, {4}, 3), 11); }
  SECTION("two hidden layers 5-4-3-3") { checkGradient(Model::mlp(5, {4, 3}, 3), 21); }
  SECTION("softmax regression 5-3") { checkGradient(Model::softmax(5, 3), 31); }
}

TEST_CASE("train_core: model layout and init", "[train_core]") {
  const Model mlp = Model::mlp(784, {128}, 10);
  CHECK(mlp.numParams() == 784u * 128 + 128 + 128 * 10 + 10);
  CHECK(mlp.tensorSizes() == std::vector<std::size_t>{784 * 128, 128, 128 * 10, 10});
  CHECK(Model::softmax(784, 10).numParams() == 7850u);

  std::vector<float> a(mlp.numParams());
  std::vector<float> b(mlp.numParams());
  mlp.init(a, 5);
  mlp.init(b, 5);
  CHECK(a == b);
  mlp.init(b, 6);
  CHECK(a != b);
  // Tensor t as an Eigen array, in flat order W1, b1, W2, b2.
  std::vector<Eigen::Map<const Eigen::ArrayXf>> tensors;
  std::size_t offset = 0;
  for (const std::size_t size : mlp.tensorSizes()) {
    tensors.emplace_back(a.data() + offset, static_cast<Eigen::Index>(size));
    offset += size;
  }
  const float bound1 = std::sqrt(6.0f / 784.0f);  // ReLU layer: He uniform
  const float bound2 = std::sqrt(1.0f / 128.0f);  // output layer
  CHECK(tensors[0].abs().maxCoeff() <= bound1);
  CHECK(tensors[0].abs().maxCoeff() > 0.9f * bound1);
  CHECK(std::abs(tensors[0].mean()) < 0.01f * bound1);
  CHECK((tensors[1] == 0.0f).all());
  CHECK(tensors[2].abs().maxCoeff() <= bound2);
  CHECK(tensors[2].abs().maxCoeff() > 0.9f * bound2);
  CHECK((tensors[3] == 0.0f).all());

  CHECK_THROWS_AS(Model::mlp(0, {128}, 10), InvalidArgument);
  CHECK_THROWS_AS(Model::mlp(784, {0}, 10), InvalidArgument);
  CHECK_THROWS_AS(Model::softmax(784, 1), InvalidArgument);
  std::vector<float> small(10);
  CHECK_THROWS_AS(mlp.init(small, 1), InvalidArgument);
}

TEST_CASE("train_core: fresh softmax model has loss near ln(10)", "[train_core]") {
  Model model = Model::softmax(784, 10);
  std::vector<float> params(model.numParams());
  model.init(params, 3);
  const RowMatrix x = randomMatrix(256, 784, 4, 0.0f, 1.0f);
  const Bytes labels = randomLabels(256, 10, 5);
  std::vector<float> grad(params.size());
  const float loss = model.lossAndGradient(params, x, labels.data(), grad);
  CHECK(std::abs(loss - std::log(10.0f)) < 0.15f);

  Dataset data;
  data.images = x;
  data.labels = labels;
  CHECK(model.loss(params, data) == Approx(loss).epsilon(1e-5));
  const double acc = model.accuracy(params, data);
  CHECK(acc >= 0.0);
  CHECK(acc <= 1.0);
}

TEST_CASE("train_core: loss is stable for huge logits", "[train_core]") {
  Model model = Model::softmax(2, 3);
  // W = [[1000, 0], [0, 0], [-1000, 0]], b = 0: logits (1000 x0, 0, -1000 x0).
  std::vector<float> params{1000, 0, 0, 0, -1000, 0, 0, 0, 0};
  RowMatrix x(2, 2);
  x << 1, 0, -1, 0;
  const Bytes labels{0, 0};
  std::vector<float> grad(params.size());
  const float loss = model.lossAndGradient(params, x, labels.data(), grad);
  REQUIRE(std::isfinite(loss));
  CHECK(loss == Approx(1000.0f).epsilon(1e-4));  // row 0 ~0, row 1 ~2000
  for (const float g : grad) CHECK(std::isfinite(g));
}

TEST_CASE("train_core: lossAndGradient validates its arguments", "[train_core]") {
  Model model = Model::mlp(4, {3}, 2);
  std::vector<float> params(model.numParams());
  std::vector<float> grad(model.numParams());
  model.init(params, 1);
  const RowMatrix x = randomMatrix(2, 4, 2, 0.0f, 1.0f);
  const Bytes labels{0, 1};
  const Bytes badLabels{0, 2};
  std::vector<float> shortParams(params.size() - 1);
  const RowMatrix wrongCols = randomMatrix(2, 5, 2, 0.0f, 1.0f);
  CHECK_THROWS_AS(model.lossAndGradient(shortParams, x, labels.data(), grad), InvalidArgument);
  CHECK_THROWS_AS(model.lossAndGradient(params, x, labels.data(), shortParams), InvalidArgument);
  CHECK_THROWS_AS(model.lossAndGradient(params, wrongCols, labels.data(), grad), InvalidArgument);
  CHECK_THROWS_AS(model.lossAndGradient(params, x, badLabels.data(), grad), InvalidArgument);
  CHECK_THROWS_AS(model.lossAndGradient(params, x, nullptr, grad), InvalidArgument);
  CHECK_THROWS_AS(model.lossAndGradient(params, x, labels.data(), params), InvalidArgument);
  Dataset data;
  data.images = x;
  data.labels = badLabels;
  CHECK_THROWS_AS(model.accuracy(params, data), InvalidArgument);
  data.labels = Bytes{0};
  CHECK_THROWS_AS(model.loss(params, data), InvalidArgument);
}

TEST_CASE("train_core: IDX loader reads valid files", "[train_core]") {
  TempDir dir;
  const std::string img = dir.file("img.gz");
  const std::string lab = dir.file("lab.gz");
  writeGz(img, imagesFile(3, 2, 3, pixelsFor(3, 6)));
  writeGz(lab, labelsFile(3, {0, 9, 4}));

  const Dataset all = loadIdx(img, lab, 0);
  REQUIRE(all.size() == 3);
  REQUIRE(all.images.rows() == 3);
  REQUIRE(all.images.cols() == 6);
  CHECK(all.numClasses == 10);
  CHECK(all.labels == Bytes{0, 9, 4});
  for (int s = 0; s < 3; ++s) {
    for (int f = 0; f < 6; ++f) {
      INFO("sample " << s << " feature " << f);
      CHECK(all.images(s, f) == Approx(pixel(s, f) / 255.0f));
    }
  }
  const Dataset two = loadIdx(img, lab, 2);
  CHECK(two.size() == 2);
  CHECK(two.images.rows() == 2);
  CHECK(two.images == all.images.topRows(2));
  CHECK(loadIdx(img, lab, 100).size() == 3);
  CHECK_THROWS_AS(loadIdx(img, lab, -1), InvalidArgument);

  // An uncompressed file is read as is.
  const std::string raw = dir.file("raw-images");
  const Bytes rawBytes = imagesFile(3, 2, 3, pixelsFor(3, 6));
  std::ofstream(raw, std::ios::binary)
      .write(reinterpret_cast<const char*>(rawBytes.data()), static_cast<std::streamsize>(rawBytes.size()));
  CHECK(loadIdx(raw, lab, 0).images == all.images);

  // Two gzip members, read in full (inflated whole, the output growing past
  // the last member's stated size) and in part (streamed): the same data.
  const Bytes big = imagesFile(200, 28, 28, pixelsFor(200, 784));
  const std::string twoMembers = dir.file("two-members.gz");
  const std::string first = dir.file("first.gz"), second = dir.file("second.gz");
  writeGz(first, Bytes(big.begin(), big.end() - 100));
  writeGz(second, Bytes(big.end() - 100, big.end()));
  {
    std::ofstream out(twoMembers, std::ios::binary);
    out << std::ifstream(first, std::ios::binary).rdbuf() << std::ifstream(second, std::ios::binary).rdbuf();
  }
  const std::string bigLab = dir.file("big-lab.gz");
  writeGz(bigLab, labelsFile(200, Bytes(200, 3)));
  const Dataset whole = loadIdx(twoMembers, bigLab, 0);
  REQUIRE(whole.size() == 200);
  CHECK(whole.images(199, 783) == Approx(pixel(199, 783) / 255.0f));
  CHECK(loadIdx(twoMembers, bigLab, 199).images == whole.images.topRows(199));
}

TEST_CASE("train_core: IDX loader rejects bad files", "[train_core]") {
  TempDir dir;
  const std::string img = dir.file("img.gz");
  const std::string lab = dir.file("lab.gz");
  const std::string goodImg = dir.file("good-img.gz");
  const std::string goodLab = dir.file("good-lab.gz");
  writeGz(goodImg, imagesFile(3, 2, 3, pixelsFor(3, 6)));
  writeGz(goodLab, labelsFile(3, {1, 2, 3}));

  SECTION("missing file") {
    const std::string missing = dir.file("nope.gz");
    requireDataError([&] { loadIdx(missing, goodLab, 0); }, missing, "not found");
    requireDataError([&] { loadIdx(goodImg, missing, 0); }, missing, "not found");
    requireDataError([&] { loadIdx(dir.str(), goodLab, 0); }, dir.str(), "directory");
  }
  SECTION("bad magic") {
    writeGz(img, imagesFile(3, 2, 3, pixelsFor(3, 6), 0x00000801));
    const auto e = requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "magic");
    CHECK(e.offset() == 0);
    writeGz(lab, labelsFile(3, {1, 2, 3}, 0x00000803));
    requireDataError([&] { loadIdx(goodImg, lab, 0); }, lab, "magic");
  }
  SECTION("truncated header") {
    writeGz(img, Bytes{0, 0, 8, 3, 0, 0});
    requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "truncated");
  }
  SECTION("truncated payload") {
    Bytes px = pixelsFor(3, 6);
    px.resize(15);
    writeGz(img, imagesFile(3, 2, 3, px));
    const auto e = requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "truncated");
    CHECK(e.offset() == 16 + 15);
    writeGz(lab, labelsFile(3, {1, 2}));
    requireDataError([&] { loadIdx(goodImg, lab, 0); }, lab, "truncated");
  }
  SECTION("truncated gzip stream") {
    const Bytes px = pixelsFor(2000, 784);
    writeGz(img, imagesFile(2000, 28, 28, px));
    std::ifstream in(img, std::ios::binary);
    std::string compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    compressed.resize(compressed.size() / 2);
    std::ofstream(img, std::ios::binary | std::ios::trunc) << compressed;
    writeGz(lab, labelsFile(2000, Bytes(2000, 1)));
    requireDataError([&] { loadIdx(img, lab, 0); }, img, "");
  }
  SECTION("trailing bytes") {
    Bytes px = pixelsFor(3, 6);
    px.push_back(7);
    writeGz(img, imagesFile(3, 2, 3, px));
    const auto e = requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "after the payload");
    CHECK(e.offset() == 16 + 18);
    CHECK(loadIdx(img, goodLab, 2).size() == 2);  // not read when limited
  }
  SECTION("absurd and zero dimensions") {
    writeGz(img, imagesFile(0xFFFFFFFFu, 28, 28, {}));
    requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "absurd");
    writeGz(img, imagesFile(1, 0xFFFFFFFFu, 0xFFFFFFFFu, {}));
    requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "absurd");
    writeGz(img, imagesFile(3, 0, 28, {}));
    requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "zero");
    writeGz(img, imagesFile(0, 28, 28, {}));
    requireDataError([&] { loadIdx(img, goodLab, 0); }, img, "count is 0");
  }
  SECTION("count mismatch") {
    writeGz(lab, labelsFile(2, {1, 2}));
    const auto e = requireDataError([&] { loadIdx(goodImg, lab, 0); }, lab, "does not match");
    CHECK(e.offset() == 4);
  }
  SECTION("label out of range") {
    writeGz(lab, labelsFile(3, {1, 2, 10}));
    const auto e = requireDataError([&] { loadIdx(goodImg, lab, 0); }, lab, "label value 10");
    CHECK(e.offset() == 8 + 2);
  }
}

TEST_CASE("train_core: loadFashionMnist standardises with training statistics", "[train_core]") {
  TempDir dir;
  writeGz(dir.file("train-images-idx3-ubyte.gz"), imagesFile(5, 2, 2, pixelsFor(5, 4)));
  writeGz(dir.file("train-labels-idx1-ubyte.gz"), labelsFile(5, {0, 1, 2, 3, 4}));
  Bytes testPx = pixelsFor(4, 4);
  std::reverse(testPx.begin(), testPx.end());
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), imagesFile(4, 2, 2, testPx));
  writeGz(dir.file("t10k-labels-idx1-ubyte.gz"), labelsFile(4, {5, 6, 7, 8}));

  const auto plain = loadFashionMnist(dir.str(), 0, 0, false);
  CHECK(plain.train.size() == 5);
  CHECK(plain.test.size() == 4);
  CHECK(plain.pixelMean == 0.0f);
  CHECK(plain.pixelStd == 1.0f);

  const auto scaled = loadFashionMnist(dir.str(), 0, 3, true);
  CHECK(scaled.test.size() == 3);
  const Eigen::ArrayXd train = scaled.train.images.reshaped().cast<double>().array();
  CHECK(std::abs(train.mean()) < 1e-5);
  CHECK(std::sqrt((train - train.mean()).square().mean()) == Approx(1.0).epsilon(1e-5));
  const double mean = plain.train.images.cast<double>().mean();
  CHECK(scaled.pixelMean == Approx(mean));
  CHECK(scaled.test.images(1, 2) ==
        Approx((plain.test.images(1, 2) - scaled.pixelMean) / scaled.pixelStd).epsilon(1e-5));

  // Different image sizes for train and test are rejected.
  const std::string testImg = dir.file("t10k-images-idx3-ubyte.gz");
  writeGz(testImg, imagesFile(4, 1, 3, pixelsFor(4, 3)));
  requireDataError([&] { loadFashionMnist(dir.str(), 0, 0, true); }, testImg, "pixels");
}

namespace {

void requireCover(const std::vector<std::vector<int>>& shards, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& shard : shards) {
    REQUIRE(std::is_sorted(shard.begin(), shard.end()));
    REQUIRE((shard.empty() || (shard.front() >= 0 && static_cast<std::size_t>(shard.back()) < n)));
    for (const int i : shard) ++seen[static_cast<std::size_t>(i)];
  }
  const auto bad = std::find_if(seen.begin(), seen.end(), [](int c) { return c != 1; });
  INFO("index " << (bad - seen.begin()) << " is in " << (bad == seen.end() ? 1 : *bad) << " shards");
  REQUIRE(bad == seen.end());
}

// Largest share of a single label within a shard, maximised over shards.
double maxDominantShare(const std::vector<std::vector<int>>& shards, const Bytes& labels) {
  double best = 0.0;
  for (const auto& shard : shards) {
    std::vector<int> counts(10, 0);
    for (const int i : shard) ++counts[labels[static_cast<std::size_t>(i)]];
    const int top = *std::max_element(counts.begin(), counts.end());
    best = std::max(best, static_cast<double>(top) / static_cast<double>(shard.size()));
  }
  return best;
}

}  // namespace

TEST_CASE("train_core: iid partition", "[train_core]") {
  const Bytes labels = randomLabels(1000, 10, 9);
  const auto shards = partitionIndices(labels, 10, 7, "iid", 0.5, 42);
  REQUIRE(shards.size() == 7);
  requireCover(shards, labels.size());
  for (const auto& shard : shards) {
    CHECK(shard.size() >= 142);
    CHECK(shard.size() <= 143);
  }
  CHECK(partitionIndices(labels, 10, 7, "iid", 0.5, 42) == shards);
  CHECK(partitionIndices(labels, 10, 7, "iid", 0.5, 43) != shards);
  CHECK(maxDominantShare(shards, labels) < 0.25);

  // Pinned: only mt19937_64 and integer arithmetic, identical on every platform.
  const std::vector<std::vector<int>> pinned{{1, 3, 7}, {0, 4, 9}, {2, 5, 6, 8}};
  CHECK(partitionIndices(Bytes(10, 0), 1, 3, "iid", 0.5, 1) == pinned);
}

TEST_CASE("train_core: non_iid partition is a skewed cover", "[train_core]") {
  const Bytes labels = randomLabels(5000, 10, 10);
  const auto skewed = partitionIndices(labels, 10, 8, "non_iid", 0.1, 7);
  REQUIRE(skewed.size() == 8);
  requireCover(skewed, labels.size());
  for (const auto& shard : skewed) CHECK(!shard.empty());
  const double skewShare = maxDominantShare(skewed, labels);
  INFO("dominant label share at alpha=0.1: " << skewShare);
  CHECK(skewShare > 0.5);

  const auto mild = partitionIndices(labels, 10, 8, "non_iid", 1000.0, 7);
  requireCover(mild, labels.size());
  CHECK(maxDominantShare(mild, labels) < 0.2);

  CHECK(partitionIndices(labels, 10, 8, "non_iid", 0.1, 7) == skewed);
  CHECK(partitionIndices(labels, 10, 8, "non_iid", 0.1, 8) != skewed);

  // Extreme skew with as many ranks as samples: still one sample each.
  const Bytes few = randomLabels(20, 10, 11);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto tiny = partitionIndices(few, 10, 20, "non_iid", 0.01, seed);
    requireCover(tiny, few.size());
    for (const auto& shard : tiny) REQUIRE(shard.size() == 1);
  }
  const auto tinyAlpha = partitionIndices(labels, 10, 8, "non_iid", 1e-6, 3);
  requireCover(tinyAlpha, labels.size());
  for (const auto& shard : tinyAlpha) CHECK(!shard.empty());
}

TEST_CASE("train_core: partition validates its arguments", "[train_core]") {
  const Bytes labels = randomLabels(100, 10, 12);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 4, "random", 0.5, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 0, "iid", 0.5, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 101, "iid", 0.5, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 5, 4, "iid", 0.5, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 4, "non_iid", 0.0, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 4, "non_iid", -1.0, 1), InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(labels, 10, 4, "non_iid", std::numeric_limits<double>::quiet_NaN(), 1),
                  InvalidArgument);
  CHECK_THROWS_AS(partitionIndices(Bytes{}, 10, 1, "iid", 0.5, 1), InvalidArgument);
}

TEST_CASE("train_core: softmax regression learns Fashion-MNIST", "[train_core][data]") {
  gossamer::testing::requireFashionMnist();
  const std::string kFashionDir = gossamer::testing::fashionMnistDir();
  const auto data = loadFashionMnist(kFashionDir, 10000, 2000, true);
  REQUIRE(data.train.size() == 10000);
  REQUIRE(data.test.size() == 2000);
  REQUIRE(data.train.images.cols() == 784);

  Model model = Model::softmax(784, 10);
  std::vector<float> params(model.numParams());
  std::vector<float> grad(model.numParams());
  model.init(params, 42);
  const double before = model.accuracy(params, data.test);

  const int batch = 32;
  const int steps = 600;
  const float lr = 0.02f;
  std::vector<int> order(static_cast<std::size_t>(data.train.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(1);
  RowMatrix x(batch, 784);
  Bytes y(batch);
  std::size_t cursor = order.size();
  Eigen::Map<Eigen::VectorXf> p(params.data(), static_cast<Eigen::Index>(params.size()));
  const Eigen::Map<const Eigen::VectorXf> g(grad.data(), static_cast<Eigen::Index>(grad.size()));
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < batch; ++b) {
      if (cursor == order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      const int i = order[cursor++];
      x.row(b) = data.train.images.row(i);
      y[static_cast<std::size_t>(b)] = data.train.labels[static_cast<std::size_t>(i)];
    }
    const float loss = model.lossAndGradient(params, x, y.data(), grad);
    REQUIRE(std::isfinite(loss));
    p -= lr * g;
  }
  const double after = model.accuracy(params, data.test);
  const double testLoss = model.loss(params, data.test);
  INFO("test accuracy " << before << " -> " << after << ", test loss " << testLoss);
  CHECK(after > 0.70);
  CHECK(testLoss < std::log(10.0));
}

TEST_CASE("train_core: a summary whose run directory is not valid UTF-8 is still written", "[train_core]") {
  // A Linux path is bytes; JSON text is UTF-8. Before, dumping such a path
  // threw once training had ended, and the finished run counted as failed.
  gossamer::train::TrainSummary s;
  s.algorithm = "sgp";
  s.runDir = "/tmp/run\xe9";
  const std::string json = gossamer::train::summaryJson(s, gossamer::test::defaultConfig());
  CHECK(json.find("\"run_dir\":\"/tmp/run\xef\xbf\xbd\"") != std::string::npos);  // U+FFFD in its place
  CHECK(json.find("\"algorithm\":\"sgp\"") != std::string::npos);
}

TEST_CASE("summary file: the larger side of a split job keeps it, whichever side writes first",
          "[train_core]") {
  using gossamer::apps::summaryOutranks;
  using gossamer::apps::writeSummaryFile;
  CHECK(summaryOutranks({0, 1, 2}, {3}));
  CHECK_FALSE(summaryOutranks({3}, {0, 1, 2}));
  CHECK(summaryOutranks({0, 3}, {1, 2}));  // as many ranks: the one holding the lowest
  CHECK_FALSE(summaryOutranks({1, 2}, {3, 0}));
  CHECK_FALSE(summaryOutranks({}, {}));
  TempDir dir;
  const std::string path = dir.file("summary.json");
  const auto side = [](const std::vector<int>& survivors, const std::string& job) {
    gossamer::train::TrainSummary s;
    s.algorithm = "sgp";
    s.job = job;
    s.survivors = survivors;
    return gossamer::train::summaryJson(s, gossamer::test::defaultConfig());
  };
  const auto held = [&] { return gossamer::apps::survivorsInSummary(path); };
  SECTION("the smaller side writes first, then the larger over it; the smaller one again changes nothing") {
    CHECK(writeSummaryFile(path, side({3}, "a1")).empty());
    CHECK(held() == std::vector<int>{3});
    CHECK(writeSummaryFile(path, side({0, 1, 2}, "a1")).empty());
    CHECK(held() == std::vector<int>{0, 1, 2});
    CHECK(writeSummaryFile(path, side({3}, "a1")) == std::vector<int>{0, 1, 2});
    CHECK(held() == std::vector<int>{0, 1, 2});
  }
  SECTION("another job's summary, one of this job sharing a rank, or an unreadable one, is written over") {
    CHECK(writeSummaryFile(path, side({0, 1, 2}, "earlier")).empty());
    CHECK(writeSummaryFile(path, side({3}, "a1")).empty());
    CHECK(held() == std::vector<int>{3});
    CHECK(writeSummaryFile(path, side({0, 1, 2, 3}, "a1")).empty());
    CHECK(writeSummaryFile(path, side({3}, "a1")).empty());  // not another side: it shares rank 3
    CHECK(held() == std::vector<int>{3});
    std::ofstream(path) << "{\"survivors\": [0, 1";
    CHECK(writeSummaryFile(path, side({3}, "a1")).empty());
    CHECK(held() == std::vector<int>{3});
  }
  SECTION("a summary without a job always writes; no temporary file is left") {
    CHECK(writeSummaryFile(path, side({0, 1, 2}, "a1")).empty());
    CHECK(writeSummaryFile(path, side({3}, "")).empty());
    CHECK(held() == std::vector<int>{3});
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.str())) names.push_back(e.path().filename().string());
    CHECK(names == std::vector<std::string>{"summary.json"});
  }
  SECTION("through a symbolic link the file it names is written, and the link stays") {
    const std::string real = dir.file("real.json");
    fs::create_symlink(real, path);
    CHECK(writeSummaryFile(path, side({1}, "a1")).empty());
    CHECK(fs::is_symlink(path));
    CHECK(gossamer::apps::survivorsInSummary(real) == std::vector<int>{1});
  }
  SECTION("a FIFO is written in place, and stays a FIFO") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
    const std::string json = side({2}, "a1");
    CHECK(writeSummaryFile(path, json).empty());
    std::string got(json.size() + 16, '\0');
    const ssize_t n = ::read(reader, got.data(), got.size());
    ::close(reader);
    CHECK(got.substr(0, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == json + "\n");
    CHECK(fs::is_fifo(path));
    // No reader: an Error after a bounded wait, not a hang.
    CHECK_THROWS_WITH(writeSummaryFile(path, json, 0.2),
                      Contains("no process opened the FIFO to read it in 0.2 s"));
  }
  SECTION("a side that waited for its turn while the other wrote the file reads what the other wrote") {
    const int lock = ::open(dir.str().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(lock >= 0);
    REQUIRE(::flock(lock, LOCK_EX) == 0);  // the larger side's turn
    std::vector<int> kept{-1};
    std::thread smaller([&] {
      try {
        kept = writeSummaryFile(path, side({3}, "a1"));
      } catch (const std::exception&) {
        kept = {-2};  // (checked below, on the test's thread)
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it finds no file, and waits
    std::ofstream(path) << side({0, 1, 2}, "a1") << '\n';
    ::flock(lock, LOCK_UN);
    ::close(lock);
    smaller.join();
    CHECK(kept == std::vector<int>{0, 1, 2});
    CHECK(held() == std::vector<int>{0, 1, 2});
  }
  SECTION("a link to /proc/self/fd/N or /dev/fd/N of a pipe (as /dev/stdout is) is written through it") {
    for (const std::string prefix : {"/proc/self/fd/", "/dev/fd/"}) {
      INFO(prefix);
      int ends[2];
      REQUIRE(::pipe(ends) == 0);
      const std::string json = side({2}, "a1");
      fs::remove(path);
      fs::create_symlink(prefix + std::to_string(ends[1]), path);
      CHECK_NOTHROW(writeSummaryFile(path, json));
      ::close(ends[1]);  // (the read below then ends, whatever was written)
      std::string got(json.size() + 16, '\0');
      const ssize_t n = ::read(ends[0], got.data(), got.size());
      ::close(ends[0]);
      CHECK(got.substr(0, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == json + "\n");
      CHECK(fs::is_symlink(path));
    }
  }
  SECTION("/dev/fd/N, however spelt, is written through N at its position: a log keeps its lines and file") {
    for (const std::string prefix : {"/dev/fd/", "/dev//fd/", "/dev/../dev/fd/", "/proc/self/./fd/"}) {
      INFO(prefix);
      const std::string log = dir.file("log");
      fs::remove(log);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
      REQUIRE(fd >= 0);
      CHECK(::write(fd, "before\n", 7) == 7);
      REQUIRE(::lseek(fd, 2, SEEK_SET) == 2);  // (reopened, the file would be emptied or appended to)
      struct stat before {};
      REQUIRE(::fstat(fd, &before) == 0);
      CHECK(writeSummaryFile(prefix + std::to_string(fd), side({2}, "a1")).empty());
      CHECK(::write(fd, "after\n", 6) == 6);  // reaches the file the name shows, not an unlinked one
      ::close(fd);
      struct stat now {};
      REQUIRE(::stat(log.c_str(), &now) == 0);
      CHECK(now.st_ino == before.st_ino);
      std::ifstream in(log);
      CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "be" + side({2}, "a1") + "\nafter\n");
    }
  }
  SECTION("a nonblocking descriptor of a full pipe is waited for until a reader drains it") {
    int ends[2];
    REQUIRE(::pipe2(ends, O_NONBLOCK | O_CLOEXEC) == 0);
    REQUIRE(::fcntl(ends[0], F_SETFL, 0) == 0);  // the reader's end blocks
    (void)::fcntl(ends[1], F_SETPIPE_SZ, 4096);
    const std::string fill(65536, 'x');
    std::size_t filled = 0;
    for (ssize_t put = 1; put > 0;) {  // until EAGAIN: the pipe is full
      put = ::write(ends[1], fill.data(), fill.size());
      if (put > 0) filled += static_cast<std::size_t>(put);
    }
    std::string drained;
    std::thread reader([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer meets EAGAIN first
      std::string buf(65536, '\0');
      for (ssize_t n; (n = ::read(ends[0], buf.data(), buf.size())) > 0;)
        drained.append(buf.data(), static_cast<std::size_t>(n));
    });
    const std::string json = side({2}, "a1");
    CHECK_NOTHROW(writeSummaryFile("/dev/fd/" + std::to_string(ends[1]), json));
    ::close(ends[1]);  // (the reader then ends)
    reader.join();
    ::close(ends[0]);
    CHECK(drained.size() == filled + json.size() + 1);
    CHECK(drained.substr(filled) == json + "\n");
  }
  SECTION("a socket's name: an Error at once") {
    const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(sock >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof addr.sun_path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(writeSummaryFile(path, side({0}, "a1")), Contains("No such device or address"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // no FIFO's wait
    ::close(sock);
  }
  SECTION("a file that keeps its mode when it is written over") {
    std::ofstream(path) << "{}";
    // (0750: a mode no new file gets from 0666 and a umask.)
    const auto mode = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec;
    fs::permissions(path, mode);
    struct stat before {};
    REQUIRE(::stat(path.c_str(), &before) == 0);
    CHECK(writeSummaryFile(path, side({1}, "a1")).empty());
    struct stat now {};
    REQUIRE(::stat(path.c_str(), &now) == 0);
    CHECK(now.st_ino != before.st_ino);  // replaced, not written in place
    CHECK(fs::status(path).permissions() == mode);
  }
  SECTION("a loop of links: an Error, and the links stay") {
    fs::create_symlink(dir.file("b.json"), path);
    fs::create_symlink(path, dir.file("b.json"));
    CHECK_THROWS_WITH(writeSummaryFile(path, side({0}, "a1")), Contains("Too many levels of symbolic links"));
    CHECK(fs::is_symlink(path));
  }
  SECTION("a directory that cannot take the file, or a target that is a directory: an Error naming it") {
    const std::string missing = dir.file("missing/summary.json");
    CHECK_THROWS_WITH(writeSummaryFile(missing, side({0}, "")),
                      Contains("cannot write summary to '" + missing + "'"));
    fs::create_directories(dir.file("taken/inner"));
    CHECK_THROWS_WITH(writeSummaryFile(dir.file("taken"), side({0}, "")),
                      Contains("cannot write summary to '" + dir.file("taken") + "'"));
  }
}

// In a child process with a mount namespace of its own (root's, else one
// inside a user namespace of its own), mounts private. Returns why it could
// not have one ("" when it has).
std::string ownMountNamespace() {
  if (::unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return std::string("cannot make a mount namespace (unshare: ") + std::strerror(errno) + ")";
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("cannot make the mounts private: ") + std::strerror(errno);
  return {};
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_CASE(
    "summary file: a name that may not be replaced is written in place (a file mounted on its own "
    "or in a read-only directory)",
    "[train_core]") {
  using gossamer::apps::survivorsInSummary;
  using gossamer::apps::writeSummaryFile;
  TempDir dir, elsewhere;
  const auto summary = [](const std::string& job) {
    gossamer::train::TrainSummary s;
    s.algorithm = "sgp";
    s.job = job;
    s.survivors = {1, 2};
    return gossamer::train::summaryJson(s, gossamer::test::defaultConfig());
  };
  const std::string json = summary("a1");
  // The child's mounts go with it; the directories are plain ones again here.
  const std::string failed = gossamer::testing::inChild([&]() -> std::string {
    if (std::string why = ownMountNamespace(); !why.empty()) return why;
    const auto mountErr = [](const char* what) { return std::string(what) + ": " + std::strerror(errno); };
    // A file mounted on its own: rename(2) over it is EBUSY.
    const std::string mounted = dir.file("mounted.json");
    std::ofstream(mounted) << "{}";
    if (::mount(mounted.c_str(), mounted.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return mountErr("bind the file");
    struct stat before {};
    ::stat(mounted.c_str(), &before);
    if (!writeSummaryFile(mounted, json).empty()) return "the mounted file was taken for another summary";
    struct stat after {};
    ::stat(mounted.c_str(), &after);
    if (after.st_ino != before.st_ino) return "the mounted file was replaced";
    if (survivorsInSummary(mounted) != std::vector<int>{1, 2}) return "mounted: " + slurp(mounted);
    // A read-only directory (no temporary file: EROFS) with a writable file
    // in it, mounted from elsewhere.
    const std::string outside = elsewhere.file("outside.json"), inside = dir.file("inside.json");
    std::ofstream(outside) << "{\"survivors\": [0, 1, 2, 3], \"job\": \"other\"}";
    std::ofstream(inside) << "{}";
    if (::mount(dir.str().c_str(), dir.str().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, dir.str().c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
      return mountErr("mount the directory read-only");
    if (::mount(outside.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return mountErr("bind outside");
    if (const int fd = ::open(dir.file("new.json").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600); fd >= 0) {
      ::close(fd);
      return "the directory takes new files";
    }
    if (!writeSummaryFile(inside, json).empty()) return "another job's summary was kept";
    if (survivorsInSummary(outside) != std::vector<int>{1, 2}) return "outside: " + slurp(outside);
    // A name that does not exist there cannot be written: an Error naming it.
    try {
      writeSummaryFile(dir.file("absent.json"), json);
      return "a summary was written into the read-only directory";
    } catch (const gossamer::Error& e) {
      if (std::string(e.what()).find("cannot write summary to '" + dir.file("absent.json") + "'") ==
          std::string::npos)
        return std::string("absent: ") + e.what();
    }
    return {};
  });
  INFO(failed);
  CHECK(failed.empty());
  CHECK(survivorsInSummary(dir.file("mounted.json")) == std::vector<int>{1, 2});  // the file under the mount
}

TEST_CASE("summary file: every process of a job draws the same job identifier, another job another one",
          "[train_core]") {
  gossamer::MemoryStore store;
  const std::string job = gossamer::apps::jobNonce(store, 0, false, 1.0);
  CHECK(job.size() == 16);
  CHECK(job.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(gossamer::apps::jobNonce(store, 2, false, 1.0) == job);
  CHECK(gossamer::apps::jobNonce(store, 0, true, 1.0) == job);  // a rank 0 restarted into the job
  gossamer::MemoryStore other;
  CHECK(gossamer::apps::jobNonce(other, 0, false, 1.0) != job);
  CHECK(gossamer::apps::jobNonce(store, 0, false, 1.0) != job);  // a new job's rank 0 draws anew
  gossamer::MemoryStore empty;
  CHECK(gossamer::apps::jobNonce(empty, 1, false, 0.05).empty());  // rank 0 died before it drew one
}
