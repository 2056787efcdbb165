// DiLoCo (optimizers/src/diloco.cpp) over the inproc transport, ranks as
// threads: the outer step against a closed form computed here in double,
// model averaging as its special case, the gossip variant's pairing and
// conservation of the sum of the outer parameters, the overlapped variant,
// and the YAML keys.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "registry.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

using Vec = std::vector<double>;

// grads[r][s]: rank r's gradient at step s (independent of the model, so the
// reference below needs no model of its own).
std::vector<std::vector<std::vector<float>>> randomGradients(int n, int steps, std::size_t p, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<std::vector<float>>> g(static_cast<std::size_t>(n));
  for (auto& rank : g)
    for (int s = 0; s < steps; ++s) {
      rank.emplace_back(p);
      for (auto& v : rank.back()) v = u(rng);
    }
  return g;
}

// Heavy-ball momentum as documented for LocalSgd (PyTorch's convention), in
// double: v <- mu v + g; x <- x - lr v.
struct HeavyBall {
  double lr, mu;
  Vec v;
  void apply(Vec& x, const std::vector<float>& g) {
    if (v.empty()) v.assign(x.size(), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      v[i] = mu * v[i] + g[i];
      x[i] -= lr * v[i];
    }
  }
};

Vec meanOf(const std::vector<Vec>& xs) {
  Vec m(xs[0].size(), 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) m[i] += x[i] / static_cast<double>(xs.size());
  return m;
}

optimizers::DilocoOptions options(int innerSteps, double outerLr, double outerMomentum,
                                  optimizers::DilocoOuter outer, bool overlap) {
  optimizers::DilocoOptions o;
  o.sgd = {0.05, 0.5, 0.0};
  o.innerSteps = innerSteps;
  o.outerLearningRate = outerLr;
  o.outerMomentum = outerMomentum;
  o.outer = outer;
  o.overlap = overlap;
  o.seed = 7;
  o.timeoutSeconds = 20;
  return o;
}

struct RankEnd {
  std::vector<float> params, theta;
  int partner = -1;
};

// Every rank starts from `x0[r]` and takes `steps` steps with its gradients;
// returns the local copies and outer parameters at the end.
std::vector<RankEnd> runDiloco(const optimizers::DilocoOptions& o, const std::vector<std::vector<float>>& x0,
                               const std::vector<std::vector<std::vector<float>>>& grads, int steps,
                               std::uint64_t totalSteps = 0) {
  const int n = static_cast<int>(x0.size());
  auto fabric = inproc::makeFabric(n);
  std::vector<RankEnd> out(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 20.0);
    Communicator comm(*t, 20.0);
    optimizers::Diloco opt(comm, x0[0].size(), o);
    opt.setTotalSteps(totalSteps);
    auto x = x0[static_cast<std::size_t>(r)];
    for (int s = 0; s < steps; ++s)
      opt.step(x, grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
    auto& e = out[static_cast<std::size_t>(r)];
    e.params = x;
    e.theta.assign(opt.outerParameters().begin(), opt.outerParameters().end());
    e.partner = opt.lastPartner();
  });
  return out;
}

std::vector<std::vector<float>> sameStart(int n, std::size_t p) {
  std::vector<float> x(p);
  for (std::size_t i = 0; i < p; ++i) x[i] = std::sin(static_cast<float>(i) + 0.5f);
  return std::vector<std::vector<float>>(static_cast<std::size_t>(n), x);
}

}  // namespace

TEST_CASE(
    "diloco: after each allreduce round theta is the same on every rank and is the Nesterov step on "
    "the mean pseudo-gradient",
    "[diloco]") {
  const int n = 4, h = 5, rounds = 2, steps = 1 + rounds * h;
  const std::size_t p = 37;
  const double lr = 0.7, mu = 0.9;
  const auto x0 = sameStart(n, p);
  const auto grads = randomGradients(n, steps, p, 11);
  const auto o = options(h, lr, mu, optimizers::DilocoOuter::kAllreduce, false);
  const auto end = runDiloco(o, x0, grads, steps);

  // The expected value, in double: every rank's inner steps from theta, then
  // m <- mu m + mean(Delta); theta <- theta - lr (mean(Delta) + mu m).
  std::vector<HeavyBall> inner(n, HeavyBall{0.05, 0.5, {}});
  std::vector<Vec> x(n, Vec(x0[0].begin(), x0[0].end()));
  for (int r = 0; r < n; ++r)
    inner[static_cast<std::size_t>(r)].apply(x[static_cast<std::size_t>(r)], grads[r][0]);
  Vec theta = meanOf(x), m(p, 0.0);  // the first step's mean starts theta
  int s = 1;
  for (int k = 0; k < rounds; ++k) {
    for (auto& xr : x) xr = theta;
    for (int i = 0; i < h; ++i, ++s)
      for (int r = 0; r < n; ++r)
        inner[static_cast<std::size_t>(r)].apply(
            x[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
    Vec delta(p, 0.0);
    for (const auto& xr : x)
      for (std::size_t i = 0; i < p; ++i) delta[i] += (theta[i] - xr[i]) / n;
    for (std::size_t i = 0; i < p; ++i) {
      m[i] = mu * m[i] + delta[i];
      theta[i] -= lr * (delta[i] + mu * m[i]);
    }
  }
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(end[static_cast<std::size_t>(r)].theta == end[0].theta);   // bit for bit
    CHECK(end[static_cast<std::size_t>(r)].params == end[0].theta);  // the local copy restarts from theta
  }
  for (std::size_t i = 0; i < p; ++i) CHECK(end[0].theta[i] == Approx(theta[i]).margin(1e-5));
  // The outer step moved theta away from the plain mean of the local copies.
  CHECK(std::abs(end[0].theta[0] - meanOf(x)[0]) > 1e-3);
}

TEST_CASE("diloco: outer learning rate 1 and momentum 0 is model averaging every H steps", "[diloco]") {
  const int n = 3, h = 4, steps = 1 + 3 * h + 2;  // three rounds, then two inner steps
  const std::size_t p = 20;
  const auto x0 = sameStart(n, p);
  const auto grads = randomGradients(n, steps, p, 5);
  const auto end =
      runDiloco(options(h, 1.0, 0.0, optimizers::DilocoOuter::kAllreduce, false), x0, grads, steps);

  // Local SGD that replaces every model by the mean after step 1, 1 + H, 1 + 2H, ...
  std::vector<HeavyBall> inner(n, HeavyBall{0.05, 0.5, {}});
  std::vector<Vec> x(n, Vec(x0[0].begin(), x0[0].end()));
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < n; ++r)
      inner[static_cast<std::size_t>(r)].apply(
          x[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
    if ((s + 1) % h == 1 % h && s + 1 <= 1 + 3 * h) {
      const Vec mean = meanOf(x);
      for (auto& xr : x) xr = mean;
    }
  }
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < p; ++i)
      CHECK(end[static_cast<std::size_t>(r)].params[i] ==
            Approx(x[static_cast<std::size_t>(r)][i]).margin(1e-5));
  // Two inner steps after the last round: the local copies differ again.
  CHECK(end[0].params != end[1].params);
}

TEST_CASE("diloco: a gossip round pairs every rank and keeps the sum of theta over the ranks", "[diloco]") {
  // Outer lr 1, momentum 0: sum_i theta_i after a round = sum_i of the local
  // copies before it (the mean of the models is kept), and the two of a pair
  // end with the same theta, the mean of their local copies. Ranks start
  // from different models, so their theta differ; the local steps are made
  // here (communication-only form), so the local copies are known.
  const int n = 6, h = 3, rounds = 4;
  const std::size_t p = 16;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::vector<std::vector<float>>> before(rounds), after(rounds);  // [round][rank]
  std::vector<std::vector<int>> partners(rounds, std::vector<int>(n));
  for (int k = 0; k < rounds; ++k) {
    before[static_cast<std::size_t>(k)].resize(n);
    after[static_cast<std::size_t>(k)].resize(n);
  }
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 20.0);
    Communicator comm(*t, 20.0);
    const auto o = options(h, 1.0, 0.0, optimizers::DilocoOuter::kGossip, false);
    optimizers::Diloco opt(comm, p, o);
    optimizers::LocalSgd sgd(p, o.sgd);
    std::mt19937 rng(static_cast<unsigned>(r) + 100);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(p), g(p);
    for (auto& v : x) v = normal(rng) + static_cast<float>(r);
    int k = 0;
    for (int s = 0; s < 1 + rounds * h; ++s) {
      for (auto& v : g) v = normal(rng);
      sgd.apply(x, g);
      const std::uint64_t applied = opt.rounds();
      const auto local = x;
      opt.mixParameters(x);
      if (opt.rounds() != applied) {
        const auto ku = static_cast<std::size_t>(k++);
        before[ku][static_cast<std::size_t>(r)] = local;
        after[ku][static_cast<std::size_t>(r)].assign(opt.outerParameters().begin(),
                                                      opt.outerParameters().end());
        partners[ku][static_cast<std::size_t>(r)] = opt.lastPartner();
        RANK_CHECK(x == after[ku][static_cast<std::size_t>(r)]);
      }
    }
    RANK_CHECK(k == rounds);
    RANK_CHECK(opt.rejectedMessages() == 0);
  });
  std::set<std::vector<int>> matchings;
  for (int k = 0; k < rounds; ++k) {
    CAPTURE(k);
    const auto& pk = partners[static_cast<std::size_t>(k)];
    matchings.insert(pk);
    for (int r = 0; r < n; ++r) {
      const int q = pk[static_cast<std::size_t>(r)];
      CHECK(q != r);  // every rank is paired (n even)
      CHECK(pk[static_cast<std::size_t>(q)] == r);
      CHECK(after[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)] ==
            after[static_cast<std::size_t>(k)][static_cast<std::size_t>(q)]);
    }
    for (std::size_t i = 0; i < p; ++i) {
      double sumBefore = 0, sumAfter = 0;
      for (int r = 0; r < n; ++r) {
        sumBefore += before[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)][i];
        sumAfter += after[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)][i];
      }
      CHECK(sumAfter == Approx(sumBefore).margin(1e-4));
    }
    for (int r = 0; r < n; ++r) {
      const int q = pk[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < p; ++i)
        CHECK(after[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)][i] ==
              Approx((before[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)][i] +
                      before[static_cast<std::size_t>(k)][static_cast<std::size_t>(q)][i]) /
                     2.0)
                  .margin(1e-5));
    }
  }
  CHECK(matchings.size() > 1);  // a new matching drawn each round
}

TEST_CASE("diloco: the noloco outer step pulls each theta towards its pair's mean and keeps the sum",
          "[diloco]") {
  // Momentum 0, lr 1, gamma 0.5: theta_i <- theta_i - Delta_bar - gamma
  // (theta_i - theta_bar), computed here in double from the thetas and local
  // copies before the round; a pair's gap shrinks by half; the sum of theta
  // over the ranks moves by -sum(Delta). Ranks start from different models.
  const int n = 4, h = 2, rounds = 3;
  const double gamma = 0.5;
  const std::size_t p = 12;
  auto fabric = inproc::makeFabric(n);
  struct Round {
    std::vector<float> thetaBefore, local, thetaAfter;
    int partner = -1;
  };
  std::vector<std::vector<Round>> got(static_cast<std::size_t>(n));  // [rank][round]
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 20.0);
    Communicator comm(*t, 20.0);
    auto o = options(h, 1.0, 0.0, optimizers::DilocoOuter::kNoloco, false);
    o.nolocoGamma = gamma;
    optimizers::Diloco opt(comm, p, o);
    optimizers::LocalSgd sgd(p, o.sgd);
    std::mt19937 rng(static_cast<unsigned>(r) + 300);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(p), g(p);
    for (auto& v : x) v = normal(rng) + 2.0f * static_cast<float>(r);
    for (int s = 0; s < 1 + rounds * h; ++s) {
      for (auto& v : g) v = normal(rng);
      sgd.apply(x, g);
      const std::uint64_t applied = opt.rounds();
      Round k;
      k.thetaBefore.assign(opt.outerParameters().begin(), opt.outerParameters().end());
      k.local = x;
      opt.mixParameters(x);
      if (opt.rounds() == applied) continue;
      k.thetaAfter.assign(opt.outerParameters().begin(), opt.outerParameters().end());
      k.partner = opt.lastPartner();
      RANK_CHECK(x == k.thetaAfter);  // the local copy restarts from theta
      got[static_cast<std::size_t>(r)].push_back(std::move(k));
    }
  });
  for (int k = 0; k < rounds; ++k) {
    CAPTURE(k);
    double sumDelta = 0, sumBefore = 0, sumAfter = 0;
    for (int r = 0; r < n; ++r) {
      const auto& mine = got[static_cast<std::size_t>(r)].at(static_cast<std::size_t>(k));
      const int q = mine.partner;
      REQUIRE(q != r);
      const auto& other = got[static_cast<std::size_t>(q)].at(static_cast<std::size_t>(k));
      CHECK(other.partner == r);
      for (std::size_t i = 0; i < p; ++i) {
        // Delta = anchor - x, the anchor being theta before the round (synchronous rounds).
        const double dMine = double(mine.thetaBefore[i]) - mine.local[i];
        const double dOther = double(other.thetaBefore[i]) - other.local[i];
        const double thetaBar = (double(mine.thetaBefore[i]) + other.thetaBefore[i]) / 2;
        const double expected =
            mine.thetaBefore[i] - (dMine + dOther) / 2 - gamma * (mine.thetaBefore[i] - thetaBar);
        CHECK(mine.thetaAfter[i] == Approx(expected).margin(1e-5));
        const double gapBefore = double(mine.thetaBefore[i]) - other.thetaBefore[i];
        const double gapAfter = double(mine.thetaAfter[i]) - other.thetaAfter[i];
        CHECK(gapAfter == Approx((1 - gamma) * gapBefore).margin(1e-5));
        if (i == 0) {
          sumDelta += dMine;
          sumBefore += mine.thetaBefore[i];
          sumAfter += mine.thetaAfter[i];
        }
      }
    }
    CHECK(sumAfter == Approx(sumBefore - sumDelta).margin(1e-4));
  }
  // The thetas stay apart (gamma < 1): not the outright average of gossip.
  const auto& a = got[0].back();
  const auto& b = got[static_cast<std::size_t>(a.partner)].back();
  CHECK(a.thetaAfter != b.thetaAfter);
}

TEST_CASE("diloco: overlap applies each round one round late and keeps the ranks' own progress", "[diloco]") {
  // Reference in double (diloco.cpp, "Overlap"): at the end of round k the
  // mean pseudo-gradient of round k-1 is applied: theta moves, and each local
  // copy moves by theta_new - theta_old + its own Delta_{k-1}; then round k's
  // Delta = anchor - x is sent, anchor <- x. The last step ends synchronously
  // with x = theta everywhere.
  const int n = 4, h = 3, steps = 1 + 4 * h + 2;
  const std::size_t p = 12;
  const double lr = 0.7, mu = 0.9;
  const auto x0 = sameStart(n, p);
  const auto grads = randomGradients(n, steps, p, 23);
  const auto o = options(h, lr, mu, optimizers::DilocoOuter::kAllreduce, true);
  const auto end = runDiloco(o, x0, grads, steps, steps);

  std::vector<HeavyBall> inner(n, HeavyBall{0.05, 0.5, {}});
  std::vector<Vec> x(n, Vec(x0[0].begin(), x0[0].end()));
  for (int r = 0; r < n; ++r)
    inner[static_cast<std::size_t>(r)].apply(x[static_cast<std::size_t>(r)], grads[r][0]);
  Vec theta = meanOf(x), m(p, 0.0);
  for (auto& xr : x) xr = theta;
  std::vector<Vec> anchor = x, inFlight;  // inFlight[r]: rank r's Delta of the round in flight
  auto apply = [&](bool reset) {
    Vec d(p, 0.0);
    for (const auto& dr : inFlight)
      for (std::size_t i = 0; i < p; ++i) d[i] += dr[i] / n;
    Vec old = theta;
    for (std::size_t i = 0; i < p; ++i) {
      m[i] = mu * m[i] + d[i];
      theta[i] -= lr * (d[i] + mu * m[i]);
    }
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < p; ++i) {
        const auto ru = static_cast<std::size_t>(r);
        const double shift = theta[i] - old[i] + inFlight[ru][i];
        x[ru][i] = reset ? theta[i] : x[ru][i] + shift;
        anchor[ru][i] = reset ? theta[i] : anchor[ru][i] + shift;
      }
    inFlight.clear();
  };
  for (int s = 1; s < steps; ++s) {
    for (int r = 0; r < n; ++r)
      inner[static_cast<std::size_t>(r)].apply(
          x[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
    const bool last = s + 1 == steps;
    if (s % h != 0 && !last) continue;
    if (!inFlight.empty()) apply(false);
    for (int r = 0; r < n; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      Vec d(p);
      for (std::size_t i = 0; i < p; ++i) d[i] = anchor[ru][i] - x[ru][i];
      inFlight.push_back(d);
      anchor[ru] = x[ru];
    }
    if (last) apply(true);
  }
  for (int r = 0; r < n; ++r) {
    CHECK(end[static_cast<std::size_t>(r)].theta == end[0].theta);
    CHECK(end[static_cast<std::size_t>(r)].params == end[0].theta);
  }
  for (std::size_t i = 0; i < p; ++i) CHECK(end[0].theta[i] == Approx(theta[i]).margin(1e-5));
  // Without the last synchronous round, a round is still in flight at the
  // end and the local copies differ, but theta is the same bits everywhere.
  const auto open = runDiloco(o, x0, grads, steps - 1);
  for (int r = 1; r < n; ++r) {
    CHECK(open[static_cast<std::size_t>(r)].theta == open[0].theta);
    CHECK(open[static_cast<std::size_t>(r)].params != open[0].params);
  }
}

TEST_CASE("diloco: with one rank, overlap, outer lr 1 and momentum 0 is plain local SGD", "[diloco]") {
  const int steps = 17;
  const std::size_t p = 9;
  const auto x0 = sameStart(1, p);
  const auto grads = randomGradients(1, steps, p, 3);
  for (auto outer : {optimizers::DilocoOuter::kAllreduce, optimizers::DilocoOuter::kGossip}) {
    const auto end = runDiloco(options(4, 1.0, 0.0, outer, true), x0, grads, steps);
    HeavyBall sgd{0.05, 0.5, {}};
    Vec x(x0[0].begin(), x0[0].end());
    for (int s = 0; s < steps; ++s) sgd.apply(x, grads[0][static_cast<std::size_t>(s)]);
    for (std::size_t i = 0; i < p; ++i) CHECK(end[0].params[i] == Approx(x[i]).margin(1e-5));
  }
}

TEST_CASE("diloco: gossip with overlap keeps the sum of theta and ends each pair equal", "[diloco]") {
  // Outer lr 1, momentum 0, learning rate 0: nothing but mixing, so the sum
  // of theta over the ranks and of the local copies stays that of the start.
  const int n = 4, h = 2, steps = 1 + 5 * h;
  const std::size_t p = 8;
  std::vector<std::vector<float>> x0(n, std::vector<float>(p));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < p; ++i) x0[static_cast<std::size_t>(r)][i] = static_cast<float>(r * 10 + i);
  auto o = options(h, 1.0, 0.0, optimizers::DilocoOuter::kGossip, true);
  o.sgd = {0.0, 0.0, 0.0};
  const auto grads = randomGradients(n, steps, p, 9);
  const auto end = runDiloco(o, x0, grads, steps, steps);
  for (std::size_t i = 0; i < p; ++i) {
    double start = 0, theta = 0, local = 0;
    for (int r = 0; r < n; ++r) {
      start += x0[static_cast<std::size_t>(r)][i];
      theta += end[static_cast<std::size_t>(r)].theta[i];
      local += end[static_cast<std::size_t>(r)].params[i];
    }
    CHECK(theta == Approx(start).margin(1e-4));
    CHECK(local == Approx(start).margin(1e-4));
  }
  for (int r = 0; r < n; ++r) {
    const int q = end[static_cast<std::size_t>(r)].partner;
    CHECK(q != r);
    CHECK(end[static_cast<std::size_t>(r)].theta == end[static_cast<std::size_t>(q)].theta);
  }
}

TEST_CASE("diloco: built from YAML by an Agent, 4 ranks reach the mean of their optima", "[diloco][agent]") {
  // f_r(x) = |x - r|^2 / 2 on rank r: the optimum of the sum is x = 1.5.
  for (const std::string outer : {"allreduce", "gossip"}) {
    CAPTURE(outer);
    const int n = 4, steps = 200;
    auto fabric = inproc::makeFabric(n);
    Registry reg;
    inproc::registerWith(reg, fabric);
    topologies::registerBuiltins(reg);
    optimizers::registerBuiltins(reg);
    const Config c = reg.parse(
        "world_size: 4\ntransport: {kind: inproc, timeout_seconds: 20}\n"
        "algorithm: {name: diloco, inner_steps: 10, outer_learning_rate: 0.7, outer_momentum: 0.5, outer: " +
            outer + "}\ntraining: {learning_rate: 0.05, momentum: 0.5}\n",
        "diloco.yaml");
    MemoryStore store;
    std::vector<std::vector<float>> xs(n);
    onEveryRank(n, [&](int r) {
      Agent agent(c, r, store, reg);
      auto& opt = agent.makeOptimizer({5});
      RANK_CHECK(opt.name() == "diloco");
      opt.setTotalSteps(steps);
      std::vector<float> x(5, 0.0f), g(5);
      for (int s = 0; s < steps; ++s) {
        for (std::size_t i = 0; i < x.size(); ++i) g[i] = x[i] - static_cast<float>(r);
        opt.step(x, g);
      }
      opt.flush(x);
      xs[static_cast<std::size_t>(r)] = x;
      agent.close();
    });
    double mean = 0;
    for (const auto& x : xs)
      for (float v : x) mean += v / (n * 5.0);
    CHECK(mean == Approx(1.5).margin(0.05));
    if (outer == "allreduce")
      for (const auto& x : xs) CHECK(x == xs[0]);
  }
}

TEST_CASE("diloco: bad keys are refused with the key named", "[diloco][config]") {
  const auto& reg = gossamer::test::trainRegistry();
  const std::map<std::string, std::string> bad = {
      {"inner_steps: 0", "algorithm.inner_steps"},
      {"inner_steps: 1000001", "algorithm.inner_steps"},
      {"inner_steps: 2.5", "algorithm.inner_steps"},
      {"outer_learning_rate: 0", "algorithm.outer_learning_rate"},
      {"outer_learning_rate: 10.5", "algorithm.outer_learning_rate"},
      {"outer_learning_rate: .nan", "algorithm.outer_learning_rate"},
      {"outer_momentum: 1.0", "algorithm.outer_momentum"},
      {"outer_momentum: -0.1", "algorithm.outer_momentum"},
      {"outer: ring", "algorithm.outer"},
      {"overlap: sometimes", "algorithm.overlap"},
      {"inner_step: 5", "algorithm.inner_step"},
  };
  for (const auto& [line, key] : bad) {
    CAPTURE(line);
    try {
      reg.parse("algorithm:\n  name: diloco\n  " + line + "\n", "bad.yaml");
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.key() == key);
      CHECK(e.line() == 3);
      CHECK_THAT(e.what(), Catch::Contains("'" + key + "'"));
    }
  }
  // The keys belong to diloco: under another algorithm they are an error.
  try {
    reg.parse("algorithm:\n  name: crossover_sgd\n  inner_steps: 10\n", "bad.yaml");
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "algorithm.inner_steps");
  }
  // Compressors replace the optimizer's own exchange: not under diloco.
  for (const std::string kind : {"a2sgd", "topk", "qsgd"}) {
    CAPTURE(kind);
    try {
      reg.parse("algorithm: {name: diloco}\ncompression: {kind: " + kind + "}\n", "bad.yaml");
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.key() == "compression.kind");
      CHECK_THAT(e.what(), Catch::Contains("diloco"));
    }
  }
  const Config good = reg.parse(
      "algorithm: {name: diloco, inner_steps: 20, outer_learning_rate: 1, outer_momentum: 0, outer: gossip, "
      "overlap: true}\n",
      "good.yaml");
  CHECK(good.get<int>("algorithm.inner_steps") == 20);
  CHECK(good.get<double>("algorithm.outer_learning_rate") == 1.0);
  CHECK(good.get<double>("algorithm.outer_momentum") == 0.0);
  CHECK(good.get<std::string>("algorithm.outer") == "gossip");
  CHECK(good.get<bool>("algorithm.overlap"));
  const Config defaults = reg.parse("algorithm: {name: diloco}\n", "defaults.yaml");
  CHECK(defaults.get<int>("algorithm.inner_steps") == 50);
  CHECK(defaults.get<double>("algorithm.outer_learning_rate") == 0.7);
  CHECK(defaults.get<double>("algorithm.outer_momentum") == 0.9);
  CHECK(defaults.get<std::string>("algorithm.outer") == "allreduce");
  CHECK_FALSE(defaults.get<bool>("algorithm.overlap"));
  // The constructor checks the same ranges for programs that skip the YAML.
  auto fabric = inproc::makeFabric(1);
  auto t = inproc::makeTransport(fabric, 0, 5.0);
  Communicator comm(*t, 5.0);
  auto o = options(0, 0.7, 0.9, optimizers::DilocoOuter::kAllreduce, false);
  CHECK_THROWS_AS(optimizers::Diloco(comm, 4, o), InvalidArgument);
  o = options(5, 0.0, 0.9, optimizers::DilocoOuter::kAllreduce, false);
  CHECK_THROWS_AS(optimizers::Diloco(comm, 4, o), InvalidArgument);
  o = options(5, 0.7, 1.0, optimizers::DilocoOuter::kAllreduce, false);
  CHECK_THROWS_AS(optimizers::Diloco(comm, 4, o), InvalidArgument);
  CHECK_THROWS_AS(optimizers::parseDilocoOuter("ring"), InvalidArgument);
  optimizers::Diloco ok(comm, 4, options(5, 0.7, 0.9, optimizers::DilocoOuter::kAllreduce, false));
  std::vector<float> x(5), g(5);
  CHECK_THROWS_AS(ok.step(x, g), InvalidArgument);
}
