// Reading a rank's place in the job from its launcher's variables (see
// launch_env.hpp).
#include "gossamer/launch_env.hpp"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/proc_stat.hpp"

namespace gossamer {

namespace {

constexpr long kSlurmBasePort = 29500, kSlurmPorts = 10000;

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

bool safeForPath(const std::string& s) {
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_')) return false;
  return !s.empty();
}

// `s` with every character that safeForPath refuses as '_' (Open MPI 5's
// PMIx namespace is "prterun-HOST-PID@N").
std::string pathSafe(std::string s) {
  for (char& ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_')) ch = '_';
  return s;
}

// A job id when every rank runs on this host, else "".
std::string singleHostJobId(const EnvLookup& env, const LaunchEnvironment& l,
                            const std::function<std::string()>& parentProcess) {
  if (l.launcher == "hydra" && env("MPI_LOCALNRANKS") == std::to_string(l.worldSize)) {
    // Hydra names no job in the environment, but every rank on a host is a
    // child of that host's hydra_pmi_proxy.
    if (std::string parent = parentProcess(); !parent.empty()) return "proxy-" + parent;
  }
  if (l.launcher == "mpirun" && env("OMPI_COMM_WORLD_LOCAL_SIZE") == std::to_string(l.worldSize)) {
    // The job id alone is a hash of the host name and mpirun's pid, which
    // repeats (another mpirun with the same pid: after a reboot, or in a
    // container or VM with the same host name that shares TMPDIR), and the
    // directory outlives the job; mpirun's random per-job key tells two
    // such jobs apart.
    auto id = env("PMIX_NAMESPACE");
    if (!id) id = env("OMPI_MCA_ess_base_jobid");
    if (!id) return "";
    if (auto key = env("OMPI_MCA_orte_precondition_transports"); key && safeForPath(*key))
      return pathSafe(*id) + "-" + *key;
    return pathSafe(*id);
  }
  if (l.launcher == "srun" && env("SLURM_NNODES") == std::string("1")) {
    if (auto job = env("SLURM_JOB_ID")) return *job + "." + env("SLURM_STEP_ID").value_or("0");
  }
  return "";
}

// Slurm over several nodes: rank 0 (on the step's first node) serves the
// store at a port derived from the job and step ids, so that two steps
// sharing a node do not collide.
std::string slurmRendezvous(const EnvLookup& env) {
  auto list = env("SLURM_STEP_NODELIST");
  if (!list) list = env("SLURM_JOB_NODELIST");
  if (!list || !env("SLURM_JOB_ID")) return "";
  const std::string host = firstSlurmHost(*list);
  const long job = parseInteger(env, "SLURM_JOB_ID", 0, std::numeric_limits<long>::max());
  const long step = env("SLURM_STEP_ID") ? parseInteger(env, "SLURM_STEP_ID", 0, 0xFFFFFFFFL) : 0;
  // In unsigned arithmetic, reduced first: job * 7 could overflow a long.
  const auto ports = static_cast<unsigned long>(kSlurmPorts);
  const unsigned long offset =
      ((static_cast<unsigned long>(job) % ports) * 7 + static_cast<unsigned long>(step) % ports) % ports;
  return "tcp://" + host + ":" + std::to_string(kSlurmBasePort + static_cast<long>(offset));
}

}  // namespace

std::string firstSlurmHost(const std::string& nodelist) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("Slurm node list '" + nodelist + "': " + why);
  };
  // The first entry: up to a comma outside brackets.
  std::size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    const char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) throw bad("']' without '['");
    if (c == ',' && depth == 0) break;
  }
  if (depth != 0) throw bad("'[' without ']'");
  const std::string entry = nodelist.substr(0, end);
  const auto open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.empty()) throw bad("no host");
    return entry;
  }
  // prefix[07-10,12]suffix: the first number of the range, with its zeros.
  const auto close = entry.find(']', open);
  std::string first = entry.substr(open + 1, close - open - 1);
  first = first.substr(0, first.find_first_of(",-"));
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
    throw bad("'" + entry.substr(open, close - open + 1) + "' does not start with a number");
  const std::string host = entry.substr(0, open) + first + entry.substr(close + 1);
  if (host.find_first_of("[]") != std::string::npos) throw bad("more than one range in '" + entry + "'");
  return host;
}

EnvLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): read-only use
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string parentProcessId() {
  const pid_t parent = ::getppid();
  const auto stat = detail::readProcessStat(parent);
  return stat ? std::to_string(parent) + "-" + stat->startTime : "";
}

std::optional<LaunchEnvironment> discoverLaunch(const EnvLookup& env,
                                                const std::function<std::string()>& parentProcess) {
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
  if (l.launcher == "srun" && env("SLURM_NNODES") != std::string("1")) {
    if (std::string rv = slurmRendezvous(env); !rv.empty()) {
      l.rendezvous = rv;
      return l;
    }
  }
  if (const std::string job = singleHostJobId(env, l, parentProcess); safeForPath(job)) {
    const std::string tmp = env("TMPDIR").value_or("/tmp");
    l.rendezvous =
        (tmp.empty() ? std::string("/tmp") : tmp) + "/gossamer-rendezvous-" + l.launcher + "-" + job;
    return l;
  }
  if (l.worldSize == 1) return l;  // nobody to meet
  throw InvalidArgument("rank " + std::to_string(l.rank) + " of " + std::to_string(l.worldSize) +
                        " started by " + l.launcher + " (" + found->rank +
                        "), but there is no rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0 serves the "
                        "store there), or GOSSAMER_RENDEZVOUS=tcp://HOST:PORT or a directory all ranks see");
}

}  // namespace gossamer
