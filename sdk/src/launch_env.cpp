// Reading a rank's place in the job from its launcher's variables (see
// launch_env.hpp).
#include "gossamer/launch_env.hpp"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

long parseInteger(const EnvLookup& env, const std::string& name, long lo, long hi) {
  const std::string text = env(name).value_or("");
  long value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw InvalidArgument(name + "='" + text + "' is not an integer");
  if (value < lo || value > hi)
    throw InvalidArgument(name + "=" + text + " is outside [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  return value;
}

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
};

constexpr Launcher kLaunchers[] = {
    {"env", "RANK", "WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"hydra", "PMI_RANK", "PMI_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS"},
};

// A job id when every rank runs on this host, else "".
std::string singleHostJobId(const EnvLookup& env, const LaunchEnvironment& l) {
  if (l.launcher == "mpirun" && env("OMPI_COMM_WORLD_LOCAL_SIZE") == std::to_string(l.worldSize)) {
    if (auto ns = env("PMIX_NAMESPACE")) return *ns;
    if (auto id = env("OMPI_MCA_ess_base_jobid")) return *id;
  }
  if (l.launcher == "srun" && env("SLURM_NNODES") == std::string("1")) {
    if (auto job = env("SLURM_JOB_ID")) return *job + "." + env("SLURM_STEP_ID").value_or("0");
  }
  return "";
}

bool safeForPath(const std::string& s) {
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_')) return false;
  return !s.empty();
}

}  // namespace

EnvLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): read-only use
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::optional<LaunchEnvironment> discoverLaunch(const EnvLookup& env) {
  LaunchEnvironment l;
  const Launcher* found = nullptr;
  for (const auto& k : kLaunchers)
    if (env(k.rank) && env(k.size)) {
      found = &k;
      break;
    }
  if (found == nullptr) return std::nullopt;
  l.launcher = found->name;
  if (l.launcher == "env" && env("TORCHELASTIC_RUN_ID")) l.launcher = "torchrun";
  l.worldSize = static_cast<int>(parseInteger(env, found->size, 1, kMaxWorldSize));
  l.rank = static_cast<int>(parseInteger(env, found->rank, 0, l.worldSize - 1));

  if (auto r = env("GOSSAMER_RENDEZVOUS"); r && !r->empty()) {
    l.rendezvous = *r;
    return l;
  }
  const auto addr = env("MASTER_ADDR");
  const bool hasPort = env("MASTER_PORT").has_value();
  if (addr && !addr->empty() && hasPort) {
    const bool agentStore = env("TORCHELASTIC_USE_AGENT_STORE") == std::string("True");
    const long port = parseInteger(env, "MASTER_PORT", 1, agentStore ? 65534 : 65535) + (agentStore ? 1 : 0);
    l.rendezvous = "tcp://" + *addr + ":" + std::to_string(port);
    return l;
  }
  if (const std::string job = singleHostJobId(env, l); safeForPath(job)) {
    const std::string tmp = env("TMPDIR").value_or("/tmp");
    l.rendezvous =
        (tmp.empty() ? std::string("/tmp") : tmp) + "/gossamer-rendezvous-" + l.launcher + "-" + job;
    return l;
  }
  throw InvalidArgument("rank " + std::to_string(l.rank) + " of " + std::to_string(l.worldSize) +
                        " started by " + l.launcher + " (" + found->rank +
                        "), but there is no rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0 serves the "
                        "store there), or GOSSAMER_RENDEZVOUS=tcp://HOST:PORT or a directory all ranks see");
}

}  // namespace gossamer
