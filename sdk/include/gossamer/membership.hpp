// Membership: which ranks of a job are alive, as a *view* that every survivor
// agrees on before it uses it.
//
// A membership service (transports/membership) sits on the transport and
// presents the current view as a Transport of its own: ranks 0..k-1 are the
// view's members in order of their rank in the job (their "global" rank).
// When a peer dies or falls silent the service revokes the view (every
// pending receive through it fails with ViewChanged), the survivors agree on
// the next view, and the Agent rebuilds its communicator, topology and
// optimizer over it (Agent::recover). Messages of different views never
// match: each view's tags carry its epoch, and what is still queued from the
// views a rank has left is dropped when it installs the next one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"

namespace gossamer {

struct Config;

/// The most ranks a job may hold, counting the ranks that join it while it
/// runs: `membership.max_world_size` when the membership service is on and
/// that is above `world_size`, else `world_size`. Ranks world_size ..
/// max_world_size-1 join with Session on a rank of their own
/// (MembershipOptions::restarted; gossamer-train --join).
int maxWorldSize(const Config& config);

class Store;

/// Claims a rank for a process that joins the running job: the lowest of
/// worldSize .. maxWorldSize-1 that no process claimed before, through the
/// job's rendezvous (Store::claim of "<prefix>/join/<rank>", whose value
/// names this process: `who`). Build the Session with that rank and
/// membership.restarted: true.
/// @throws Error if every rank up to maxWorldSize is taken ("the job is
///         full"), or from the store (InvalidArgument for one that cannot
///         claim).
int claimJoinRank(Store& store, int worldSize, int maxWorldSize, const std::string& who,
                  const std::string& prefix = "gossamer");

/// A membership view: the ranks of the job (global ranks, ascending) that
/// are alive, and the view's identity (number, coordinator). Views are
/// ordered by number, then by size (more members), then by coordinator
/// (lower first); a rank always moves to a newer view. After a partition
/// heals, the smaller side joins the larger (which numbers its next view
/// above the smaller side's to that end); of two sides of one size, the one
/// whose view is older joins the other.
struct View {
  std::uint64_t number = 0;  ///< 0 for the job's first view, +1 per change (or more: see above).
  int coordinator = -1;      ///< Global rank that issued it (-1: the first view).
  std::vector<int> members;  ///< Global ranks, ascending.

  /// Position of global rank `global` in members (its rank in the view), or -1.
  int localRank(int global) const;
  /// Whether `a` is newer than `b`.
  friend bool newer(const View& a, const View& b) {
    if (a.number != b.number) return a.number > b.number;
    if (a.members.size() != b.members.size()) return a.members.size() > b.members.size();
    return a.coordinator < b.coordinator;
  }
};

/// The outcome of one view change, the same on every survivor.
struct ViewChange {
  View view;                ///< The new view.
  std::vector<int> lost;    ///< Global ranks of the previous view that are not in the new one.
  std::vector<int> joined;  ///< Global ranks that rejoined (this rank, on the rank that rejoined).
  /// The most steps any survivor had completed when the old view was revoked:
  /// in lockstep algorithms every survivor continues from there.
  std::uint64_t resumeStep = 0;
  /// The fewest steps any survivor had completed: resumeStep - fewestSteps
  /// steps were skipped by the ranks furthest behind (lockstep algorithms).
  std::uint64_t fewestSteps = 0;
  /// Global rank of the lowest survivor that had completed resumeStep steps;
  /// -1 when every survivor had and no rank joined (nobody is behind: a rank
  /// that joins takes a survivor's model, however many steps it reports).
  int modelSource = -1;
  /// A survivor that had completed resumeStep steps had a collective of its
  /// own to run before its next step (inside Agent::survive, or
  /// Agent::setCollectivePending said so): every member runs that
  /// collective, ranks that catch up and ranks that had completed it alike.
  /// False: in lockstep algorithms none does (ranks still in it drop it).
  bool evaluating = false;
  /// The ranks that joined were a side of a partition that trained on as a
  /// view of its own (membership.partition: merge): their models are merged
  /// with the members', not replaced. Replicated models (AllReduce-SGD) are
  /// averaged over the new view, which weights each side by its size;
  /// gossip keeps every rank's model and push-sum weight (the mass adds).
  bool merged = false;
  /// Seconds from the revocation of the old view (on this rank) to the new one.
  double seconds = 0;
  /// When the new view was installed on this rank: seconds since the Unix
  /// epoch (system clock), to compare with events outside the job.
  double installedAtUnixSeconds = 0;
};

/// View changes in a row, inside one call that redoes its work after each
/// (Session::survive, a step of the optimizer the Session hands out), that
/// lost and joined no rank. A PeerFailure after that many is not a failure
/// the membership service sees (a link that fails while the peer's
/// heartbeats arrive, or code of the caller's own that raises PeerFailure):
/// the call lets it out instead of changing views again and again. A
/// ViewChanged (another rank revoked the view) is always recovered from.
inline constexpr int kMaxEmptyViewChanges = 3;

/// True when `change` lost and joined no rank.
inline bool emptyViewChange(const ViewChange& change) { return change.lost.empty() && change.joined.empty(); }

/// A receive or send through a view that was revoked: a peer died or fell
/// silent, and the survivors are changing the view. peer() is the global
/// rank suspected first (-1 if unknown). Recover with Agent::recover().
class ViewChanged : public PeerFailure {
 public:
  ViewChanged(int peer, const std::string& msg) : PeerFailure(peer, msg) {}
};

/// This rank was removed from the view by its peers (it was silent for
/// longer than membership.suspect_seconds: stopped, or cut off) and may not
/// continue in the job (membership.rejoin off). peer() is this rank.
class Expelled : public PeerFailure {
 public:
  Expelled(int self, const std::string& msg) : PeerFailure(self, msg) {}
};

/// The membership interface the Agent uses; implemented by the membership
/// service's transport (transports/membership). Thread-safe.
class Membership {
 public:
  virtual ~Membership() = default;
  /// The view in force.
  virtual View view() const = 0;
  /// True once the view in force was revoked (a peer is suspected, or a peer
  /// started a view change); recover() installs the next one.
  virtual bool revoked() const = 0;
  /// Takes part in the view change: revokes the view if it was not yet,
  /// reports that this rank completed `completedSteps` steps (optimizer
  /// steps) and waits until the survivors agree on the next view, then
  /// installs it. A peer that failed is found by the failure detector (its
  /// connection's verdict, or its silence), not named by the caller.
  /// @throws Expelled if this rank is not in the new view; TimeoutError if no
  ///         view is agreed within the transport's timeout.
  /// `evaluating`: this rank recovers from a collective of its own between
  /// steps (Agent::survive), not from a step.
  virtual ViewChange recover(std::uint64_t completedSteps, bool evaluating) = 0;
  /// The global ranks lost so far, in the order they were lost.
  virtual std::vector<int> lost() const = 0;
};

}  // namespace gossamer
