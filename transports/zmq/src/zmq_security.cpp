// CURVE admission (zmq_security.hpp). libzmq runs the CURVE handshake
// (CurveZMQ, ZeroMQ RFC 26: Curve25519 key exchange, then every frame
// encrypted and authenticated with crypto_box); before it accepts a client it
// asks the ZAP handler (RFC 27) whether the client's long-term public key is
// admitted. Request frames: version "1.0", request id, domain, address,
// routing id, mechanism "CURVE", the client's 32-byte public key; the reply:
// version, request id, status "200" or "400", status text, user id, metadata.
#include "zmq_security.hpp"

#include <chrono>
#include <cstring>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/log.hpp"
#include "gossamer/transports/zmq.hpp"

namespace gossamer::zmq::curve {

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr int kLinesPerSecond = 10;

std::string z85(const std::string& bytes) {
  if (bytes.size() != 32) return "(" + std::to_string(bytes.size()) + " bytes, not a key)";
  char out[41];
  if (zmq_z85_encode(out, reinterpret_cast<const std::uint8_t*>(bytes.data()), 32) == nullptr) return "?";
  return out;
}

}  // namespace

CurveAdmission::CurveAdmission(::zmq::context_t& ctx, ::zmq::socket_t& serverSocket, const CurveKeys* keys,
                               int rank)
    : zap_(ctx, ::zmq::socket_type::rep),
      monitor_(ctx, ::zmq::socket_type::pair),
      keys_(keys),
      rank_(rank),
      report_(LogLevel::kWarning, kLinesPerSecond, "refusals") {
  zap_.set(::zmq::sockopt::linger, 0);
  if (keys_ != nullptr) {
    try {
      zap_.bind(kZapEndpoint);
    } catch (const ::zmq::error_t& e) {
      throw Error("rank " + std::to_string(rank) + ": cannot serve ZAP at " + kZapEndpoint + ": " + e.what());
    }
  }
  const std::string monitorAt = "inproc://gossamer-admission-monitor";
  if (zmq_socket_monitor(serverSocket.handle(), monitorAt.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    throw Error("rank " + std::to_string(rank) + ": cannot watch the handshakes of its receiving socket");
  monitor_.set(::zmq::sockopt::linger, 0);
  monitor_.connect(monitorAt);
  thread_ = std::thread([this] { run(); });
}

CurveAdmission::~CurveAdmission() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  report_.flush();
}

void CurveAdmission::makeServer(::zmq::socket_t& socket, const CurveKeys& keys) {
  // A key file whose public-key line is another's (edited, or two files
  // mixed up) would publish a key this rank cannot answer for: every
  // handshake with it would fail, and the job go on in pieces.
  char derived[41] = {};
  if (zmq_curve_public(derived, keys.secretKey.c_str()) == 0 && keys.publicKey != derived)
    throw InvalidArgument("security.secret_key: the key file's public-key (" + keys.publicKey +
                          ") is not the public half of its secret-key (that is " + derived +
                          "): write the pair again with gossamer-keygen");
  socket.set(::zmq::sockopt::curve_server, true);
  socket.set(::zmq::sockopt::curve_secretkey, keys.secretKey);
  socket.set(::zmq::sockopt::zap_domain, "gossamer");
}

void CurveAdmission::makeClient(::zmq::socket_t& socket, const CurveKeys& keys, const std::string& serverKey,
                                int serverRank) {
  if (!keys.admits(serverKey))
    throw Error("rank " + std::to_string(serverRank) + " published a public key that is not admitted (" +
                serverKey + "): not connecting to it");
  socket.set(::zmq::sockopt::curve_serverkey, serverKey);
  socket.set(::zmq::sockopt::curve_publickey, keys.publicKey);
  socket.set(::zmq::sockopt::curve_secretkey, keys.secretKey);
}

void CurveAdmission::run() {
  while (!stop_) {
    bool closed = false;
    // (Out of memory while a stranger's handshake is answered, say: that
    // answer is lost, not the process.)
    survivePass("CURVE admission", [&] {
      ::zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0}, {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        ::zmq::poll(items, 2, std::chrono::milliseconds(100));
        if (items[0].revents & ZMQ_POLLIN) answer();
        if (items[1].revents & ZMQ_POLLIN) readMonitor();
      } catch (const ::zmq::error_t& e) {
        closed = e.num() == ETERM;  // the context is shutting down
        if (!closed) GOSSAMER_LOG(kError, "rank " << rank_ << ": CURVE admission: " << e.what());
      }
    });
    if (closed) return;
  }
}

void CurveAdmission::answer() {
  std::vector<std::string> frames;
  for (;;) {
    ::zmq::message_t m;
    if (!zap_.recv(m, ::zmq::recv_flags::dontwait)) break;
    frames.push_back(m.to_string());
    if (!m.more()) break;
  }
  const bool wellFormed = frames.size() >= 7 && frames[0] == "1.0";
  const std::string requestId = frames.size() > 1 ? frames[1] : "";
  const std::string address = frames.size() > 3 ? frames[3] : "?";
  const std::string mechanism = frames.size() > 5 ? frames[5] : "?";
  const std::string key = wellFormed && mechanism == "CURVE" ? z85(frames[6]) : "";
  const bool admit = !key.empty() && keys_ != nullptr && keys_->admits(key);
  const std::string status = admit ? "200" : "400";
  zap_.send(::zmq::buffer(std::string("1.0")), ::zmq::send_flags::sndmore);
  zap_.send(::zmq::buffer(requestId), ::zmq::send_flags::sndmore);
  zap_.send(::zmq::buffer(status), ::zmq::send_flags::sndmore);
  zap_.send(::zmq::buffer(std::string(admit ? "OK" : "key not admitted")), ::zmq::send_flags::sndmore);
  zap_.send(::zmq::buffer(admit ? key : std::string()), ::zmq::send_flags::sndmore);
  zap_.send(::zmq::const_buffer{}, ::zmq::send_flags::none);
  if (!admit) {
    ++refusedKeys_;
    report_("zmq rank " + std::to_string(rank_) + ": refused a connection from " + address + ": " +
            (key.empty() ? "mechanism " + mechanism : "public key " + key + " is not admitted"));
  }
}

void CurveAdmission::readMonitor() {
  ::zmq::message_t event, address;
  if (!monitor_.recv(event, ::zmq::recv_flags::dontwait)) return;
  if (event.more()) (void)monitor_.recv(address, ::zmq::recv_flags::dontwait);
  if (event.size() < 6) return;
  std::uint16_t id;
  std::uint32_t value;
  std::memcpy(&id, event.data(), 2);
  std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
  if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return;  // the ZAP refusal, reported already
  ++failedHandshakes_;
  report_("zmq rank " + std::to_string(rank_) + ": refused a connection on " + address.to_string() +
          ": the " + (keys_ != nullptr ? "CURVE" : "ZMTP") + " handshake failed (" +
          (keys_ != nullptr ? "a plaintext peer or not ZMTP; " : "not ZMTP; ") +
          (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error " + std::to_string(value)
                                                     : "errno " + std::to_string(value)) +
          ")");
}

}  // namespace gossamer::zmq::curve

namespace gossamer::zmq {
std::pair<std::string, std::string> newCurveKeyPair() {
  char pub[41], sec[41];
  if (zmq_has("curve") == 0 || zmq_curve_keypair(pub, sec) != 0)
    throw Error("this libzmq cannot make CURVE keys (built without libsodium?)");
  return {pub, sec};
}
}  // namespace gossamer::zmq
