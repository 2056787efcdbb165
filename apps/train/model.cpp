#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>

#include "gossamer/errors.hpp"

namespace gossamer::train {
namespace {

// Column-major view: W_l stored row-major out x in is W_l^T column-major in x out.
using ColMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using RowMap = Eigen::Map<RowMatrix>;
using ConstRowMap = Eigen::Map<const RowMatrix>;

constexpr Eigen::Index kEvalChunk = 1000;
constexpr int kMaxWidth = 1 << 24;

void ensureSize(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Model::Model(std::vector<int> widths) : widths_(std::move(widths)) {
  GOSSAMER_ENFORCE(widths_.size() >= 2, "a model needs inputs and outputs");
  for (std::size_t l = 0; l < widths_.size(); ++l) {
    GOSSAMER_ENFORCE(widths_[l] >= 1 && widths_[l] <= kMaxWidth,
                     "layer width " << l << " is " << widths_[l] << ", must be in [1, " << kMaxWidth << "]");
  }
  GOSSAMER_ENFORCE(widths_.back() >= 2, "classes=" << widths_.back() << " (need >= 2)");
  for (int l = 0; l < numLayers(); ++l) {
    offsets_.push_back(numParams_);
    const auto in = static_cast<std::size_t>(widths_[l]);
    const auto out = static_cast<std::size_t>(widths_[l + 1]);
    numParams_ += out * in + out;
  }
}

Model Model::mlp(int inputs, std::vector<int> hidden, int classes) {
  std::vector<int> widths;
  widths.reserve(hidden.size() + 2);
  widths.push_back(inputs);
  widths.insert(widths.end(), hidden.begin(), hidden.end());
  widths.push_back(classes);
  return Model(std::move(widths));
}

Model Model::softmax(int inputs, int classes) { return mlp(inputs, {}, classes); }

std::vector<std::size_t> Model::tensorSizes() const {
  std::vector<std::size_t> sizes;
  for (int l = 0; l < numLayers(); ++l) {
    const auto in = static_cast<std::size_t>(widths_[l]);
    const auto out = static_cast<std::size_t>(widths_[l + 1]);
    sizes.push_back(out * in);
    sizes.push_back(out);
  }
  return sizes;
}

void Model::checkParams(std::size_t size, const char* what) const {
  GOSSAMER_ENFORCE(size == numParams_, what << " has " << size << " floats, the model has " << numParams_);
}

void Model::init(std::span<float> params, std::uint64_t seed) const {
  checkParams(params.size(), "params");
  std::mt19937_64 rng(seed);
  for (int l = 0; l < numLayers(); ++l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    const bool relu = l + 1 < numLayers();
    const double bound = std::sqrt((relu ? 6.0 : 1.0) / in);
    float* w = params.data() + offsets_[l];
    const std::size_t count = static_cast<std::size_t>(in) * static_cast<std::size_t>(out);
    for (std::size_t k = 0; k < count; ++k) {
      const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
      w[k] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
    std::fill_n(w + count, out, 0.0f);
  }
}

const float* Model::forward(std::span<const float> params, const Eigen::Ref<const RowMatrix>& x,
                            std::vector<std::vector<float>>& acts) const {
  const Eigen::Index batch = x.rows();
  const int layers = numLayers();
  if (acts.size() < static_cast<std::size_t>(layers)) acts.resize(layers);
  for (int l = 0; l < layers; ++l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    const float* w = params.data() + offsets_[l];
    const Eigen::Map<const ColMatrix> wt(w, in, out);  // W_l^T
    const Eigen::Map<const Eigen::RowVectorXf> b(w + static_cast<std::size_t>(in) * out, out);
    ensureSize(acts[l], static_cast<std::size_t>(batch) * out);
    RowMap z(acts[l].data(), batch, out);
    if (l == 0) {
      z.noalias() = x * wt;
    } else {
      z.noalias() = ConstRowMap(acts[l - 1].data(), batch, in) * wt;
    }
    z.rowwise() += b;
    if (l + 1 < layers) z = z.cwiseMax(0.0f);
  }
  return acts[layers - 1].data();
}

float Model::lossAndGradient(std::span<const float> params, const Eigen::Ref<const RowMatrix>& x,
                             const std::uint8_t* labels, std::span<float> grad) {
  checkParams(params.size(), "params");
  checkParams(grad.size(), "grad");
  GOSSAMER_ENFORCE(x.rows() >= 1, "empty batch");
  GOSSAMER_ENFORCE(x.cols() == inputs(), "x has " << x.cols() << " columns, model inputs " << inputs());
  GOSSAMER_ENFORCE(labels != nullptr, "labels is null");
  const std::less<const float*> before;
  GOSSAMER_ENFORCE(!before(grad.data(), params.data() + params.size()) ||
                       !before(params.data(), grad.data() + grad.size()),
                   "grad overlaps params");
  const Eigen::Index batch = x.rows();
  const int numClasses = classes();
  for (Eigen::Index i = 0; i < batch; ++i) {
    GOSSAMER_ENFORCE(labels[i] < numClasses,
                     "label " << int{labels[i]} << " of row " << i << " >= classes " << numClasses);
  }

  const float* logits = forward(params, x, acts_);

  // Softmax cross-entropy; delta = d(mean loss)/d(logits) = (softmax - onehot) / batch.
  ensureSize(delta_, static_cast<std::size_t>(batch) * numClasses);
  const ConstRowMap z(logits, batch, numClasses);
  RowMap dz(delta_.data(), batch, numClasses);
  const float invBatch = 1.0f / static_cast<float>(batch);
  double total = 0.0;
  for (Eigen::Index i = 0; i < batch; ++i) {
    const float m = z.row(i).maxCoeff();
    dz.row(i) = (z.row(i).array() - m).exp().matrix();
    const float s = dz.row(i).sum();  // >= 1: the max term is exp(0)
    total += static_cast<double>(std::log(s) + m - z(i, labels[i]));
    dz.row(i) *= invBatch / s;
    dz(i, labels[i]) -= invBatch;
  }

  // Backward: delta_ holds d/dz of the current layer.
  for (int l = numLayers() - 1; l >= 0; --l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    const std::size_t wOffset = offsets_[l];
    const std::size_t wCount = static_cast<std::size_t>(in) * out;
    const ConstRowMap dZ(delta_.data(), batch, out);
    Eigen::Map<ColMatrix> gwt(grad.data() + wOffset, in, out);  // dW_l^T
    Eigen::Map<Eigen::RowVectorXf> gb(grad.data() + wOffset + wCount, out);
    if (l == 0) {
      gwt.noalias() = x.transpose() * dZ;
    } else {
      gwt.noalias() = ConstRowMap(acts_[l - 1].data(), batch, in).transpose() * dZ;
    }
    gb.noalias() = dZ.colwise().sum();
    if (l > 0) {
      const Eigen::Map<const ColMatrix> wt(params.data() + wOffset, in, out);
      const ConstRowMap a(acts_[l - 1].data(), batch, in);
      ensureSize(deltaPrev_, static_cast<std::size_t>(batch) * in);
      RowMap dA(deltaPrev_.data(), batch, in);
      dA.noalias() = dZ * wt.transpose();
      dA = (a.array() > 0.0f).select(dA, 0.0f);  // ReLU'
      std::swap(delta_, deltaPrev_);
    }
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

void Model::checkData(std::span<const float> params, const Dataset& data) const {
  checkParams(params.size(), "params");
  GOSSAMER_ENFORCE(data.size() >= 1, "empty data set");
  GOSSAMER_ENFORCE(data.images.rows() == data.size(), data.images.rows()
                                                          << " image rows but " << data.size() << " labels");
  GOSSAMER_ENFORCE(data.images.cols() == inputs(),
                   "data has " << data.images.cols() << " features, model inputs " << inputs());
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    GOSSAMER_ENFORCE(data.labels[i] < classes(),
                     "label " << int{data.labels[i]} << " of sample " << i << " >= classes " << classes());
  }
}

template <class Fn>
void Model::forEachChunk(std::span<const float> params, const Dataset& data, Fn&& fn) const {
  checkData(params, data);
  std::vector<std::vector<float>> acts;  // local: keeps the const members reentrant
  const Eigen::Index rows = data.images.rows();
  for (Eigen::Index start = 0; start < rows; start += kEvalChunk) {
    const Eigen::Index n = std::min(kEvalChunk, rows - start);
    const float* logits = forward(params, data.images.middleRows(start, n), acts);
    fn(ConstRowMap(logits, n, classes()), data.labels.data() + start);
  }
}

double Model::accuracy(std::span<const float> params, const Dataset& data) const {
  std::size_t correct = 0;
  forEachChunk(params, data, [&](const ConstRowMap& z, const std::uint8_t* labels) {
    for (Eigen::Index i = 0; i < z.rows(); ++i) {
      Eigen::Index best = 0;
      z.row(i).maxCoeff(&best);
      if (best == labels[i]) ++correct;
    }
  });
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

double Model::loss(std::span<const float> params, const Dataset& data) const {
  double total = 0.0;
  forEachChunk(params, data, [&](const ConstRowMap& z, const std::uint8_t* labels) {
    for (Eigen::Index i = 0; i < z.rows(); ++i) {
      const float m = z.row(i).maxCoeff();
      const float s = (z.row(i).array() - m).exp().sum();
      total += static_cast<double>(std::log(s) + m - z(i, labels[i]));
    }
  });
  return total / static_cast<double>(data.size());
}

}  // namespace gossamer::train
