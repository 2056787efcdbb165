// The `security:` section and CURVE key files (security.hpp).
//
// A certificate is text in the layout ZeroMQ's tools use:
//   # comment (a whole line)
//   metadata
//   curve
//       public-key = "<40 Z85 characters>"
//       secret-key = "<40 Z85 characters>"     (secret certificates only)
// Only the key lines are read; the rest is ignored.
#include "gossamer/kit/security.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/write_fully.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/schema.hpp"

namespace gossamer {

namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

void writeFile(const std::string& path, const std::string& text, mode_t mode, bool force) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST) throw InvalidArgument(path + " exists (use --force to replace it)");
    throw Error("cannot write " + path + ": " + std::strerror(errno));
  }
  // An existing file keeps its mode under O_TRUNC: set it.
  int err = ::fchmod(fd, mode) == 0 ? detail::writeFully(fd, text.data(), text.size()) : errno;
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    if (regular) ::unlink(path.c_str());  // a key cut short is no key
    throw Error("cannot write " + path + ": " + std::strerror(err));
  }
}

}  // namespace

bool CurveKeys::admits(const std::string& key) const {
  return std::find(admitted.begin(), admitted.end(), key) != admitted.end();
}

bool isZ85Key(const std::string& key) {
  return key.size() == 40 && std::all_of(key.begin(), key.end(), [](char c) {
           return c != '\0' && kZ85.find(c) != std::string_view::npos;
         });
}

std::pair<std::vector<std::string>, std::vector<std::string>> parseCertificate(const std::string& text,
                                                                               const std::string& name) {
  std::istringstream in(text);
  std::pair<std::vector<std::string>, std::vector<std::string>> keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;  // Z85 has '#': comments are whole lines
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string field = trim(line.substr(0, eq));
    if (field != "public-key" && field != "secret-key") continue;
    std::string value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    if (!isZ85Key(value))
      throw InvalidArgument(name + ":" + std::to_string(number) + ": " + field +
                            " is not 40 characters of Z85 (a CURVE key as gossamer-keygen writes it)");
    (field == "public-key" ? keys.first : keys.second).push_back(value);
  }
  return keys;
}

std::pair<std::vector<std::string>, std::vector<std::string>> readCertificate(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cannot read key file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InvalidArgument("cannot read key file " + path + ": " + std::strerror(errno));
  return parseCertificate(text.str(), path);
}

CurveKeys loadCurveKeys(const std::string& secretKeyPath, const std::string& publicKeysPath) {
  struct stat st {};
  if (::stat(secretKeyPath.c_str(), &st) != 0)
    throw InvalidArgument("cannot read secret key file " + secretKeyPath + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0)
    throw InvalidArgument("secret key file " + secretKeyPath +
                          " can be read by group or others: chmod 600 it (gossamer-keygen writes it so)");
  CurveKeys keys;
  const auto [pub, sec] = readCertificate(secretKeyPath);
  if (pub.size() != 1 || sec.size() != 1)
    throw InvalidArgument("secret key file " + secretKeyPath + " holds " + std::to_string(pub.size()) +
                          " public and " + std::to_string(sec.size()) + " secret keys, expected one of each");
  keys.publicKey = pub[0];
  keys.secretKey = sec[0];

  std::vector<std::string> files;
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(publicKeysPath, ec);
  if (directory) {
    for (const auto& entry : std::filesystem::directory_iterator(publicKeysPath, ec))
      if (entry.is_regular_file()) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(publicKeysPath);
  }
  for (const auto& f : files) {
    const auto [admitted, secret] = readCertificate(f);
    if (directory && !secret.empty()) continue;  // a secret certificate beside the public ones
    for (const auto& k : admitted)
      if (!keys.admits(k)) keys.admitted.push_back(k);
  }
  if (keys.admitted.empty()) throw InvalidArgument("no public key admitted by " + publicKeysPath);
  if (!keys.admits(keys.publicKey))
    throw InvalidArgument("this peer's public key (" + secretKeyPath + ") is not among those " +
                          publicKeysPath + " admits: the others would refuse it");
  return keys;
}

std::string secretKeyPath(const Config& config, int rank) {
  std::string secret = config.get<std::string>("security.secret_key");
  for (auto at = secret.find("{rank}"); at != std::string::npos; at = secret.find("{rank}", at))
    secret.replace(at, 6, std::to_string(rank));
  return secret;
}

std::optional<CurveKeys> curveKeysFrom(const Config& config, int rank) {
  if (!config.get<bool>("security.enabled")) return std::nullopt;
  const std::string secret = secretKeyPath(config, rank);
  const auto& pub = config.get<std::string>("security.public_keys");
  // The load-time rule (keysWhenEnabled) says so with the line; this is for a
  // Config that was never validated.
  if (secret.empty() || pub.empty())
    throw ConfigError(config.sourceFile, 0, secret.empty() ? "security.secret_key" : "security.public_keys",
                      "required when security.enabled is true");
  return loadCurveKeys(secret, pub);
}

void requireNoSecurity(const Config& config, const std::string& transport) {
  if (config.get<bool>("security.enabled"))
    throw ConfigError(
        config.sourceFile, 0, "security.enabled",
        "transport " + transport +
            " cannot authenticate or encrypt: use transport.kind: zmq, which runs CURVE with the "
            "same keys");
}

void writeCertificates(const std::string& path, const std::string& publicKey, const std::string& secretKey,
                       bool force) {
  GOSSAMER_ENFORCE(isZ85Key(publicKey) && isZ85Key(secretKey), "keys must be 40 characters of Z85");
  // Checked before anything is written: "" or "keys/" would leave a stray
  // ".pub" (or "keys/.pub") behind and then fail.
  const std::filesystem::path p(path);
  const std::string leaf = p.filename().string();
  if (path.empty()) throw InvalidArgument("the key file's path is empty");
  if (leaf.empty() || leaf == "." || leaf == "..")
    throw InvalidArgument("key file path '" + path + "' names a directory, not a file in it");
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec))
    throw InvalidArgument("key file path '" + path + "' is a directory (give a file in it, e.g. " +
                          (p / "rank0").string() + ")");
  // Without force neither file may exist (a dangling link counts): refused
  // before either is written, so that a new public key never sits beside
  // an old secret one.
  if (!force)
    for (const std::string& f : {path + ".pub", path})
      if (std::filesystem::symlink_status(f, ec).type() != std::filesystem::file_type::not_found)
        throw InvalidArgument(f + " exists (use --force to replace it)");
  const std::string head = "# Gossamer CURVE certificate (ZeroMQ layout)\nmetadata\ncurve\n";
  const std::string pub = "    public-key = \"" + publicKey + "\"\n";
  // The public file first: a failure leaves no secret without its public half.
  writeFile(path + ".pub", head + pub, 0644, force);
  try {
    writeFile(path,
              "# SECRET: give this file to no one; readable by its owner only.\n" + head + pub +
                  "    secret-key = \"" + secretKey + "\"\n",
              0600, force);
  } catch (...) {
    if (!force) ::unlink((path + ".pub").c_str());  // made just now: no public key without its secret
    throw;
  }
}

namespace detail {
ConfigRule securedTransportsRule(std::shared_ptr<const TransportCatalog> catalog) {
  return [catalog](const Config& c) -> std::optional<ConfigIssue> {
    if (!c.get<bool>("security.enabled")) return std::nullopt;
    bool secured = false;  // a transport in use secures its links: it needs the keys
    for (const auto& [key, name] : catalog->inUse(c)) {
      const TransportTraits* t = catalog->find(name);
      // An unregistered name is its key's own error (the selector's, or the
      // rule of the transport that reads it). One whose ranks share a
      // process has nothing to secure, and runs as without.
      if (t != nullptr && t->secures) secured = true;
      if (t == nullptr || t->secures || !t->spansProcesses || !t->innerKeys.empty()) continue;
      const std::string secure =
          catalog->namesWhere([](const TransportTraits& o) { return o.secures; }, " or ");
      return ConfigIssue{
          key,
          "transport " + name + " cannot authenticate or encrypt, and security.enabled is true: " +
              (secure.empty() ? std::string("no registered transport can")
                              : "use transport.kind: " + secure + ", which runs CURVE with the same keys")};
    }
    if (secured)
      for (const char* key : {"security.secret_key", "security.public_keys"})
        if (c.get<std::string>(key).empty())
          return ConfigIssue{key,
                             "required when security.enabled is true over a transport that secures its "
                             "links (gossamer-keygen writes the key files)"};
    return std::nullopt;
  };
}

void addSecurityKeys(ConfigSchema& schema) {
  schema.addSection("security",
                    "Admission by key: every link authenticated and encrypted with CURVE (zmq; socket "
                    "and libfabric are refused at load with it on; inproc and simgrid, whose ranks share "
                    "one process, run as without).");
  schema.addKeys(
      "security",
      KeySet()
          .boolean("enabled", false, "authenticate and encrypt every link; admit only listed keys")
          .text("secret_key", "", {},
                "this peer's secret certificate (gossamer-keygen; mode 0600); {rank} in it "
                "becomes the rank")
          .perRank()
          .text("public_keys", "", {}, "the admitted public keys: a certificate file, or a directory of them")
          .perRank());
}
}  // namespace detail

}  // namespace gossamer
