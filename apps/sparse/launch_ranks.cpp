// Local processes for the ranks of a sparse program (launch_ranks.hpp).
#include "launch_ranks.hpp"

#include <memory>
#include <optional>

#include "gossamer/launcher.hpp"

namespace gossamer::sparse {

void requireProcessTransport(Registry& registry, const std::string& program) {
  const std::shared_ptr<const TransportCatalog> catalog = registry.transportCatalog();
  registry.addSection(
      "transport", "", KeySet().rule([catalog, program](const Config& c) -> std::optional<ConfigIssue> {
        const std::string& kind = c.get<std::string>("transport.kind");
        const TransportTraits* t = catalog->find(kind);
        if (t == nullptr || t->spansProcesses) return std::nullopt;
        const std::string usable =
            catalog->namesWhere([](const TransportTraits& t) { return t.spansProcesses; });
        return ConfigIssue{"transport.kind", program + " runs its ranks as processes, which " + kind +
                                                 " cannot link: use " + usable};
      }));
}

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
    // With membership, the lowest rank of each final view writes it (the
    // larger side of a job split for good keeps the file).
    if ((r == 0 || c.getOr("membership.enabled", false)) && !summaryPath.empty()) {
      args.push_back("--summary-json");
      args.push_back(summaryPath);
    }
    return args;
  });
  if (result.signal != 0) return 128 + result.signal;
  return result.ok() ? 0 : 1;
}

}  // namespace gossamer::sparse
