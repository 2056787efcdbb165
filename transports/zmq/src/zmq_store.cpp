// Rendezvous store over ZeroMQ: a ROUTER server thread holding a map, and
// REQ clients. Request: [op "set"|"get"][key][value (set only)].
// Reply: ["ok"][value] | ["missing"] | ["error"][message].
#include <zmq.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/transports/zmq.hpp"
#include "store_request.hpp"

namespace gossamer::zmq {

namespace {
std::string str(const ::zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

// HOST and PORT of "tcp://HOST:PORT" (split at the last ':'; PORT may be
// empty), or nullopt without "tcp://", a ':' or a HOST.
std::optional<std::pair<std::string, std::string>> hostAndPort(const std::string& address) {
  constexpr std::string_view kTcp = "tcp://";
  if (address.rfind(kTcp, 0) != 0) return std::nullopt;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon <= kTcp.size()) return std::nullopt;
  return std::make_pair(address.substr(kTcp.size(), colon - kTcp.size()), address.substr(colon + 1));
}

// A rendezvous address is "tcp://HOST:PORT" (HOST an IPv4 address or a host
// name; PORT in 1..65535: rank 0 binds it and the others connect to it, so
// neither 0 nor a wildcard can name it) or a directory; anything else with "://" is a mistake, not a
// directory.
// @throws InvalidArgument naming the address.
void checkRendezvousAddress(const std::string& address) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("rendezvous address '" + address + "': " + why +
                           " (give tcp://HOST:PORT, or a directory every rank sees)");
  };
  if (address.empty()) throw InvalidArgument("empty rendezvous address");
  // A scheme is letters, digits, '+', '-' and '.' from the start, the
  // first a letter (RFC 3986); "dir://x" deeper in a path is a directory.
  const auto scheme = address.find("://");
  const auto isSchemeChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
  };
  if (scheme == std::string::npos || scheme == 0 ||
      std::isalpha(static_cast<unsigned char>(address[0])) == 0 ||
      !std::all_of(address.begin(), address.begin() + static_cast<std::ptrdiff_t>(scheme), isSchemeChar))
    return;  // a directory
  if (address.compare(0, scheme, "tcp") != 0)
    throw bad("'" + address.substr(0, scheme) + "://' is not tcp://");
  const auto parts = hostAndPort(address);
  if (!parts) throw bad("no HOST:PORT");
  const std::string& host = parts->first;
  if (host.front() == '[' || host.find(':') != std::string::npos)
    throw bad("'" + host +
              "' is an IPv6 address, and the transports listen on IPv4 only; give an IPv4 "
              "address or a host name with one");
  const std::string& port = parts->second;
  const bool digits = !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535)
    throw bad("port '" + port + "' is not a number in 1..65535");
}
// Where rank 0's server binds for the rendezvous "tcp://HOST:PORT": HOST
// itself when it is an IPv4 address (or '*'), every interface when it is a
// host name (Slurm's first node, torchrun's MASTER_ADDR): zmq binds only
// addresses and interface names, and the name may resolve here to a
// loopback address (127.0.1.1 in Debian's /etc/hosts) the others cannot
// reach.
std::string bindEndpointOf(const std::string& address) {
  const auto [host, port] = hostAndPort(address).value();  // checked by checkRendezvousAddress
  in_addr v4{};
  if (host == "*" || ::inet_pton(AF_INET, host.c_str(), &v4) == 1) return address;
  return "tcp://*:" + port;
}
}  // namespace

struct StoreServer::Impl {
  ::zmq::context_t ctx{1};
  ::zmq::socket_t sock{ctx, ::zmq::socket_type::router};
  std::string endpoint;
  std::map<std::string, std::string> kv;
  std::size_t bytes = 0;  // keys and values in kv, and kStoreEntryOverheadBytes per entry
  std::atomic<bool> stop{false};
  std::thread thread;

  void serve() {
    while (!stop) {
      bool closed = false;
      // (Out of memory for a request or its reply, say: that request is
      // lost, not the process; its client's wait ends at its timeout.)
      survivePass("rendezvous store", [&] {
        ::zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
        try {
          ::zmq::poll(&item, 1, std::chrono::milliseconds(20));
          if (!(item.revents & ZMQ_POLLIN)) return;
          std::vector<::zmq::message_t> parts;
          do {
            parts.emplace_back();
            (void)sock.recv(parts.back(), ::zmq::recv_flags::none);
          } while (sock.get(::zmq::sockopt::rcvmore) && parts.size() < 8);
          while (sock.get(::zmq::sockopt::rcvmore)) {  // drain an oversized request
            ::zmq::message_t sink;
            (void)sock.recv(sink, ::zmq::recv_flags::none);
          }
          handle(parts);
        } catch (const ::zmq::error_t& e) {
          closed = e.num() == ETERM;
        }
      });
      if (closed) return;
    }
  }

  // parts: envelope (client id, REQ's request id, ...) up to an empty
  // delimiter frame, then [op][key][value?] (store_request.hpp). The reply
  // reuses the envelope.
  void handle(std::vector<::zmq::message_t>& parts) {
    std::vector<std::string_view> frames;
    frames.reserve(parts.size());
    for (const auto& m : parts) frames.emplace_back(static_cast<const char*>(m.data()), m.size());
    const std::size_t envelope = store_wire::storeEnvelopeFrames(frames);
    if (envelope == 0) return;  // no envelope: nobody to answer
    const std::size_t delim = envelope - 1;
    std::vector<std::string> reply;
    try {
      store_wire::StoreRequest request =
          store_wire::parseStoreRequest(std::span<const std::string_view>(frames).subspan(envelope));
      if (request.op != store_wire::StoreRequest::Op::kGet) {
        const auto it = kv.find(request.key);
        const bool exists = it != kv.end();
        if (exists && request.op == store_wire::StoreRequest::Op::kClaim) {
          reply = {"ok", "0"};
        } else {
          const std::size_t old =
              exists ? it->first.size() + it->second.size() + store_wire::kStoreEntryOverheadBytes : 0;
          const std::size_t now =
              request.key.size() + request.value.size() + store_wire::kStoreEntryOverheadBytes;
          if (bytes - old + now > store_wire::kMaxStoreBytes)
            throw Error("the rendezvous store holds " + std::to_string(bytes) + " bytes; '" + request.key +
                        "' would take it past " + std::to_string(store_wire::kMaxStoreBytes));
          bytes = bytes - old + now;
          kv[request.key] = std::move(request.value);
          reply = {"ok", request.op == store_wire::StoreRequest::Op::kClaim ? "1" : ""};
        }
      } else {
        auto it = kv.find(request.key);
        reply =
            it == kv.end() ? std::vector<std::string>{"missing"} : std::vector<std::string>{"ok", it->second};
      }
    } catch (const Error& e) {
      reply = {"error", e.what()};
    }
    for (std::size_t i = 0; i <= delim; ++i) sock.send(parts[i], ::zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < reply.size(); ++i)
      sock.send(::zmq::buffer(reply[i]),
                i + 1 < reply.size() ? ::zmq::send_flags::sndmore : ::zmq::send_flags::none);
  }
};

StoreServer::StoreServer(const std::string& endpoint) : impl_(std::make_unique<Impl>()) {
  impl_->sock.set(::zmq::sockopt::linger, 0);
  // A frame longer than the longest request part (a value of 1 MiB) makes
  // libzmq drop its sender's connection before the frame is held in memory,
  // and a few requests queue per connection: a client reaching the port
  // cannot grow rank 0's memory by more than that.
  impl_->sock.set(::zmq::sockopt::maxmsgsize,
                  static_cast<std::int64_t>(store_wire::kMaxStoreValueBytes + 256));
  impl_->sock.set(::zmq::sockopt::rcvhwm, 16);
  try {
    impl_->sock.bind(endpoint);
  } catch (const ::zmq::error_t& e) {
    throw Error("rendezvous server cannot bind '" + endpoint + "': " + e.what());
  }
  impl_->endpoint = impl_->sock.get(::zmq::sockopt::last_endpoint);
  impl_->thread = std::thread([this] { impl_->serve(); });
}

StoreServer::~StoreServer() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string StoreServer::endpoint() const { return impl_->endpoint; }

struct RemoteStore::Impl {
  ::zmq::context_t ctx{1};
  ::zmq::socket_t sock{ctx, ::zmq::socket_type::req};
  std::string endpoint;
  double timeout;
  std::mutex mu;

  std::vector<std::string> request(const std::vector<std::string>& parts) {
    std::lock_guard<std::mutex> lk(mu);
    for (std::size_t i = 0; i < parts.size(); ++i)
      sock.send(::zmq::buffer(parts[i]),
                i + 1 < parts.size() ? ::zmq::send_flags::sndmore : ::zmq::send_flags::none);
    std::vector<std::string> reply;
    do {
      ::zmq::message_t m;
      if (!sock.recv(m, ::zmq::recv_flags::none))
        throw TimeoutError("rendezvous server " + endpoint + " did not answer within " +
                           std::to_string(timeout) + " s");
      reply.push_back(str(m));
    } while (sock.get(::zmq::sockopt::rcvmore) && reply.size() < 4);
    if (reply.empty()) throw Error("empty reply from rendezvous server " + endpoint);
    if (reply[0] == "error")
      throw Error("rendezvous server " + endpoint + ": " + (reply.size() > 1 ? reply[1] : ""));
    return reply;
  }
};

RemoteStore::RemoteStore(const std::string& endpoint, double requestTimeoutSeconds)
    : impl_(std::make_unique<Impl>()) {
  GOSSAMER_ENFORCE(requestTimeoutSeconds > 0, "timeout " << requestTimeoutSeconds);
  impl_->endpoint = endpoint;
  impl_->timeout = requestTimeoutSeconds;
  auto& s = impl_->sock;
  s.set(::zmq::sockopt::linger, 0);
  // Whole milliseconds, at least 1 (0 would not wait at all) and at most
  // INT_MAX (a longer bound, infinity included, waits about 24.8 days).
  const double millis = std::ceil(std::min(requestTimeoutSeconds * 1000.0, double{INT_MAX}));
  s.set(::zmq::sockopt::rcvtimeo, std::max(1, static_cast<int>(millis)));
  s.set(::zmq::sockopt::sndtimeo, std::max(1, static_cast<int>(millis)));
  s.set(::zmq::sockopt::req_relaxed, 1);    // a timed-out request may be retried
  s.set(::zmq::sockopt::req_correlate, 1);  // and a late reply to it is dropped
  try {
    s.connect(endpoint);
  } catch (const ::zmq::error_t& e) {
    throw InvalidArgument("bad rendezvous address '" + endpoint + "': " + e.what());
  }
}

RemoteStore::~RemoteStore() = default;

void RemoteStore::set(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  GOSSAMER_ENFORCE(value.size() <= store_wire::kMaxStoreValueBytes,
                   "store value of " << value.size() << " bytes exceeds 1 MiB");
  impl_->request({"set", key, value});
}

bool RemoteStore::claim(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  GOSSAMER_ENFORCE(value.size() <= store_wire::kMaxStoreValueBytes,
                   "store value of " << value.size() << " bytes exceeds 1 MiB");
  auto reply = impl_->request({"claim", key, value});
  if (reply[0] != "ok" || reply.size() != 2 || (reply[1] != "1" && reply[1] != "0"))
    throw Error("malformed reply from rendezvous server " + impl_->endpoint);
  return reply[1] == "1";
}

std::optional<std::string> RemoteStore::tryGet(const std::string& key) {
  checkStoreKey(key);
  auto reply = impl_->request({"get", key});
  if (reply[0] == "missing") return std::nullopt;
  if (reply[0] != "ok" || reply.size() != 2)
    throw Error("malformed reply from rendezvous server " + impl_->endpoint);
  return reply[1];
}

std::optional<std::string> RemoteStore::localAddress() {
  // The endpoint is "tcp://HOST:PORT": the address facing HOST.
  const auto parts = hostAndPort(impl_->endpoint);
  GOSSAMER_CHECK(parts.has_value(), "rendezvous endpoint '" << impl_->endpoint << "'");
  return routeAddressTo(parts->first);
}

std::unique_ptr<Store> openStore(const std::string& address, double requestTimeoutSeconds) {
  checkRendezvousAddress(address);
  if (address.rfind("tcp://", 0) == 0) return std::make_unique<RemoteStore>(address, requestTimeoutSeconds);
  return std::make_unique<FileStore>(address);
}

namespace {
// What the Rendezvous of one process share: rank 0's server per address
// (serving until the process exits) and how many Rendezvous each (address,
// rank) has made. A fork holds the lock across it (pthread_atfork), and the
// child starts afresh: the parent's servers' threads do not exist in it, so
// it leaves their objects alone and never destroys (joins) them.
class ProcessRendezvous {
 public:
  static ProcessRendezvous& instance() {
    static ProcessRendezvous shared;
    return shared;
  }
  ProcessRendezvous(const ProcessRendezvous&) = delete;
  ProcessRendezvous& operator=(const ProcessRendezvous&) = delete;

  // The next generation of (address, rank), and rank 0's server for address.
  std::pair<int, std::shared_ptr<StoreServer>> open(const std::string& address, int rank, bool serve) {
    std::lock_guard<std::mutex> lk(mu_);
    std::shared_ptr<StoreServer> server;
    if (serve) {
      auto& s = servers_[address];
      if (!s) {
        try {
          s = std::make_shared<StoreServer>(bindEndpointOf(address));
        } catch (...) {
          servers_.erase(address);
          throw;
        }
      }
      server = s;
    }
    return {made_[{address, rank}]++, std::move(server)};
  }

  // Takes `generation` of (address, rank) back if no later one was made.
  void giveBack(const std::string& address, int rank, int generation) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = made_.find({address, rank});
    if (it != made_.end() && it->second == generation + 1) --it->second;
  }

 private:
  ProcessRendezvous() {
    ::pthread_atfork([] { instance().mu_.lock(); }, [] { instance().mu_.unlock(); },
                     [] {
                       auto& self = instance();
                       self.mu_.unlock();  // held by the forking thread, the child's only one
                       self.forgetParents();
                     });
  }

  void forgetParents() {
    // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): the parent's, left alone on purpose
    new std::map<std::string, std::shared_ptr<StoreServer>>(std::move(servers_));
    servers_.clear();
    made_.clear();
  }

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<StoreServer>> servers_;
  std::map<std::pair<std::string, int>, int> made_;
};
}  // namespace

Rendezvous::Rendezvous(const std::string& address, int rank, double requestTimeoutSeconds)
    : address_(address), rank_(rank) {
  GOSSAMER_ENFORCE(rank >= 0, "rank " << rank);
  checkRendezvousAddress(address);  // before rank 0 binds anything
  const bool tcp = address.rfind("tcp://", 0) == 0;
  // Rank 0's server is bound before its client connects: a connect that
  // finds no listener yet retries only after zmq's reconnect interval.
  std::tie(generation_, server_) = ProcessRendezvous::instance().open(address, rank, tcp && rank == 0);
  try {
    base_ = openStore(address, requestTimeoutSeconds);
  } catch (...) {
    giveBack();
    throw;
  }
  if (generation_ > 0)
    prefixed_ = std::make_unique<PrefixedStore>(*base_, "gen" + std::to_string(generation_) + "/");
}

Rendezvous::~Rendezvous() = default;

void Rendezvous::giveBack() noexcept {
  try {
    ProcessRendezvous::instance().giveBack(address_, rank_, generation_);
  } catch (...) {  // a lock that cannot be taken: the generation stays used
  }
}

}  // namespace gossamer::zmq
