// Session: checkpoints of a training run and the resume from them (the
// `checkpoint:` section). Every rank saves its own state at the same steps,
// rank-R-step-S.ckpt in checkpoint.dir (gossamer/checkpoint.hpp's atomic
// files), and keeps the last two it wrote: a rank killed while writing still
// has the one before. A resumed job starts from the newest step every rank
// has (two allreduces of a float64 per candidate step); a process that replaces a failed rank of a running
// job (membership.restarted) takes its own newest one and asks the job to
// take it back. A checkpoint holds: the model (float32), the step, the job's
// world size and seed, the epoch's loss sum so far, the view, the
// optimizer's state ("optimizer." sections) and the application's
// (TrainingPlan::saveState).
#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <typeinfo>

#include "elastic/session_impl.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"

namespace gossamer {

namespace {

std::string checkpointPath(const std::string& dir, int rank, std::uint64_t step) {
  return dir + "/rank-" + std::to_string(rank) + "-step-" + std::to_string(step) + ".ckpt";
}

// The steps this rank has checkpoints for in `dir`, ascending.
std::vector<std::uint64_t> checkpointSteps(const std::string& dir, int rank) {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  // At most 19 digits: a step fits in 64 bits (a longer name is not one of ours).
  const std::regex name("rank-" + std::to_string(rank) + "-step-([0-9]{1,19})\\.ckpt");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name)) out.push_back(std::stoull(m[1].str()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// checkpoint.every_steps and checkpoint.resume need checkpoint.dir.
std::optional<ConfigIssue> dirWhenUsed(const Config& c) {
  if (!c.get<std::string>("checkpoint.dir").empty()) return std::nullopt;
  if (c.get<int>("checkpoint.every_steps") == 0 && !c.get<bool>("checkpoint.resume")) return std::nullopt;
  return ConfigIssue{"checkpoint.dir", "checkpoint.every_steps or checkpoint.resume needs a folder"};
}

}  // namespace

void detail::addCheckpointKeys(ConfigSchema& schema) {
  const CheckpointSettings d;
  schema.addSection(
      "checkpoint",
      "Each rank's state saved atomically, to resume an interrupted run bit for bit (Session).");
  schema.addKeys("checkpoint",
                 KeySet()
                     .integer("every_steps", static_cast<int>(d.everySteps), 0, INT_MAX,
                              "save every N steps (0 = never); every rank at the same step")
                     .text("dir", d.dir, {}, "folder of the files rank-R-step-S.ckpt (the last two are kept)")
                     .perRank()
                     .boolean("resume", d.resume,
                              "start from the newest step for which every rank has a checkpoint (none: from "
                              "scratch)")
                     .rule(dirWhenUsed));
}

CheckpointSettings detail::checkpointSettingsFrom(const Config& c) {
  CheckpointSettings s;
  s.everySteps = static_cast<std::uint64_t>(c.get<int>("checkpoint.every_steps"));
  s.dir = c.get<std::string>("checkpoint.dir");
  s.resume = c.get<bool>("checkpoint.resume");
  return s;
}

void Session::Impl::save(std::uint64_t step) {
  EpochLoop& l = *loop;
  a.optimizer->flush(l.params);  // a consistent cut: nothing in flight
  Checkpoint c;
  c.putArray<float>("model", l.params);
  c.putValue<std::uint64_t>("step", step);
  c.putValue<std::int32_t>("world_size", a.config.worldSize());
  c.putValue<std::uint64_t>("seed", a.config.seed());
  c.putValue<double>("epoch_loss_sum", l.lossSum);
  c.putValue<std::uint64_t>("epoch_loss_steps", l.lossSteps);
  c.putArray<int>("view", agent.view().members);
  if (l.plan.saveState) l.plan.saveState(c);
  a.optimizer->saveState(c, "optimizer.");
  std::filesystem::create_directories(checkpoint.dir);
  c.save(checkpointPath(checkpoint.dir, a.rank, step));
  // Keep the last two written: this one and the newest below it. Ones above
  // it are of steps this rank went back from (its side of a partition was
  // ahead, and it joined the other one): a resume must not find them, and
  // keeping the two highest numbers would delete this one.
  const auto have = checkpointSteps(checkpoint.dir, a.rank);
  const auto at = std::find(have.begin(), have.end(), step);
  if (at == have.end()) return;  // the listing missed it: remove nothing on its account
  for (auto it = have.begin(); it != have.end(); ++it)
    if (it > at || it + 1 < at) std::filesystem::remove(checkpointPath(checkpoint.dir, a.rank, *it));
}

void Session::Impl::checkCheckpointable(const DistributedOptimizer& optimizer) const {
  if (checkpoint.everySteps == 0 && !checkpoint.resume) return;
  // A rank whose view is revoked before its optimizer is built (a joining
  // or restarted rank, or a peer failed at start) is not probed here: its
  // first save refuses as the others' train() did.
  if (resilient != nullptr && !resilient->built()) return;
  try {
    Checkpoint probe;  // the optimizer's initial state, thrown away
    optimizer.saveState(probe, "optimizer.");
  } catch (const InvalidArgument& e) {
    const std::string key = checkpoint.everySteps > 0 ? "checkpoint.every_steps" : "checkpoint.resume";
    throw ConfigError(a.config.sourceFile, 0, key,
                      std::string(e.what()) + ": turn checkpoints off, or train with an optimizer that " +
                          "saves its state (docs/operations.md, Checkpoints)");
  }
}

void Session::Impl::resume() {
  EpochLoop& l = *loop;
  const bool restarted = membership != nullptr && a.config.get<bool>("membership.restarted");
  if (!checkpoint.resume && !restarted) return;
  if (!checkpoint.dir.empty()) {
    std::error_code ec;
    const auto status = std::filesystem::status(checkpoint.dir, ec);
    if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
      throw ConfigError(a.config.sourceFile, 0, "checkpoint.dir", checkpoint.dir + " is not a directory");
    if (!std::filesystem::exists(status) && checkpoint.resume)
      GOSSAMER_LOG(kWarning, "rank " << a.rank << ": checkpoint.resume is on but checkpoint.dir "
                                     << checkpoint.dir << " does not exist: starting from scratch");
  }
  const auto mine = checkpointSteps(checkpoint.dir, a.rank);  // ascending
  if (mine.empty() && restarted) return;
  std::uint64_t step = mine.empty() ? 0 : mine.back();  // a restarted rank: its own newest
  if (!restarted) {
    // The newest step every rank has a checkpoint of (a rank lost and not
    // restarted may have left an older newest one than the others, who
    // rotated theirs away since): the lowest of the ranks' newest at or
    // below a bound, while some rank lacks it, again below it.
    double bound = std::numeric_limits<double>::infinity();
    for (;;) {
      const auto at = std::upper_bound(mine.begin(), mine.end(), bound,
                                       [](double b, std::uint64_t s) { return b < static_cast<double>(s); });
      double newest = at == mine.begin() ? 1.0 : -static_cast<double>(*std::prev(at));  // max of -x: min of x
      a.communicator->allreduce(std::span<double>(&newest, 1), ReduceOp::kMax);
      if (newest > 0) return;  // some rank has none at or below it: from scratch
      step = static_cast<std::uint64_t>(-newest);
      double missing = std::binary_search(mine.begin(), mine.end(), step) ? 0.0 : 1.0;
      a.communicator->allreduce(std::span<double>(&missing, 1), ReduceOp::kMax);
      if (missing == 0) break;
      bound = static_cast<double>(step) - 1;
    }
  }
  const std::string path = checkpointPath(checkpoint.dir, a.rank, step);
  const Checkpoint c = Checkpoint::load(path);
  try {
    const auto worldSize = c.getValue<std::int32_t>("world_size");
    const auto seed = c.getValue<std::uint64_t>("seed");
    if (worldSize != a.config.worldSize() || seed != a.config.seed())
      throw Error("written by a job of world size " + std::to_string(worldSize) + " and seed " +
                  std::to_string(seed) + ", this job has world size " + std::to_string(a.config.worldSize()) +
                  " and seed " + std::to_string(a.config.seed()));
    if (c.getValue<std::uint64_t>("step") != step)
      throw Error("holds step " + std::to_string(c.getValue<std::uint64_t>("step")) +
                  ", not the step its name says");
    const auto saved = c.getArray<float>("model");  // (every value finite, as all the state read here)
    if (saved.size() != l.params.size())
      throw Error("checkpoint model of " + std::to_string(saved.size()) + " parameters, this model has " +
                  std::to_string(l.params.size()));
    const double lossSum = c.getValue<double>("epoch_loss_sum");
    // (A checkpoint without the count holds the sum of every step of the
    // epoch up to its own.)
    const std::uint64_t spe = l.plan.stepsPerEpoch, inEpoch = step % spe == 0 && step > 0 ? spe : step % spe;
    const auto lossSteps =
        c.has("epoch_loss_steps") ? c.getValue<std::uint64_t>("epoch_loss_steps") : inEpoch;
    if (lossSteps > inEpoch)
      throw Error("epoch_loss_steps " + std::to_string(lossSteps) + " is more than the " +
                  std::to_string(inEpoch) + " steps of its epoch up to step " + std::to_string(step));
    std::copy(saved.begin(), saved.end(), l.params.begin());
    if (l.plan.loadState) l.plan.loadState(c);
    a.optimizer->loadState(c, "optimizer.");
    l.lossSum = lossSum;
    l.lossSteps = lossSteps;
  } catch (const Error& e) {
    // What the file holds does not fit this job (a section missing, of
    // another size, not finite; refused by loadState): named with the file.
    // Errors of other kinds (a ViewChanged, ...) pass as they are.
    if (typeid(e) != typeid(Error) && typeid(e) != typeid(InvalidArgument)) throw;
    throw Error("checkpoint " + path + ": " + e.what());
  }
  l.resumedFrom = static_cast<std::int64_t>(step);
  if (restarted)
    GOSSAMER_LOG(kWarning, "rank " << a.rank << " restarts from its checkpoint of step " << step
                                   << " and asks the running job to take it back");
}

}  // namespace gossamer
