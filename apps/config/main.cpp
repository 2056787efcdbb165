// gossamer-config: the configuration reference and checker of every program's
// configs (gossamer-train, gossamer-sparse, gossamer-admm), generated from one
// registry of the built-in components and every program's sections (nothing
// here lists a key).
//
//   gossamer-config --schema             every section and key, as text
//   gossamer-config --schema --markdown  the same as Markdown (README's reference)
//   gossamer-config --check FILE...      load each file; print its errors (file:line: key: ...)
//
// Exit status: 0 when every checked file is valid, 1 when one is not, 2 on
// bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "programs.hpp"

namespace {

/// The reference as plain text: one line per key.
std::string plainSchema(const gossamer::ConfigSchema& schema) {
  std::string out;
  for (const auto& section : schema.sections()) {
    for (const auto& entry : section.entries) {
      std::string owners;
      for (const auto& o : entry.owners) owners += (owners.empty() ? " [" : ", ") + o;
      if (!owners.empty()) owners += "]";
      const std::string key = section.name.empty() ? entry.spec.name : section.name + "." + entry.spec.name;
      out += key + " = " + gossamer::formatConfigValue(entry.spec.defaultValue) + "  # " + entry.spec.doc +
             owners + "\n";
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gossamer-config: reference and checker of the YAML configs of gossamer-train, -sparse and -admm"};
  bool schema = false, markdown = false;
  std::vector<std::string> check;
  app.add_flag("--schema", schema, "print every registered section and key with its default and meaning");
  app.add_flag("--markdown", markdown, "with --schema: as Markdown tables");
  app.add_option("--check", check, "config files to load and validate");
  CLI11_PARSE(app, argc, argv);
  if (!schema && check.empty()) {
    std::fprintf(stderr, "gossamer-config: give --schema or --check FILE (see --help)\n");
    return 2;
  }
  try {
    const gossamer::Registry registry = gossamer::apps::makeProgramsRegistry();
    if (schema) {
      const std::string text = markdown ? registry.schema().markdown() : plainSchema(registry.schema());
      std::fputs(text.c_str(), stdout);
    }
    int bad = 0;
    for (const auto& path : check) {
      try {
        registry.load(path);
        std::printf("%s: ok\n", path.c_str());
      } catch (const gossamer::ConfigError& e) {
        std::printf("%s\n", e.what());
        ++bad;
      }
    }
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossamer-config: error: %s\n", e.what());
    return 1;
  }
}
