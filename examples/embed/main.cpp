// A training loop to copy: least-squares regression on each rank's own data,
// trained by the configured algorithm through a gossamer::Session, which
// keeps the job going over the survivors when a rank dies (kill -9 one and
// watch). Built against an installed Gossamer (CMakeLists.txt here) or in
// the Gossamer tree (examples/CMakeLists.txt).
//
// Usage: embed_train <config.yaml> <rank> <rendezvous-dir>
// Start one process per rank 0..world_size-1 with the same config and a
// fresh, empty rendezvous directory. Exit 0: trained; 1: the model did not
// learn; 2: an error (bad usage, config, timeout).
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <gossamer/errors.hpp>
#include <gossamer/optimizers/optimizers.hpp>
#include <gossamer/registry.hpp>
#include <gossamer/session.hpp>
#include <gossamer/store.hpp>
#include <gossamer/topologies/topologies.hpp>
#include <gossamer/transports/builtins.hpp>

namespace {

constexpr int kFeatures = 16;
constexpr int kEpochs = 20, kStepsPerEpoch = 50, kBatch = 8;  // samples per step

// Rank r's samples: x ~ N(0, 1)^16, y = <w*, x> + noise, with w*_i = i / 8.
struct Data {
  std::vector<float> x, y;
  Data(int rank, int samples) : x(static_cast<std::size_t>(samples) * kFeatures), y(samples) {
    std::mt19937 rng(1234u + static_cast<unsigned>(rank));
    std::normal_distribution<float> normal;
    for (int s = 0; s < samples; ++s) {
      float dot = 0;
      for (int i = 0; i < kFeatures; ++i) {
        const float v = normal(rng);
        x[static_cast<std::size_t>(s * kFeatures + i)] = v;
        dot += v * static_cast<float>(i) / 8.0f;
      }
      y[static_cast<std::size_t>(s)] = dot + 0.1f * normal(rng);
    }
  }
};

// The mean squared error of `w` on samples [begin, end) and its gradient.
double lossAndGradient(const Data& d, int begin, int end, const std::vector<float>& w,
                       std::vector<float>& g) {
  std::fill(g.begin(), g.end(), 0.0f);
  double loss = 0;
  for (int s = begin; s < end; ++s) {
    const float* x = &d.x[static_cast<std::size_t>(s * kFeatures)];
    float err = -d.y[static_cast<std::size_t>(s)];
    for (int i = 0; i < kFeatures; ++i) err += w[static_cast<std::size_t>(i)] * x[i];
    loss += 0.5 * err * err;
    for (int i = 0; i < kFeatures; ++i) g[static_cast<std::size_t>(i)] += err * x[i] / float(end - begin);
  }
  return loss / (end - begin);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <config.yaml> <rank> <rendezvous-dir>\n", argv[0]);
    return 2;
  }
  try {
    // The components this program offers (a section of its own would be
    // registry.addSection("example", ..., KeySet()...)).
    gossamer::Registry registry;
    gossamer::transports::registerBuiltins(registry);  // zmq, socket, ..., faults, membership
    gossamer::topologies::registerBuiltins(registry);
    gossamer::optimizers::registerBuiltins(registry);  // also training.learning_rate, momentum
    const gossamer::Config config = registry.load(argv[1]);
    const int rank = std::stoi(argv[2]);
    gossamer::FileStore store(argv[3]);
    gossamer::Session session(config, rank, store, registry);

    const Data data(rank, 1024);
    std::vector<float> w(kFeatures, 0.0f), g(kFeatures), avg(kFeatures);
    gossamer::TrainingPlan plan;
    plan.params = w;
    plan.tensorSizes = {kFeatures};
    plan.stepsPerEpoch = kStepsPerEpoch;
    plan.epochs = kEpochs;
    session.train(plan);
    double error = 0;  // of the average model against w*
    while (session.nextEpoch()) {
      while (session.stepping()) {
        const int begin = static_cast<int>(session.steps() * kBatch % 1024);
        const double loss = lossAndGradient(data, begin, begin + kBatch, w, g);
        session.step(g, loss);
      }
      // The evaluation: the mean loss over every step the view's ranks took
      // in the epoch (one that rejoined inside it took fewer) and the
      // average model.
      double loss = 0;
      const bool evaluated = session.evaluate([&](const gossamer::EpochEnd& e) {
        const auto steps = static_cast<double>(e.lossSteps);
        double sums[2] = {e.loss * steps, steps};
        auto& comm = session.agent().communicator();
        comm.allreduce(std::span<double>(sums, 2), gossamer::ReduceOp::kSum);
        loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
        avg = w;
        session.agent().average(avg);
        error = 0;
        for (int i = 0; i < kFeatures; ++i) error += std::pow(avg[static_cast<std::size_t>(i)] - i / 8.0, 2);
      });
      if (evaluated && session.agent().communicator().rank() == 0)
        std::printf("epoch %d/%d  loss %.5f  |avg - w*|^2 %.2e  ranks %zu\n", session.epoch(), plan.epochs,
                    loss, error, session.view().members.size());
      std::fflush(stdout);
    }
    session.finish();
    std::printf("rank %d: done after %llu steps, %zu ranks left\n", rank,
                static_cast<unsigned long long>(session.steps()), session.view().members.size());
    session.close();
    return error < 1e-2 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: error: %s\n", argv[2], e.what());
    return 2;
  }
}
