// launchLocalRanks's CPU binding: each rank is a real process (/bin/sh) that
// writes the CPUs the kernel lets it run on (Cpus_allowed_list of
// /proc/self/status); the test reads them back from the rendezvous directory.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/launcher.hpp"

namespace {

// "0-2,5" -> {0, 1, 2, 5}
std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

// Launches `n` ranks under `binding`; returns each rank's allowed CPUs.
std::map<int, std::vector<int>> cpusOfRanks(int n, gossamer::CpuBinding binding) {
  gossamer::LaunchOptions o;
  o.worldSize = n;
  o.executable = "/bin/sh";
  o.deadlineSeconds = 30;
  o.binding = binding;
  o.name = "test-launcher";
  std::map<int, std::vector<int>> seen;
  const auto result = gossamer::launchLocalRanks(
      o,
      [](int r, const std::string& dir) {
        return std::vector<std::string>{"sh", "-c",
                                        "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status > " +
                                            dir + "/cpus-" + std::to_string(r)};
      },
      [&](const std::string& dir) {
        for (int r = 0; r < n; ++r) {
          std::ifstream in(dir + "/cpus-" + std::to_string(r));
          std::string line;
          if (std::getline(in, line)) seen[r] = parseCpuList(line);
        }
      });
  REQUIRE(result.ok());
  return seen;
}

}  // namespace

TEST_CASE("launcher: kCore binds rank r to the (r mod C)-th allowed CPU, kNone leaves the mask alone",
          "[launcher]") {
  const auto cpus = gossamer::allowedCpus();
  REQUIRE_FALSE(cpus.empty());
  const int n = static_cast<int>(cpus.size()) * 2 + 1;  // more ranks than CPUs: the round robin wraps

  SECTION("kCore") {
    const auto seen = cpusOfRanks(n, gossamer::CpuBinding::kCore);
    REQUIRE(seen.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(seen.at(r) == std::vector<int>{cpus[static_cast<std::size_t>(r) % cpus.size()]});
    }
  }
  SECTION("kNone") {
    const auto seen = cpusOfRanks(n, gossamer::CpuBinding::kNone);
    REQUIRE(seen.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(seen.at(r) == cpus);
    }
  }
}

TEST_CASE("launcher: allowedCpus lists this process's affinity mask in ascending order", "[launcher]") {
  std::ifstream status("/proc/self/status");
  std::string line;
  std::vector<int> fromProc;
  while (std::getline(status, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) fromProc = parseCpuList(line.substr(line.find(':') + 1));
  REQUIRE_FALSE(fromProc.empty());
  CHECK(gossamer::allowedCpus() == fromProc);
}

TEST_CASE("launcher: CPU binding names round-trip, and an unknown one is refused", "[launcher]") {
  for (auto b : {gossamer::CpuBinding::kCore, gossamer::CpuBinding::kNone})
    CHECK(gossamer::parseCpuBinding(gossamer::toString(b)) == b);
  CHECK(std::string(gossamer::toString(gossamer::CpuBinding::kCore)) == "core");
  CHECK_THROWS_AS(gossamer::parseCpuBinding("socket"), gossamer::InvalidArgument);
  CHECK_THROWS_WITH(gossamer::parseCpuBinding(""), Catch::Contains("core or none"));
}
