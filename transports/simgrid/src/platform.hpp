// Builds a Platform in the running SimGrid engine (platform.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gossamer/transports/simgrid.hpp"

namespace simgrid::s4u {
class Host;
class Link;
}  // namespace simgrid::s4u

namespace gossamer::simgrid {

/// One-way latency from rank `src` to rank `dst` (seconds) of a built platform.
using RouteLatency = std::function<double(int src, int dst)>;

/// Builds `p` (validated) in the engine made by simulate(): hosts "rank-R"
/// in their islands' zones, or `p.file`'s platform. The links carry no
/// latency in SimGrid's flows: the transport holds each message for its
/// route's latency, which this returns (the generated platform's inside
/// latency, plus the between latency across islands; a file's links'
/// latencies summed along SimGrid's route, read before they are zeroed).
/// @throws InvalidArgument if the file lacks a host rank-R for R < p.hosts,
///         or is named *.so or *.dylib (SimGrid's platform libraries) and
///         cannot be loaded or lacks load_platform; for what SimGrid throws
///         on a file it cannot load (its ParseError, or another exception):
///         "simgrid platform file FILE:LINE: what", LINE where its parser
///         was (left out when unknown, and for a platform library).
RouteLatency build(const Platform& p);

/// The links of SimGrid's route from `from` (rank `src`'s host) to `to`
/// (rank `dst`'s) in `file`'s platform. (SimGrid crashes, aborts or loops
/// without end on some missing routes of a Dijkstra zone: checkFile asks
/// for every pair's route in its child first.)
/// @throws InvalidArgument "simgrid platform file FILE: no route from rank-S
///         to rank-D ..." when SimGrid throws, or gives no link between two
///         hosts (it aborts the process on a flow over none).
std::vector<::simgrid::s4u::Link*> routeOf(const std::string& file, const ::simgrid::s4u::Host* from,
                                           const ::simgrid::s4u::Host* to, int src, int dst);

/// The line of a platform file that SimGrid's parser has reached while
/// build() loads the file; 0 outside a load, or with a SimGrid that does
/// not export its scanner's line. Async-signal-safe: it reads an int (the
/// check's abort handler calls it).
int parsingLine() noexcept;

/// Builds `p` (with a file) in a child process (fork) with an engine of its
/// own, made from `args` (SimGrid's command line, as simulate() makes it),
/// before simulate() makes the process's engine. SimGrid aborts the process
/// on many platform files that its XML parser takes (an unknown routing, a
/// tag it removed, an actor in the file, a trace file that is missing, a
/// route in a zone of routing None, a WiFi link with a latency ...): they
/// abort the child instead, and SimGrid's critical message comes back; so
/// does an exit() inside SimGrid (a configuration item's value "help"),
/// which runs none of the parent's atexit handlers in the child. Once the
/// file is built, if it has a zone of routing Dijkstra, DijkstraCache or
/// Floyd (those compute routes; the others look them up), the child asks
/// SimGrid for the route between every ordered pair of the job's hosts
/// (rank-0 .. rank-<p.hosts - 1>): in a Dijkstra zone in which one host
/// cannot reach another, SimGrid crashes (a host without routes), loops
/// without end, or throws (Floyd throws) on such a route. Pairs still
/// unasked after kRouteSeconds are left to the simulation, as before (a
/// pair's route is computed when first used); one route that takes
/// kRouteStallSeconds is taken for such a loop. (Dijkstra computes each
/// route afresh: about 0.5 ms each for 300 hosts, so 300 hosts take some
/// 45 s; DijkstraCache computes once per source.) Since the process's
/// engine is not made yet, a simulate() with another file can follow.
/// Blocks until the child has exited (not until its pipes' end: a process
/// another thread forks meanwhile may hold them), at most kCheckSeconds;
/// the child is killed and reaped on every way out.
/// @throws InvalidArgument "simgrid platform file FILE:LINE: what" for
///         every error of the file: SimGrid's parse errors, aborts and
///         exits (LINE: where its parser was; left out when unknown), and
///         build()'s own checks; "simgrid platform file FILE: no route from
///         rank-S to rank-D ..." for a pair whose route SimGrid could not
///         give (naming how it would have ended the process, if it would);
///         "SimGrid refused its configuration ..." when making the engine
///         from `args` failed, aborted or exited; Error when no child can
///         be started, reading from it failed, or it did not end within
///         kCheckSeconds.
void checkFile(const Platform& p, const std::vector<std::string>& args);

/// Checks SimGrid's configuration items `items` ("name:value", each passed
/// as --cfg=name:value after `base`, SimGrid's command line without them)
/// in a child process before simulate() makes the process's engine: SimGrid
/// throws on an unknown name or a value it cannot read, but aborts the
/// process on a model it does not know (network/model:Bogus) and exits on
/// a value "help". The child makes an engine from them, builds a generated
/// platform of two hosts and runs one flow and one execution (models that
/// fail only when used). With several items and a refusal, each is tried
/// alone to name the one refused. Bounded as checkFile is.
/// @throws InvalidArgument "SimGrid refused its configuration item 'ITEM'
///         ...: what" (every item named when none is refused alone); Error
///         when no child can be started, reading from it failed, or it did
///         not end within kCheckSeconds.
void checkConfig(const std::vector<std::string>& base, const std::vector<std::string>& items);

/// checkFile's bound on its child, seconds (a platform file of many
/// thousand hosts loads in a few).
constexpr int kCheckSeconds = 300;

/// How long checkFile's child asks for routes, seconds, before it leaves
/// the pairs not yet asked to the simulation.
constexpr int kRouteSeconds = 60;

/// How long one route may take in checkFile's child before it is taken for
/// SimGrid looping without end over a missing route, seconds.
constexpr int kRouteStallSeconds = 5;

}  // namespace gossamer::simgrid
