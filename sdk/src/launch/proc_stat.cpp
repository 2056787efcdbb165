#include "gossamer/kit/proc_stat.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

namespace gossamer::detail {

std::optional<std::string> readFileHead(const std::string& path, std::size_t maxBytes) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return std::nullopt;
  std::string out(maxBytes, '\0');
  out.resize(std::fread(out.data(), 1, maxBytes, f));
  std::fclose(f);
  return out;
}

std::optional<ProcessStat> readProcessStat(pid_t pid) {
  const auto stat = readFileHead("/proc/" + std::to_string(pid) + "/stat", 1023);
  if (!stat) return std::nullopt;
  // The fields count from after the command name, which ends at the last ')'
  // (the name itself may hold spaces and parentheses).
  const char* p = std::strrchr(stat->c_str(), ')');
  if (!p) return std::nullopt;
  std::vector<std::string> fields;  // fields[0] is field 3 (the state), so field 22 is fields[19]
  for (const char* q = p + 1; *q && fields.size() < 20;) {
    while (*q == ' ') ++q;
    const char* e = q;
    while (*e && *e != ' ' && *e != '\n') ++e;
    if (e == q) break;
    fields.emplace_back(q, e);
    q = e;
  }
  if (fields.size() < 20) return std::nullopt;
  return ProcessStat{fields[19], fields[0] == "Z", fields[0] == "T" || fields[0] == "t"};
}

}  // namespace gossamer::detail
