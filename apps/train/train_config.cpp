// gossamer-train's sections (see train_config.hpp).
#include "train_config.hpp"

#include <climits>

namespace gossamer::train {

namespace {

/// training.straggler_rank: -1 (none) or an existing rank.
std::optional<gossamer::ConfigIssue> checkStraggler(const gossamer::Config& c) {
  const int r = c.get<int>("training.straggler_rank");
  if (r < c.worldSize()) return std::nullopt;
  return gossamer::ConfigIssue{"training.straggler_rank", "rank " + std::to_string(r) + " does not exist (" +
                                                              gossamer::rankRangeText(c.worldSize()) +
                                                              "; -1 means no straggler)"};
}

}  // namespace

void registerTrainSections(gossamer::Registry& registry) {
  using gossamer::KeySet;
  using gossamer::kUnbounded;
  const TrainConfig d;
  registry.addSection("model", "The classifier gossamer-train trains.",
                      KeySet()
                          .text("kind", d.model.kind, {"mlp", "softmax"}, "ReLU MLP or softmax regression")
                          .intList("hidden", d.model.hidden, 1, 1 << 20, "hidden layer widths of the MLP"));
  registry.addSection(
      "data", "Fashion-MNIST and how it is split over the peers.",
      KeySet()
          .text("path", d.data.path, {}, "folder with the four IDX .gz files")
          .perRank()
          .text("partition", d.data.partition, {"iid", "non_iid"}, "iid, or Dirichlet label skew per peer")
          .real("dirichlet_alpha", d.data.dirichletAlpha, {0.0, false, kUnbounded, false},
                "non_iid concentration; smaller is more skewed")
          .boolean("standardize", d.data.standardize,
                   "standardise inputs with the training set's mean and std")
          .integer("train_limit", d.data.trainLimit, 0, INT_MAX,
                   "use only the first N training images (0 = all)")
          .integer("test_limit", d.data.testLimit, 0, INT_MAX, "use only the first N test images (0 = all)"));
  registry.addSection(
      "training", "How each peer trains.",
      KeySet()
          .integer("epochs", d.training.epochs, 1, INT_MAX, "passes over the sharded training set")
          .integer("batch_size", d.training.batchSize, 1, INT_MAX, "per-peer mini-batch, samples")
          .integer("straggler_rank", d.training.stragglerRank, -1, gossamer::kMaxWorldSize - 1,
                   "straggler emulation: this rank sleeps after each step (-1 = none)")
          .real("straggler_delay_seconds", d.training.stragglerDelaySeconds, {0.0, true, 86400.0, true},
                "the straggler's sleep after each step, seconds (at most a day)")
          .text("stop_file", d.training.stopFile, {},
                "when this file exists, every rank stops after the epoch in whose evaluation one of them "
                "saw it, before training.epochs (empty: never)")
          .perRank()
          .rule(checkStraggler));
}

TrainConfig trainConfigFrom(const gossamer::Config& c) {
  TrainConfig t;
  t.model.kind = c.get<std::string>("model.kind");
  t.model.hidden = c.get<std::vector<int>>("model.hidden");
  t.data.path = c.get<std::string>("data.path");
  t.data.partition = c.get<std::string>("data.partition");
  t.data.dirichletAlpha = c.get<double>("data.dirichlet_alpha");
  t.data.standardize = c.get<bool>("data.standardize");
  t.data.trainLimit = c.get<int>("data.train_limit");
  t.data.testLimit = c.get<int>("data.test_limit");
  t.training.epochs = c.get<int>("training.epochs");
  t.training.batchSize = c.get<int>("training.batch_size");
  t.training.learningRate = c.getOr("training.learning_rate", t.training.learningRate);
  t.training.stragglerRank = c.get<int>("training.straggler_rank");
  t.training.stragglerDelaySeconds = c.get<double>("training.straggler_delay_seconds");
  t.training.stopFile = c.get<std::string>("training.stop_file");
  return t;
}

}  // namespace gossamer::train
