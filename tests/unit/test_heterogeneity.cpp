// Heterogeneity-corrected gossip (gradient tracking, D², quasi-global
// momentum) over the inproc transport: the exact property on a quadratic
// whose ranks have different minima, the D² mixing check, and the
// registrations.
#include <catch2/catch.hpp>

#include "registry.hpp"
#include "threads.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/optimizers/heterogeneity.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

// Rank i's loss: f_i(x) = 1/2 sum_k a_ik (x_k - b_ik)^2, curvatures a in
// [0.5, 2] and minima b in [-0.5, 0.5] drawn per rank (float32 rounding of
// models of that size leaves D² within 1e-6 of x*). The minimizer of the
// average loss is x*_k = sum_i a_ik b_ik / sum_i a_ik, which is not the
// average of the ranks' minima.
struct Quadratic {
  int n;
  std::size_t p;
  std::vector<std::vector<double>> a, b;
  std::vector<double> minimizer;

  Quadratic(int ranks, std::size_t elements, unsigned seed) : n(ranks), p(elements) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> curvature(0.5, 2.0), centre(-0.5, 0.5);
    a.assign(static_cast<std::size_t>(n), std::vector<double>(p));
    b = a;
    for (int i = 0; i < n; ++i)
      for (std::size_t k = 0; k < p; ++k) {
        a[static_cast<std::size_t>(i)][k] = curvature(rng);
        b[static_cast<std::size_t>(i)][k] = centre(rng);
      }
    minimizer.assign(p, 0.0);
    for (std::size_t k = 0; k < p; ++k) {
      double num = 0, den = 0;
      for (int i = 0; i < n; ++i) {
        num += a[static_cast<std::size_t>(i)][k] * b[static_cast<std::size_t>(i)][k];
        den += a[static_cast<std::size_t>(i)][k];
      }
      minimizer[k] = num / den;
    }
  }
  void gradient(int rank, std::span<const float> x, std::span<float> g) const {
    for (std::size_t k = 0; k < p; ++k)
      g[k] = static_cast<float>(a[static_cast<std::size_t>(rank)][k] *
                                (x[k] - b[static_cast<std::size_t>(rank)][k]));
  }
  // The largest |x_ik - x*_k| over every rank and element.
  double worstError(const std::vector<std::vector<float>>& x) const {
    double worst = 0;
    for (const auto& xi : x)
      for (std::size_t k = 0; k < p; ++k) worst = std::max(worst, std::abs(xi[k] - minimizer[k]));
    return worst;
  }
};

using MakeOptimizer = std::function<std::unique_ptr<DistributedOptimizer>(Transport&, int rank)>;

// Every rank starts at 0 and takes `steps` steps with its exact gradient.
std::vector<std::vector<float>> trainQuadratic(const Quadratic& q, int steps, const MakeOptimizer& make) {
  auto fabric = inproc::makeFabric(q.n);
  std::vector<std::vector<float>> x(static_cast<std::size_t>(q.n), std::vector<float>(q.p, 0.0f));
  onEveryRank(q.n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 20.0);
    auto opt = make(*t, r);
    auto& xr = x[static_cast<std::size_t>(r)];
    std::vector<float> g(q.p);
    for (int s = 0; s < steps; ++s) {
      q.gradient(r, xr, g);
      opt->step(xr, g);
    }
    opt->flush(xr);
  });
  return x;
}

constexpr std::size_t kElements = 12;
const std::vector<std::size_t> kTensors = {5, 7};
const optimizers::SgdOptions kPlainSgd{0.1, 0.0, 0.0};

optimizers::CrossoverOptions crossoverOptions(std::vector<std::size_t> tensors = kTensors) {
  optimizers::CrossoverOptions o;
  o.sgd = kPlainSgd;
  o.segments = static_cast<int>(tensors.size());
  o.timeoutSeconds = 20;
  return o;
}
// Random perfect matchings: symmetric and doubly stochastic, but a new one each round.
topologies::BandwidthRoulette pairings(int n, std::uint64_t seed) {
  return topologies::BandwidthRoulette(NetworkLayout::uniform(n), seed, 0.0);
}
std::vector<std::size_t> twice(std::vector<std::size_t> t) {
  const auto n = t.size();
  for (std::size_t i = 0; i < n; ++i) t.push_back(t[i]);
  return t;
}

}  // namespace

TEST_CASE(
    "on a quadratic whose ranks have different minima, gossip SGD at a constant step stays biased while "
    "gradient tracking and D2 reach the global minimizer to 1e-6",
    "[optimizer][heterogeneity]") {
  const int n = 8;
  const Quadratic q(n, kElements, 11);
  topologies::FairRoulette roulette(n, 5);
  const topologies::Ring ring(n, 0.5);  // fixed, symmetric, eigenvalues >= 0: what D² needs
  const int steps = 1500;

  const auto plain = trainQuadratic(q, steps, [&](Transport& t, int) {
    return std::make_unique<optimizers::CrossoverSgd>(t, roulette, kTensors, crossoverOptions());
  });
  const auto tracking = trainQuadratic(q, steps, [&](Transport& t, int) {
    auto base = std::make_unique<optimizers::CrossoverSgd>(t, roulette, twice(kTensors),
                                                           crossoverOptions(twice(kTensors)));
    return std::make_unique<optimizers::GradientTracking>(std::move(base), kElements, kPlainSgd);
  });
  const auto plainRing = trainQuadratic(q, steps, [&](Transport& t, int) {
    return std::make_unique<optimizers::CrossoverSgd>(t, ring, kTensors, crossoverOptions());
  });
  const auto d2 = trainQuadratic(q, steps, [&](Transport& t, int) {
    auto base = std::make_unique<optimizers::CrossoverSgd>(t, ring, kTensors, crossoverOptions());
    return std::make_unique<optimizers::D2>(std::move(base), ring, 2, kElements, kPlainSgd);
  });
  INFO("worst |x - x*|: plain " << q.worstError(plain) << " (fair roulette), " << q.worstError(plainRing)
                                << " (ring), gradient tracking " << q.worstError(tracking) << ", D2 "
                                << q.worstError(d2));
  // Plain gossip settles where each rank's pull to its own minimum balances the mixing.
  CHECK(q.worstError(plain) > 1e-2);
  CHECK(q.worstError(plainRing) > 1e-2);
  CHECK(q.worstError(tracking) < 1e-6);
  CHECK(q.worstError(d2) < 1e-6);
}

TEST_CASE(
    "gradient tracking over SGP's push-sum on the directed exponential graph reaches the global minimizer",
    "[optimizer][heterogeneity]") {
  const int n = 8;
  const Quadratic q(n, kElements, 3);
  topologies::DirectedExponential graph(n, 1);
  optimizers::SgpOptions o;
  o.sgd = kPlainSgd;
  o.timeoutSeconds = 20;
  const auto plain = trainQuadratic(
      q, 1500, [&](Transport& t, int) { return std::make_unique<optimizers::Sgp>(t, graph, kElements, o); });
  const auto tracking = trainQuadratic(q, 1500, [&](Transport& t, int) {
    auto base = std::make_unique<optimizers::Sgp>(t, graph, 2 * kElements, o);
    return std::make_unique<optimizers::GradientTracking>(std::move(base), kElements, kPlainSgd);
  });
  INFO("worst |x - x*|: SGP " << q.worstError(plain) << ", gradient tracking " << q.worstError(tracking));
  CHECK(q.worstError(plain) > 1e-2);
  CHECK(q.worstError(tracking) < 1e-6);
}

TEST_CASE("gradient tracking with momentum and in overlap mode still reaches the global minimizer",
          "[optimizer][heterogeneity]") {
  const int n = 6;
  const Quadratic q(n, kElements, 19);
  topologies::FairRoulette roulette(n, 9);
  for (const auto mode : {optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap}) {
    const optimizers::SgdOptions heavyBall{0.05, 0.5, 0.0};
    const auto x = trainQuadratic(q, 2000, [&](Transport& t, int) {
      auto o = crossoverOptions(twice(kTensors));
      o.mode = mode;
      auto base = std::make_unique<optimizers::CrossoverSgd>(t, roulette, twice(kTensors), o);
      return std::make_unique<optimizers::GradientTracking>(std::move(base), kElements, heavyBall);
    });
    INFO("mode " << static_cast<int>(mode) << ": worst |x - x*| " << q.worstError(x));
    CHECK(q.worstError(x) < 1e-5);
  }
}

TEST_CASE(
    "gradient tracking sends twice the base's bytes (as many in bfloat16), while D2 and quasi-global "
    "momentum "
    "send no more than the base",
    "[optimizer][heterogeneity]") {
  const int n = 4;
  const Quadratic q(n, kElements, 2);
  topologies::FairRoulette roulette(n, 1);
  const topologies::Ring ring(n, 0.5);
  std::vector<std::uint64_t> bytes(6);
  for (int which = 0; which < 6; ++which) {
    auto fabric = inproc::makeFabric(n);
    std::vector<std::uint64_t> sent(n);
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 20.0);
      std::unique_ptr<DistributedOptimizer> opt;
      if (which == 0)
        opt = std::make_unique<optimizers::CrossoverSgd>(*t, roulette, kTensors, crossoverOptions());
      if (which == 1)
        opt = std::make_unique<optimizers::GradientTracking>(
            std::make_unique<optimizers::CrossoverSgd>(*t, roulette, twice(kTensors),
                                                       crossoverOptions(twice(kTensors))),
            kElements, kPlainSgd);
      if (which == 2)
        opt = std::make_unique<optimizers::D2>(
            std::make_unique<optimizers::CrossoverSgd>(*t, ring, kTensors, crossoverOptions()), ring, 2,
            kElements, kPlainSgd);
      if (which == 3)
        opt = std::make_unique<optimizers::QuasiGlobalMomentum>(
            std::make_unique<optimizers::CrossoverSgd>(*t, roulette, kTensors, crossoverOptions()), kElements,
            optimizers::SgdOptions{0.1, 0.9, 0.0});
      if (which == 4)
        opt = std::make_unique<optimizers::CrossoverSgd>(*t, ring, kTensors, crossoverOptions());
      if (which == 5) {  // compression.kind bf16: x and y go out as bfloat16
        opt = std::make_unique<optimizers::GradientTracking>(
            std::make_unique<optimizers::CrossoverSgd>(*t, roulette, twice(kTensors),
                                                       crossoverOptions(twice(kTensors))),
            kElements, kPlainSgd);
        RANK_REQUIRE(opt->setExchangeType(DType::kBfloat16));
      }
      std::vector<float> x(kElements, 0.0f), g(kElements);
      for (int s = 0; s < 10; ++s) {
        q.gradient(r, x, g);
        opt->step(x, g);
      }
      sent[static_cast<std::size_t>(r)] = t->stats().bytesSent;
    });
    bytes[static_cast<std::size_t>(which)] = sent[0];
  }
  CHECK(bytes[0] == 10 * kElements * sizeof(float));
  CHECK(bytes[1] == 2 * bytes[0]);
  CHECK(bytes[2] == bytes[4]);  // the ring sends to both neighbours: 2 * 4P
  CHECK(bytes[4] == 2 * bytes[0]);
  CHECK(bytes[5] == bytes[0]);  // 2 bytes an element, twice the elements
  CHECK(bytes[3] == bytes[0]);
}

TEST_CASE("quasi-global momentum on one rank is heavy-ball (or Nesterov) fed with its own displacement",
          "[optimizer][heterogeneity]") {
  // With no peers x_{t+1} = x_t - lr s_t, so d_t = s_t and
  // m^ <- beta m^ + (1 - beta) s_t, with m_t = beta m^ + g_t and s_t = m_t
  // (heavy ball) or g_t + beta m_t (Nesterov); weight decay adds wd x_t to g_t.
  const bool nesterov = GENERATE(false, true);
  INFO((nesterov ? "Nesterov" : "heavy ball"));
  auto fabric = inproc::makeFabric(1);
  auto t = inproc::makeTransport(fabric, 0, 1.0);
  topologies::Ring alone(1);
  const double lr = 0.1, beta = 0.8, wd = 0.05;
  optimizers::QuasiGlobalMomentum opt(std::make_unique<optimizers::CrossoverSgd>(
                                          *t, alone, std::vector<std::size_t>{3}, crossoverOptions({3})),
                                      3, {lr, beta, wd}, nesterov);
  std::vector<float> x = {1.0f, -1.0f, 0.5f};
  std::vector<double> ref(x.begin(), x.end()), mhat(3, 0.0);
  for (int s = 0; s < 20; ++s) {
    std::vector<float> g(3);
    for (std::size_t k = 0; k < 3; ++k) g[k] = static_cast<float>(2.0 * x[k] - 0.3 * static_cast<double>(k));
    opt.step(x, g);
    for (std::size_t k = 0; k < 3; ++k) {
      const double grad = 2.0 * ref[k] - 0.3 * static_cast<double>(k) + wd * ref[k];
      const double m = beta * mhat[k] + grad;
      const double step = nesterov ? grad + beta * m : m;
      ref[k] -= lr * step;
      mhat[k] = beta * mhat[k] + (1 - beta) * step;
    }
  }
  for (std::size_t k = 0; k < 3; ++k) CHECK(x[k] == Approx(ref[k]).margin(1e-5));
  CHECK(opt.steps() == 20);
}

TEST_CASE("quasi-global momentum with momentum 0 is the base's plain gossip SGD, bit for bit",
          "[optimizer][heterogeneity]") {
  const int n = 4;
  const Quadratic q(n, kElements, 8);
  topologies::FairRoulette roulette(n, 2);
  const auto plain = trainQuadratic(q, 50, [&](Transport& t, int) {
    return std::make_unique<optimizers::CrossoverSgd>(t, roulette, kTensors, crossoverOptions());
  });
  const auto qgm = trainQuadratic(q, 50, [&](Transport& t, int) {
    return std::make_unique<optimizers::QuasiGlobalMomentum>(
        std::make_unique<optimizers::CrossoverSgd>(t, roulette, kTensors, crossoverOptions()), kElements,
        kPlainSgd);
  });
  CHECK(plain == qgm);
}

TEST_CASE("quasi-global momentum with momentum 0 over sync SGP on a non-regular graph steps as SGP does",
          "[optimizer][heterogeneity]") {
  // Rank 0 has two out-neighbours and the others one, so the push-sum
  // weights drift from 1: SGP takes its step on the numerator (divided by
  // the weight), and so must quasi-global momentum over it.
  const int n = 3;
  const Quadratic q(n, kElements, 5);
  const topologies::ExplicitGraph graph(n, {{0, 1}, {1, 2}, {2, 0}, {0, 2}});
  const optimizers::SgpOptions o{
      .sgd = kPlainSgd, .timeoutSeconds = 20.0, .mode = optimizers::GossipMode::kSync};
  const auto sgp = trainQuadratic(
      q, 40, [&](Transport& t, int) { return std::make_unique<optimizers::Sgp>(t, graph, kElements, o); });
  const auto qgm = trainQuadratic(q, 40, [&](Transport& t, int) {
    auto base = std::make_unique<optimizers::Sgp>(t, graph, kElements, o);
    return std::make_unique<optimizers::QuasiGlobalMomentum>(std::move(base), kElements, kPlainSgd, true,
                                                             optimizers::GossipMode::kSync);
  });
  for (int r = 0; r < n; ++r)
    for (std::size_t k = 0; k < kElements; ++k) {
      INFO("rank " << r << ", element " << k);
      CHECK(qgm[static_cast<std::size_t>(r)][k] ==
            Approx(sgp[static_cast<std::size_t>(r)][k]).margin(1e-5).epsilon(1e-4));
    }
}

TEST_CASE("D2 refuses a mixing matrix it cannot use, naming the eigenvalue", "[optimizer][heterogeneity]") {
  // The ring with weights 1/3 on an even number of ranks has eigenvalue -1/3 exactly.
  topologies::Ring evenRing(6);
  try {
    optimizers::D2::checkMixing(evenRing, 1);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("smallest eigenvalue is -0.333") != std::string::npos);
    CHECK(what.find("ring") != std::string::npos);
  }
  // On 5 ranks the smallest is 1/3 + 2/3 cos(4 pi / 5) = -0.206: accepted.
  CHECK_NOTHROW(optimizers::D2::checkMixing(topologies::Ring(5), 1));
  CHECK_NOTHROW(optimizers::D2::checkMixing(topologies::Ring(6, 0.5), 1));
  // Random pairings are symmetric but change every round; the fair roulette's
  // rounds are permutations, not symmetric; nor is a directed graph.
  CHECK_THROWS_WITH(optimizers::D2::checkMixing(pairings(16, 3), 4), Catch::Contains("differs from round 0"));
  CHECK_THROWS_WITH(optimizers::D2::checkMixing(topologies::FairRoulette(8, 3), 1),
                    Catch::Contains("not symmetric"));
  try {
    optimizers::D2::checkMixing(topologies::DirectedExponential(8, 1), 1);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("not symmetric") != std::string::npos);
  }
}

TEST_CASE("gradient_tracking, d2 and quasi_global_momentum are built from a config, with clear errors",
          "[optimizer][heterogeneity][config]") {
  const int n = 4;
  const Quadratic q(n, kElements, 4);
  for (const std::string name : {"gradient_tracking", "d2", "quasi_global_momentum"}) {
    auto fabric = inproc::makeFabric(n);
    Registry reg;
    inproc::registerWith(reg, fabric);
    topologies::registerBuiltins(reg);
    optimizers::registerBuiltins(reg);
    Config c = gossamer::test::defaultConfig();
    c.set("world_size", n);
    c.set<std::string>("transport.kind", "inproc");
    c.set<double>("transport.timeout_seconds", 20);
    c.set<std::string>("algorithm.name", name);
    c.set<int>("algorithm.segments", 2);
    if (name == "d2") {
      c.set<std::string>("topology.kind", "ring");
      c.set<double>("topology.self_weight", 0.5);
    }
    MemoryStore store;
    std::vector<std::vector<float>> x(n, std::vector<float>(kElements, 0.0f));
    onEveryRank(n, [&](int r) {
      Agent agent(c, r, store, reg);
      auto& opt = agent.makeOptimizer(kTensors);
      RANK_CHECK(opt.name() == name);
      std::vector<float> g(kElements);
      for (int s = 0; s < 5; ++s) {
        q.gradient(r, x[static_cast<std::size_t>(r)], g);
        opt.step(x[static_cast<std::size_t>(r)], g);
      }
      RANK_CHECK(opt.steps() == 5);
      agent.close();
    });
  }
  // D2 over SGP, or in overlap mode, and gradient tracking in async mode:
  // refused with the key named.
  struct Refused {
    std::string algorithm, key, value;
  };
  for (const auto& [algorithm, key, value] :
       std::vector<Refused>{{"d2", "algorithm.base", "sgp"},
                            {"d2", "algorithm.mode", "overlap"},
                            {"gradient_tracking", "algorithm.mode", "async"}}) {
    INFO(algorithm << " " << key << ": " << value);
    Config c = gossamer::test::defaultConfig();
    c.set("world_size", 1);
    c.set<std::string>("transport.kind", "inproc");
    c.set<std::string>("algorithm.name", algorithm);
    c.set<std::string>(key, value);
    auto one = inproc::makeFabric(1);
    Registry r1;
    inproc::registerWith(r1, one);
    topologies::registerBuiltins(r1);
    optimizers::registerBuiltins(r1);
    MemoryStore store;
    Agent agent(c, 0, store, r1);
    try {
      agent.makeOptimizer(kTensors);
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.key() == key);
    }
  }
}
