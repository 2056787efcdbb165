// The membership service: a failure detector per peer and a membership view
// that the survivors agree on, as a wrapper around the transport.
//
// Failure detector. Every rank sends a heartbeat to every member of its view
// each `heartbeatSeconds`. A peer is suspected when the transport gives its
// verdict on it (its connection dropped without a goodbye: a crash, kill -9)
// or when nothing arrived from it for `suspectSeconds` (stopped, hung, cut
// off). A peer that closed its Agent cleanly says so first (a leave message)
// and is not suspected; it leaves the view at the next change.
//
// View change (no central server; the coordinator of each change is the
// lowest-ranked member nobody suspects):
//   1. The rank that suspects p tells every member (suspect message) and
//      revokes its view: pending receives through it fail with ViewChanged.
//      Every rank that hears a suspicion does the same, so all survivors
//      stop using the view within one message delay.
//   2. Each survivor, from Session::recover (at its own step boundary or inside
//      the step that failed), sends every member a state message with the
//      steps it completed, and sends it again with each heartbeat until a
//      view is decided: a report that missed a member (one that still
//      counted a restarted process as dead) would otherwise hold the
//      coordinator until membership.agreement_seconds.
//   3. The coordinator, once every member it does not suspect reported,
//      sends the new view (number+1, the survivors, the largest completed
//      step and the lowest survivor that completed it, and the view it was
//      decided from) to the survivors and to the suspects (so a peer that
//      was only stopped learns it was removed: Expelled). A rank that holds
//      a newer view than its own to go to decides nothing.
//   4. Survivors install it: a rank installs only a view decided from the
//      one it holds (the coordinator decided with its report for that view,
//      and every member reckons who was lost and who is new against the
//      same view). Data messages carry their view's epoch in tag
//      bits 24-31 of the step. Views numbered 16 apart share an epoch, so a
//      rank that installs a view drops what is still queued from older views
//      (it keeps the next view's, which a faster peer may have sent), and a
//      rank removed from the view drops what it had queued: messages of
//      different views never match.
//      A rank that missed a view message gets it again: every control
//      message carries its sender's view, and a rank with a newer view
//      answers with it. A suspicion sent in a view a rank has not installed
//      yet is kept and acted on when it installs that view (of each peer,
//      what it said in the latest such view only: membership.cpp, Early).
//      Every message carries its sender process's incarnation (the tenth of
//      a second its service started, modulo 2^24): one from a process
//      started in place of a failed rank is newer (or any other, once the
//      transport lost the rank), and its peers forget what its predecessor
//      said about views they have not installed, and drop what the
//      predecessor (or one of the 4 processes before it) sent that arrives
//      after it, unless the process they hold has been silent for a
//      suspect period (a late frame or a clock behind cannot shut the live
//      process out).
//   5. With rejoin on, a rank that finds itself removed (it was stopped, or
//      on the other side of a healed partition) sends the members a join
//      message and its state; the next coordinator adds it, and the Agent
//      hands it the current model (the coordinator waits for its report up
//      to 5 heartbeats, at most half of agreementSeconds, and not for a
//      joiner the transport lost). The members of the view it leaves get
//      the view it goes to (they follow it there, unless they hold a newer
//      one) and a suspicion of itself in the view it leaves. A rank listed
//      in a newer view decided from a view it has left since (two views
//      were decided at once and it took the other one) leaves for it the
//      same way, with a suspicion of itself in it, and asks to join the
//      next one.
//   Views are ordered (newer(): number, then size, then coordinator) and a
//   rank only moves to newer ones, so the ranks that can reach each other
//   end in one view. After a partition heals, the smaller side joins the
//   larger: a rank that hears the view of a side with no member in common,
//   fewer members and a higher number numbers its side's next view above
//   it (the view message says how many numbers it skipped), so that side
//   finds this one newer and joins it. Of two sides of one size, the one
//   with the older view joins the other.
// Bytes on the wire: 56 bytes per heartbeat, suspect or state message (while
// a change waits, a state message rides with each heartbeat), 56 +
// 4 x members per view message (Op::kMembership, step 0, segment 0).
//
// The design follows the view-synchronous group membership of Birman and
// Joseph (Isis) with a rotating coordinator, and ULFM's revoke-then-shrink
// (Bland et al., "Post-failure recovery of MPI communication capability",
// IJHPCA 2013) for the collectives.
#pragma once

#include <cstddef>
#include <memory>

#include "gossamer/membership.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::membership {

/// Settings of the failure detector.
struct MembershipOptions {
  /// Interval between heartbeats to each member (> 0, <= 86400).
  double heartbeatSeconds = 0.2;
  /// Silence after which a member is suspected (> heartbeatSeconds, <= 86400).
  double suspectSeconds = 3.0;
  /// Longest wait in recover() for the survivors to agree (>= 0, <= 86400;
  /// the transport's timeout when 0).
  double agreementSeconds = 0;
  /// A rank the others removed while it was stopped asks to rejoin (and its
  /// peers take it back at the next view change) instead of stopping with
  /// Expelled.
  bool rejoin = true;
  /// This process was started in place of a rank of a running job that
  /// failed (gossamer-train --rejoin; needs `rejoin` and a transport that
  /// takes a restarted peer back: zmq). It learns the job's current view from
  /// the members' answers, asks to join it and is added at the next view
  /// change, as a rank that was stopped is.
  bool restarted = false;
  /// Partition policy `majority` (membership.partition): a side decides a
  /// view without the others only while it holds a strict majority of the
  /// view it leaves (half of it with that view's lowest rank breaks a tie),
  /// ranks that left it (closed their transport) left out of the count, and
  /// those the transport lost within a suspect period of the change's start
  /// (crashed: their connections close at once). Ranks it lost later count:
  /// a cut that lasts the transport's timeout ends the same way, and needs
  /// that timeout above 2 suspectSeconds (wrap() checks) so that a cut-off
  /// rank is suspected first. A minority decides nothing: its ranks
  /// wait in recover() (up to a day, the pause; then TimeoutError) until the
  /// majority's view reaches them, then ask to join it. A cut that the
  /// transport reports at once (connections reset) is taken for a crash on
  /// both sides, and both decide a view. false (`merge`): every side goes on
  /// as a view of its own.
  bool majority = false;
};

/// The membership service over a transport: `transport` is the current view
/// (rank() and worldSize() are the view's), `membership` its handle (the
/// same object, valid as long as `transport` lives).
struct Service {
  std::unique_ptr<Transport> transport;
  Membership* membership = nullptr;
};

/// Wraps `inner` (whose ranks are the job's global ranks) in the membership
/// service. Starts a background thread (heartbeats and control messages),
/// joined by close(), abort() and the destructor.
/// @throws InvalidArgument for a null transport or bad options.
Service wrap(std::unique_ptr<Transport> inner, const MembershipOptions& options);

/// Registers the `membership:` section (enabled, heartbeat_seconds,
/// suspect_seconds, agreement_seconds, rejoin, restarted) as a transport
/// service that offers its handle to the Agent (ServiceCapabilities).
void registerWith(Registry& registry);

namespace detail {
/// What a membership service holds of its peers' messages sent in views
/// other than the one it holds (not installed yet: kept for when it is):
/// suspicions, requests to join and reports. Of each kind it keeps only a
/// peer's latest such view (a peer that names a new view has left the one
/// before), so a rank that sends ever newer view numbers cannot make it
/// grow. For tests, which check that bound.
struct HeldForOtherViews {
  std::size_t views = 0;    ///< Distinct views (number, coordinator) they name.
  std::size_t entries = 0;  ///< Suspicions + requests to join + reports.
};
/// @throws InvalidArgument if `membership` is not the handle wrap() returned.
HeldForOtherViews heldForOtherViews(const Membership& membership);
}  // namespace detail

}  // namespace gossamer::membership
