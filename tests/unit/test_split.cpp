// Communicator::split (MPI_Comm_split) over inproc threads: membership and
// order, nested splits, communicators of one tree alive side by side, the
// contexts' reuse and exhaustion, and bad input.
#include <catch2/catch.hpp>

#include "threads.hpp"

#include <atomic>
#include <climits>
#include <memory>
#include <numeric>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/transports/inproc.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

std::vector<std::unique_ptr<Transport>> inprocGroup(int n) {
  auto fabric = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> g;
  for (int r = 0; r < n; ++r) g.push_back(inproc::makeTransport(fabric, r, kTimeout));
  return g;
}

// The parent rank of every member of `comm`, in its rank order (an
// allreduce of one-hot vectors over it).
std::vector<int> parentRanksOf(Communicator& comm, int parentRank) {
  std::vector<double> v(static_cast<std::size_t>(comm.worldSize()), 0.0);
  v[static_cast<std::size_t>(comm.rank())] = parentRank;
  comm.allreduce(std::span<double>(v));
  return std::vector<int>(v.begin(), v.end());
}

}  // namespace

TEST_CASE("split: ranks of a color form a communicator ordered by key", "[collectives][split]") {
  for (int n : {1, 2, 5, 8}) {
    auto g = inprocGroup(n);
    onEveryRank(n, [&](int r) {
      Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
      // Colors r % 3 (rank 1 joins none), keys in reverse rank order.
      const int color = r == 1 ? Communicator::kUndefinedColor : r % 3;
      auto sub = world.split(color, -r);
      if (r == 1) {
        RANK_CHECK(sub == nullptr);
        return;
      }
      RANK_REQUIRE(sub != nullptr);
      std::vector<int> expected;
      for (int j = n - 1; j >= 0; --j)
        if (j != 1 && j % 3 == color) expected.push_back(j);
      RANK_CHECK(sub->worldSize() == static_cast<int>(expected.size()));
      RANK_CHECK(parentRanksOf(*sub, r) == expected);
      RANK_CHECK(expected[static_cast<std::size_t>(sub->rank())] == r);
      sub->barrier();
    });
  }
}

TEST_CASE("split: equal keys keep the parent's order, and the default options carry over",
          "[collectives][split]") {
  const int n = 6;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    CollectiveOptions o;
    o.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
    o.chunkBytes = 4096;
    world.setOptions(o);
    auto sub = world.split(r / 3, 0);
    RANK_REQUIRE(sub != nullptr);
    RANK_CHECK(parentRanksOf(*sub, r) == (r < 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5}));
    RANK_CHECK(sub->options().algorithm == AllreduceAlgorithm::kRecursiveDoubling);
    RANK_CHECK(sub->options().chunkBytes == 4096);
    RANK_CHECK(sub->timeoutSeconds() == kTimeout);
  });
}

TEST_CASE("split: nested splits and their parents run collectives side by side", "[collectives][split]") {
  const int n = 8;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    auto half = world.split(r % 2, r);                // {0,2,4,6}, {1,3,5,7}
    auto quarter = half->split(half->rank() / 2, 0);  // {0,2}, {4,6}, {1,3}, {5,7}
    RANK_REQUIRE(quarter != nullptr);
    // A split of a split is a view on the top-level transport.
    auto* view = dynamic_cast<SubTransport*>(&quarter->transport());
    RANK_REQUIRE(view != nullptr);
    RANK_CHECK(&view->parent() == g[static_cast<std::size_t>(r)].get());
    const std::vector<int> pair = {r - (r % 4 >= 2 ? 2 : 0), r - (r % 4 >= 2 ? 2 : 0) + 2};
    RANK_CHECK(parentRanksOf(*quarter, r) == pair);
    // The three communicators in turn, many times: every sum is its own.
    for (int round = 0; round < 50; ++round) {
      std::vector<double> a(1000, r + round), b(7, r), c(3, 1.0);
      world.allreduce(std::span<double>(a));
      half->allreduce(std::span<double>(b));
      quarter->allreduce(std::span<double>(c));
      RANK_REQUIRE(a[999] == 28.0 + 8.0 * round);
      RANK_REQUIRE(b[6] == (r % 2 ? 16.0 : 12.0));
      RANK_REQUIRE(c[2] == 2.0);
    }
  });
}

TEST_CASE("split: contexts are freed with their communicators and run out while held",
          "[collectives][split]") {
  const int n = 3;
  auto g = inprocGroup(n);
  std::atomic<int> exhausted{0};
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    // Far more splits than contexts, each destroyed before the next.
    for (int i = 0; i < 3 * Communicator::kSplitContexts; ++i) {
      auto sub = world.split(0, r);
      std::vector<double> v(1, 1.0);
      sub->allreduce(std::span<double>(v));
      RANK_REQUIRE(v[0] == 3.0);
    }
    // All held: the next split fails on every member, and a freed context
    // makes room again.
    std::vector<std::unique_ptr<Communicator>> held;
    for (int i = 0; i < Communicator::kSplitContexts; ++i) held.push_back(world.split(0, r));
    try {
      world.split(0, r);
    } catch (const InvalidArgument&) {
      ++exhausted;
    }
    held.erase(held.begin() + 5);
    auto again = world.split(0, r);
    std::vector<double> v(2, 2.0);
    again->allreduce(std::span<double>(v));
    RANK_CHECK(v[1] == 6.0);
    held.back()->barrier();  // the oldest and the newest still work
    held.front()->barrier();
  });
  CHECK(exhausted == n);
}

TEST_CASE("split: a context in use on one member is not taken by its group", "[collectives][split]") {
  // Rank 0 holds a communicator with rank 1 only; then all four split into
  // {0, 2} and {1, 3}. Each group must avoid the contexts its members hold.
  const int n = 4;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    auto pair = world.split(r < 2 ? 0 : Communicator::kUndefinedColor, r);
    auto other = world.split(r % 2, r);
    std::vector<std::uint8_t> contexts;
    if (pair) contexts.push_back(dynamic_cast<SubTransport&>(pair->transport()).context());
    const auto mine = dynamic_cast<SubTransport&>(other->transport()).context();
    if (pair) RANK_CHECK(mine != contexts.front());
    for (int round = 0; round < 20; ++round) {
      std::vector<double> v(5, r);
      other->allreduce(std::span<double>(v));
      RANK_REQUIRE(v[4] == (r % 2 ? 4.0 : 2.0));
      if (pair) {
        std::vector<double> w(3, 1.0);
        pair->allreduce(std::span<double>(w));
        RANK_REQUIRE(w[0] == 2.0);
      }
    }
  });
}

TEST_CASE("split: bad colors are refused, and view-building algorithms refuse a split",
          "[collectives][split]") {
  const int n = 4;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    RANK_CHECK_THROWS_AS(world.split(-2, 0), InvalidArgument);
    auto sub = world.split(0, r);
    for (auto a : {AllreduceAlgorithm::kTorus2d, AllreduceAlgorithm::kHierarchical,
                   AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips}) {
      std::vector<float> v(16, 1.0f);
      CollectiveOptions o(1000 + static_cast<std::uint64_t>(a), kTimeout, a);
      RANK_CHECK_THROWS_AS(allreduce<float>(sub->transport(), v, ReduceOp::kSum, o), InvalidArgument);
    }
    // auto falls back to what runs on a view.
    std::vector<float> v(100, 1.0f);
    sub->allreduce(std::span<float>(v));
    RANK_CHECK(v[99] == 4.0f);
  });
}

TEST_CASE("split: ties follow the rank in the parent, also when it is not the global order",
          "[collectives][split]") {
  const int n = 6;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], kTimeout);
    auto reversed = world.split(0, n - r);  // rank 5 first, rank 0 last
    auto sub = reversed->split(r % 2, 0);   // equal keys: the order of `reversed`
    RANK_CHECK(parentRanksOf(*sub, r) == (r % 2 ? std::vector<int>{5, 3, 1} : std::vector<int>{4, 2, 0}));
    // Extreme colors and keys.
    auto extreme = world.split(r < 3 ? INT_MAX : 0, r == 0 ? INT_MIN : INT_MAX - r);
    RANK_CHECK(parentRanksOf(*extreme, r) == (r < 3 ? std::vector<int>{0, 2, 1} : std::vector<int>{5, 4, 3}));
  });
}

TEST_CASE("split: communicators of different trees over one transport never share a context",
          "[collectives][split]") {
  // The main communicator on the transport, another on a view of it (as an
  // optimizer's group communicator), a third on a user view: all split, and
  // all run side by side. A view in split's range is refused.
  const int n = 4;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    Transport& t = *g[static_cast<std::size_t>(r)];
    Communicator world(t, kTimeout);
    SubTransport groupView(t, r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, 1);
    Communicator group(groupView, kTimeout);
    SubTransport reserved(t, {0, 1, 2, 3}, Communicator::kFirstSplitContext + 5);
    RANK_CHECK_THROWS_AS(Communicator(reserved, kTimeout), InvalidArgument);
    SubTransport userView(t, {0, 1, 2, 3}, 0x0F);
    Communicator user(userView, kTimeout);
    auto a = world.split(0, r);
    auto b = group.split(0, r);
    auto c = user.split(0, r);
    auto contextOf = [](Communicator& comm) {
      return dynamic_cast<SubTransport&>(comm.transport()).context();
    };
    RANK_CHECK(contextOf(*a) != contextOf(*b));
    RANK_CHECK(contextOf(*a) != contextOf(*c));
    RANK_CHECK(contextOf(*b) != contextOf(*c));
    for (int round = 0; round < 20; ++round) {
      std::vector<double> x(3, 1.0), y(3, r), z(3, 2.0), w(3, 1.0);
      a->allreduce(std::span<double>(x));
      b->allreduce(std::span<double>(y));
      c->allreduce(std::span<double>(z));
      user.allreduce(std::span<double>(w));
      RANK_REQUIRE(x[0] == 4.0);
      RANK_REQUIRE(y[0] == (r < 2 ? 1.0 : 5.0));
      RANK_REQUIRE(z[0] == 8.0);
      RANK_REQUIRE(w[0] == 4.0);
    }
  });
}

TEST_CASE("split: a child outlives the communicator it was split from", "[collectives][split]") {
  const int n = 4;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    std::unique_ptr<Communicator> child;
    {
      auto world = std::make_unique<Communicator>(*g[static_cast<std::size_t>(r)], kTimeout);
      auto half = world->split(r / 2, r);
      child = half->split(0, -r);
    }
    std::vector<double> v(10, r);
    child->allreduce(std::span<double>(v));
    RANK_CHECK(v[9] == (r < 2 ? 1.0 : 5.0));
    Communicator again(*g[static_cast<std::size_t>(r)], kTimeout);
    auto other = again.split(0, r);  // must avoid the child's context
    RANK_CHECK(dynamic_cast<SubTransport&>(other->transport()).context() !=
               dynamic_cast<SubTransport&>(child->transport()).context());
  });
}

TEST_CASE("split: a collective on a split names a peer that sent the wrong length by its rank in the job",
          "[collectives][split]") {
  // Ranks 1 and 3 (color 1) allreduce over their split, rank 3 with a longer
  // vector. Rank 3's left neighbour in the split's ring is its rank 0: job
  // rank 1, which the error names (the split's own numbering would say 0).
  const int n = 4;
  auto g = inprocGroup(n);
  std::vector<int> named(n, -2);
  onEveryRank(n, [&](int r) {
    Communicator world(*g[static_cast<std::size_t>(r)], 2.0);
    auto sub = world.split(r % 2, r);
    std::vector<float> v(r == 3 ? 12 : 8, 1.0f);
    try {
      ringAllreduce<float>(sub->transport(), std::span<float>(v), ReduceOp::kSum, {1, 2.0});
    } catch (const ProtocolError& e) {
      named[static_cast<std::size_t>(r)] = e.peer();
    } catch (const Error&) {
      named[static_cast<std::size_t>(r)] = -1;
    }
  });
  CHECK(named[3] == 1);
  CHECK(named[0] == -2);  // color 0 agreed
  CHECK(named[2] == -2);
}
