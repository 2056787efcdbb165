// Session: lockstep rounds that roll back (RoundProgram), for programs whose
// rounds are collectives of their own rather than a DistributedOptimizer's
// steps (gossamer-admm's ADMM iterations, gossamer-sparse's rounds).
//
// Each rank reports its newest commit (the rounds completed up to it) to the
// view change as its completed steps; the survivors agree on the view, and
// every member returns to ViewChange::fewestSteps, the newest commit every
// one of them holds. Ranks are at most one commit apart: every commit
// follows collectives of every member since the one before (a rank that
// completed commit c + 1 holds c as well, as its previous one), so each
// member holds that commit as its newest or the one before. The rounds
// after it are run again over the new view. Nothing is sent here beyond the
// membership service's agreement and what the program's restore() sends.
#include "elastic/session_impl.hpp"
#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

// What round programs cannot do: take a rank back (it would have no state
// to continue from) or keep checkpoints.
void checkRoundSettings(const Config& c, bool elastic, const CheckpointSettings& ck) {
  if (elastic && c.get<bool>("membership.rejoin"))
    throw ConfigError(c.sourceFile, 0, "membership.rejoin",
                      "this program's rounds go on over the survivors but take no rank back: set it false");
  if (elastic && c.get<bool>("membership.restarted"))
    throw ConfigError(c.sourceFile, 0, "membership.restarted", "this program takes no rank back");
  if (ck.everySteps > 0 || ck.resume)
    throw ConfigError(c.sourceFile, 0, ck.resume ? "checkpoint.resume" : "checkpoint.every_steps",
                      "this program keeps no checkpoints");
}

}  // namespace

// Agrees on the next view and has the program return to the newest commit
// every member holds, over again while peers fail meanwhile. Returns it;
// `empty`: every view installed lost and joined nobody.
std::uint64_t Session::Impl::agreeAndRestore(RoundProgram& program, std::uint64_t newest,
                                             std::uint64_t previous, bool& empty) {
  empty = true;
  for (;;) {
    try {
      const ViewChange change = recover();
      empty = emptyViewChange(change) && empty;
      if (membership->revoked()) continue;  // revoked again meanwhile: the next view
      const std::uint64_t back = change.fewestSteps;
      GOSSAMER_CHECK(back == newest || back == previous, "the survivors return to the commit after "
                                                             << back << " rounds; this rank holds " << newest
                                                             << " and " << previous);
      program.restore(back, change);
      return back;
    } catch (const Expelled&) {
      throw;
    } catch (const PeerFailure&) {
      empty = false;  // another peer failed during the change or the restore: the next view
    }
  }
}

std::uint64_t Session::runRounds(std::uint64_t count, RoundProgram& program) {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(!m.loop, "runRounds() after train()");
  GOSSAMER_ENFORCE(!m.rounds, "runRounds() inside runRounds()");
  checkRoundSettings(m.a.config, m.membership != nullptr, m.checkpoint);
  struct Inside {
    Impl& m;
    explicit Inside(Impl& x) : m(x) { m.rounds = true; }
    ~Inside() { m.rounds = false; }
  } inside(m);
  std::uint64_t newest = 0, previous = 0;  // the commits this rank holds
  m.roundsCommitted = 0;
  std::uint64_t round = 0;
  bool more = round < count;
  detail::EmptyChangeCount emptyChanges;
  for (;;) {
    try {
      if (m.membership != nullptr && m.membership->revoked())
        throw ViewChanged(-1, "the view was revoked before round " + std::to_string(round));
      if (!more) {
        // Done once every member is: a member still in the last round (a
        // peer failed in it) rolls every member back with it.
        m.a.communicator->barrier();
        break;
      }
      more = program.run(round);
      ++round;
      more = more && round < count;
      if (program.commit(round)) {
        previous = newest;
        newest = round;
        m.roundsCommitted = newest;
      }
    } catch (const Expelled&) {
      throw;
    } catch (const PeerFailure& e) {
      if (m.membership == nullptr) throw;
      const bool own = detail::EmptyChangeCount::own(e, *m.membership);
      if (emptyChanges.exhausted(own)) throw;  // not a failure the membership service sees
      bool empty = true;
      const std::uint64_t back = m.agreeAndRestore(program, newest, previous, empty);
      emptyChanges.recovered(own, empty);
      newest = previous = back;
      m.roundsCommitted = back;
      round = back;
      more = round < count;
    }
  }
  return round;
}

}  // namespace gossamer
