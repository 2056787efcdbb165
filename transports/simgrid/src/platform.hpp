// Builds a Platform in the running SimGrid engine (platform.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gossamer/transports/simgrid.hpp"

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
/// which runs none of the parent's atexit handlers in the child. Since the
/// process's engine is not made yet, a simulate() with another file can
/// follow. Blocks until the child has exited (not until its pipes' end: a
/// process another thread forks meanwhile may hold them), at most
/// kCheckSeconds; the child is killed and reaped on every way out.
/// @throws InvalidArgument "simgrid platform file FILE:LINE: what" for
///         every error of the file: SimGrid's parse errors, aborts and
///         exits (LINE: where its parser was; left out when unknown), and
///         build()'s own checks; "SimGrid refused its configuration ..."
///         when making the engine from `args` failed, aborted or exited;
///         Error when no child can be started, reading from it failed, or
///         it did not end within kCheckSeconds.
void checkFile(const Platform& p, const std::vector<std::string>& args);

/// checkFile's bound on its child, seconds (a platform file of many
/// thousand hosts loads in a few).
constexpr int kCheckSeconds = 300;

}  // namespace gossamer::simgrid
