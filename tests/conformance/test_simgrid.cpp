// The simgrid transport: the SDK's own collectives and point-to-point
// semantics inside a SimGrid simulation, with simulated time checked against
// what the platform's links give. SimGrid's engine can be made once per
// process, so every case runs its simulation in a child process (fork) and
// reads back what failed.
#ifdef GOSSAMER_HAVE_SIMGRID

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/executor.hpp"
#include "gossamer/kit/hips.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/simgrid.hpp"
#include "process.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::inChild;

namespace {

// Network model settings under which a transfer takes latency + bytes / rate
// exactly: SimGrid's default TCP model scales both by measured factors, and
// sends 5% of every flow back along the reverse route (the ACKs), which a
// link used both ways (the platform file's) shares with the flow.
const std::vector<std::string> kExactLinks{"network/latency-factor:1", "network/bandwidth-factor:1",
                                           "network/crosstraffic:0"};

// Every rank's error, one per line.
std::string errorsOf(const simgrid::Outcome& o) {
  std::string s;
  for (const auto& e : o.errors) s += e + "\n";
  return s;
}

std::unique_ptr<Transport> transportOf(int rank, int n, double timeout = 30) {
  simgrid::Options o;
  o.rank = rank;
  o.worldSize = n;
  o.timeoutSeconds = timeout;
  return simgrid::makeTransport(o);
}

}  // namespace

TEST_CASE("simgrid: receives from any of several ranks and keeps each pair's order", "[simgrid]") {
  const std::string failed = inChild([] {
    constexpr int kRanks = 4, kEach = 5;
    simgrid::Platform p;
    p.hosts = kRanks;
    const auto out = simgrid::simulate(p, [](int r) {
      auto t = transportOf(r, kRanks);
      const Tag tag = Tag::make(Op::kUser, 7, 0);
      if (r != 0) {
        for (int k = 0; k < kEach; ++k) {
          const std::int32_t v = r * 100 + k;
          t->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1)).wait(t->timeoutSeconds());
        }
        return;
      }
      const std::vector<int> sources{1, 2, 3};
      std::vector<int> next(kRanks, 0);
      for (int k = 0; k < (kRanks - 1) * kEach; ++k) {
        std::int32_t v = -1;
        Request q = t->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(&v, 1)));
        q.wait(t->timeoutSeconds());
        const int from = q.peer();
        if (v != from * 100 + next[static_cast<std::size_t>(from)])
          throw Error("from rank " + std::to_string(from) + " got " + std::to_string(v) + ", expected " +
                      std::to_string(from * 100 + next[static_cast<std::size_t>(from)]));
        ++next[static_cast<std::size_t>(from)];
      }
    });
    return errorsOf(out);
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a message takes latency plus bytes over rate in simulated time", "[simgrid]") {
  std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 2;
    p.insideBytesPerSecond = 125e6;  // 1 Gbit/s
    p.insideLatencySeconds = 50e-6;
    double arrived = -1;
    constexpr std::size_t kBytes = 1000000;
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, 2);
          std::vector<std::byte> b(kBytes, std::byte{3});
          const Tag tag = Tag::make(Op::kUser, 1, 0);
          if (r == 0) {
            t->isend(1, tag, b).wait(t->timeoutSeconds());
          } else {
            std::fill(b.begin(), b.end(), std::byte{0});
            t->irecv(0, tag, b).wait(t->timeoutSeconds());
            if (b.front() != std::byte{3} || b.back() != std::byte{3}) throw Error("wrong bytes");
            arrived = simgrid::now();
          }
        },
        kExactLinks);
    // The sender's up link (50 us) and the receiver's down link, both at
    // 1 Gbit/s; the 48-byte header travels with the payload.
    const double expected = 50e-6 + (kBytes + 48) / 125e6;
    std::string s = errorsOf(out);
    if (std::abs(arrived - expected) > 0.01 * expected)
      s += "arrived at " + std::to_string(arrived) + " s, expected " + std::to_string(expected) + " s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: ring recursive doubling and Rabenseifner allreduce give exact sums on 6 ranks",
          "[simgrid]") {
  const std::string failed = inChild([] {
    constexpr int kRanks = 6;
    simgrid::Platform p;
    p.hosts = kRanks;
    const auto out = simgrid::simulate(p, [](int r) {
      auto t = transportOf(r, kRanks);
      std::uint64_t sequence = 0;
      for (const auto algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
                                   AllreduceAlgorithm::kRabenseifner}) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300001}}) {
          std::vector<float> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
          CollectiveOptions o;
          o.sequence = ++sequence;
          o.timeoutSeconds = 30;
          o.algorithm = algorithm;
          allreduce<float>(*t, v, ReduceOp::kSum, o);
          for (std::size_t i = 0; i < n; ++i) {
            const auto expected =
                static_cast<float>(kRanks * (kRanks + 1) / 2 + kRanks * static_cast<int>(i % 7));
            if (v[i] != expected)
              throw Error(std::string(toString(algorithm)) + ", " + std::to_string(n) +
                          " elements: element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                          ", expected " + std::to_string(expected));
          }
        }
      }
    });
    return errorsOf(out);
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: HiPS's parallel streams run as actors of their rank and give exact sums", "[simgrid]") {
  const std::string failed = inChild([] {
    constexpr int kRanks = 6;
    simgrid::Platform p;
    p.hosts = kRanks;
    const auto out = simgrid::simulate(p, [](int r) {
      auto t = transportOf(r, kRanks);
      constexpr std::size_t n = 100003;
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
      CollectiveOptions o;
      o.sequence = 1;
      o.timeoutSeconds = 30;
      HipsOptions h;
      h.levels = {2, 3};
      h.parallelStreams = true;  // stream 1 is a task: here an actor (a thread would be refused)
      hipsAllreduce<float>(*t, v, ReduceOp::kSum, o, h);
      for (std::size_t i = 0; i < n; ++i) {
        const auto expected =
            static_cast<float>(kRanks * (kRanks + 1) / 2 + kRanks * static_cast<int>(i % 7));
        if (v[i] != expected)
          throw Error("element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " +
                      std::to_string(expected));
      }
    });
    return errorsOf(out);
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a ring allreduce takes the time its bytes need on the links", "[simgrid]") {
  std::string failed = inChild([] {
    constexpr int kRanks = 8;
    constexpr std::size_t kElems = 2000000;  // 8 MB of float32
    simgrid::Platform p;
    p.hosts = kRanks;
    p.insideBytesPerSecond = 125e6;
    p.insideLatencySeconds = 50e-6;
    double took = -1;
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, kRanks);
          std::vector<float> v(kElems, 1.0f);
          CollectiveOptions o;
          o.sequence = 1;
          o.timeoutSeconds = 60;
          o.algorithm = AllreduceAlgorithm::kRing;
          const double t0 = simgrid::now();
          allreduce<float>(*t, v, ReduceOp::kSum, o);
          if (v.front() != kRanks || v.back() != kRanks) throw Error("wrong sum");
          if (r == 0) took = simgrid::now() - t0;
        },
        kExactLinks);
    // Each rank sends and receives 2 (N-1)/N of the vector, at once in both
    // directions (its up and down links); 2 (N-1) steps of one latency each.
    const double bytes = 4.0 * kElems;
    const double expected = 2.0 * (kRanks - 1) / kRanks * bytes / 125e6 + 2 * (kRanks - 1) * 50e-6;
    std::string s = errorsOf(out);
    if (std::abs(took - expected) > 0.10 * expected)
      s += "ring took " + std::to_string(took) + " s simulated, alpha-beta gives " +
           std::to_string(expected) + " s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a receive from a silent peer times out in simulated seconds", "[simgrid]") {
  const auto wall0 = std::chrono::steady_clock::now();
  std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 2;
    double gaveUp = -1;
    bool timedOut = false;
    const auto out = simgrid::simulate(p, [&](int r) {
      auto t = transportOf(r, 2, 500);  // 500 simulated seconds
      if (r == 0) {
        simgrid::sleepFor(1000);  // silent past the timeout, then closes
        return;
      }
      std::int32_t v = 0;
      try {
        t->irecvOf<std::int32_t>(0, Tag::make(Op::kUser, 1, 0), std::span<std::int32_t>(&v, 1))
            .wait(t->timeoutSeconds());
      } catch (const TimeoutError&) {
        timedOut = true;
        gaveUp = simgrid::now();
      }
    });
    std::string s = errorsOf(out);
    if (!timedOut) s += "the receive did not time out\n";
    if (std::abs(gaveUp - 500) > 1e-6)
      s += "gave up at " + std::to_string(gaveUp) + " s simulated, not 500\n";
    if (std::abs(out.simulatedSeconds - 1000) > 1e-6)
      s += "the simulation ended at " + std::to_string(out.simulatedSeconds) + " s, not 1000\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
  // 1,000 simulated seconds are not waited in real time.
  CHECK(std::chrono::steady_clock::now() - wall0 < std::chrono::seconds(30));
}

TEST_CASE("simgrid: waitAny suspends a rank until one of its receives settles or its simulated time runs out",
          "[simgrid]") {
  const auto wall0 = std::chrono::steady_clock::now();
  std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 3;
    p.insideLatencySeconds = 1e-3;
    std::vector<std::pair<int, double>> got;  // (waitAny's result, when)
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, 3, 5000);
          const std::int64_t v = r;
          if (r == 1) simgrid::sleepFor(1000);  // silent, then closes
          if (r == 2) {
            simgrid::sleepFor(300);
            t->isendOf<std::int64_t>(0, Tag::make(Op::kGossip, 2), std::span<const std::int64_t>(&v, 1));
          }
          if (r != 0) return;
          std::int64_t a = 0, b = 0;
          std::vector<Request> rs;
          rs.push_back(
              t->irecvOf<std::int64_t>(1, Tag::make(Op::kGossip, 1), std::span<std::int64_t>(&a, 1)));
          rs.push_back(
              t->irecvOf<std::int64_t>(2, Tag::make(Op::kGossip, 2), std::span<std::int64_t>(&b, 1)));
          const auto waitAny = [&](double seconds) {
            const int k = Request::waitAny(rs, seconds);
            got.emplace_back(k, simgrid::now());
          };
          waitAny(100);  // nothing comes in 100 s
          waitAny(400);  // rank 2's message at 300 s
          rs[1] = Request();
          waitAny(4000);  // rank 1 leaves at 1000 s
        },
        kExactLinks);
    std::string s = errorsOf(out);
    const std::vector<std::pair<int, double>> expected{{-1, 100}, {1, 300 + 1e-3 + 56 / 125e6}, {0, 1000}};
    if (got.size() != expected.size()) return s + "waitAny returned " + std::to_string(got.size()) + " times";
    for (std::size_t k = 0; k < got.size(); ++k)
      if (got[k].first != expected[k].first || std::abs(got[k].second - expected[k].second) > 1e-6)
        s += "waitAny " + std::to_string(k) + ": " + std::to_string(got[k].first) + " at " +
             std::to_string(got[k].second) + " s, expected " + std::to_string(expected[k].first) + " at " +
             std::to_string(expected[k].second) + " s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
  // 1,000 simulated seconds are not waited in real time.
  CHECK(std::chrono::steady_clock::now() - wall0 < std::chrono::seconds(30));
}

TEST_CASE("simgrid: a rank that closes its transport fails the receives waiting on it", "[simgrid]") {
  std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 3;
    int failures = 0;
    const auto out = simgrid::simulate(p, [&](int r) {
      auto t = transportOf(r, 3, 100);
      if (r == 0) {
        simgrid::sleepFor(2);
        t->close();
        return;
      }
      std::int32_t v = 0;
      try {
        t->irecvOf<std::int32_t>(0, Tag::make(Op::kUser, 1, 0), std::span<std::int32_t>(&v, 1))
            .wait(t->timeoutSeconds());
      } catch (const PeerFailure& e) {
        // The bye crosses two links after rank 0 closes at 2 s.
        if (e.peer() == 0 && simgrid::now() >= 2 && simgrid::now() < 2.01) ++failures;
      }
    });
    std::string s = errorsOf(out);
    if (failures != 2) s += std::to_string(failures) + " of 2 waiting ranks got PeerFailure(0) at 2 s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a deadlock, a throw of a non-exception and an endless compute are errors of their ranks",
          "[simgrid]") {
  // SimGrid kills the ranks of a deadlock (every rank left waiting without
  // end): each is reported, at the simulated time it happened. A rank that
  // throws what is not a std::exception fails alone (it used to terminate
  // the process); an infinite compute is refused (it used to deadlock).
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 4;
    const auto out = simgrid::simulate(p, [&](int r) {
      auto t = transportOf(r, 4);
      std::int32_t v = 0;
      const auto forever = std::numeric_limits<double>::infinity();
      if (r == 0) simgrid::sleepFor(5);
      if (r <= 1)
        t->irecvOf<std::int32_t>(1 - r, Tag::make(Op::kUser, 1, 0), std::span<std::int32_t>(&v, 1))
            .wait(forever);
      if (r == 2) throw 42;
      if (r == 3) simgrid::compute(forever);
    });
    std::string s;
    const std::vector<std::string> expected{"rank 0: deadlock at 5.000000 s simulated",
                                            "rank 1: deadlock at 5.000000 s simulated",
                                            "rank 2: threw something that is not a std::exception",
                                            "rank 3: " /* then GOSSAMER_ENFORCE's text */};
    if (out.errors.size() != expected.size()) return "errors:\n" + errorsOf(out);
    for (std::size_t k = 0; k < expected.size(); ++k)
      if (out.errors[k].rfind(expected[k], 0) != 0)
        s += "expected '" + expected[k] + "', got " + out.errors[k] + "\n";
    if (out.errors[3].find("compute: inf flops") == std::string::npos) s += "rank 3: " + out.errors[3] + "\n";
    if (!(std::abs(out.simulatedSeconds - 5) < 1e-9))
      s += "the simulation ended at " + std::to_string(out.simulatedSeconds) + " s, not 5\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: the transport refuses use outside a simulation and a second engine", "[simgrid]") {
  std::string failed = inChild([] {
    std::string s;
    try {
      transportOf(0, 1);
      s += "makeTransport outside simulate() did not throw\n";
    } catch (const InvalidArgument&) {
    }
    simgrid::Platform p;
    p.hosts = 1;
    const auto out = simgrid::simulate(p, [](int r) { transportOf(r, 1); });
    s += errorsOf(out);
    try {
      simgrid::simulate(p, [](int) {});
      s += "a second simulate() did not throw\n";
    } catch (const Error&) {
    }
    try {
      p.hosts = 0;
      simgrid::simulate(p, [](int) {});
      s += "0 hosts did not throw\n";
    } catch (const InvalidArgument&) {
    }
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a hosted group's messages take simulated time on the links and exclude simulate()",
          "[simgrid][hosted]") {
  const std::string failed = inChild([] {
    std::string s;
    auto g = simgrid::makeHostedGroup(4, 10);
    if (g.size() != 4 || g[2]->rank() != 2 || g[2]->worldSize() != 4 || g[0]->name() != "simgrid")
      s += "the group's ranks are not 0..3 of 4\n";
    // 12.5 MB at 1 Gbit/s: 0.1 s on the link (SimGrid's default TCP model
    // gives a flow 97% of it), and 50 us of latency; no real time to speak of.
    const std::vector<std::byte> big(12'500'000, std::byte{7});
    std::vector<std::byte> got(big.size());
    const double t0 = simgrid::hostedSeconds();
    const auto real0 = std::chrono::steady_clock::now();
    auto r = g[3]->irecv(1, Tag::make(Op::kUser, 1), got);
    g[1]->isend(3, Tag::make(Op::kUser, 1), big).wait(10);
    r.wait(10);
    const double took = simgrid::hostedSeconds() - t0;
    const double real = std::chrono::duration<double>(std::chrono::steady_clock::now() - real0).count();
    if (got != big) s += "the message arrived changed\n";
    if (took < 0.1 || took > 0.11)
      s += "12.5 MB took " + std::to_string(took) + " s simulated, not 0.1 s / 0.97 + 50 us\n";
    if (real > 5) s += "a 0.1 s simulated transfer took " + std::to_string(real) + " s of real time\n";
    // A second group runs beside the first; the ranks are threads.
    auto h = simgrid::makeHostedGroup(3, 10);
    std::vector<std::vector<double>> d(3, std::vector<double>(1000));
    for (int k = 0; k < 3; ++k)
      std::fill(d[static_cast<std::size_t>(k)].begin(), d[static_cast<std::size_t>(k)].end(), k + 1.0);
    gossamer::testing::onEveryRank(3, [&](int k) {
      allreduce<double>(*h[static_cast<std::size_t>(k)], std::span<double>(d[static_cast<std::size_t>(k)]),
                        ReduceOp::kSum, CollectiveOptions{1, 10, AllreduceAlgorithm::kRing});
    });
    for (const auto& v : d)
      if (std::any_of(v.begin(), v.end(), [](double x) { return x != 6.0; })) s += "the allreduce is not 6\n";
    try {
      simgrid::Platform p;
      simgrid::simulate(p, [](int) {});
      s += "simulate() after makeHostedGroup did not throw\n";
    } catch (const Error&) {
    }
    try {
      simgrid::makeHostedGroup(65, 10);
      s += "a group of 65 did not throw\n";
    } catch (const InvalidArgument&) {
    }
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: islands give inside and between links their rates and latencies, shared by their flows",
          "[simgrid][platform]") {
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 8;
    p.islands = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    p.insideBytesPerSecond = 125e6;  // 1 Gbit/s
    p.insideLatencySeconds = 50e-6;
    p.betweenBytesPerSecond = 12.5e6;  // 100 Mbit/s into each island
    p.betweenLatencySeconds = 10e-3;
    constexpr std::size_t kBytes = 1000000;
    std::vector<double> arrived(8, -1);
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, 8, 100);
          std::vector<std::byte> b(kBytes);
          const Tag tag = Tag::make(Op::kUser, 1, 0);
          // 0 -> 1 inside island 0; 2 -> 4 and 3 -> 5 at once into island 1.
          const int to = r == 0 ? 1 : r == 2 ? 4 : r == 3 ? 5 : -1;
          const int from = r == 1 ? 0 : r == 4 ? 2 : r == 5 ? 3 : -1;
          if (to >= 0) t->isend(to, tag, b).wait(t->timeoutSeconds());
          if (from >= 0) {
            t->irecv(from, tag, b).wait(t->timeoutSeconds());
            arrived[static_cast<std::size_t>(r)] = simgrid::now();
          }
        },
        kExactLinks);
    const double bytes = kBytes + 48;
    const double inside = 50e-6 + bytes / 125e6;
    // Two flows share island 1's 100 Mbit/s: each gets half.
    const double between = 50e-6 + 10e-3 + bytes / (12.5e6 / 2);
    std::string s = errorsOf(out);
    const auto near = [&](int r, double expected) {
      const double got = arrived[static_cast<std::size_t>(r)];
      if (std::abs(got - expected) > 0.01 * expected)
        s += "rank " + std::to_string(r) + " received at " + std::to_string(got) + " s, expected " +
             std::to_string(expected) + " s\n";
    };
    near(1, inside);
    near(4, between);
    near(5, between);
    if (out.bytesSent != 3 * bytes || out.bytesBetweenIslands != 2 * bytes)
      s += "counted " + std::to_string(out.bytesSent) + " bytes sent, " +
           std::to_string(out.bytesBetweenIslands) + " between islands; expected 3 and 2 messages of " +
           std::to_string(bytes) + "\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE(
    "simgrid: a pair's messages go back to back and token buckets let a burst through at once and count TCP "
    "framing",
    "[simgrid][platform]") {
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 4;
    p.islands = {{0, 1}, {2, 3}};
    p.insideBytesPerSecond = 125e6;
    p.insideLatencySeconds = 50e-6;
    p.betweenBytesPerSecond = 12.5e6;
    p.betweenLatencySeconds = 10e-3;
    p.shapeLikeNamespaceHosts();  // 125,000-byte and 65,536-byte buckets, 1,514 bytes per 1,448
    if (std::abs(p.wireBytesPerByte - 1514.0 / 1448.0) > 1e-12)
      return "wireBytesPerByte " + std::to_string(p.wireBytesPerByte) + ", expected 1514 / 1448";
    constexpr std::size_t kBytes = 200000;
    std::vector<double> arrived;
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, 4, 100);
          std::vector<std::byte> b(kBytes);
          const Tag tag = Tag::make(Op::kUser, 1, 0);
          if (r == 0) {
            // Two messages at once to the other island, then one inside it later.
            t->isend(2, tag, b);
            t->isend(2, tag, b);
            simgrid::sleepFor(1.0);
            t->isend(1, tag, b);
          } else if (r == 2 || r == 1) {
            for (int k = 0; k < (r == 2 ? 2 : 1); ++k) {
              t->irecv(0, tag, b).wait(t->timeoutSeconds());
              arrived.push_back(simgrid::now());
            }
          }
        },
        kExactLinks);
    // What the links carry and the buckets count: the message and its frame
    // header, in full TCP segments of the veth pairs' MTU.
    const double bytes = (kBytes + 48) * 1514.0 / 1448.0;
    // The first message: its first 65,536 bytes at once (the island's
    // bucket is the smaller), the rest at 100 Mbit/s, after both latencies.
    const double first = 50e-6 + 10e-3 + (bytes - 65536) / 12.5e6;
    // The second goes after it on the stream, when the island's bucket has
    // just paid off the first one's debt: its bytes at the rate (all but a
    // few hundred), without paying the latency again.
    const double second = first + bytes / 12.5e6;
    // A second later the host's bucket is full again: 125,000 bytes at once.
    const double inside = 1.0 + 50e-6 + (bytes - 125000) / 125e6;
    std::string s = errorsOf(out);
    const std::vector<double> expected{first, second, inside};
    std::sort(arrived.begin(), arrived.end());
    if (arrived.size() != 3) return s + "received " + std::to_string(arrived.size()) + " messages";
    for (std::size_t k = 0; k < 3; ++k)
      if (std::abs(arrived[k] - expected[k]) > 1e-3 * expected[k])
        s += "message " + std::to_string(k) + " arrived at " + std::to_string(arrived[k]) + " s, expected " +
             std::to_string(expected[k]) + " s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a platform file stands in for the generated platform", "[simgrid][platform]") {
  gossamer::testing::TempDir dir;
  const std::string file = dir / "two.xml";
  gossamer::testing::writeFile(file, R"(<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="two" routing="Full">
    <host id="rank-0" speed="1Gf"/>
    <host id="rank-1" speed="1Gf"/>
    <link id="wire" bandwidth="10MBps" latency="1ms"/>
    <route src="rank-0" dst="rank-1"><link_ctn id="wire"/></route>
  </zone>
</platform>
)");
  const std::string failed = inChild([&] {
    simgrid::Platform p;
    p.hosts = 2;
    p.file = file;
    double arrived = -1;
    const auto out = simgrid::simulate(
        p,
        [&](int r) {
          auto t = transportOf(r, 2);
          std::vector<std::byte> b(100000);
          const Tag tag = Tag::make(Op::kUser, 1, 0);
          if (r == 0) t->isend(1, tag, b).wait(t->timeoutSeconds());
          if (r == 1) {
            t->irecv(0, tag, b).wait(t->timeoutSeconds());
            arrived = simgrid::now();
          }
        },
        kExactLinks);
    const double expected = 1e-3 + 100048 / 10e6;
    std::string s = errorsOf(out);
    if (std::abs(arrived - expected) > 0.01 * expected)
      s += "arrived at " + std::to_string(arrived) + " s, the file's link gives " + std::to_string(expected) +
           "\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
  // A file without the hosts of every rank is refused.
  const std::string refused = inChild([&] {
    simgrid::Platform p;
    p.hosts = 3;
    p.file = file;
    try {
      simgrid::simulate(p, [](int) {});
    } catch (const InvalidArgument& e) {
      return std::string(e.what()).find("rank-2") != std::string::npos ? std::string()
                                                                       : std::string(e.what());
    }
    return std::string("a file without rank-2 was taken for 3 ranks");
  });
  INFO(refused);
  CHECK(refused.empty());
}

TEST_CASE("simgrid: a platform file's links without bandwidth and pairs without a route are refused",
          "[simgrid][platform]") {
  // SimGrid itself aborts the process on a flow over either.
  gossamer::testing::TempDir dir;
  const auto platform = [&](const std::string& name, const std::string& bandwidth, bool routed) {
    const std::string file = dir / name;
    gossamer::testing::writeFile(
        file,
        "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
        "<platform version=\"4.1\">\n  <zone id=\"two\" routing=\"Full\">\n"
        "    <host id=\"rank-0\" speed=\"1Gf\"/>\n    <host id=\"rank-1\" speed=\"1Gf\"/>\n"
        "    <link id=\"wire\" bandwidth=\"" +
            bandwidth + "\" latency=\"1ms\"/>\n" +
            (routed ? "    <route src=\"rank-0\" dst=\"rank-1\"><link_ctn id=\"wire\"/></route>\n" : "") +
            "  </zone>\n</platform>\n");
    return file;
  };
  // What a two-rank job over `file` reports: the error from simulate, or
  // its ranks' errors.
  const auto job = [](const std::string& file) {
    return inChild([&] {
      simgrid::Platform p;
      p.hosts = 2;
      p.file = file;
      try {
        const auto out = simgrid::simulate(p, [](int r) {
          auto t = transportOf(r, 2);
          std::vector<std::byte> b(1000);
          const Tag tag = Tag::make(Op::kUser, 1, 0);
          if (r == 0) t->isend(1, tag, b).wait(t->timeoutSeconds());
          if (r == 1) t->irecv(0, tag, b).wait(t->timeoutSeconds());
        });
        return errorsOf(out);
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
    });
  };
  const std::string none = job(platform("none.xml", "0MBps", true));
  INFO(none);
  CHECK(none.find("link wire has bandwidth 0") != std::string::npos);
  const std::string negative = job(platform("negative.xml", "-5MBps", true));
  INFO(negative);
  CHECK(negative.find("link wire has bandwidth -5e+06") != std::string::npos);
  const std::string unrouted = job(platform("unrouted.xml", "10MBps", false));
  INFO(unrouted);
  CHECK(unrouted.find("rank 0: ") != std::string::npos);
  CHECK(unrouted.find("no route from rank-0 to rank-1") != std::string::npos);
  CHECK(job(platform("routed.xml", "10MBps", true)).empty());
}

TEST_CASE("simgrid: a platform's fields are validated", "[simgrid][platform]") {
  simgrid::Platform p;
  p.hosts = 4;
  CHECK_NOTHROW(p.validate());
  p.islands = {{0, 1}, {1, 2, 3}};
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.islands = {{0, 1}, {2}};
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.islands = {{0, 1}, {2, 3}};
  CHECK_NOTHROW(p.validate());
  p.insideBytesPerSecond = 0;
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.insideBytesPerSecond = 1;
  p.betweenLatencySeconds = -1;
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.betweenLatencySeconds = 0;
  p.wireBytesPerByte = 0.97;  // fewer bytes on the wire than in the message
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.wireBytesPerByte = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  p.wireBytesPerByte = 1;
  p.hosts = 0;
  p.islands.clear();
  CHECK_THROWS_AS(p.validate(), InvalidArgument);
  // From the job's network: section.
  const NetworkLayout layout(8, {{0, 1, 2, 3}, {4, 5, 6, 7}}, 10, 0.1, 0.02);
  const auto q = simgrid::Platform::fromNetwork(layout, 20e-6);
  CHECK(q.hosts == 8);
  CHECK(q.islands == layout.islands());
  CHECK(q.insideBytesPerSecond == Approx(1.25e9));
  CHECK(q.betweenBytesPerSecond == Approx(12.5e6));
  CHECK(q.betweenLatencySeconds == Approx(0.02));
  CHECK(q.insideLatencySeconds == Approx(20e-6));
}

TEST_CASE("simgrid: a platform's infinite rates, latencies, bursts and speed are refused",
          "[simgrid][platform]") {
  // SimGrid aborted the process on an infinite rate; an infinite latency
  // never let a message arrive.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<const char*, double simgrid::Platform::*>> fields{
      {"inside rate", &simgrid::Platform::insideBytesPerSecond},
      {"between rate", &simgrid::Platform::betweenBytesPerSecond},
      {"inside latency", &simgrid::Platform::insideLatencySeconds},
      {"between latency", &simgrid::Platform::betweenLatencySeconds},
      {"burst sizes", &simgrid::Platform::insideBurstBytes},
      {"burst sizes", &simgrid::Platform::betweenBurstBytes},
      {"host speed", &simgrid::Platform::flopsPerSecond}};
  for (const auto& [name, field] : fields) {
    simgrid::Platform p;
    p.hosts = 2;
    p.*field = inf;
    INFO(name);
    CHECK_THROWS_WITH(p.validate(), Catch::Contains(name) && Catch::Contains("inf"));
  }
}

TEST_CASE("simgrid: a platform library that cannot be loaded is refused, not an abort",
          "[simgrid][platform]") {
  // SimGrid loads a platform file named *.so as a library, and aborts the
  // process when it cannot.
  gossamer::testing::TempDir dir;
  const std::string file = dir / "platform.so";
  gossamer::testing::writeFile(file, "<platform version=\"4.1\"/>\n");
  const std::string failed = inChild([&] {
    simgrid::Platform p;
    p.hosts = 2;
    p.file = file;
    try {
      simgrid::simulate(p, [](int) {});
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      return what.find("simgrid platform file " + file + ": cannot load it as a library") != std::string::npos
                 ? std::string()
                 : what;
    }
    return std::string("a platform.so that is not a library was taken");
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE(
    "simgrid: a malformed platform file is an error naming its file and line, and the process simulates on",
    "[simgrid][platform]") {
  // SimGrid's parser throws for XML it cannot read, but aborts the process
  // on much that it reads (an unknown routing, a removed tag, an actor whose
  // function is unknown, a trace file that is missing): simulate() loads
  // the file in a child process first. Either way the error names the file
  // and the line, and the process has not made its engine yet, so a
  // simulate() over a good file follows in the same process.
  gossamer::testing::TempDir dir;
  const std::string head =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n";                                 // lines 1-3
  const std::string zone = "  <zone id=\"two\" routing=\"Full\">\n";  // line 4
  const std::string hosts =
      "    <host id=\"rank-0\" speed=\"1Gf\"/>\n"   // line 5
      "    <host id=\"rank-1\" speed=\"1Gf\"/>\n";  // line 6
  const std::string link = "    <link id=\"wire\" bandwidth=\"10MBps\" latency=\"1ms\"/>\n";
  const std::string route = "    <route src=\"rank-0\" dst=\"rank-1\"><link_ctn id=\"wire\"/></route>\n";
  const std::string tail = "  </zone>\n</platform>\n";
  struct Bad {
    const char* name;
    std::string text;
    int line;           // where the error is
    const char* about;  // in SimGrid's message
  };
  const std::vector<Bad> bad{
      {"truncated.xml", head + zone + "    <host id=\"rank-0\" spe", 5, "Invalid XML"},
      {"unclosed.xml", head + zone + hosts + link + route + "</platform>\n", 9, "</zone>' expected"},
      {"unknown-element.xml", head + zone + hosts + "    <wire id=\"w\"/>\n" + link + route + tail, 7,
       "Invalid XML"},
      {"wrong-attribute.xml", head + zone + "    <host id=\"rank-0\" speed=\"1Gf\" colour=\"red\"/>\n" + tail,
       5, "Bad attribute `colour'"},
      {"bad-value.xml", head + zone + "    <host id=\"rank-0\" speed=\"fast\"/>\n" + tail, 5, "fast"},
      // Those SimGrid aborts on:
      {"unknown-routing.xml", head + "  <zone id=\"two\" routing=\"Bogus\">\n" + hosts + tail, 4,
       "Not a valid model"},
      {"include.xml", head + "  <include file=\"other.xml\"/>\n" + zone + hosts + tail, 4,
       "<include> tag was removed"},
      {"actor.xml",
       head + zone + hosts + link + route +
           "  </zone>\n  <actor host=\"rank-0\" function=\"f\"/>\n</platform>\n",
       10, "Function 'f' not registered"},
      {"trace-file.xml",
       head + zone + "    <host id=\"rank-0\" speed=\"1Gf\" state_file=\"/nonexistent/state\"/>\n" + tail, 5,
       "/nonexistent/state"},
  };
  const std::string good = dir / "good.xml";
  gossamer::testing::writeFile(good, head + zone + hosts + link + route + tail);
  const std::string failed = inChild([&] {
    std::string s;
    simgrid::Platform p;
    p.hosts = 2;
    for (const auto& b : bad) {
      p.file = dir / b.name;
      gossamer::testing::writeFile(p.file, b.text);
      const std::string where = "simgrid platform file " + p.file + ":" + std::to_string(b.line) + ": ";
      try {
        simgrid::simulate(p, [](int) {});
        s += std::string(b.name) + " was taken\n";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        if (what.rfind(where, 0) != 0 || what.find(b.about) == std::string::npos)
          s += std::string(b.name) + ": expected '" + where + "...' about '" + b.about + "', got: " + what +
               "\n";
      }
    }
    // The process is whole, and has not made SimGrid's engine yet.
    p.file = good;
    const auto out = simgrid::simulate(p, [](int r) {
      auto t = transportOf(r, 2);
      std::int32_t v = 7;
      const Tag tag = Tag::make(Op::kUser, 1, 0);
      if (r == 0)
        t->isendOf<std::int32_t>(1, tag, std::span<const std::int32_t>(&v, 1)).wait(t->timeoutSeconds());
      if (r == 1) {
        v = 0;
        t->irecvOf<std::int32_t>(0, tag, std::span<std::int32_t>(&v, 1)).wait(t->timeoutSeconds());
        if (v != 7) throw Error("got " + std::to_string(v));
      }
    });
    s += errorsOf(out);
    if (!(out.simulatedSeconds > 1e-3)) s += "the good file's link took no time\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a deadlock of a rank's tasks is reported task by task with what each waited for",
          "[simgrid]") {
  // Tasks (kit/executor.hpp) are actors: rank 0 joins a task that waits
  // forever on rank 1, which waits forever on rank 0; rank 2's task throws
  // (it used to end the process); rank 3's task outlives its rank and waits
  // forever (it used to end the simulation without a word).
  const std::string failed = inChild([] {
    const auto forever = std::numeric_limits<double>::infinity();
    // Never joined: the child process ends with _exit.
    static std::optional<Task> outlives;
    const auto out = simgrid::simulate(
        [] {
          simgrid::Platform p;
          p.hosts = 4;
          return p;
        }(),
        [&](int r) {
          std::shared_ptr<Transport> t = transportOf(r, 4);
          const auto wait = [t, forever](int from, std::uint64_t step) {
            std::int32_t v = 0;
            t->irecvOf<std::int32_t>(from, Tag::make(Op::kUser, step, 0), std::span<std::int32_t>(&v, 1))
                .wait(forever);
          };
          if (r == 0) startTask([&] { wait(1, 1); }).join();
          if (r == 1) {
            simgrid::sleepFor(3);
            wait(0, 2);
          }
          if (r == 2) startTask([] { throw Error("the task failed on purpose"); }).join();
          if (r == 3)
            outlives.emplace(startTask([wait] {
              simgrid::sleepFor(1);
              wait(3, 3);
            }));
        });
    const std::string at = "deadlock at 3.000000 s simulated: ";
    const std::vector<std::pair<std::string, std::string>> expected{
        {"rank 0: " + at + "the rank never returned, waiting for the end of its task rank-0-task-1", ""},
        {"rank 0 task 1: " + at + "the task never returned, waiting for a receive from rank(s) {1}",
         "step=1"},
        {"rank 1: " + at + "the rank never returned, waiting for a receive from rank(s) {0}", "step=2"},
        {"rank 2 task 1: the task failed on purpose", ""},
        {"rank 3 task 1: " + at + "the task never returned, waiting for a receive from rank(s) {3}",
         "step=3"}};
    if (out.errors.size() != expected.size()) return "errors:\n" + errorsOf(out);
    std::string s;
    for (std::size_t k = 0; k < expected.size(); ++k)
      if (out.errors[k].rfind(expected[k].first, 0) != 0 ||
          out.errors[k].find(expected[k].second) == std::string::npos)
        s += "expected '" + expected[k].first + "' (" + expected[k].second + "), got " + out.errors[k] + "\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a task that ends in its first turn leaves its rank's message in flight to arrive",
          "[simgrid]") {
  // SimGrid runs an actor started from an actor before its starter resumes.
  // Rank 1 sends and returns; rank 0 starts and joins an empty task, which
  // ended before the task was counted among the live actors: its end was
  // taken for the simulation's, and rank 1's message in flight was dropped.
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 2;
    const auto out = simgrid::simulate(p, [](int r) {
      auto t = transportOf(r, 2, 10);
      std::int32_t v = 7;
      const Tag tag = Tag::make(Op::kUser, 1, 0);
      if (r == 1) {
        t->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1));
        return;
      }
      simgrid::sleepFor(1e-9);
      startTask([] {}).join();
      v = 0;
      t->irecvOf<std::int32_t>(1, tag, std::span<std::int32_t>(&v, 1)).wait(t->timeoutSeconds());
      if (v != 7) throw Error("got " + std::to_string(v));
    });
    std::string s = errorsOf(out);
    if (out.simulatedSeconds > 1) s += "took " + std::to_string(out.simulatedSeconds) + " s simulated\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a task starts a task of its own before its first wait", "[simgrid]") {
  // The task runs its first turn before its starter resumes: it used to find
  // no rank of its own and refuse to start one.
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 1;
    int ran = 0;
    const auto out = simgrid::simulate(p, [&ran](int) {
      startTask([&ran] {
        startTask([&ran] { ++ran; }).join();
        ++ran;
      }).join();
    });
    std::string s = errorsOf(out);
    if (ran != 2) s += "the tasks ran " + std::to_string(ran) + " times\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE(
    "simgrid: a platform file whose hosts' names spell a check's record is refused and a good file follows",
    "[simgrid][platform]") {
  // SimGrid's message quotes the duplicate host's name. The check's record
  // used to follow a marker in the stream of SimGrid's log, and a name of
  // that marker and "ok" passed the file (the engine was made from it, and
  // no simulate() could follow).
  gossamer::testing::TempDir dir;
  const std::string head =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"z\" routing=\"Full\">\n"
      "    <host id=\"rank-0\" speed=\"1Gf\"/>\n    <host id=\"rank-1\" speed=\"1Gf\"/>\n";
  const std::string tail = "  </zone>\n</platform>\n";
  const std::string spoof = "    <host id=\"&#30;gossamer-platform-check ok&#10;\" speed=\"1Gf\"/>\n";
  const std::string bad = dir / "spoof.xml", good = dir / "good.xml";
  gossamer::testing::writeFile(bad, head + spoof + spoof + tail);
  gossamer::testing::writeFile(good, head + tail);
  const std::string failed = inChild([&] {
    std::string s;
    simgrid::Platform p;
    p.hosts = 2;
    p.file = bad;
    try {
      simgrid::simulate(p, [](int) {});
      s += "the file was taken\n";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (what.rfind("simgrid platform file " + bad + ":8: ", 0) != 0 ||
          what.find("second host") == std::string::npos)
        s += "got: " + what + "\n";
    }
    p.file = good;
    return s + errorsOf(simgrid::simulate(p, [](int) {}));
  });
  INFO(failed);
  CHECK(failed.empty());
}

namespace {

int gAtExitFd = -1;  // written by the test's atexit handler

}  // namespace

TEST_CASE(
    "simgrid: an exit inside SimGrid while it checks a platform file is an error and runs no atexit handler",
    "[simgrid][platform]") {
  // A configuration value "help" makes SimGrid print a list and exit(): in
  // the check's child that used to run the handlers the process had
  // registered (here: one writing to a pipe), and pass for a crash.
  gossamer::testing::TempDir dir;
  const std::string good = dir / "good.xml";
  gossamer::testing::writeFile(good,
                               "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
                               "\"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n"
                               "  <zone id=\"z\" routing=\"Full\">\n    <host id=\"rank-0\" speed=\"1Gf\"/>\n"
                               "    <host id=\"rank-1\" speed=\"1Gf\"/>\n  </zone>\n</platform>\n");
  const std::string failed = inChild([&] {
    int ran[2];
    if (::pipe2(ran, O_NONBLOCK) != 0) return std::string("pipe failed");
    gAtExitFd = ran[1];
    std::atexit([] { (void)!::write(gAtExitFd, "x", 1); });
    std::string s;
    simgrid::Platform p;
    p.hosts = 2;
    p.file = good;
    try {
      simgrid::simulate(p, [](int) {}, {"network/model:help"});
      s += "the configuration was taken\n";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (what.rfind("SimGrid refused its configuration item 'network/model:help' (it would have ended, by "
                     "exit(), the process): ",
                     0) != 0 ||
          what.find("LV08") == std::string::npos)
        s += "got: " + what + "\n";
    }
    char c = 0;
    if (::read(ran[0], &c, 1) > 0) s += "the process's atexit handler ran in the check's child\n";
    return s + errorsOf(simgrid::simulate(p, [](int) {}));
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE(
    "simgrid: a host that cannot reach another in a Dijkstra or Floyd zone is refused before the engine",
    "[simgrid][platform]") {
  // SimGrid computes such a zone's routes when first used: over a host
  // without routes Dijkstra crashed the process (SIGSEGV), from a host that
  // cannot reach every host of its zone it looped without end, and Floyd
  // threw in the rank that sent. The platform check asks for every pair's
  // route first, and names the pair.
  gossamer::testing::TempDir dir;
  const auto platform = [&](const std::string& name, const std::string& routing, const std::string& extra) {
    const std::string file = dir / name;
    gossamer::testing::writeFile(
        file,
        "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
        "<platform version=\"4.1\">\n  <zone id=\"z\" routing=\"" +
            routing +
            "\">\n    <host id=\"rank-0\" speed=\"1Gf\"/>\n    <host id=\"rank-1\" speed=\"1Gf\"/>\n"
            "    <host id=\"rank-2\" speed=\"1Gf\"/>\n    <link id=\"w\" bandwidth=\"10MBps\" "
            "latency=\"1ms\"/>\n"
            "    <route src=\"rank-0\" dst=\"rank-1\"><link_ctn id=\"w\"/></route>\n" +
            extra + "  </zone>\n</platform>\n");
    return file;
  };
  const std::string oneWay =
      "    <route src=\"rank-2\" dst=\"rank-1\" symmetrical=\"NO\"><link_ctn id=\"w\"/></route>\n";
  struct Bad {
    std::string file;
    const char* pair;   // in the error
    const char* about;  // in the error
  };
  const std::vector<Bad> bad{
      {platform("dijkstra.xml", "Dijkstra", ""), "rank-0 to rank-2", "crashed the process"},
      {platform("dijkstra-cache.xml", "DijkstraCache", ""), "rank-0 to rank-2", "crashed the process"},
      {platform("one-way.xml", "Dijkstra", oneWay), "rank-0 to rank-1", "without end"},
      {platform("floyd.xml", "Floyd", ""), "rank-0 to rank-2", "No route from"},
  };
  const std::string good = platform(
      "good.xml", "Dijkstra", "    <route src=\"rank-1\" dst=\"rank-2\"><link_ctn id=\"w\"/></route>\n");
  const std::string failed = inChild([&] {
    std::string s;
    simgrid::Platform p;
    p.hosts = 3;
    for (const auto& b : bad) {
      p.file = b.file;
      try {
        simgrid::simulate(p, [](int) {});
        s += b.file + " was taken\n";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        if (what.rfind("simgrid platform file " + b.file + ": ", 0) != 0 ||
            what.find(b.pair) == std::string::npos || what.find(b.about) == std::string::npos)
          s += b.file + ": expected the pair " + b.pair + " and '" + b.about + "', got: " + what + "\n";
      }
    }
    // The process is whole, and simulates over a zone whose hosts reach each other.
    p.file = good;
    return s + errorsOf(simgrid::simulate(p, [](int r) {
             auto t = transportOf(r, 3);
             std::vector<std::byte> b(1000);
             const Tag tag = Tag::make(Op::kUser, 1, 0);
             if (r == 0) t->isend(2, tag, b).wait(t->timeoutSeconds());
             if (r == 2) t->irecv(0, tag, b).wait(t->timeoutSeconds());
           }));
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: a configuration item SimGrid would abort on is refused by name without a platform file",
          "[simgrid][config]") {
  // Without a platform file nothing checked the items before the engine was
  // made: a model SimGrid does not know aborted the process, and an unknown
  // key threw from the engine's making, after which no simulate() could run.
  struct Bad {
    std::vector<std::string> items;
    std::string error;  // what the error starts with
    const char* about;  // in SimGrid's message
  };
  const std::vector<Bad> bad{
      {{"network/model:Bogus"},
       "SimGrid refused its configuration item 'network/model:Bogus' (it would have aborted the process): ",
       "Model 'Bogus' is invalid"},
      {{"network/latency-factor:1", "cpu/optim:Bogus"},
       "SimGrid refused its configuration item 'cpu/optim:Bogus' (it would have aborted the process): ",
       "Invalid value 'Bogus' for option cpu/optim"},
      {{"network/bogus-key:1"},
       "SimGrid refused its configuration item 'network/bogus-key:1': ",
       "Bad config key: network/bogus-key"},
      {{"network/latency-factor:abc"},
       "SimGrid refused its configuration item 'network/latency-factor:abc': ",
       "invalid double"},
  };
  const std::string failed = inChild([&] {
    std::string s;
    simgrid::Platform p;
    p.hosts = 2;
    for (const auto& b : bad) {
      try {
        simgrid::simulate(
            p, [](int) {}, b.items);
        s += b.items.back() + " was taken\n";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        if (what.rfind(b.error, 0) != 0 || what.find(b.about) == std::string::npos ||
            what.find("Existing config keys") != std::string::npos)
          s += "expected '" + b.error + "...' about '" + b.about + "', got: " + what + "\n";
      }
    }
    // The process is whole, and has not made SimGrid's engine yet.
    return s + errorsOf(simgrid::simulate(
                   p, [](int) {}, kExactLinks));
  });
  INFO(failed);
  CHECK(failed.empty());
}

namespace {

// The pipe that a process forked in a platform check's child waits on: it
// ends when the test closes the write end.
int gHoldRead = -1, gHoldWrite = -1;

}  // namespace

TEST_CASE("simgrid: a platform check ends with its child while a process forked meanwhile holds its pipes",
          "[simgrid][platform]") {
  // A fork of another thread while the check's pipes are open keeps their
  // write ends: the check used to read until their end of file, so until
  // that process ended (its bound: 300 s). Here the check's child forks such
  // a process as it starts (an atfork handler), which holds them to the end.
  gossamer::testing::TempDir dir;
  const std::string head =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n";
  const std::string bad = dir / "routing.xml", good = dir / "good.xml";
  gossamer::testing::writeFile(bad, head + "  <zone id=\"z\" routing=\"Bogus\">\n  </zone>\n</platform>\n");
  gossamer::testing::writeFile(good,
                               head +
                                   "  <zone id=\"z\" routing=\"Full\">\n    <host id=\"rank-0\" "
                                   "speed=\"1Gf\"/>\n    <host id=\"rank-1\" speed=\"1Gf\"/>\n  </zone>\n"
                                   "</platform>\n");
  const std::string failed = inChild([&] {
    int hold[2];
    if (::pipe(hold) != 0) return std::string("pipe failed");
    gHoldRead = hold[0];
    gHoldWrite = hold[1];
    struct Release {  // the forked processes end, however this ends
      ~Release() { ::close(gHoldWrite); }
    } release;
    ::pthread_atfork(nullptr, nullptr, [] {
      // _Fork: no atfork handlers (fork() here would wait on their lock).
      if (::_Fork() != 0) return;
      ::close(gHoldWrite);
      pollfd end{gHoldRead, POLLIN, 0};
      (void)::poll(&end, 1, 150000);
      ::_exit(0);
    });
    const auto start = std::chrono::steady_clock::now();
    std::string s;
    simgrid::Platform p;
    p.hosts = 2;
    p.file = bad;
    try {
      simgrid::simulate(p, [](int) {});
      s += "the file was taken\n";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (what.rfind("simgrid platform file " + bad + ":4: SimGrid cannot load it", 0) != 0 ||
          what.find("Not a valid model") == std::string::npos)
        s += "got: " + what + "\n";
    }
    p.file = good;
    s += errorsOf(simgrid::simulate(p, [](int) {}));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 30) s += "the checks took " + std::to_string(seconds) + " s\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

#ifdef GOSSAMER_TEST_PLATFORM_LIBRARY
TEST_CASE("simgrid: a platform library's error names its file and no line", "[simgrid][platform]") {
  // The library's load_platform throws. A library is not scanned: the line
  // of SimGrid's scanner it used to name (1) was nothing of the library's.
  const std::string file = GOSSAMER_TEST_PLATFORM_LIBRARY;
  const std::string failed = inChild([&] {
    simgrid::Platform p;
    p.hosts = 2;
    p.file = file;
    try {
      simgrid::simulate(p, [](int) {});
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      return what == "simgrid platform file " + file + ": the platform library failed on purpose"
                 ? std::string()
                 : "got: " + what;
    }
    return std::string("the library was taken");
  });
  INFO(failed);
  CHECK(failed.empty());
}
#endif

namespace {

// Trains `steps` steps of `algorithm` on 4 ranks through an Agent made from a
// config with transport.kind: simgrid: the shipped optimizer, unchanged, in
// simulated time. Each rank's parameters start at `start(r, i)` and every
// step's gradient is `grad(r, i)`; returns each rank's final parameters, or
// the errors in `errors`.
std::vector<std::vector<float>> trainSimulated(const std::string& algorithm, int steps,
                                               float (*start)(int, std::size_t),
                                               float (*grad)(int, std::size_t), std::string& errors,
                                               double& secondsPerStep, const std::string& extra = "") {
  constexpr int kRanks = 4;
  constexpr std::size_t kParams = 25000;  // 100 KB of float32
  Registry registry;
  simgrid::registerWith(registry);
  topologies::registerBuiltins(registry);
  optimizers::registerBuiltins(registry);
  const Config c = registry.parse(
      "world_size: 4\ntransport:\n  kind: simgrid\n  timeout_seconds: 60\n"
      "topology:\n  kind: ring\nalgorithm:\n  name: " +
          algorithm + "\n" + extra + "training:\n  learning_rate: 0.1\n  momentum: 0\n",
      "simgrid-train.yaml");
  MemoryStore store;
  std::vector<std::vector<float>> params(kRanks, std::vector<float>(kParams));
  simgrid::Platform p;
  p.hosts = kRanks;
  double first = 0, last = 0;
  const auto out = simgrid::simulate(p, [&](int r) {
    auto& x = params[static_cast<std::size_t>(r)];
    std::vector<float> g(kParams);
    for (std::size_t i = 0; i < kParams; ++i) {
      x[i] = start(r, i);
      g[i] = grad(r, i);
    }
    Agent agent(c, r, store, registry);
    auto& opt = agent.makeOptimizer({kParams});
    if (r == 0) first = simgrid::now();
    for (int s = 0; s < steps; ++s) opt.step(x, g);
    opt.flush(x);
    if (r == 0) last = simgrid::now();
    agent.close();
  });
  errors = errorsOf(out);
  secondsPerStep = (last - first) / steps;
  return params;
}

float same(int /*r*/, std::size_t /*i*/) { return 0.5f; }
float byRank(int r, std::size_t i) { return static_cast<float>(r) + 0.001f * static_cast<float>(i % 10); }
float rankGradient(int r, std::size_t i) {
  return 0.01f * static_cast<float>((r + 1) * (static_cast<int>(i % 5) + 1));
}
float noGradient(int /*r*/, std::size_t /*i*/) { return 0.0f; }
float sharedGradient(int /*r*/, std::size_t i) {
  return 0.01f * static_cast<float>(static_cast<int>(i % 5) + 1);
}

// Largest |x_r[i] - mean_i| over ranks and elements, and the largest
// |mean_i - target(i)|.
std::pair<double, double> spread(const std::vector<std::vector<float>>& x,
                                 const std::function<double(std::size_t)>& target) {
  double dev = 0, drift = 0;
  for (std::size_t i = 0; i < x[0].size(); ++i) {
    double m = 0;
    for (const auto& v : x) m += v[i];
    m /= static_cast<double>(x.size());
    for (const auto& v : x) dev = std::max(dev, std::abs(v[i] - m));
    drift = std::max(drift, std::abs(m - target(i)));
  }
  return {dev, drift};
}

}  // namespace

TEST_CASE("simgrid: AllReduce-SGD trains through an Agent and keeps every rank's model equal to central SGD",
          "[simgrid][train]") {
  const std::string failed = inChild([] {
    std::string errors;
    double perStep = 0;
    constexpr int kSteps = 10;
    const auto x = trainSimulated("allreduce_sgd", kSteps, same, rankGradient, errors, perStep);
    if (!errors.empty()) return errors;
    for (std::size_t r = 1; r < x.size(); ++r)
      if (x[r] != x[0]) return "rank " + std::to_string(r) + "'s model differs from rank 0's";
    // Central SGD with the mean gradient: 0.5 - lr * steps * mean_r g_r(i).
    for (std::size_t i = 0; i < x[0].size(); ++i) {
      double g = 0;
      for (int r = 0; r < 4; ++r) g += rankGradient(r, i) / 4.0;
      const double expected = 0.5 - 0.1 * kSteps * g;
      if (std::abs(x[0][i] - expected) > 1e-5)
        return "element " + std::to_string(i) + " is " + std::to_string(x[0][i]) + ", central SGD gives " +
               std::to_string(expected);
    }
    if (!(perStep > 0)) return "a step took " + std::to_string(perStep) + " simulated seconds";
    return std::string();
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: Crossover-SGD and SGP gossip through an Agent towards the mean and keep it in every mode",
          "[simgrid][train]") {
  for (const std::string algorithm : {"crossover_sgd", "sgp"}) {
    for (const std::string mode : {"sync", "overlap", "async"}) {
      DYNAMIC_SECTION(algorithm << " " << mode) {
        const std::string failed = inChild([&] {
          std::string errors;
          double perStep = 0;
          // async: a rank waits up to 1 ms (simulated) for its partners' segments.
          const auto x = trainSimulated(algorithm, 30, byRank, noGradient, errors, perStep,
                                        "  mode: " + mode + "\n  async_wait_seconds: 0.001\n");
          if (!errors.empty()) return errors;
          // Ranks start 1 apart (0..3): consensus distance 1.5; the mean is kept.
          const auto [dev, drift] =
              spread(x, [](std::size_t i) { return 1.5 + 0.001 * static_cast<double>(i % 10); });
          std::string s;
          if (dev > 0.1) s += "after 30 steps ranks are still " + std::to_string(dev) + " from the mean\n";
          if (drift > 1e-3) s += "the mean moved by " + std::to_string(drift) + "\n";
          if (!(perStep > 0)) s += "a step took " + std::to_string(perStep) + " simulated seconds\n";
          return s;
        });
        INFO(failed);
        CHECK(failed.empty());
      }
    }
  }
}

TEST_CASE("simgrid: DiLoCo's outer allreduce overlapped with the inner steps runs as an actor",
          "[simgrid][train]") {
  const std::string failed = inChild([] {
    std::string errors;
    double perStep = 0;
    // Every rank the same gradient: each rank's model follows the same path.
    const auto x = trainSimulated("diloco", 24, same, sharedGradient, errors, perStep,
                                  "  overlap: true\n  inner_steps: 4\n");
    if (!errors.empty()) return errors;
    const auto [dev, drift] = spread(x, [](std::size_t) { return 0.0; });
    (void)drift;
    std::string s;
    if (dev > 1e-6) s += "ranks are " + std::to_string(dev) + " apart after 6 outer rounds\n";
    if (!(perStep > 0)) s += "a step took " + std::to_string(perStep) + " simulated seconds\n";
    if (x[0][0] == 0.5f) s += "the model did not move\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("simgrid: the SDK's clock pauses and metrics records keep simulated time", "[simgrid][clock]") {
  const std::string failed = inChild([] {
    simgrid::Platform p;
    p.hosts = 2;
    std::string s;
    const double unixStart = unixSeconds();
    const auto wall0 = std::chrono::steady_clock::now();
    const auto out = simgrid::simulate(p, [&](int r) {
      const auto t0 = Clock::now();
      const double u0 = unixSeconds();
      if (r == 1) {
        // An hour of polling pauses, in the SDK's own call, passes in simulated time.
        for (int k = 0; k < 3600; ++k) sleepFor(1.0);
        if (std::abs(secondsSince(t0) - 3600) > 1e-6)
          s += "the SDK clock advanced " + std::to_string(secondsSince(t0)) + " s over 3600 s of pauses\n";
        if (std::abs(simgrid::now() - 3600) > 1e-6)
          s += "the simulation is at " + std::to_string(simgrid::now()) + " s\n";
        if (std::abs(unixSeconds() - u0 - 3600) > 1e-3)
          s += "the records' time advanced " + std::to_string(unixSeconds() - u0) + " s\n";
      }
      if (u0 < unixStart - 1) s += "the records' time starts before the simulation\n";
    });
    s += errorsOf(out);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    if (wall > 30) s += "an hour of simulated pauses took " + std::to_string(wall) + " s of wall time\n";
    // Outside the simulation the machine's clock is back.
    if (std::abs(unixSeconds() - unixStart) > 600) s += "the machine's clock is not restored\n";
    return s;
  });
  INFO(failed);
  CHECK(failed.empty());
}

#endif  // GOSSAMER_HAVE_SIMGRID
