// Classifiers of the example training job, evaluated on one flat parameter
// vector so that the distributed optimizers can treat the model as a single
// contiguous float array.
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataset.hpp"

namespace gossamer::train {

/// A fully connected ReLU network (MLP) ending in a softmax over `classes`,
/// trained with the mean cross-entropy loss. Softmax regression is the MLP
/// without hidden layers.
///
/// Parameter layout: for each layer l = 0..L-1 with fan-in `in` and fan-out
/// `out`, the flat vector holds W_l (out x in, row-major: W_l(o, i) is at
/// offset(W_l) + o * in + i) followed by b_l (out). Layers follow each other
/// in order, so tensorSizes() = {out0*in0, out0, out1*in1, out1, ...}.
/// Layer l computes z = W_l a + b_l; hidden layers apply ReLU.
///
/// The object holds the architecture and scratch buffers for
/// lossAndGradient(), which therefore does not allocate once it has seen the
/// largest batch. One Model per thread: lossAndGradient() is not reentrant;
/// the const members are.
class Model {
 public:
  /// An MLP inputs -> hidden[0] -> ... -> classes with ReLU hidden layers.
  /// @throws InvalidArgument if inputs < 1, classes < 2 or a width is < 1, or
  ///         a width is above 2^24.
  static Model mlp(int inputs, std::vector<int> hidden, int classes);

  /// Softmax regression: a single linear layer inputs -> classes.
  /// @throws InvalidArgument as mlp().
  static Model softmax(int inputs, int classes);

  /// Number of input features (columns of x).
  int inputs() const { return widths_.front(); }
  /// Number of classes (outputs).
  int classes() const { return widths_.back(); }
  /// Layer widths including input and output, e.g. {784, 128, 10}.
  const std::vector<int>& widths() const { return widths_; }

  /// Total number of float parameters (the length of the flat vector).
  std::size_t numParams() const { return numParams_; }

  /// Element count of each tensor in flat order: W0, b0, W1, b1, ...
  std::vector<std::size_t> tensorSizes() const;

  /// Writes initial parameters: weights uniform in +-sqrt(6 / fan_in) for the
  /// ReLU (hidden) layers (He/Kaiming uniform), +-sqrt(1 / fan_in) for the
  /// output layer; biases 0. Deterministic in `seed` on every platform
  /// (mt19937_64 bits, own uniform mapping).
  /// @throws InvalidArgument if params.size() != numParams().
  void init(std::span<float> params, std::uint64_t seed) const;

  /// Mean cross-entropy of a mini-batch and its gradient.
  ///
  /// @param params  flat parameters, numParams() floats (layout above).
  /// @param x       batch x inputs() row-major features (batch >= 1). Pass a
  ///                RowMatrix or a block of rows of one: other expressions are
  ///                copied into a temporary by Eigen::Ref (an allocation).
  /// @param labels  batch labels, each in [0, classes()).
  /// @param grad    numParams() floats, overwritten with d(mean loss)/d(params)
  ///                in the same layout; must not overlap params.
  /// @return the mean over the batch of -log softmax(logits)[label] (nats),
  ///         computed with log-sum-exp.
  /// @throws InvalidArgument on a size mismatch, null labels or a label out of range.
  float lossAndGradient(std::span<const float> params, const Eigen::Ref<const RowMatrix>& x,
                        const std::uint8_t* labels, std::span<float> grad);

  /// Fraction in [0, 1] of samples of `data` whose arg-max logit equals the
  /// label (ties go to the lowest class). Evaluated 1000 rows at a time.
  /// @throws InvalidArgument on a size mismatch, an empty data set or a label
  ///         out of range.
  double accuracy(std::span<const float> params, const Dataset& data) const;

  /// Mean cross-entropy (nats) over all samples of `data`, in chunks of 1000.
  /// @throws InvalidArgument as accuracy().
  double loss(std::span<const float> params, const Dataset& data) const;

 private:
  explicit Model(std::vector<int> widths);

  int numLayers() const { return static_cast<int>(widths_.size()) - 1; }
  void checkParams(std::size_t size, const char* what) const;
  void checkData(std::span<const float> params, const Dataset& data) const;

  // Forward pass over x into acts (acts[l] = batch x widths_[l + 1] values,
  // ReLU applied except on the last layer, which holds the logits). acts only
  // grows. Returns a pointer to the logits.
  const float* forward(std::span<const float> params, const Eigen::Ref<const RowMatrix>& x,
                       std::vector<std::vector<float>>& acts) const;

  // Calls fn(logits row-major batch x classes) per chunk of `data`.
  template <class Fn>
  void forEachChunk(std::span<const float> params, const Dataset& data, Fn&& fn) const;

  std::vector<int> widths_;           // inputs, hidden..., classes
  std::vector<std::size_t> offsets_;  // offset of W_l in the flat vector; b_l follows
  std::size_t numParams_ = 0;

  // Scratch of lossAndGradient (sized for the largest batch seen).
  std::vector<std::vector<float>> acts_;
  std::vector<float> delta_;
  std::vector<float> deltaPrev_;
};

}  // namespace gossamer::train
