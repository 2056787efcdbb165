// Local processes for the ranks of a sparse program (launch_ranks.hpp).
#include "launch_ranks.hpp"

#include "gossamer/launcher.hpp"

namespace gossamer::sparse {

int launchRanks(const std::string& program, const Config& c, const std::string& configPath,
                const std::vector<std::string>& overrides, const std::string& summaryPath) {
  LaunchOptions o;
  o.worldSize = c.worldSize();
  o.failureGraceSeconds =
      c.get<double>("transport.timeout_seconds") + c.get<double>("transport.linger_seconds") + 5;
  o.name = program;
  const auto result = launchLocalRanks(o, [&](int r, const std::string& rendezvous) {
    std::vector<std::string> args = {program,           "--config",     configPath, "--rank",
                                     std::to_string(r), "--rendezvous", rendezvous};
    for (const auto& kv : overrides) {
      args.push_back("--set");
      args.push_back(kv);
    }
    if (r == 0 && !summaryPath.empty()) {
      args.push_back("--summary-json");
      args.push_back(summaryPath);
    }
    return args;
  });
  if (result.signal != 0) return 128 + result.signal;
  return result.ok() ? 0 : 1;
}

}  // namespace gossamer::sparse
