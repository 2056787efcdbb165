// CURVE admission for the zmq transport: a ZAP handler (ZeroMQ RFC 27) that
// admits only the listed public keys, and a watch on the receiving socket's
// failed handshakes (a plaintext peer, or one that speaks no ZMTP, never
// reaches ZAP). Every refusal is logged with the remote address and key, at
// most 10 lines a second; the rest are counted and summed up in the next line.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <zmq.hpp>

#include "gossamer/security.hpp"

namespace gossamer::zmq::curve {

/// Runs on its own thread for the life of the transport's context. The ZAP
/// endpoint is per context, so one handler serves every socket of it.
class CurveAdmission {
 public:
  /// Binds inproc://zeromq.zap.01 in `ctx` and watches `serverSocket`'s
  /// handshakes. @throws Error if the ZAP endpoint is taken or the socket
  /// cannot be monitored.
  CurveAdmission(::zmq::context_t& ctx, ::zmq::socket_t& serverSocket, const CurveKeys& keys, int rank);
  ~CurveAdmission();
  CurveAdmission(const CurveAdmission&) = delete;
  CurveAdmission& operator=(const CurveAdmission&) = delete;

  /// Connections refused so far: by key (ZAP) and by failed handshake.
  std::uint64_t refusedKeys() const { return refusedKeys_.load(); }
  std::uint64_t failedHandshakes() const { return failedHandshakes_.load(); }

  /// Makes `socket` a CURVE server with this peer's keys, its handshakes
  /// sent to the handler.
  static void makeServer(::zmq::socket_t& socket, const CurveKeys& keys);
  /// Makes `socket` a CURVE client of the server with `serverKey`.
  /// @throws Error if `serverKey` is not admitted (a rendezvous entry an
  ///         attacker wrote cannot lead this peer to an unknown server).
  static void makeClient(::zmq::socket_t& socket, const CurveKeys& keys, const std::string& serverKey,
                         int serverRank);

 private:
  void run();
  void answer();       // one ZAP request
  void readMonitor();  // one monitor event
  void report(const std::string& what);

  ::zmq::socket_t zap_, monitor_;
  const CurveKeys& keys_;
  int rank_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> refusedKeys_{0}, failedHandshakes_{0};
  std::uint64_t suppressed_ = 0;
  double windowStart_ = 0;
  int linesInWindow_ = 0;
  std::thread thread_;
};

}  // namespace gossamer::zmq::curve
