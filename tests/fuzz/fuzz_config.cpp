// Feeds YAML text to parseConfig with gossamer-train's whole schema (the core
// keys and every registered transport's, topology's, optimizer's and
// compressor's, and model:, data:, training:, checkpoint:, as
// makeTrainRegistry builds it). Bytes after a NUL are overrides, one per line
// ("training.epochs=1"). Checks: only ConfigError escapes, naming a line
// within the text (or 0); a config that loads passes validateConfig, and
// trainConfigFrom reads it.
#include <algorithm>

#include "components.hpp"
#include "fuzz_support.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "train_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const gossamer::Registry registry = gossamer::train::makeTrainRegistry();
  const std::string input = gossamer::fuzz::textOf(data, size);
  const auto nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::size_t at = nul + 1;
    while (at <= input.size() && overrides.size() < 8) {
      const auto end = std::min(input.find('\n', at), input.size());
      overrides.push_back(input.substr(at, end - at));
      at = end + 1;
    }
  }
  gossamer::Config config;
  try {
    config = gossamer::parseConfig(yaml, registry.schema(), "fuzz.yaml", overrides);
  } catch (const gossamer::ConfigError& e) {
    const auto lines = static_cast<int>(std::count(yaml.begin(), yaml.end(), '\n')) + 1;
    FUZZ_CHECK(e.line() >= 0 && (e.file() != "fuzz.yaml" || e.line() <= lines));
    return 0;
  }
  FUZZ_CHECK(config.worldSize() >= 1 && config.worldSize() <= gossamer::kMaxWorldSize);
  gossamer::validateConfig(config, registry.schema());  // a ConfigError here is a finding
  (void)gossamer::train::trainConfigFrom(config);
  return 0;
}
