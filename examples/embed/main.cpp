// Embedding example: a program outside the Gossamer tree that averages a vector
// over N processes with an installed Gossamer (find_package(gossamer)).
//
// Usage: embed_average <config.yaml> <rank> <rendezvous-dir>
// Start one process per rank 0..world_size-1 with the same config and
// rendezvous directory (a fresh, empty one per run). Exit code 0 = the
// average is correct, 1 = wrong result, 2 = error (bad usage, config, timeout).
#include <cmath>
#include <cstddef>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <gossamer/agent.hpp>
#include <gossamer/config.hpp>
#include <gossamer/errors.hpp>
#include <gossamer/optimizers/optimizers.hpp>
#include <gossamer/registry.hpp>
#include <gossamer/store.hpp>
#include <gossamer/topologies/topologies.hpp>
#include <gossamer/transports/zmq.hpp>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " <config.yaml> <rank> <rendezvous-dir>\n";
    return 2;
  }
  try {
    // The caller chooses which components exist: no global registry. What
    // is registered is also what a config may name and set.
    gossamer::Registry registry;
    gossamer::zmq::registerWith(registry);
    gossamer::topologies::registerBuiltins(registry);
    gossamer::optimizers::registerBuiltins(registry);

    const gossamer::Config config = registry.load(argv[1]);
    const int rank = std::stoi(argv[2]);

    // Peers find each other's endpoints through files in a shared directory.
    gossamer::FileStore store(argv[3]);
    gossamer::Agent agent(config, rank, store, registry);

    // Rank r holds (r+1)*(i+1); the mean over ranks is (n+1)/2*(i+1).
    std::vector<float> vec(1000);
    for (std::size_t i = 0; i < vec.size(); ++i) vec[i] = float(rank + 1) * float(i + 1);
    agent.average(vec);

    const int n = agent.worldSize();
    for (std::size_t i = 0; i < vec.size(); ++i) {
      const double expected = (n + 1) / 2.0 * double(i + 1);
      if (std::abs(vec[i] - expected) > 1e-4 * std::abs(expected)) {
        std::cerr << "rank " << rank << ": vec[" << i << "] = " << vec[i] << ", expected " << expected
                  << "\n";
        return 1;
      }
    }
    agent.close();
    std::cout << "rank " << rank << ": average ok (n=" << n << ")\n";
    return 0;
  } catch (const gossamer::Error& e) {
    std::cerr << "gossamer error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
