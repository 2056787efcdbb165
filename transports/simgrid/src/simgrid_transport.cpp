// The simgrid transport (see simgrid.hpp): ranks as S4U actors, messages as
// detached S4U communications of their real bytes, matched by the kit's
// Mailbox, waits in simulated time.
//
// Per message: isend copies the payload (one allocation) and queues it on the
// pair's stream. Each rank with messages queued has a sender actor on its
// host that starts them, each stream's in order, one in flight per stream: it
// holds a message until its route's latency has passed since it was sent
// (the links carry no latency of their own, platform.cpp), then puts it on
// the destination's S4U mailbox with a simulated size of payload + 48 bytes
// (the frame header the real transports send), detached. So the messages of
// a pair go one after another, back to back, as on a TCP stream (not sharing
// the pair's bandwidth among themselves, which lets later ones delay earlier
// ones), while each still arrives latency + bytes / rate after it was sent on
// an idle path; flows of different pairs share the links (SimGrid's flow
// model). The destination's mailbox has a permanent receiver (its daemon
// actor), which takes each message at its simulated arrival, frees the
// stream for its next message (waking the source's sender), delivers it to
// the rank's kit Mailbox, and wakes the rank's waiters (S4U condition
// variables, so waiting costs simulated time, not real time). The sender
// ends when nothing is queued or in flight. Three actors per rank, whatever
// the traffic. A send to oneself is delivered at once.
//
// Order: what one rank sends another arrives in the order sent (the stream
// goes one message at a time). close() records how
// many messages the rank sent each peer; a peer marks the rank gone once it
// has delivered that many (at once if it has), like a stream's end after its
// last bytes, without a message per pair (that would be N^2 at the end of a
// job of N ranks). Per-pair state is kept only for pairs that exchanged
// messages, so a job's memory grows with its traffic, not with N^2.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
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

constexpr double kFrameHeaderBytes = 48;            // wire.hpp's header, counted in every simulated message
constexpr unsigned kSenderStackBytes = 256 * 1024;  // a sender actor's stack

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

// A pair's stream: what waits to go, and whether a message is in flight.
struct Stream {
  std::deque<Queued> queue;
  bool inFlight = false;
};

// A rank's sending side: its streams' heads that wait for their latency to
// pass (due time, destination; earliest first), how many messages are in
// flight, and its actor.
struct Sender {
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> due;
  std::size_t inFlight = 0;
  bool running = false;
  s4u::MutexPtr mu = s4u::Mutex::create();
  s4u::ConditionVariablePtr cv = s4u::ConditionVariable::create();
};

// A rank that closed: how many messages it sent each peer, and why it left.
struct Closed {
  std::unordered_map<int, std::uint64_t> sent;
  bool afterError = false;
};

// What every rank's transport shares while simulate() runs.
struct World {
  World(const Platform& p, RouteLatency routeLatency)
      : latency(std::move(routeLatency)),
        island(static_cast<std::size_t>(p.hosts), 0),
        boxes(static_cast<std::size_t>(p.hosts)),
        inbound(static_cast<std::size_t>(p.hosts)),
        mu(static_cast<std::size_t>(p.hosts)),
        cv(static_cast<std::size_t>(p.hosts)),
        attached(static_cast<std::size_t>(p.hosts), false),
        bytesIn(static_cast<std::size_t>(p.hosts)),
        messagesIn(static_cast<std::size_t>(p.hosts)),
        delivered(static_cast<std::size_t>(p.hosts)),
        streams(static_cast<std::size_t>(p.hosts)),
        senders(static_cast<std::size_t>(p.hosts)),
        closed(static_cast<std::size_t>(p.hosts)) {
    for (std::size_t k = 0; k < p.islands.size(); ++k)
      for (const int r : p.islands[k]) island[static_cast<std::size_t>(r)] = static_cast<int>(k);
    if (p.insideBurstBytes > 0)
      up.assign(static_cast<std::size_t>(p.hosts),
                Bucket{p.insideBytesPerSecond, p.insideBurstBytes, p.insideBurstBytes, 0});
    if (p.betweenBurstBytes > 0)
      into.assign(std::max<std::size_t>(1, p.islands.size()),
                  Bucket{p.betweenBytesPerSecond, p.betweenBurstBytes, p.betweenBurstBytes, 0});
    for (int r = 0; r < p.hosts; ++r) {
      const auto i = static_cast<std::size_t>(r);
      boxes[i] = std::make_unique<Mailbox>(p.hosts);
      inbound[i] = s4u::Mailbox::by_name("gossamer-rank-" + std::to_string(r));
      mu[i] = s4u::Mutex::create();
      cv[i] = s4u::ConditionVariable::create();
    }
  }
  int size() const { return static_cast<int>(boxes.size()); }
  // Wakes rank r's waiters (a request of theirs may have settled). Without
  // the mutex: SimGrid runs one actor at a time, and a waiter checks its
  // request and sleeps without another actor running in between.
  void wake(int r) { cv[static_cast<std::size_t>(r)]->notify_all(); }

  // Rank `gone` has left `to`: its receives from it fail from now on.
  void markGone(int to, int gone) {
    boxes[static_cast<std::size_t>(to)]->peerGone(
        gone, detail::closedPeerFailure(gone, closed[static_cast<std::size_t>(gone)]->afterError));
    wake(to);
  }

  // Rank r closed after sending `sent` messages to each peer: each peer that
  // has delivered them all learns it now, the others once they have.
  void close(int r, std::unordered_map<int, std::uint64_t> sent, bool afterError) {
    closed[static_cast<std::size_t>(r)] = std::make_unique<Closed>(Closed{std::move(sent), afterError});
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

  // The daemon of `dst` has taken a message of src's stream to it: the
  // stream's next message may go once its latency has passed.
  void arrived(int src, int dst) {
    Stream& stream = streams[static_cast<std::size_t>(src)][dst];
    Sender& sender = senders[static_cast<std::size_t>(src)];
    stream.inFlight = false;
    --sender.inFlight;
    if (!stream.queue.empty()) sender.due.emplace(stream.queue.front().due, dst);
    sender.cv->notify_all();
  }

  RouteLatency latency;      // one-way, by (source, destination)
  std::vector<Bucket> up;    // by rank: its sending link's bucket (empty: none)
  std::vector<Bucket> into;  // by island: its link's bucket (empty: none)
  std::vector<int> island;   // by rank
  double bytesSent = 0, bytesBetween = 0;
  std::vector<std::unique_ptr<Mailbox>> boxes;
  std::vector<s4u::Mailbox*> inbound;
  std::vector<s4u::MutexPtr> mu;
  std::vector<s4u::ConditionVariablePtr> cv;
  std::vector<bool> attached;  // guarded by SimGrid running one actor at a time
  std::vector<std::atomic<std::uint64_t>> bytesIn, messagesIn;
  // [destination]: how many messages it has delivered from each source that
  // sent it something (touched by the destination's daemon only).
  std::vector<std::unordered_map<int, std::uint64_t>> delivered;
  // [source]: its streams by destination (touched by the source's actors
  // and its streams' actors).
  std::vector<std::unordered_map<int, Stream>> streams;
  std::vector<Sender> senders;  // by source
  // [rank]: set once the rank closed its transport.
  std::vector<std::unique_ptr<Closed>> closed;
  // Every actor's ContextLocal (collective scratch, wait time): the actors
  // share one OS thread.
  std::unordered_map<::aid_t, std::unique_ptr<ContextLocal>> locals;
};

World* gWorld = nullptr;  // set while simulate() runs
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
  explicit ActorTask(s4u::ActorPtr actor) : actor_(std::move(actor)) {}
  void join() override { actor_->join(); }

 private:
  s4u::ActorPtr actor_;
};

std::unique_ptr<TaskHandle> startActorTask(std::function<void()> body) {
  const s4u::Actor* self = gWorld != nullptr ? s4u::Actor::self() : nullptr;
  if (self == nullptr) return startThread(std::move(body));
  return std::make_unique<ActorTask>(
      s4u::Actor::create(self->get_name() + "-task", s4u::this_actor::get_host(), std::move(body)));
}

World& world() {
  GOSSAMER_ENFORCE(
      gWorld != nullptr && s4u::Actor::self() != nullptr,
      "the simgrid transport is used only inside gossamer::simgrid::simulate(), from a rank's actor");
  return *gWorld;
}

// Waits in simulated time: until the request settles or the simulated
// timeout passes, sleeping on the rank's S4U condition variable.
class SimEngine final : public detail::ProgressEngine {
 public:
  SimEngine(World& w, int rank) : w_(w), rank_(rank) {}
  void waitUntil(detail::RequestState& /*state*/,
                 std::chrono::steady_clock::time_point /*deadline*/) override {}
  void poke() override {}
  bool keepsTime() const noexcept override { return true; }
  bool waitFor(detail::RequestState& state, double timeoutSeconds) override {
    const auto i = static_cast<std::size_t>(rank_);
    const double end = s4u::Engine::get_clock() + timeoutSeconds;
    std::unique_lock<s4u::Mutex> lock(*w_.mu[i]);
    for (;;) {
      {
        std::lock_guard<std::mutex> g(state.mu);
        if (state.status != detail::RequestState::Status::kPending) return true;
      }
      const double left = end - s4u::Engine::get_clock();
      if (left <= 0) return false;
      w_.cv[i]->wait_for(lock, left);
    }
  }

 private:
  World& w_;
  int rank_;
};

class SimTransport final : public Transport {
 public:
  SimTransport(World& w, const Options& o)
      : w_(w), rank_(o.rank), timeout_(o.timeoutSeconds), engine_(std::make_shared<SimEngine>(w, o.rank)) {
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
    if (dst == rank_) {
      deliver(w_, rank_, Message{rank_, tag, std::move(owned)});
    } else {
      put(dst, Message{rank_, tag, std::move(owned)}, static_cast<double>(data.size()));
    }
    return Request(detail::completedRequest(dst, data.size()));
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

  // The daemon's (and a self-send's) delivery into rank `to`'s Mailbox.
  static void deliver(World& w, int to, Message m) {
    const auto i = static_cast<std::size_t>(to);
    w.bytesIn[i] += m.bytes->size();
    ++w.messagesIn[i];
    const std::span<const std::byte> bytes(m.bytes->data(), m.bytes->size());
    w.boxes[i]->deliver(m.source, m.tag, InboundPayload{std::move(m.bytes), bytes});
    w.wake(to);
  }

 private:
  Mailbox& box() { return *w_.boxes[static_cast<std::size_t>(rank_)]; }

  // A call from a thread SimGrid does not run (a service's own thread)
  // cannot take part in the simulation.
  void onActor(const char* what) const {
    GOSSAMER_ENFORCE(s4u::Actor::self() != nullptr,
                     "simgrid transport, rank "
                         << rank_ << ": " << what
                         << " from a thread that is not the rank's actor (a thread of its "
                            "own, such as a service's, cannot run in the simulation)");
  }

  // Queues m (payloadBytes + the header, simulated) on the stream to `dst`,
  // and starts the rank's sender actor if it is not running.
  void put(int dst, Message m, double payloadBytes) {
    ++sentTo_[dst];
    const double simulated = payloadBytes + kFrameHeaderBytes;
    w_.bytesSent += simulated;
    if (w_.island[static_cast<std::size_t>(rank_)] != w_.island[static_cast<std::size_t>(dst)])
      w_.bytesBetween += simulated;
    Stream& stream = w_.streams[static_cast<std::size_t>(rank_)][dst];
    const double due = s4u::Engine::get_clock() + w_.latency(rank_, dst);
    stream.queue.push_back(Queued{std::move(m), simulated, due});
    if (stream.inFlight || stream.queue.size() > 1) return;  // it goes when those before it have
    Sender& sender = w_.senders[static_cast<std::size_t>(rank_)];
    sender.due.emplace(due, dst);
    if (sender.running) {
      sender.cv->notify_all();
      return;
    }
    sender.running = true;
    s4u::Actor::init("sender-" + std::to_string(rank_), s4u::this_actor::get_host())
        ->set_stacksize(kSenderStackBytes)
        ->start([&w = w_, src = rank_] { send(w, src); });
  }

  // A rank's sender actor: starts each stream's head once its latency has
  // passed and the stream has nothing in flight; ends when nothing is queued
  // or in flight. SimGrid runs one actor at a time, so the state it shares
  // with the rank and the daemons needs no lock beyond the condition
  // variable's.
  static void send(World& w, int src) {
    Sender& sender = w.senders[static_cast<std::size_t>(src)];
    std::unique_lock<s4u::Mutex> lock(*sender.mu);
    for (;;) {
      const double now = s4u::Engine::get_clock();
      while (!sender.due.empty() && sender.due.top().first <= now) {
        const int dst = sender.due.top().second;
        sender.due.pop();
        Stream& stream = w.streams[static_cast<std::size_t>(src)][dst];
        auto m = std::make_unique<Message>(std::move(stream.queue.front().message));
        const double total = stream.queue.front().simulatedBytes;
        const auto bytes = static_cast<std::uint64_t>(std::llround(total - w.burst(src, dst, total)));
        stream.queue.pop_front();
        stream.inFlight = true;
        ++sender.inFlight;
        // The daemon owns the message once it has taken it.
        w.inbound[static_cast<std::size_t>(dst)]->put_init(m.release(), bytes)->detach([](void* p) {
          delete static_cast<Message*>(p);
        });
      }
      if (sender.due.empty() && sender.inFlight == 0) break;
      if (sender.due.empty())
        sender.cv->wait(lock);
      else
        sender.cv->wait_for(lock, sender.due.top().first - now);
    }
    sender.running = false;
  }

  void shut(bool afterError) {
    if (closed_.exchange(true)) return;
    if (gWorld == &w_ && s4u::Actor::self() != nullptr) {
      w_.close(rank_, sentTo_, afterError);
    }
    box().close();
  }

  World& w_;
  int rank_;
  double timeout_;
  std::shared_ptr<SimEngine> engine_;
  std::unordered_map<int, std::uint64_t> sentTo_;  // messages sent, by destination
  std::atomic<bool> closed_{false};
  std::atomic<std::uint64_t> bytesSent_{0}, messagesSent_{0};
};

// Rank r's daemon: takes what arrives on its S4U mailbox into its Mailbox.
void receiveLoop(World& w, int r) {
  s4u::Actor::self()->daemonize();
  auto* inbound = w.inbound[static_cast<std::size_t>(r)];
  auto& delivered = w.delivered[static_cast<std::size_t>(r)];
  for (;;) {
    std::unique_ptr<Message> m;
    try {
      m.reset(inbound->get<Message>());
    } catch (const ::simgrid::NetworkFailureException&) {
      continue;  // a transfer that failed: nothing arrived
    }
    // A stream has one message in flight: they arrive in the order sent.
    const int source = m->source;
    w.arrived(source, r);
    ++delivered[source];
    SimTransport::deliver(w, r, std::move(*m));
    if (w.closed[static_cast<std::size_t>(source)] && w.allDelivered(r, source)) w.markGone(r, source);
  }
}

}  // namespace

Outcome simulate(const Platform& platform, const std::function<void(int rank)>& rank,
                 const std::vector<std::string>& config) {
  platform.validate();
  GOSSAMER_ENFORCE(rank, "simulate: no rank function");
  if (gSimulated.exchange(true))
    throw Error("gossamer::simgrid::simulate runs once per process (SimGrid's engine cannot be made twice)");

  std::vector<std::string> args{"gossamer-simgrid", "--log=root.thresh:warning"};
  for (const auto& c : config) args.push_back("--cfg=" + c);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  s4u::Engine engine(&argc, argv.data());
  RouteLatency latency = build(platform);

  World w(platform, std::move(latency));
  gWorld = &w;
  // The actors share one OS thread: the SDK's per-thread state is per actor.
  setContextLocalProvider(&actorLocal);
  // Deadlines, polling pauses and metrics records in simulated time.
  gStartUnix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  setTimeSource(&kSimulatedTime);
  // Tasks a rank starts are actors of its host.
  setTaskStarter(&startActorTask);
  Outcome out;
  std::vector<std::string> errors(static_cast<std::size_t>(platform.hosts));
  for (int r = 0; r < platform.hosts; ++r) {
    auto* host = s4u::Host::by_name("rank-" + std::to_string(r));
    auto daemon = s4u::Actor::create("inbox-" + std::to_string(r), host, [&w, r] { receiveLoop(w, r); });
    w.inbound[static_cast<std::size_t>(r)]->set_receiver(daemon);
    s4u::Actor::create("rank-" + std::to_string(r), host, [&errors, &rank, r] {
      try {
        rank(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  engine.run();
  setTaskStarter(nullptr);
  setTimeSource(nullptr);
  setContextLocalProvider(nullptr);
  gWorld = nullptr;
  out.simulatedSeconds = s4u::Engine::get_clock();
  out.bytesSent = w.bytesSent;
  out.bytesBetweenIslands = w.bytesBetween;
  for (int r = 0; r < platform.hosts; ++r)
    if (!errors[static_cast<std::size_t>(r)].empty())
      out.errors.push_back("rank " + std::to_string(r) + ": " + errors[static_cast<std::size_t>(r)]);
  return out;
}

std::unique_ptr<Transport> makeTransport(const Options& o) {
  World& w = world();
  GOSSAMER_ENFORCE(o.worldSize == w.size(), "simgrid transport: world size "
                                                << o.worldSize << " but the platform has " << w.size()
                                                << " hosts");
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < o.worldSize,
                   "rank " << o.rank << " outside world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds << " s");
  return std::make_unique<SimTransport>(w, o);
}

double now() { return s4u::Engine::get_clock(); }

void compute(double flops) {
  GOSSAMER_ENFORCE(flops >= 0, "compute: " << flops << " flops");
  (void)world();
  s4u::this_actor::execute(flops);
}

void sleepFor(double seconds) {
  GOSSAMER_ENFORCE(seconds >= 0, "sleepFor: " << seconds << " s");
  (void)world();
  s4u::this_actor::sleep_for(seconds);
}

void registerWith(Registry& registry) {
  registry.addTransport("simgrid", [](const TransportContext& ctx) {
    Options o;
    o.rank = ctx.rank;
    o.worldSize = ctx.config.worldSize();
    o.timeoutSeconds = ctx.config.get<double>("transport.timeout_seconds");
    return makeTransport(o);
  });
}

}  // namespace gossamer::simgrid
