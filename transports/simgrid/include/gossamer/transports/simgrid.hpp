// The simgrid transport: the job's ranks as SimGrid actors in one process,
// their messages timed by SimGrid's flow-level network model.
//
// Every rank is an S4U actor on a simulated host (Platform). isend copies the
// bytes and queues them on the pair's stream; once the route's latency has
// passed, a flow of their simulated size (payload plus the 48-byte frame
// header of the real transports) goes from the source's host to the
// destination's and takes what the platform's links give it, shared with
// every other flow on them. At its simulated arrival the message goes into
// the destination rank's kit Mailbox, which matches receives by source and
// tag exactly as the real transports do. An actor waiting on a request waits
// in simulated time (ProgressEngine::keepsTime), so timeouts are simulated
// seconds too.
//
// What runs is the SDK's own code: collectives, optimizers and services call
// the Transport interface as they do over zmq; nothing in them knows it is
// simulated. Computation takes no simulated time unless the caller says so
// (simgrid::compute).
//
// SimGrid runs one engine per process: simulate() may be called once (a
// call refused for a bad platform or configuration does not count), and
// not in a process that used makeHostedGroup (ranks driven by ordinary
// threads, with the engine on a thread of its own). Actors
// share one OS thread (SimGrid's default contexts), so simulate() installs a
// ContextLocal provider (kit/context_local.hpp): the SDK's per-thread state
// (collective scratch, wait time) is per actor; and it installs a TimeSource
// (kit/clock.hpp): the SDK's deadlines, polling pauses and metrics records
// are in simulated seconds (the records' "time" counts from the real Unix
// time at which simulate() began); and a TaskStarter (kit/executor.hpp):
// a task a rank starts (HiPS's streams, DiLoCo's overlapped outer step) is an
// actor on the rank's host. A rank must not start
// OS threads of its own, nor wait on anything but its transport's requests.
//
// Source: SimGrid's S4U interface (Casanova et al., "Versatile, Scalable, and
// Accurate Simulation of Distributed Applications and Platforms", JPDC 2014);
// its flow-level TCP model (Velho et al., "On the Validity of Flow-level TCP
// Network Models for Grid and Cloud Simulations", TOMACS 2013).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/kit/network.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::simgrid {

/// The simulated network (platform.cpp): one host per rank, "rank-R", in
/// islands. Inside an island every host has its own link to the island's
/// switch: sending at insideBytesPerSecond with a one-way latency of
/// insideLatencySeconds, receiving at the same rate (unbounded with
/// receiveUnshaped). Between islands, what enters island b shares b's link of
/// betweenBytesPerSecond, which adds betweenLatencySeconds; what leaves an
/// island is not limited. So a message inside an island takes
/// insideLatencySeconds + bytes / insideBytesPerSecond when alone on its links.
///
/// With burst sizes, the host's sending link and the island's link from the
/// others are token buckets, as tc tbf shapes them on the namespace hosts
/// (tests/hosts/hosts.py): tokens (bytes) come at the link's rate up to the
/// burst size, every message takes as many as its bytes (going into debt
/// when there are too few), and the bytes of a message for which every
/// shaped link on its path holds tokens at its start go at once; the rest
/// flows at the links' rates.
struct Platform {
  int hosts = 2;                          ///< Number of hosts (= world size), >= 1.
  std::vector<std::vector<int>> islands;  ///< A partition of [0, hosts); empty: one island.
  double insideBytesPerSecond = 125e6;    ///< A host's link, bytes per second (125e6: 1 Gbit/s).
  double insideLatencySeconds = 50e-6;    ///< One-way latency inside an island, seconds.
  double betweenBytesPerSecond = 125e6;   ///< Each island's link from the others, bytes per second.
  double betweenLatencySeconds = 0;       ///< Added one-way latency between islands, seconds.
  bool receiveUnshaped = false;           ///< Hosts receive at any rate (as tc shapes only egress).
  double insideBurstBytes = 0;            ///< A host's sending link's token bucket, bytes (0: none).
  double betweenBurstBytes = 0;           ///< Each island's link's token bucket, bytes (0: none).
  double flopsPerSecond = 1e9;            ///< Each host's speed, for simgrid::compute.
  /// Bytes the links carry (and the token buckets count) per byte of a
  /// message (payload plus frame header), >= 1: the framing of the
  /// protocols under the transport. 1: none (SimGrid's own bandwidth factor,
  /// 0.97 by default, stands for it). shapeLikeNamespaceHosts() sets TCP's
  /// over IPv4 and Ethernet at a 1,500-byte MTU, as tc tbf counts it.
  double wireBytesPerByte = 1;
  /// A SimGrid platform file (XML) instead of all of the above but `hosts`:
  /// it must hold hosts "rank-0" .. "rank-<hosts-1>". simulate() loads it
  /// first in a child process, where SimGrid's aborts on a file it cannot
  /// take (most of its errors but the XML parser's) do no harm.
  std::string file;

  /// The job's `network:` section (islands, inside_gbps, between_gbps,
  /// between_delay_ms), with `insideLatencySeconds` inside islands.
  static Platform fromNetwork(const NetworkLayout& layout, double insideLatencySeconds);
  /// Sets the burst sizes that tests/hosts/hosts.py gives tc tbf (one
  /// millisecond at the link's rate, at least 64 KiB), and wireBytesPerByte
  /// to what tbf counts of a TCP stream over the hosts' veth pairs: 1,514
  /// bytes (Ethernet 14, IPv4 20, TCP with timestamps 32) per 1,448 bytes
  /// of stream at their 1,500-byte MTU, 1.0456.
  void shapeLikeNamespaceHosts();
  /// @throws InvalidArgument naming the field that is out of range, or the
  ///         rank an island partition misses or repeats.
  void validate() const;
};

/// Options of one rank's transport.
struct Options {
  int rank = 0;                ///< This rank, 0 <= rank < worldSize.
  int worldSize = 1;           ///< Ranks in the job (the platform's hosts).
  double timeoutSeconds = 60;  ///< Bound on every wait, simulated seconds.
};

/// The result of one simulation.
struct Outcome {
  double simulatedSeconds = 0;  ///< Simulated time when the last rank or task returned (or deadlocked).
  /// "rank R: what()" for every rank whose function threw, "rank R: deadlock
  /// at T s simulated: ... waiting for W ..." for every rank of a deadlock
  /// (W: what it waited for, such as "a receive from rank(s) {1} tag(...)"
  /// or "the end of its task rank-R-task-K"). After each rank's, its tasks'
  /// (kit/executor.hpp's, in the order started): "rank R task K: what()"
  /// for a task whose body threw, "rank R task K: deadlock at ..." for one
  /// of a deadlock.
  std::vector<std::string> errors;
  /// Bytes the ranks sent each other (payloads plus the 48-byte header of
  /// each message; a rank's sends to itself left out), and of those the
  /// bytes that crossed from one island to another.
  double bytesSent = 0, bytesBetweenIslands = 0;
};

/// Builds `platform`, runs `rank(r)` as the actor of rank r on host "rank-r"
/// for every r < platform.hosts, and returns when all have returned. Each
/// function makes its rank's transport with makeTransport (or through a
/// Registry given registerWith). Exceptions thrown by a rank are caught and
/// reported in Outcome::errors; the other ranks go on (their waits on it
/// time out, or fail with PeerFailure once its transport is closed). The
/// tasks the ranks start (kit/executor.hpp) are actors too: the simulation
/// ends when every rank and task has returned. A deadlock (every rank and
/// task left waiting without end: an infinite timeout, a join of a task
/// that does not end, or an execution that never ends) ends the simulation
/// there, and each of those ranks and tasks is reported in Outcome::errors
/// as a deadlock, with what it waited for. A task whose body throws is
/// reported there too (rather than ending the process).
/// @param config SimGrid configuration items ("key:value", as its --cfg).
/// @throws InvalidArgument on a bad platform or configuration item; for a
///         platform file SimGrid cannot load, "simgrid platform file
///         FILE:LINE: what" (SimGrid's message; LINE where its parser was,
///         left out when unknown); over a zone that computes routes
///         (Dijkstra, DijkstraCache, Floyd), "simgrid platform file FILE:
///         SimGrid cannot compute the route from rank-S to rank-D (...)" or
///         "... no route from ..."; for a configuration item SimGrid would
///         abort, exit or throw on, "SimGrid refused its configuration item
///         'NAME:VALUE' ...". These are found in child processes before
///         SimGrid's engine is made, so a later simulate() may still run.
///         Error if called after a simulate() that made the engine, or after
///         makeHostedGroup (SimGrid's engine cannot be made twice), or when
///         a checking child process cannot be started or does not end within
///         300 s.
Outcome simulate(const Platform& platform, const std::function<void(int rank)>& rank,
                 const std::vector<std::string>& config = {});

/// This rank's transport. Call it from the rank's actor, inside simulate().
/// @throws InvalidArgument on bad options; Error outside simulate().
std::unique_ptr<Transport> makeTransport(const Options& options);

/// `worldSize` ranks of a simulated network for ordinary threads (tests,
/// tools that drive ranks from threads of their own, such as the transport
/// conformance suite): index r is rank r's transport, usable from any thread.
/// The first call starts SimGrid's engine on a thread of its own, over a
/// one-island platform of 64 hosts (Platform's defaults: 1 Gbit/s, 50 us);
/// every later group shares it. Messages take the same path as inside
/// simulate() (per-pair streams, latency timers, flows timed by
/// SimGrid), handed to the engine's thread by a gateway actor; the engine
/// runs a batch of them until all have arrived, then waits for more. Waits
/// and timeouts are in real seconds (the callers are not actors), and
/// simulated time advances only while messages are in flight.
/// @param worldSize 1..64 ranks.
/// @param timeoutSeconds the transports' timeoutSeconds() (real seconds).
/// @throws InvalidArgument on a size or timeout out of range; Error if
///         simulate() has run in this process, or the engine stopped.
std::vector<std::unique_ptr<Transport>> makeHostedGroup(int worldSize, double timeoutSeconds);

/// The hosted simulation's clock (makeHostedGroup): the simulated time, in
/// seconds, at which its latest message arrived (set before the message is
/// delivered, so a thread whose receive completed reads that time or a
/// later one); 0 before the first group. Callable from any thread.
double hostedSeconds();

/// Simulated seconds since simulate() started (SimGrid's clock).
double now();

/// Takes `flops` floating-point operations of simulated time on this rank's
/// host (at Platform::flopsPerSecond): the compute part of a step.
/// @throws InvalidArgument for a negative or infinite `flops`; Error outside
///         a rank's actor.
void compute(double flops);

/// Sleeps `seconds` of simulated time in the calling actor.
void sleepFor(double seconds);

/// Registers "simgrid" (transport.kind: simgrid; keys: transport.timeout_seconds)
/// with `registry`: for programs that run jobs inside simulate().
void registerWith(Registry& registry);

}  // namespace gossamer::simgrid
