// The C ABI (gossamer/gossamer.h) over gossamer::Session and every built-in
// component. Each entry point runs its body inside guarded(): any exception
// becomes a status and this thread's last-error record, so none crosses into
// C. The agent is a Session over a zmq::Rendezvous store and the registry of
// every built-in component (bindings/common/builtins.hpp), as the Python
// module's Agent (bindings/python/src/module.cpp).
#include "gossamer/gossamer.h"

#include "../../common/builtins.hpp"
#include "../../common/view_rank.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/launch_env.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/metrics.hpp"
#include "gossamer/session.hpp"
#include "gossamer/transports/zmq.hpp"

// Metrics records (JSON text) not yet taken by gossamer_metrics_poll: at most
// kCapacity, the oldest dropped beyond that. Filled from any thread that
// makes records (training, the stall watcher).
struct RecordQueue {
  static constexpr std::size_t kCapacity = 65536;
  std::mutex mu;
  std::deque<std::string> lines;
};

struct gossamer_agent {
  std::shared_ptr<RecordQueue> records = std::make_shared<RecordQueue>();  // shared with the subscription
  std::unique_ptr<gossamer::zmq::Rendezvous> rendezvous;  // declared first: destroyed after the session
  std::unique_ptr<gossamer::Session> session;
  gossamer::DistributedOptimizer* optimizer = nullptr;
  std::size_t parameters = 0;  // the optimizer's P
  // The call running on the agent (one at a time, see Call) and whether
  // gossamer_agent_close took it out; both guarded by callMu.
  std::mutex callMu;
  const char* running = nullptr;  // the running call's name, null when none
  bool closed = false;
};

namespace {

using namespace gossamer;

struct LastError {
  gossamer_status status = GOSSAMER_OK;
  std::string message, file, key;
  int peer = -1;
  int line = 0;
};
thread_local LastError lastError;

gossamer_status fail(gossamer_status status, const char* message, int peer = -1) {
  LastError e;
  e.status = status;
  e.peer = peer;
  try {
    e.message = message;
  } catch (...) {  // no memory for the message: the status alone
  }
  lastError = std::move(e);
  return status;
}

// A call refused because another thread's call runs on the agent (Call):
// GOSSAMER_E_BUSY.
class Busy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `body`; an exception becomes its status and the last-error record.
template <typename F>
gossamer_status guarded(F&& body) noexcept {
  try {
    body();
    return GOSSAMER_OK;
  } catch (const ConfigError& e) {
    const gossamer_status s = fail(GOSSAMER_E_CONFIG, e.what());
    try {
      lastError.file = e.file();
      lastError.key = e.key();
    } catch (...) {
    }
    lastError.line = e.line();
    return s;
  } catch (const Expelled& e) {
    return fail(GOSSAMER_E_EXPELLED, e.what(), e.peer());
  } catch (const PeerFailure& e) {
    return fail(GOSSAMER_E_PEER_FAILURE, e.what(), e.peer());
  } catch (const ProtocolError& e) {
    return fail(GOSSAMER_E_PROTOCOL, e.what(), e.peer());
  } catch (const TimeoutError& e) {
    return fail(GOSSAMER_E_TIMEOUT, e.what());
  } catch (const Cancelled& e) {
    return fail(GOSSAMER_E_CANCELLED, e.what());
  } catch (const InvalidArgument& e) {
    return fail(GOSSAMER_E_INVALID_ARGUMENT, e.what());
  } catch (const Busy& e) {
    return fail(GOSSAMER_E_BUSY, e.what());
  } catch (const InternalError& e) {
    return fail(GOSSAMER_E_INTERNAL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GOSSAMER_E_NO_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(GOSSAMER_E_ERROR, e.what());
  } catch (...) {
    return fail(GOSSAMER_E_ERROR, "unknown error");
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw InvalidArgument(what);
}

Config loadConfig(const char* config, int isText, const char* const* overrides, std::size_t n,
                  const std::vector<std::string>& more) {
  require(config != nullptr, "config is NULL");
  require(n == 0 || overrides != nullptr, "overrides is NULL with n_overrides > 0");
  std::vector<std::string> all;
  for (std::size_t i = 0; i < n; ++i) {
    require(overrides[i] != nullptr, "an override is NULL");
    all.emplace_back(overrides[i]);
  }
  all.insert(all.end(), more.begin(), more.end());
  return bindings::loadConfig(config, isText != 0, all);
}

// The agents not yet closed, by handle. A handle is a number never handed
// out twice (not the agent's address, which a later agent may get), so a
// handle that was closed or never made is an error rather than a read of
// freed memory or a call on another agent. Each call holds its agent while
// it runs. Never destroyed: a static destructor must not free agents the
// program still uses.
struct LiveAgents {
  std::mutex mu;
  std::uintptr_t last = 0;
  std::unordered_map<const gossamer_agent*, std::shared_ptr<gossamer_agent>> agents;
};
LiveAgents& live() {
  static auto* table = new LiveAgents;  // NOLINT(cppcoreguidelines-owning-memory): never freed, see above
  return *table;
}

constexpr const char* kNotLive = "agent is not a live gossamer_agent (closed already, or never created)";

// The live agent behind `handle`. @throws InvalidArgument for NULL or a
// handle that is not a live agent.
std::shared_ptr<gossamer_agent> hold(const gossamer_agent* handle) {
  require(handle != nullptr, "agent is NULL");
  LiveAgents& t = live();
  std::lock_guard<std::mutex> lk(t.mu);
  const auto it = t.agents.find(handle);
  require(it != t.agents.end(), kNotLive);
  return it->second;
}

// One call on an agent while it runs: holds the agent (hold()) and marks it
// busy. An agent runs one call at a time: a call that another thread makes
// while one runs is refused, not run, since it could replace or free what
// the running call uses (gossamer_make_optimizer and gossamer_recover
// replace the optimizer and the communicator, a step that recovers from a
// failed peer replaces the communicator, gossamer_agent_close frees them).
// gossamer_agent_close, _rank, _world_size and gossamer_metrics_poll touch
// nothing a call replaces and make no Call.
class Call {
 public:
  /// @throws InvalidArgument for a handle that is not a live agent; Busy
  /// while another call (named in the message with `name`) runs on it.
  Call(const gossamer_agent* handle, const char* name) : agent_(hold(handle)) {
    std::lock_guard<std::mutex> lk(agent_->callMu);
    require(!agent_->closed, kNotLive);  // closed since hold(), by another thread
    if (agent_->running != nullptr)
      throw Busy(std::string(name) + " while " + agent_->running +
                 " runs on this agent on another thread: an agent takes one call at a time "
                 "(gossamer_agent_close, _rank, _world_size and gossamer_metrics_poll excepted)");
    agent_->running = name;
  }
  ~Call() {
    std::lock_guard<std::mutex> lk(agent_->callMu);
    agent_->running = nullptr;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  gossamer_agent* operator->() const { return agent_.get(); }
  gossamer_agent& operator*() const { return *agent_; }

 private:
  std::shared_ptr<gossamer_agent> agent_;  // freed here when a close came while the call ran
};

void create(const Config& c, int rank, const std::string& rendezvous, gossamer_agent** out) {
  require(rank >= 0 && rank < c.worldSize(),
          ("rank " + std::to_string(rank) + " outside [0, " + std::to_string(c.worldSize()) + ")").c_str());
  require(!rendezvous.empty(),
          "rendezvous is empty: give \"tcp://HOST:PORT\" or a directory every rank sees");
  auto a = std::make_shared<gossamer_agent>();
  a->rendezvous =
      std::make_unique<zmq::Rendezvous>(rendezvous, rank, c.get<double>("transport.timeout_seconds"));
  // A Session that fails to build gives the rendezvous's generation back: a
  // retry in this process meets the other ranks' same agent. Once it is
  // built the other ranks have used that generation too, so a failure
  // after it (memory for the subscription or the table's entry) keeps it:
  // a retry then meets their next one.
  try {
    a->session = std::make_unique<Session>(c, rank, a->rendezvous->store(), bindings::builtins());
  } catch (...) {
    a->rendezvous->giveBack();
    throw;
  }
  a->session->agent().metrics().subscribe([q = a->records](const MetricsRecord& r) {
    std::lock_guard<std::mutex> lk(q->mu);
    if (q->lines.size() == RecordQueue::kCapacity) q->lines.pop_front();
    q->lines.push_back(r.json);
  });
  LiveAgents& t = live();
  std::lock_guard<std::mutex> lk(t.mu);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): an opaque handle, never dereferenced
  auto* const handle = reinterpret_cast<gossamer_agent*>(t.last + 1);
  t.agents.emplace(handle, std::move(a));
  ++t.last;
  *out = handle;
}

DistributedOptimizer& optimizerOf(gossamer_agent& a) {
  require(a.optimizer != nullptr, "no optimizer: call gossamer_make_optimizer first");
  return *a.optimizer;
}

DistributedOptimizer& optimizerOf(gossamer_agent& a, std::size_t count) {
  optimizerOf(a);
  if (count != a.parameters)
    throw InvalidArgument("count " + std::to_string(count) + " != the optimizer's " +
                          std::to_string(a.parameters) + " parameters");
  return *a.optimizer;
}

// The communication-only call `name` on the caller's count floats at data:
// the optimizer's method, after the agent, optimizer, count and NULL checks.
template <void (DistributedOptimizer::*Method)(std::span<float>)>
gossamer_status onFloats(const char* name, gossamer_agent* agent, float* data, std::size_t count,
                         const char* nullMessage) {
  return guarded([&] {
    const Call a(agent, name);
    auto& o = optimizerOf(*a, count);
    require(data != nullptr, nullMessage);
    (o.*Method)(std::span<float>(data, count));
  });
}

// The header gives the enums int as their underlying type in C++, so that
// a value outside their names (from C) is one opOf and withSpan can refuse.
static_assert(std::is_same_v<std::underlying_type_t<gossamer_op>, int>);
static_assert(std::is_same_v<std::underlying_type_t<gossamer_dtype>, int>);
static_assert(std::is_same_v<std::underlying_type_t<gossamer_status>, int>);

ReduceOp opOf(gossamer_op op) {
  switch (op) {
    case GOSSAMER_SUM:
      return ReduceOp::kSum;
    case GOSSAMER_AVERAGE:
      return ReduceOp::kAverage;
    case GOSSAMER_MAX:
      return ReduceOp::kMax;
    case GOSSAMER_MIN:
      return ReduceOp::kMin;
  }
  throw InvalidArgument("op " + std::to_string(static_cast<int>(op)) +
                        " is not a gossamer_op (GOSSAMER_SUM, _AVERAGE, _MAX, _MIN)");
}

// Calls f(std::span<T>) with the element type `dtype` names.
template <typename F>
void withSpan(void* data, std::size_t count, gossamer_dtype dtype, F&& f) {
  require(data != nullptr || count == 0, "data is NULL");
  const auto span = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    // No object is larger than PTRDIFF_MAX bytes: a larger count is a bad
    // argument, not a buffer (its size in bytes would wrap).
    if (count > static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(T))
      throw InvalidArgument("count " + std::to_string(count) + " of " + std::to_string(sizeof(T)) +
                            "-byte elements is larger than any buffer");
    return std::span<T>(typed, count);
  };
  switch (dtype) {
    case GOSSAMER_FLOAT32:
      return f(span(static_cast<float*>(data)));
    case GOSSAMER_FLOAT64:
      return f(span(static_cast<double*>(data)));
    case GOSSAMER_FLOAT16:
      return f(span(static_cast<float16*>(data)));
    case GOSSAMER_BFLOAT16:
      return f(span(static_cast<bfloat16*>(data)));
  }
  throw InvalidArgument("dtype " + std::to_string(static_cast<int>(dtype)) +
                        " is not a gossamer_dtype (GOSSAMER_FLOAT32, _FLOAT64, _FLOAT16, _BFLOAT16)");
}

}  // namespace

extern "C" {

int gossamer_c_api_version(void) { return GOSSAMER_C_API_VERSION; }

const char* gossamer_version(void) { return GOSSAMER_VERSION_STRING; }

const char* gossamer_status_name(gossamer_status status) {
  switch (status) {
    case GOSSAMER_OK:
      return "GOSSAMER_OK";
    case GOSSAMER_E_INVALID_ARGUMENT:
      return "GOSSAMER_E_INVALID_ARGUMENT";
    case GOSSAMER_E_CONFIG:
      return "GOSSAMER_E_CONFIG";
    case GOSSAMER_E_TIMEOUT:
      return "GOSSAMER_E_TIMEOUT";
    case GOSSAMER_E_PEER_FAILURE:
      return "GOSSAMER_E_PEER_FAILURE";
    case GOSSAMER_E_EXPELLED:
      return "GOSSAMER_E_EXPELLED";
    case GOSSAMER_E_PROTOCOL:
      return "GOSSAMER_E_PROTOCOL";
    case GOSSAMER_E_CANCELLED:
      return "GOSSAMER_E_CANCELLED";
    case GOSSAMER_E_INTERNAL:
      return "GOSSAMER_E_INTERNAL";
    case GOSSAMER_E_ERROR:
      return "GOSSAMER_E_ERROR";
    case GOSSAMER_E_NO_MEMORY:
      return "GOSSAMER_E_NO_MEMORY";
    case GOSSAMER_E_BUSY:
      return "GOSSAMER_E_BUSY";
  }
  return "unknown";
}

gossamer_status gossamer_agent_create(const char* config, int config_is_text, const char* const* overrides,
                                      size_t n_overrides, int rank, int world_size, const char* rendezvous,
                                      gossamer_agent** out) {
  return guarded([&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    require(world_size >= 0, "world_size < 0");
    require(rendezvous != nullptr, "rendezvous is NULL");
    std::vector<std::string> more;
    if (world_size > 0) more.push_back("world_size=" + std::to_string(world_size));
    create(loadConfig(config, config_is_text, overrides, n_overrides, more), rank, rendezvous, out);
  });
}

gossamer_status gossamer_agent_from_env(const char* config, int config_is_text, const char* const* overrides,
                                        size_t n_overrides, gossamer_agent** out) {
  return guarded([&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    const auto launch = discoverLaunch();
    if (!launch)
      throw InvalidArgument(
          "no launcher found: set RANK, WORLD_SIZE and GOSSAMER_RENDEZVOUS, or start under torchrun, mpirun, "
          "mpiexec or srun");
    require(!launch->rendezvous.empty(),
            "the launcher's world of one rank names no rendezvous: set GOSSAMER_RENDEZVOUS (a directory of "
            "your own)");
    create(loadConfig(config, config_is_text, overrides, n_overrides,
                      {"world_size=" + std::to_string(launch->worldSize)}),
           launch->rank, launch->rendezvous, out);
  });
}

gossamer_status gossamer_agent_close(gossamer_agent* agent) {
  if (agent == nullptr) return GOSSAMER_OK;
  std::shared_ptr<gossamer_agent> a;
  bool busy = false;
  const gossamer_status found = guarded([&] {
    a = hold(agent);
    {
      LiveAgents& t = live();
      std::lock_guard<std::mutex> lk(t.mu);
      // Two closes racing: only the one that takes it out closes it.
      require(t.agents.erase(agent) == 1, kNotLive);
    }
    std::lock_guard<std::mutex> lk(a->callMu);
    a->closed = true;  // no call starts on it from here on
    busy = a->running != nullptr;
  });
  if (found != GOSSAMER_OK) return found;
  // A call running on another thread (this close is a watchdog's) uses the
  // session: only its transport is closed now, which cancels that call's
  // waits (it returns GOSSAMER_E_CANCELLED); the session is closed when that
  // call returns and lets the agent go.
  const gossamer_status s = guarded([&] {
    if (busy)
      a->session->agent().transport().close();
    else
      a->session->close();
  });
  // Destroying never throws (the destructors catch). The agent is freed here,
  // or by the last call still running on it once that returns.
  a.reset();
  return s;
}

gossamer_status gossamer_agent_rank(const gossamer_agent* agent, int* rank) {
  return guarded([&] {
    require(rank != nullptr, "rank is NULL");
    *rank = hold(agent)->session->agent().rank();
  });
}

gossamer_status gossamer_agent_world_size(const gossamer_agent* agent, int* world_size) {
  return guarded([&] {
    require(world_size != nullptr, "world_size is NULL");
    *world_size = hold(agent)->session->agent().worldSize();
  });
}

gossamer_status gossamer_allreduce(gossamer_agent* agent, void* data, size_t count, gossamer_dtype dtype,
                                   gossamer_op op) {
  return guarded([&] {
    const Call a(agent, "gossamer_allreduce");
    Communicator& c = a->session->agent().communicator();
    const ReduceOp o = opOf(op);
    withSpan(data, count, dtype, [&](auto span) { c.allreduce(span, o); });
  });
}

gossamer_status gossamer_broadcast(gossamer_agent* agent, void* data, size_t count, gossamer_dtype dtype,
                                   int root) {
  return guarded([&] {
    const Call a(agent, "gossamer_broadcast");
    Communicator& c = a->session->agent().communicator();
    const int local = bindings::rootInView(a->session->view(), root);
    withSpan(data, count, dtype, [&](auto span) { c.broadcast(span, local); });
  });
}

gossamer_status gossamer_barrier(gossamer_agent* agent) {
  return guarded([&] {
    const Call a(agent, "gossamer_barrier");
    a->session->agent().communicator().barrier();
  });
}

gossamer_status gossamer_make_optimizer(gossamer_agent* agent, const size_t* tensor_sizes, size_t n_tensors) {
  return guarded([&] {
    const Call a(agent, "gossamer_make_optimizer");
    require(n_tensors > 0 && tensor_sizes != nullptr, "no tensor sizes");
    // The model's float32 parameters form one buffer: at most PTRDIFF_MAX
    // bytes, so its elements and tensors fit in that too (and the pointer
    // range below cannot wrap).
    constexpr std::size_t kMaxElements = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float);
    if (n_tensors > static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(std::size_t))
      throw InvalidArgument("n_tensors " + std::to_string(n_tensors) + " is more than a model can hold");
    std::vector<std::size_t> sizes(tensor_sizes, tensor_sizes + n_tensors);
    std::size_t total = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 0)
        throw InvalidArgument("tensor_sizes[" + std::to_string(i) +
                              "] is 0: a tensor has one element at least");
      if (sizes[i] > kMaxElements - total)
        throw InvalidArgument("tensor_sizes add up to more than " + std::to_string(kMaxElements) +
                              " float32 elements (at tensor " + std::to_string(i) + ")");
      total += sizes[i];
    }
    a->optimizer = nullptr;
    a->parameters = 0;
    a->optimizer = &a->session->makeOptimizer(sizes);
    a->parameters = total;
  });
}

gossamer_status gossamer_step(gossamer_agent* agent, float* params, const float* grads, size_t count) {
  return guarded([&] {
    const Call a(agent, "gossamer_step");
    auto& o = optimizerOf(*a, count);
    require(params != nullptr && grads != nullptr, "params or grads is NULL");
    o.step(std::span<float>(params, count), std::span<const float>(grads, count));
  });
}

gossamer_status gossamer_reduce_gradients(gossamer_agent* agent, float* grads, size_t count) {
  return onFloats<&DistributedOptimizer::reduceGradients>("gossamer_reduce_gradients", agent, grads, count,
                                                          "grads is NULL");
}

gossamer_status gossamer_mix_parameters(gossamer_agent* agent, float* params, size_t count) {
  return onFloats<&DistributedOptimizer::mixParameters>("gossamer_mix_parameters", agent, params, count,
                                                        "params is NULL");
}

gossamer_status gossamer_flush(gossamer_agent* agent, float* params, size_t count) {
  return onFloats<&DistributedOptimizer::flush>("gossamer_flush", agent, params, count, "params is NULL");
}

gossamer_status gossamer_steps(gossamer_agent* agent, uint64_t* steps) {
  return guarded([&] {
    require(steps != nullptr, "steps is NULL");
    const Call a(agent, "gossamer_steps");
    *steps = optimizerOf(*a).steps();
  });
}

gossamer_status gossamer_skips_local_step(gossamer_agent* agent, int* skips) {
  return guarded([&] {
    require(skips != nullptr, "skips is NULL");
    const Call a(agent, "gossamer_skips_local_step");
    *skips = optimizerOf(*a).skipsLocalStep() ? 1 : 0;
  });
}

gossamer_status gossamer_view(gossamer_agent* agent, uint64_t* number, int* members, size_t capacity,
                              size_t* count) {
  return guarded([&] {
    const Call a(agent, "gossamer_view");
    require(number != nullptr && count != nullptr, "number or count is NULL");
    require(capacity == 0 || members != nullptr, "members is NULL with capacity > 0");
    const View v = a->session->view();
    *number = v.number;
    *count = v.members.size();
    if (v.members.size() > capacity)
      throw InvalidArgument("the view has " + std::to_string(v.members.size()) + " members, capacity " +
                            std::to_string(capacity));
    std::copy(v.members.begin(), v.members.end(), members);
  });
}

gossamer_status gossamer_recover(gossamer_agent* agent) {
  return guarded([&] {
    const Call a(agent, "gossamer_recover");
    a->session->recover();
  });
}

gossamer_status gossamer_metrics_poll(gossamer_agent* agent, char* buffer, size_t capacity, size_t* length) {
  return guarded([&] {
    const auto a = hold(agent);
    require(length != nullptr, "length is NULL");
    require(capacity == 0 || buffer != nullptr, "buffer is NULL with capacity > 0");
    RecordQueue& q = *a->records;
    std::lock_guard<std::mutex> lk(q.mu);
    *length = 0;
    if (q.lines.empty()) {
      if (capacity > 0) buffer[0] = '\0';
      return;
    }
    const std::string& line = q.lines.front();
    *length = line.size();
    if (line.size() + 1 > capacity)
      throw InvalidArgument("the record has " + std::to_string(line.size()) + " bytes and a NUL, capacity " +
                            std::to_string(capacity));
    std::memcpy(buffer, line.data(), line.size());
    buffer[line.size()] = '\0';
    q.lines.pop_front();
  });
}

gossamer_status gossamer_last_error(void) { return lastError.status; }
const char* gossamer_last_error_message(void) { return lastError.message.c_str(); }
int gossamer_last_error_peer(void) { return lastError.peer; }
const char* gossamer_last_error_file(void) { return lastError.file.c_str(); }
int gossamer_last_error_line(void) { return lastError.line; }
const char* gossamer_last_error_key(void) { return lastError.key.c_str(); }

}  // extern "C"
