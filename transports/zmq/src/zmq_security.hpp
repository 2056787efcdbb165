// Admission for the zmq transport's receiving socket. Always: a watch on its
// failed handshakes (bytes that are not ZMTP, a plaintext peer of a CURVE
// job), each counted and logged with the remote address. Under CURVE also a
// ZAP handler (ZeroMQ RFC 27) that admits only the listed public keys and
// logs every refusal with the address and key. At most 10 lines a second
// are logged; the rest are counted and summed up in the next line.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <zmq.hpp>

#include "gossamer/kit/security.hpp"
#include "gossamer/log.hpp"

namespace gossamer::zmq::curve {

/// Runs on its own thread for the life of the transport's context. The ZAP
/// endpoint is per context, so one handler serves every socket of it.
class CurveAdmission {
 public:
  /// Watches `serverSocket`'s handshakes and, when `keys` is not null, binds
  /// inproc://zeromq.zap.01 in `ctx` to admit the clients whose public key
  /// `keys` lists (`keys` must outlive this object).
  /// @throws Error if the ZAP endpoint is taken or the socket cannot be monitored.
  CurveAdmission(::zmq::context_t& ctx, ::zmq::socket_t& serverSocket, const CurveKeys* keys, int rank);
  ~CurveAdmission();
  CurveAdmission(const CurveAdmission&) = delete;
  CurveAdmission& operator=(const CurveAdmission&) = delete;

  /// Connections refused so far: by key (ZAP) and by failed handshake.
  std::uint64_t refusedKeys() const { return refusedKeys_.load(); }
  std::uint64_t failedHandshakes() const { return failedHandshakes_.load(); }

  /// Makes `socket` a CURVE server with this peer's keys, its handshakes
  /// sent to the handler.
  /// @throws InvalidArgument if the public key is not the secret key's
  ///         public half (libzmq's zmq_curve_public).
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

  ::zmq::socket_t zap_, monitor_;
  const CurveKeys* keys_;
  int rank_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> refusedKeys_{0}, failedHandshakes_{0};
  LogLimiter report_;
  std::thread thread_;
};

}  // namespace gossamer::zmq::curve
