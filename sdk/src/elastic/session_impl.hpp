// What a Session holds (session.cpp, epochs.cpp, checkpoints.cpp, rounds.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/agent_impl.hpp"
#include "elastic/checkpoint_settings.hpp"
#include "elastic/resilient_optimizer.hpp"
#include "gossamer/session.hpp"

namespace gossamer {

/// The epoch protocol's state (Session::train).
struct EpochLoop {
  TrainingPlan plan;
  std::span<float> params;
  std::uint64_t totalSteps = 0;
  int evaluated = 0;                 ///< Epochs whose evaluation is behind this rank.
  int epoch = 0;                     ///< The epoch nextEpoch() positioned the loop at.
  std::uint64_t firstStep = 0;       ///< steps() when it did.
  double lossSum = 0;                ///< Losses of this epoch's steps so far...
  std::uint64_t lossSteps = 0;       ///< ...and how many steps they are (fewer after a rejoin).
  int lossEpoch = 0;                 ///< The epoch whose mean loss epochLoss is...
  double epochLoss = 0;              ///< ...for an evaluation run again without training,
  std::uint64_t epochLossSteps = 0;  ///< ...over this many steps.
  std::size_t changesSeen = 0;       ///< View changes realign() has looked at.
  bool closed = false;               ///< The last epoch's evaluation ran plan.closing.
  bool moved = false;                ///< A step of this epoch did not count.
  std::int64_t resumedFrom = -1;     ///< The checkpoint step the run resumed at.
  std::vector<std::uint64_t> rejoinedAt;
};

struct Session::Impl {
  Impl(const Config& config, int rank, Store& store, const Registry& registry);

  Agent agent;
  Agent::Impl& a;          ///< agent's insides (Session is its friend)
  Membership* membership;  ///< null without the membership service
  CheckpointSettings checkpoint;
  detail::ResilientOptimizer* resilient = nullptr;  ///< inside a.optimizer, when elastic
  std::vector<std::size_t> tensorSizes;
  std::vector<ViewChange> changes;
  bool evaluating = false;  ///< inside survive(): a collective of the caller's own
  // View changes that moved this rank past the point where a collective of
  // its own in progress (survive()) belonged: it jumped to the survivors'
  // step, or they are past the collective, or it went back to one.
  std::uint64_t moves = 0;
  // A view change sent this rank back to the collective it had completed
  // after this many steps (the others were still in it): until it runs it
  // again, it reports it as pending.
  std::optional<std::uint64_t> owedCollective;
  std::optional<EpochLoop> loop;      ///< train()'s
  bool rounds = false;                ///< inside runRounds
  std::uint64_t roundsCommitted = 0;  ///< runRounds: the newest commit, reported as the steps

  // checkpoints.cpp
  /// With checkpoint.every_steps or checkpoint.resume on: ConfigError on
  /// that key if `optimizer` cannot save its state, before the first step
  /// rather than at the first save (not probed while it is not built).
  void checkCheckpointable(const DistributedOptimizer& optimizer) const;

  // session.cpp
  std::uint64_t steps() const;
  bool collectivePending() const;
  ViewChange recover();
  void realignOptimizer(const ViewChange& change, std::uint64_t completed, bool pending);
  void record(const ViewChange& change, std::uint64_t completed, bool pending, double weightBefore,
              double weightAfter);
  bool survive(const std::function<void()>& f);
  DistributedOptimizer& makeOptimizer(const std::vector<std::size_t>& tensorSizes);
  // epochs.cpp
  bool realign();
  // rounds.cpp
  std::uint64_t agreeAndRestore(RoundProgram& program, std::uint64_t newest, std::uint64_t previous,
                                bool& empty);
  // checkpoints.cpp
  void resume();
  void save(std::uint64_t step);
};

}  // namespace gossamer
