// The simgrid transport (see simgrid.hpp): ranks as S4U actors, messages as
// detached S4U communications of their real bytes, matched by the kit's
// Mailbox, waits in simulated time.
//
// Per message: isend copies the payload (one allocation) and queues it on the
// pair's stream, one message in flight per stream. A stream's head goes once
// its route's latency has passed since it was sent (the links carry no
// latency of their own, platform.cpp): a SimGrid kernel timer set for that
// moment starts a host-to-host S4U communication of payload + 48 bytes (the
// frame header the real transports send) from the source's host to the
// destination's, detached. When its flow ends (SimGrid's signal of a
// network action's new state), the message is delivered to the
// destination's kit Mailbox, the rank's waiting actors are resumed, and the
// stream's next message gets its timer. So the messages of a pair go one
// after another, back to back, as on a TCP stream (not sharing the pair's
// bandwidth among themselves, which lets later ones delay earlier ones),
// while each still arrives latency + bytes / rate after it was sent on an
// idle path; flows of different pairs share the links (SimGrid's flow
// model). Timers and the signal run in SimGrid's maestro, between the
// actors' turns: a message costs no actor a wake-up, and each rank is one
// actor (and the tasks it starts). A send to oneself is delivered at once.
//
// Order: what one rank sends another arrives in the order sent (the stream
// goes one message at a time). close() records how
// many messages the rank sent each peer; a peer marks the rank gone once it
// has delivered that many (at once if it has), like a stream's end after its
// last bytes, without a message per pair (that would be N^2 at the end of a
// job of N ranks). Per-pair state is kept only for pairs that exchanged
// messages, so a job's memory grows with its traffic, not with N^2.
//
// Hosted groups (makeHostedGroup): the same World, streams and actors, but
// the ranks are ordinary threads outside the simulation. SimGrid's engine
// runs on a thread of its own (Hub) with a gateway actor that executes, in
// order, what those threads hand it (a send's put, a close, a new or retired
// World), then waits in simulated time until every queued message has
// arrived (World::undelivered), then in real time for more. Receives wait on
// their request's condition variable in real time (no ProgressEngine).
#include <simgrid/Exception.hpp>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/context_local.hpp"
#include "gossamer/kit/executor.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/transports/simgrid.hpp"
#include "platform.hpp"

namespace gossamer::simgrid {

namespace s4u = ::simgrid::s4u;

namespace {

constexpr double kFrameHeaderBytes = 48;  // wire.hpp's header, counted in every simulated message

// One message in flight: who sent it, under which tag, and its bytes.
struct Message {
  int source;
  Tag tag;
  std::shared_ptr<std::vector<std::byte>> bytes;
};

// A message waiting on its pair's stream: its simulated bytes, and when its
// route's latency has passed (simulated seconds).
struct Queued {
  Message message;
  double simulatedBytes;
  double due;
};

// A token bucket (tc tbf) in front of a link: tokens (bytes) come at `rate`
// up to `burst`; a message takes its bytes from it, into debt if needed.
struct Bucket {
  double rate = 0, burst = 0, tokens = 0, at = 0;
  // Tokens at simulated time `now`.
  double available(double now) {
    tokens = std::min(burst, tokens + rate * (now - at));
    at = now;
    return tokens;
  }
};

// A pair's stream: what waits to go, whether a message is in flight, and the
// timer set for its head's latency to pass (null: none).
struct Stream {
  std::deque<Queued> queue;
  bool inFlight = false;
  ::simgrid::kernel::timer::Timer* timer = nullptr;
};

// A rank that closed: how many messages it sent each peer, and why it left.
struct Closed {
  std::unordered_map<int, std::uint64_t> sent;
  bool afterError = false;
};

// What every rank's transport shares: one per simulate(), one per hosted
// group (makeHostedGroup). Touched on the simulation's thread only, but for
// the Mailboxes and the counters, which are thread-safe.
struct World {
  // Ranks 0..ranks-1 of `p` (ranks <= p.hosts).
  World(const Platform& p, RouteLatency routeLatency, int ranks)
      : latency(std::move(routeLatency)),
        wireBytesPerByte(p.wireBytesPerByte),
        island(static_cast<std::size_t>(ranks), 0),
        hosts(static_cast<std::size_t>(ranks)),
        boxes(static_cast<std::size_t>(ranks)),
        waiters(static_cast<std::size_t>(ranks)),
        attached(static_cast<std::size_t>(ranks), false),
        bytesIn(static_cast<std::size_t>(ranks)),
        messagesIn(static_cast<std::size_t>(ranks)),
        delivered(static_cast<std::size_t>(ranks)),
        sentTo(static_cast<std::size_t>(ranks)),
        streams(static_cast<std::size_t>(ranks)),
        closed(static_cast<std::size_t>(ranks)) {
    for (std::size_t k = 0; k < p.islands.size(); ++k)
      for (const int r : p.islands[k])
        if (r < ranks) island[static_cast<std::size_t>(r)] = static_cast<int>(k);
    if (p.insideBurstBytes > 0)
      up.assign(static_cast<std::size_t>(ranks),
                Bucket{p.insideBytesPerSecond, p.insideBurstBytes, p.insideBurstBytes, 0});
    if (p.betweenBurstBytes > 0)
      into.assign(std::max<std::size_t>(1, p.islands.size()),
                  Bucket{p.betweenBytesPerSecond, p.betweenBurstBytes, p.betweenBurstBytes, 0});
    for (int r = 0; r < ranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      hosts[i] = s4u::Host::by_name("rank-" + std::to_string(r));
      boxes[i] = std::make_unique<Mailbox>(ranks);
    }
  }
  int size() const { return static_cast<int>(boxes.size()); }
  // Resumes rank r's waiters (a request of theirs may have settled); each
  // checks its request again. No lock: SimGrid runs one actor at a time, a
  // waiter checks its request, lists itself and suspends in one turn, and
  // the kernel carries out the actors' calls in the order the actors ran,
  // so a waker that ran after it resumes it after it has suspended.
  void wake(int r) {
    auto& list = waiters[static_cast<std::size_t>(r)];
    if (list.empty()) return;
    std::vector<s4u::Actor*> woken;
    woken.swap(list);
    for (auto* actor : woken) actor->resume();
  }

  // Rank `gone` has left `to`: its receives from it fail from now on.
  void markGone(int to, int gone) {
    boxes[static_cast<std::size_t>(to)]->peerGone(
        gone, detail::closedPeerFailure(gone, closed[static_cast<std::size_t>(gone)]->afterError));
    wake(to);
  }

  // Rank r closed: each peer that has delivered all it sent learns it now,
  // the others once they have.
  void close(int r, bool afterError) {
    closed[static_cast<std::size_t>(r)] =
        std::make_unique<Closed>(Closed{sentTo[static_cast<std::size_t>(r)], afterError});
    for (int q = 0; q < size(); ++q)
      if (q != r && allDelivered(q, r)) markGone(q, r);
  }

  // Whether `to` has delivered every message of the closed rank `source`.
  bool allDelivered(int to, int source) const {
    const auto& c = *closed[static_cast<std::size_t>(source)];
    const auto it = c.sent.find(to);
    const std::uint64_t sent = it == c.sent.end() ? 0 : it->second;
    const auto& f = delivered[static_cast<std::size_t>(to)];
    const auto got = f.find(source);
    return (got == f.end() ? 0 : got->second) == sent;
  }

  // The bytes of a `bytes`-byte message from src to dst that go at once
  // (the tokens every bucket on its path holds now); takes `bytes` tokens
  // from each of them.
  double burst(int src, int dst, double bytes) {
    if (up.empty() && into.empty()) return 0;
    const double now = s4u::Engine::get_clock();
    std::array<Bucket*, 2> path{};
    std::size_t k = 0;
    if (!up.empty()) path[k++] = &up[static_cast<std::size_t>(src)];
    const int to = island[static_cast<std::size_t>(dst)];
    if (!into.empty() && island[static_cast<std::size_t>(src)] != to)
      path[k++] = &into[static_cast<std::size_t>(to)];
    double free = bytes;
    for (std::size_t i = 0; i < k; ++i) free = std::min(free, std::max(0.0, path[i]->available(now)));
    for (std::size_t i = 0; i < k; ++i) path[i]->tokens -= bytes;
    return free;
  }

  // A message of src's stream to dst has arrived: the stream's next message
  // may go once its latency has passed.
  void arrived(int src, int dst);

  // Cancels every stream's timer and every flow in flight (the simulation
  // ends, or the world is freed while messages wait): what they carry never
  // arrives. On the simulation's thread.
  void cancelAll();

  RouteLatency latency;           // one-way, by (source, destination)
  double wireBytesPerByte = 1;    // Platform::wireBytesPerByte
  std::vector<Bucket> up;         // by rank: its sending link's bucket (empty: none)
  std::vector<Bucket> into;       // by island: its link's bucket (empty: none)
  std::vector<int> island;        // by rank
  std::vector<s4u::Host*> hosts;  // by rank
  double bytesSent = 0, bytesBetween = 0;
  // Messages queued or in flight; `settled` is notified when it drops to 0.
  std::size_t undelivered = 0;
  s4u::MutexPtr settleMu = s4u::Mutex::create();
  s4u::ConditionVariablePtr settled = s4u::ConditionVariable::create();
  std::vector<std::unique_ptr<Mailbox>> boxes;
  // [rank]: its actors suspended in a wait (SimEngine), until wake(rank).
  std::vector<std::vector<s4u::Actor*>> waiters;
  std::vector<bool> attached;  // guarded by SimGrid running one actor at a time
  std::vector<std::atomic<std::uint64_t>> bytesIn, messagesIn;
  // [destination]: how many messages it has delivered from each source that
  // sent it something.
  std::vector<std::unordered_map<int, std::uint64_t>> delivered;
  // [source]: how many messages it has sent each destination.
  std::vector<std::unordered_map<int, std::uint64_t>> sentTo;
  // [source]: its streams by destination.
  std::vector<std::unordered_map<int, Stream>> streams;
  // [rank]: set once the rank closed its transport.
  std::vector<std::unique_ptr<Closed>> closed;
  // Every actor's ContextLocal (collective scratch, wait time): the actors
  // share one OS thread.
  std::unordered_map<::aid_t, std::unique_ptr<ContextLocal>> locals;

  // Inside simulate(): the actors that have not returned, ranks and tasks
  // (what is in flight is cancelled when none is left).
  int live = 0;
  // A task a rank (or one of its tasks) started (startActorTask): the rank,
  // its number among the rank's tasks (from 1), its actor, whether its body
  // returned (also set for one that failed to start), and what it threw.
  struct TaskRecord {
    int rank = 0;
    int number = 0;
    ::aid_t pid = -1;
    bool ended = false;
    std::string error;
  };
  std::deque<TaskRecord> tasks;  // in the order started
  std::vector<int> tasksOf;      // [rank]: how many it has started
  // [actor]: the rank whose actor or task it is.
  std::unordered_map<::aid_t, int> rankOf;
  // [actor]: what it waits for without end (a receive with an infinite
  // timeout, a task's join). Only a normal return from the wait unlists it:
  // an actor that SimGrid kills in a deadlock stays listed, for the report.
  std::unordered_map<::aid_t, std::string> waitingFor;

  // An actor (rank or task) returned: with the last one the simulation
  // ends, and what waits for its latency or is in flight never arrives.
  void actorEnded() {
    if (--live == 0) cancelAll();
  }
};

World* gWorld = nullptr;             // set while simulate() runs
std::shared_ptr<World> gWorldOwner;  // simulate()'s world, for its transports
std::atomic<bool> gSimulated{false};

// The ContextLocal of the running actor (outside actors: the OS thread's).
ContextLocal* actorLocal() noexcept {
  if (gWorld == nullptr) return nullptr;
  const s4u::Actor* self = s4u::Actor::self();
  if (self == nullptr) return nullptr;
  auto& slot = gWorld->locals[self->get_pid()];
  if (!slot) slot = std::make_unique<ContextLocal>();
  return slot.get();
}

// The SDK's time in a simulation (kit/clock.hpp): SimGrid's simulated
// seconds, counted from the real Unix time at which simulate() began.
double gStartUnix = 0;
const TimeSource kSimulatedTime{
    []() noexcept { return static_cast<std::int64_t>(std::llround(s4u::Engine::get_clock() * 1e9)); },
    []() noexcept { return gStartUnix + s4u::Engine::get_clock(); },
    [](double seconds) noexcept {
      if (gWorld != nullptr && s4u::Actor::self() != nullptr)
        s4u::this_actor::sleep_for(seconds);
      else
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    }};

// A task that a rank starts (kit/executor.hpp: HiPS's streams, DiLoCo's
// outer allreduce): an actor on the rank's host. Outside the simulation's
// actors, an OS thread.
class ActorTask final : public TaskHandle {
 public:
  ActorTask(s4u::ActorPtr actor, std::string name) : actor_(std::move(actor)), name_(std::move(name)) {}
  void join() override {
    const s4u::Actor* self = s4u::Actor::self();
    if (self != nullptr && self->get_pid() == actor_->get_pid())
      throw InvalidArgument("a task cannot join itself (join() from inside its own body)");
    // Listed while it waits: a join without end is part of a deadlock's report.
    World* w = self != nullptr ? gWorld : nullptr;
    if (w != nullptr) w->waitingFor[self->get_pid()] = "the end of its task " + name_;
    actor_->join();
    if (w != nullptr) w->waitingFor.erase(self->get_pid());
  }

 private:
  s4u::ActorPtr actor_;
  std::string name_;
};

// Runs an actor's body (a rank's function or a task's): what it threw, ""
// when it returned. An exception out of an actor would end the process.
// SimGrid's unwinding of a killed actor (a deadlock) goes on: it did not end.
template <typename Body>
std::string errorOf(const Body& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  } catch (const ::simgrid::ForcefulKillException&) {
    throw;
  } catch (...) {
    return "threw something that is not a std::exception";
  }
  return {};
}

std::unique_ptr<TaskHandle> startActorTask(std::function<void()> body) {
  const s4u::Actor* self = gWorld != nullptr ? s4u::Actor::self() : nullptr;
  if (self == nullptr) return startThread(std::move(body));
  World& w = *gWorld;
  const auto owner = w.rankOf.find(self->get_pid());
  GOSSAMER_ENFORCE(
      owner != w.rankOf.end(),
      "a task started from an actor that is neither a rank nor a rank's task (" << self->get_name() << ")");
  const int rank = owner->second;
  // Taken now: init() below is a simcall, during which another actor of the
  // rank may start a task. A task that fails to start leaves its number
  // unused.
  const int number = ++w.tasksOf[static_cast<std::size_t>(rank)];
  const std::string name = "rank-" + std::to_string(rank) + "-task-" + std::to_string(number);
  // Made, not started: from an actor, SimGrid starts an actor in a simcall
  // after which the new one runs before its creator resumes. So everything
  // its first turn relies on is set before start(): its pid in rankOf (a
  // task it starts finds its rank), and the live count (its end must not
  // end the simulation while its creator lives).
  s4u::ActorPtr actor = s4u::Actor::init(name, s4u::this_actor::get_host());
  const ::aid_t pid = actor->get_pid();
  const std::size_t index = w.tasks.size();
  auto& record = w.tasks.emplace_back();
  record.rank = rank;
  record.number = number;
  record.pid = pid;
  w.rankOf[pid] = rank;
  ++w.live;
  // A body that throws (against TaskStarter's contract) is reported as the
  // task's error (errorOf).
  try {
    actor->start([&w, index, body = std::move(body)] {
      auto& task = w.tasks[index];
      task.error = errorOf(body);
      task.ended = true;
      w.actorEnded();
    });
  } catch (const ::simgrid::ForcefulKillException&) {
    throw;  // the creator killed after the start was handled: the task runs, its bookkeeping stands
  } catch (...) {
    // Not started (its host is off): not a task that a report could call
    // deadlocked. Its record stays (other actors' tasks, started during the
    // simcall, may follow it, their bodies holding their index), marked as
    // ended without an error: reported as nothing.
    --w.live;
    w.rankOf.erase(pid);
    w.tasks[index].ended = true;
    throw;
  }
  return std::make_unique<ActorTask>(std::move(actor), name);
}

// What a deadlock's report says of an actor (a "rank" or a "task") that
// never returned, waiting for `waiting` ("" when it is not known).
std::string deadlockOf(const char* who, const std::string& waiting) {
  return "deadlock at " + std::to_string(s4u::Engine::get_clock()) + " s simulated: the " + who +
         " never returned, waiting" + (waiting.empty() ? std::string() : " for " + waiting) +
         " while every other rank and task left waited for what none of them would do (a wait or compute "
         "without end)";
}

World& world() {
  GOSSAMER_ENFORCE(
      gWorld != nullptr && s4u::Actor::self() != nullptr,
      "the simgrid transport is used only inside gossamer::simgrid::simulate(), from a rank's actor");
  return *gWorld;
}

// Waits in simulated time: until the request settles or the simulated
// timeout passes, the actor suspended (in the rank's waiters, and with a
// kernel timer for the timeout). A suspension costs neither a
// synchronisation object nor a sleep action, as an S4U condition variable's
// wait does.
class SimEngine final : public detail::ProgressEngine {
 public:
  SimEngine(World& w, int rank) : w_(w), rank_(rank) {}
  void waitUntil(detail::RequestState& /*state*/,
                 std::chrono::steady_clock::time_point /*deadline*/) override {}
  void poke() override {}
  bool keepsTime() const noexcept override { return true; }
  bool waitFor(detail::RequestState& state, double timeoutSeconds) override {
    detail::RequestState* one = &state;
    return waitForAny(std::span<detail::RequestState* const>(&one, 1), timeoutSeconds);
  }
  // Every message delivered to the rank resumes it (World::wake), and it
  // checks its requests again. A wait without end (an infinite timeout) is
  // listed in World::waitingFor while it lasts, for a deadlock's report.
  bool waitForAny(std::span<detail::RequestState* const> states, double timeoutSeconds) override {
    const double end = s4u::Engine::get_clock() + timeoutSeconds;
    const ::aid_t self = std::isfinite(end) ? -1 : s4u::this_actor::get_pid();
    for (bool first = true;; first = false) {
      for (auto* state : states) {
        std::lock_guard<std::mutex> g(state->mu);
        if (state->status != detail::RequestState::Status::kPending) {
          if (!first && self >= 0) w_.waitingFor.erase(self);
          return true;
        }
      }
      if (end - s4u::Engine::get_clock() <= 0) return false;  // (a finite end: never listed)
      if (first && self >= 0) w_.waitingFor[self] = describe(states);
      Suspension(w_.waiters[static_cast<std::size_t>(rank_)], end).wait();
    }
  }

 private:
  // One suspension of the running actor: listed among `waiters`, resumed by
  // World::wake or by its timer at `end` (none for an infinite timeout: a
  // timer at infinity would move the clock there, and every rank left
  // waiting forever is a deadlock, which SimGrid detects and simulate()
  // reports). Its end (a wake-up, or the actor killed while suspended)
  // cancels the timer and unlists the actor.
  class Suspension {
   public:
    Suspension(std::vector<s4u::Actor*>& waiters, double end) : waiters_(waiters), self_(s4u::Actor::self()) {
      if (std::isfinite(end))
        timer_ = ::simgrid::kernel::timer::Timer::set(end, [this] {
          timer_ = nullptr;
          self_->resume();
        });
      waiters_.push_back(self_);
    }
    ~Suspension() {
      if (timer_ != nullptr) timer_->remove();
      waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), self_), waiters_.end());
    }
    Suspension(const Suspension&) = delete;
    Suspension& operator=(const Suspension&) = delete;
    void wait() { s4u::this_actor::suspend(); }

   private:
    std::vector<s4u::Actor*>& waiters_;
    s4u::Actor* self_;
    ::simgrid::kernel::timer::Timer* timer_ = nullptr;
  };

  // "a receive from rank(s) {1} tag(...)", joined by " or ".
  static std::string describe(std::span<detail::RequestState* const> states) {
    std::string s;
    for (auto* state : states) {
      std::lock_guard<std::mutex> g(state->mu);
      s += (s.empty() ? "" : " or ") + (state->what.empty() ? std::string("a request") : "a " + state->what);
    }
    return s;
  }

  World& w_;
  int rank_;
};

class Hub;
bool submitToHub(Hub& hub, std::function<void()> command) noexcept;

// Queues m (payloadBytes + the header, simulated) on the stream from `src`
// to `dst`, and starts it (or sets its timer) if the stream is idle. On the
// simulation's thread (a rank's actor, or the hosted gateway).
void put(World& w, int src, int dst, Message m, double payloadBytes);

// Simulated seconds of the latest delivery (hostedSeconds()).
std::atomic<double> gLastDelivery{0};

// Delivers m into rank `to`'s Mailbox (an arrival, and a
// self-send's) and wakes the rank's waiters. On the simulation's thread.
void deliver(World& w, int to, Message m) {
  const auto i = static_cast<std::size_t>(to);
  gLastDelivery.store(s4u::Engine::get_clock(), std::memory_order_relaxed);
  w.bytesIn[i] += m.bytes->size();
  ++w.messagesIn[i];
  const std::span<const std::byte> bytes(m.bytes->data(), m.bytes->size());
  w.boxes[i]->deliver(m.source, m.tag, InboundPayload{std::move(m.bytes), bytes});
  w.wake(to);
}

// One rank's transport. Inside simulate() (hub == nullptr) it is called from
// the rank's actors, and acts on the simulation at once; a hosted one
// (makeHostedGroup) is called from ordinary threads, which hand what touches
// the simulation to the hub's gateway actor and wait in real time.
class SimTransport final : public Transport {
 public:
  SimTransport(std::shared_ptr<World> w, const Options& o, Hub* hub)
      : owner_(std::move(w)),
        w_(*owner_),
        rank_(o.rank),
        timeout_(o.timeoutSeconds),
        hub_(hub),
        engine_(hub == nullptr ? std::make_shared<SimEngine>(w_, o.rank) : nullptr) {
    const auto i = static_cast<std::size_t>(rank_);
    GOSSAMER_ENFORCE(!w_.attached[i], "rank " << rank_ << " already has a simgrid transport");
    w_.attached[i] = true;
  }
  ~SimTransport() override { close(); }

  int rank() const override { return rank_; }
  int worldSize() const override { return w_.size(); }
  std::string name() const override { return "simgrid"; }
  double timeoutSeconds() const override { return timeout_; }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    detail::checkSendArguments(dst, worldSize(), data.size(), dtype);
    if (closed_) throw Cancelled("isend on a closed transport (rank " + std::to_string(rank_) + ")");
    onActor("isend");
    if (dst != rank_ && box().isGone(dst)) throw PeerFailure(dst, "cannot send: peer closed its transport");
    auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    bytesSent_ += data.size();
    ++messagesSent_;
    auto send = [w = owner_, src = rank_, dst, m = Message{rank_, tag, std::move(owned)},
                 n = static_cast<double>(data.size())]() mutable {
      if (dst == src)
        deliver(*w, src, std::move(m));
      else
        put(*w, src, dst, std::move(m), n);
    };
    if (hub_ == nullptr)
      send();
    else if (!submitToHub(*hub_, std::move(send)))
      throw Error("simgrid transport, rank " + std::to_string(rank_) + ": the hosted simulation has stopped");
    return Request(sent(dst, data.size()));
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    if (closed_) throw Cancelled("irecv on a closed transport (rank " + std::to_string(rank_) + ")");
    onActor("irecv");
    return box().post(sources, tag, buffer, engine_);
  }

  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return box().discard(stale);
  }

  void close() override { shut(false); }
  void abort() override { shut(true); }

  TransportStats stats() const override {
    const auto i = static_cast<std::size_t>(rank_);
    TransportStats s;
    s.bytesSent = bytesSent_;
    s.messagesSent = messagesSent_;
    s.bytesReceived = w_.bytesIn[i];
    s.messagesReceived = w_.messagesIn[i];
    return s;
  }

 private:
  Mailbox& box() { return *w_.boxes[static_cast<std::size_t>(rank_)]; }

  // The completed state of a send of `bytes` to `dst`. Inside simulate() a
  // rank's sends to one peer of one size share one: it is never written
  // again once completed, and a collective that keeps its sends until the
  // end (a ring allgather: N - 1 of them per rank) would otherwise keep N^2
  // states alive in the one process, some 5 GB at 4,096 ranks. Hosted
  // transports are called from several threads: a state per send.
  std::shared_ptr<detail::RequestState> sent(int dst, std::size_t bytes) {
    if (hub_ != nullptr) return detail::completedRequest(dst, bytes);
    if (!lastSent_ || lastSent_->peer != dst || lastSent_->bytes != bytes)
      lastSent_ = detail::completedRequest(dst, bytes);
    return lastSent_;
  }

  // Inside simulate(), a call from a thread SimGrid does not run (a
  // service's own thread) cannot take part in the simulation.
  void onActor(const char* what) const {
    GOSSAMER_ENFORCE(hub_ != nullptr || s4u::Actor::self() != nullptr,
                     "simgrid transport, rank "
                         << rank_ << ": " << what
                         << " from a thread that is not the rank's actor (a thread of its "
                            "own, such as a service's, cannot run in the simulation)");
  }

  void shut(bool afterError) {
    if (closed_.exchange(true)) return;
    if (hub_ != nullptr)
      submitToHub(*hub_, [w = owner_, r = rank_, afterError] { w->close(r, afterError); });
    else if (gWorld == &w_ && s4u::Actor::self() != nullptr)
      w_.close(rank_, afterError);
    box().close();
  }

  std::shared_ptr<World> owner_;
  World& w_;
  int rank_;
  double timeout_;
  Hub* hub_;
  std::shared_ptr<SimEngine> engine_;               // null when hosted: waits are real
  std::shared_ptr<detail::RequestState> lastSent_;  // sent(): the rank's actors only
  std::atomic<bool> closed_{false};
  std::atomic<std::uint64_t> bytesSent_{0}, messagesSent_{0};
};

// A message whose flow is in flight: its world, pair, and the comm that
// carries its simulated bytes.
struct InFlight {
  World* world;
  int src, dst;
  std::unique_ptr<Message> message;
  s4u::CommPtr comm;
};

// Every flow in flight, by its comm's kernel activity (the key of SimGrid's
// signal of a network action's new state). On the simulation's thread.
std::unordered_map<const void*, InFlight> gInFlight;

// src's message to dst has arrived: the stream's next message may go once
// its latency has passed; the message goes to dst's Mailbox, and dst learns
// that src left if this was src's last. In SimGrid's maestro.
void arrive(World& w, int src, int dst, Message m) {
  w.arrived(src, dst);
  ++w.delivered[static_cast<std::size_t>(dst)][src];
  deliver(w, dst, std::move(m));
  if (w.closed[static_cast<std::size_t>(src)] && w.allDelivered(dst, src)) w.markGone(dst, src);
  if (--w.undelivered == 0) w.settled->notify_all();
}

// SimGrid's signal that a network action changed state: a flow of ours that
// finished delivers its message; one that failed (cancelled: cancelAll) is
// dropped. The signal declares the action's type only; it is an Action
// (NetworkAction derives from it alone).
void onFlowState(::simgrid::kernel::resource::NetworkAction& changed,
                 ::simgrid::kernel::resource::Action::State /*previous*/) {
  using State = ::simgrid::kernel::resource::Action::State;
  const auto& action = reinterpret_cast<const ::simgrid::kernel::resource::Action&>(changed);
  const State state = action.get_state();
  if (state != State::FINISHED && state != State::FAILED) return;
  const auto it = gInFlight.find(action.get_activity());
  if (it == gInFlight.end()) return;
  InFlight f = std::move(it->second);
  gInFlight.erase(it);
  if (state == State::FINISHED) arrive(*f.world, f.src, f.dst, std::move(*f.message));
}

// Connects onFlowState, once per process (SimGrid's engine is made once).
void watchFlows() {
  static std::once_flag once;
  std::call_once(once, [] { s4u::Link::on_communication_state_change_cb(&onFlowState); });
}

// Starts the head of `stream` (src's to dst): its latency has passed and the
// stream has nothing in flight. A host-to-host flow of its simulated bytes,
// less what the token buckets let go at once; none if that is nothing (it
// arrives now). In SimGrid's maestro (the stream's timer).
void startHead(World& w, int src, int dst, Stream& stream) {
  auto m = std::make_unique<Message>(std::move(stream.queue.front().message));
  const double total = stream.queue.front().simulatedBytes * w.wireBytesPerByte;
  const auto bytes = static_cast<std::uint64_t>(std::llround(total - w.burst(src, dst, total)));
  stream.queue.pop_front();
  stream.inFlight = true;
  if (bytes == 0) {
    arrive(w, src, dst, std::move(*m));
    return;
  }
  auto comm =
      s4u::Comm::sendto_init(w.hosts[static_cast<std::size_t>(src)], w.hosts[static_cast<std::size_t>(dst)]);
  const void* key = comm->get_impl();
  gInFlight.emplace(key, InFlight{&w, src, dst, std::move(m), comm});
  comm->set_payload_size(bytes);
  comm->detach();  // starts it
}

// `stream` (src's to dst) has nothing in flight and a head waiting: sets its
// timer for the moment its latency has passed (now, if it has). A stream
// stays where it is in its map (node-based) for the world's life.
void scheduleHead(World& w, int src, int dst, Stream& stream) {
  const double due = std::max(stream.queue.front().due, s4u::Engine::get_clock());
  stream.timer = ::simgrid::kernel::timer::Timer::set(due, [&w, src, dst, &stream] {
    stream.timer = nullptr;
    startHead(w, src, dst, stream);
  });
}

void World::arrived(int src, int dst) {
  Stream& stream = streams[static_cast<std::size_t>(src)][dst];
  stream.inFlight = false;
  if (!stream.queue.empty()) scheduleHead(*this, src, dst, stream);
}

void World::cancelAll() {
  for (auto& bySource : streams)
    for (auto& [dst, stream] : bySource)
      if (stream.timer != nullptr) {
        stream.timer->remove();
        stream.timer = nullptr;
      }
  // Unlisted first, so that the cancellations' signals find nothing to do.
  std::vector<s4u::CommPtr> flows;
  for (auto it = gInFlight.begin(); it != gInFlight.end();) {
    if (it->second.world != this) {
      ++it;
      continue;
    }
    flows.push_back(std::move(it->second.comm));
    it = gInFlight.erase(it);
  }
  for (auto& c : flows) c->cancel();
}

void put(World& w, int src, int dst, Message m, double payloadBytes) {
  const double due =
      s4u::Engine::get_clock() + w.latency(src, dst);  // first: it throws on a pair without a route
  ++w.sentTo[static_cast<std::size_t>(src)][dst];
  ++w.undelivered;
  const double simulated = payloadBytes + kFrameHeaderBytes;
  w.bytesSent += simulated;
  if (w.island[static_cast<std::size_t>(src)] != w.island[static_cast<std::size_t>(dst)])
    w.bytesBetween += simulated;
  Stream& stream = w.streams[static_cast<std::size_t>(src)][dst];
  stream.queue.push_back(Queued{std::move(m), simulated, due});
  if (stream.inFlight || stream.queue.size() > 1) return;  // it goes when those before it have
  scheduleHead(w, src, dst, stream);
}

// The hosted simulation (makeHostedGroup): SimGrid's engine on a thread of
// its own, over a platform of kHostedHosts hosts, with one gateway actor
// that runs what the ranks' ordinary threads hand it (commands), in the
// order handed: sends, closes, new worlds, retired worlds. After each batch
// of commands the gateway waits, in simulated time, until every message
// queued has arrived; while none is queued it waits in real time for the
// next command (the engine, and simulated time, stand still meanwhile).
constexpr int kHostedHosts = 64;

class Hub {
 public:
  Hub() {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { run(ready); });
    try {
      started.get();  // rethrows what the engine's start threw
    } catch (...) {
      thread_.join();  // (it has returned: a joinable thread's destructor would end the process)
      throw;
    }
  }
  ~Hub() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  // Queues `command` for the gateway; false once the engine has stopped.
  bool submit(std::function<void()> command) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stopped_) return false;
      commands_.push_back(std::move(command));
    }
    cv_.notify_all();
    return true;
  }

  // A world of `ranks` ranks on hosts rank-0...
  std::shared_ptr<World> makeWorld(int ranks) {
    // Shared with the command: it may run after a caller that gave up waiting has returned.
    auto made = std::make_shared<std::promise<World*>>();
    auto future = made->get_future();
    const bool queued = submit([this, ranks, made] {
      try {
        auto* w = new World(platform_, latency_, ranks);
        live_.push_back(w);
        made->set_value(w);
      } catch (...) {
        made->set_exception(std::current_exception());
      }
    });
    if (!queued || future.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      throw Error("simgrid: the hosted simulation did not make a world of " + std::to_string(ranks) +
                  " ranks (its engine stopped)");
    World* w = future.get();
    // The last owner hands the world back to the gateway, which frees it on
    // the simulation's thread once its messages have arrived.
    return std::shared_ptr<World>(w, [this](World* dead) {
      if (!submit([this, dead] { retire(dead); })) {
        // The engine has stopped: its actors are gone, the world is freed here.
        delete dead;
      }
    });
  }

 private:
  void run(std::promise<void>& ready) {
    std::unique_ptr<s4u::Engine> engine;
    try {
      std::string a0 = "gossamer-simgrid-hosted", a1 = "--log=root.thresh:warning";
      std::vector<char*> argv{a0.data(), a1.data(), nullptr};
      int argc = 2;
      engine = std::make_unique<s4u::Engine>(&argc, argv.data());
      platform_.hosts = kHostedHosts;
      latency_ = build(platform_);
      watchFlows();
      s4u::Actor::create("gateway", s4u::Host::by_name("rank-0"), [this] { gateway(); });
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    ready.set_value();
    engine->run();
    std::lock_guard<std::mutex> g(mu_);
    stopped_ = true;
  }

  void gateway() {
    for (;;) {
      std::deque<std::function<void()>> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !commands_.empty() || stopping_; });
        if (commands_.empty()) break;  // stopping, nothing left
        batch.swap(commands_);
      }
      for (auto& command : batch) command();
      batch.clear();  // drops the commands' world references (maybe queueing a retire)
      for (World* w : live_) {
        std::unique_lock<s4u::Mutex> lock(*w->settleMu);
        while (w->undelivered > 0) w->settled->wait(lock);
      }
    }
    // Worlds still owned at exit: what they had in flight never arrives.
    for (World* w : live_) w->cancelAll();
    std::lock_guard<std::mutex> g(mu_);
    stopped_ = true;
  }

  // Frees a world whose transports are gone, once its messages have
  // arrived (the gateway settles every batch).
  void retire(World* w) {
    {
      std::unique_lock<s4u::Mutex> lock(*w->settleMu);
      while (w->undelivered > 0) w->settled->wait(lock);
    }
    live_.erase(std::remove(live_.begin(), live_.end(), w), live_.end());
    delete w;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> commands_;  // guarded by mu_
  bool stopping_ = false, stopped_ = false;     // guarded by mu_
  std::thread thread_;
  // On the simulation's thread only:
  Platform platform_;
  RouteLatency latency_;
  std::vector<World*> live_;
};

// The process's hosted simulation, once makeHostedGroup started it.
std::unique_ptr<Hub>& hostedHub() {
  static std::unique_ptr<Hub> hub;
  return hub;
}

bool submitToHub(Hub& hub, std::function<void()> command) noexcept {
  try {
    return hub.submit(std::move(command));
  } catch (...) {
    return false;
  }
}

// Outcome::errors of a simulation that has run: each rank's error (what it
// threw, or its deadlock), then its tasks' (what they threw, their
// deadlocks), rank by rank. `ended`, `pids`: by rank.
std::vector<std::string> reportOf(const World& w, const std::vector<std::string>& errors,
                                  const std::vector<char>& ended, const std::vector<::aid_t>& pids) {
  const auto waiting = [&w](::aid_t pid) {
    const auto it = w.waitingFor.find(pid);
    return it == w.waitingFor.end() ? std::string() : it->second;
  };
  std::vector<std::vector<std::string>> taskErrors(errors.size());
  for (const auto& task : w.tasks) {
    std::string e = task.error;
    if (!task.ended) e = deadlockOf("task", waiting(task.pid));
    if (!e.empty())
      taskErrors[static_cast<std::size_t>(task.rank)].push_back(
          "rank " + std::to_string(task.rank) + " task " + std::to_string(task.number) + ": " + e);
  }
  std::vector<std::string> out;
  for (std::size_t r = 0; r < errors.size(); ++r) {
    const std::string e = ended[r] != 0 ? errors[r] : deadlockOf("rank", waiting(pids[r]));
    if (!e.empty()) out.push_back("rank " + std::to_string(r) + ": " + e);
    out.insert(out.end(), taskErrors[r].begin(), taskErrors[r].end());
  }
  return out;
}

}  // namespace

Outcome simulate(const Platform& platform, const std::function<void(int rank)>& rank,
                 const std::vector<std::string>& config) {
  platform.validate();
  GOSSAMER_ENFORCE(rank, "simulate: no rank function");
  const char* const once =
      "gossamer::simgrid::simulate runs once per process, and not after makeHostedGroup (SimGrid's engine "
      "cannot be made twice)";
  if (gSimulated.load()) throw Error(once);

  const std::vector<std::string> base{"gossamer-simgrid", "--log=root.thresh:warning"};
  std::vector<std::string> args(base);
  for (const auto& c : config) {
    // SimGrid aborts the process on an item without "name:value", and
    // splits an item at white space into items of their own.
    const auto colon = c.find(':');
    if (colon == std::string::npos || colon == 0 || c.find_first_of(" \t\n\r\v\f") != std::string::npos)
      throw InvalidArgument("SimGrid configuration item '" + c +
                            "' is not NAME:VALUE (e.g. network/latency-factor:1)");
    args.push_back("--cfg=" + c);
  }
  // Everything wrong with the configuration items or a platform file is
  // found before the engine is made (SimGrid aborts on much of it:
  // checkConfig and checkFile make an engine of their own in a child
  // process), so that the process may still simulate with others.
  checkConfig(base, config);
  if (!platform.file.empty()) checkFile(platform, args);
  if (gSimulated.exchange(true)) throw Error(once);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  s4u::Engine engine(&argc, argv.data());
  RouteLatency latency = build(platform);
  watchFlows();

  gWorldOwner = std::make_shared<World>(platform, std::move(latency), platform.hosts);
  World& w = *gWorldOwner;
  gWorld = &w;
  // The actors share one OS thread: the SDK's per-thread state is per actor.
  setContextLocalProvider(&actorLocal);
  // Deadlines, polling pauses and metrics records in simulated time.
  gStartUnix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  setTimeSource(&kSimulatedTime);
  // Tasks a rank starts are actors of its host.
  setTaskStarter(&startActorTask);
  std::vector<std::string> errors(static_cast<std::size_t>(platform.hosts));
  // [rank]: whether its function returned or threw (SimGrid kills the actors
  // of a deadlock: every rank and task left waiting on what no one will do).
  std::vector<char> ended(static_cast<std::size_t>(platform.hosts), 0);
  w.live = platform.hosts;
  w.tasksOf.assign(static_cast<std::size_t>(platform.hosts), 0);
  std::vector<::aid_t> pids;
  for (int r = 0; r < platform.hosts; ++r) {
    auto actor = s4u::Actor::create("rank-" + std::to_string(r), w.hosts[static_cast<std::size_t>(r)],
                                    [&errors, &ended, &rank, &w, r] {
                                      errors[static_cast<std::size_t>(r)] = errorOf([&rank, r] { rank(r); });
                                      ended[static_cast<std::size_t>(r)] = 1;
                                      w.actorEnded();
                                    });
    pids.push_back(actor->get_pid());
    w.rankOf[pids.back()] = r;
  }
  engine.run();
  setTaskStarter(nullptr);
  setTimeSource(nullptr);
  setContextLocalProvider(nullptr);
  gWorld = nullptr;
  Outcome out;
  out.simulatedSeconds = s4u::Engine::get_clock();
  out.bytesSent = w.bytesSent;
  out.bytesBetweenIslands = w.bytesBetween;
  out.errors = reportOf(w, errors, ended, pids);
  gWorldOwner.reset();
  return out;
}

std::unique_ptr<Transport> makeTransport(const Options& o) {
  (void)world();
  World& w = *gWorldOwner;
  GOSSAMER_ENFORCE(o.worldSize == w.size(), "simgrid transport: world size "
                                                << o.worldSize << " but the platform has " << w.size()
                                                << " hosts");
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < o.worldSize,
                   "rank " << o.rank << " outside world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds << " s");
  return std::make_unique<SimTransport>(gWorldOwner, o, nullptr);
}

std::vector<std::unique_ptr<Transport>> makeHostedGroup(int worldSize, double timeoutSeconds) {
  GOSSAMER_ENFORCE(worldSize >= 1 && worldSize <= kHostedHosts,
                   "makeHostedGroup: world size " << worldSize << " outside 1.." << kHostedHosts);
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "makeHostedGroup: timeout " << timeoutSeconds << " s");
  static std::once_flag once;
  static std::string startError;  // why the hosted engine did not start (it is made once: every call says so)
  std::call_once(once, [] {
    if (gSimulated.exchange(true))
      throw Error(
          "gossamer::simgrid::makeHostedGroup: simulate() has run in this process (SimGrid's engine "
          "cannot be made twice)");
    try {
      hostedHub() = std::make_unique<Hub>();
    } catch (const std::exception& e) {
      startError = e.what();
    }
  });
  Hub* hub = hostedHub().get();
  GOSSAMER_ENFORCE(hub != nullptr, "makeHostedGroup: the hosted simulation failed to start: " << startError);
  auto w = hub->makeWorld(worldSize);
  std::vector<std::unique_ptr<Transport>> group;
  for (int r = 0; r < worldSize; ++r) {
    Options o;
    o.rank = r;
    o.worldSize = worldSize;
    o.timeoutSeconds = timeoutSeconds;
    group.push_back(std::make_unique<SimTransport>(w, o, hub));
  }
  return group;
}

double hostedSeconds() {
  return hostedHub() == nullptr ? 0.0 : gLastDelivery.load(std::memory_order_relaxed);
}

double now() { return s4u::Engine::get_clock(); }

void compute(double flops) {
  // SimGrid never ends an infinite execution (a deadlock).
  GOSSAMER_ENFORCE(flops >= 0 && std::isfinite(flops), "compute: " << flops << " flops");
  (void)world();
  s4u::this_actor::execute(flops);
}

void sleepFor(double seconds) {
  // SimGrid aborts the process on a duration that is not finite.
  GOSSAMER_ENFORCE(seconds >= 0 && std::isfinite(seconds), "sleepFor: " << seconds << " s");
  (void)world();
  s4u::this_actor::sleep_for(seconds);
}

void registerWith(Registry& registry) {
  registry.addTransport(
      "simgrid",
      [](const TransportContext& ctx) {
        Options o;
        o.rank = ctx.rank;
        o.worldSize = ctx.config.worldSize();
        o.timeoutSeconds = ctx.config.get<double>("transport.timeout_seconds");
        return makeTransport(o);
      },
      KeySet{},
      TransportTraits{.spansProcesses = false,
                      .secures = false,
                      .innerKeys = {}});  // simulated ranks: actors of one process
}

}  // namespace gossamer::simgrid
