// gossamer-train's own YAML sections: `model:`, `data:` and the trainer's
// keys of `training:`. The SDK knows nothing of them; they are registered
// like any component's keys (registerTrainSections) and read back with
// trainConfigFrom.
#pragma once

#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::train {

/// `model:` section.
struct ModelConfig {
  std::string kind = "mlp";      ///< "mlp" (ReLU MLP) or "softmax" (softmax regression).
  std::vector<int> hidden{128};  ///< Hidden layer widths of the MLP (each >= 1).
};

/// `data:` section.
struct DataConfig {
  std::string path = "/usr/share/datasets/fashion-mnist";  ///< Folder with the four IDX .gz files.
  std::string partition = "iid";  ///< "iid" or "non_iid" (Dirichlet label skew per peer).
  double dirichletAlpha = 0.5;    ///< non_iid concentration (> 0); smaller is more skewed.
  bool standardize = true;        ///< Standardise inputs with the training-set mean and std.
  int trainLimit = 0;             ///< Use only the first N training images (0 = all).
  int testLimit = 0;              ///< Use only the first N test images (0 = all).
};

/// The trainer's keys of `training:` (the optimizers declare the SGD step's
/// learning_rate, momentum and weight_decay there; they are copied here).
struct TrainingConfig {
  int epochs = 3;              ///< Passes over the (sharded) training set (>= 1).
  int batchSize = 32;          ///< Per-peer mini-batch, samples (>= 1).
  double learningRate = 0.01;  ///< SGD step size (>= 0), from training.learning_rate.
  /// Straggler emulation (benchmarks): this rank sleeps `stragglerDelaySeconds`
  /// after each local step. -1 = none.
  int stragglerRank = -1;
  double stragglerDelaySeconds = 0.0;  ///< >= 0.
  /// A file whose existence stops the job after the epoch whose evaluation
  /// sees it on some rank (every rank stops there); "" = never.
  std::string stopFile;
};

/// Everything gossamer-train reads beyond the SDK's keys.
struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
};

/// Declares `model:`, `data:` and the trainer's `training:` keys (with their
/// checks) in `registry`. Call after gossamer::optimizers::registerBuiltins,
/// which declares the SGD keys of `training:`.
/// @throws gossamer::InvalidArgument if the keys clash with registered ones.
void registerTrainSections(gossamer::Registry& registry);

/// The sections' values from a config loaded or completed by a registry that
/// registerTrainSections filled.
/// @throws gossamer::InvalidArgument if a key is missing.
TrainConfig trainConfigFrom(const gossamer::Config& config);

}  // namespace gossamer::train
