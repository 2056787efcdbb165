// Admission by key: the `security:` section and the CURVE key files every
// transport that authenticates its peers reads. A config that turns security
// on over a transport that cannot authenticate (TransportTraits::secures) is
// a ConfigError at load; such a transport also refuses to start with it
// (requireNoSecurity), for a Config that was never validated.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gossamer/schema.hpp"

namespace gossamer {

struct Config;
class ConfigSchema;
class TransportCatalog;

/// One peer's CURVE (Curve25519) identity and the public keys the job admits.
/// Keys are Z85 text, 40 characters each (32 bytes; ZeroMQ RFC 32).
struct CurveKeys {
  std::string publicKey;              ///< This peer's public key.
  std::string secretKey;              ///< This peer's secret key.
  std::vector<std::string> admitted;  ///< Every admitted public key, this peer's included.
  bool admits(const std::string& publicKey) const;
};

/// True if `key` is 40 characters of the Z85 alphabet.
bool isZ85Key(const std::string& key);

/// Reads the keys of a certificate file: lines `public-key = "Z85"` and
/// `secret-key = "Z85"` (the ZeroMQ certificate layout gossamer-keygen
/// writes; a line starting with '#' is a comment). Returns {public keys, secret keys} in file
/// order. @throws InvalidArgument naming the file and line of a malformed key
/// or a file that cannot be read.
std::pair<std::vector<std::string>, std::vector<std::string>> readCertificate(const std::string& path);

/// Reads the keys of a certificate's text, as readCertificate does a file's.
/// @param text the certificate (any bytes: lines end at a newline).
/// @param name what the text is (a file name), for the error message.
/// @throws InvalidArgument naming `name` and the line of a malformed key.
std::pair<std::vector<std::string>, std::vector<std::string>> parseCertificate(const std::string& text,
                                                                               const std::string& name);

/// Loads this peer's key pair from `secretKeyPath` (a certificate with one
/// public-key and one secret-key line, readable by its owner only) and the
/// admitted public keys from `publicKeysPath`: a certificate file with one or
/// more public-key lines, or a directory whose regular files are read so
/// (secret certificates in it are skipped). @throws InvalidArgument if a file
/// is missing or malformed, the secret file can be read by group or others
/// (mode & 077), no key is admitted, or this peer's own public key is not.
CurveKeys loadCurveKeys(const std::string& secretKeyPath, const std::string& publicKeysPath);

/// `security.secret_key` with each "{rank}" in it replaced by `rank` (one key
/// pair per peer from one config): the secret certificate of that rank.
std::string secretKeyPath(const Config& config, int rank);

/// The keys `security:` names for `rank`, loaded, when `security.enabled` is
/// true; nullopt otherwise. "{rank}" in `security.secret_key` becomes the
/// rank (one key pair per peer from one config). @throws InvalidArgument as
/// loadCurveKeys; ConfigError when a key path is empty.
std::optional<CurveKeys> curveKeysFrom(const Config& config, int rank);

/// For a transport without authentication: @throws ConfigError (key
/// security.enabled) saying that `transport` cannot run with it and which one can.
void requireNoSecurity(const Config& config, const std::string& transport);

/// Writes a new key pair: `path` gets the secret certificate (mode 0600) and
/// `path + ".pub"` the public one. Refuses to replace an existing file unless
/// `force`. @throws InvalidArgument for a bad key, a path that is empty or
/// names a directory (checked before anything is written), or an existing
/// file without force; Error if a file cannot be written.
void writeCertificates(const std::string& path, const std::string& publicKey, const std::string& secretKey,
                       bool force);

namespace detail {
/// Declares the `security:` section (enabled, secret_key, public_keys).
void addSecurityKeys(ConfigSchema& schema);
/// The rule that every transport a config runs (TransportCatalog::inUse)
/// can honour security.enabled (TransportTraits::secures; one whose ranks
/// share a process runs as without), and that both key paths are set when
/// one of them secures its links; the Registry adds it with its catalog.
ConfigRule securedTransportsRule(std::shared_ptr<const TransportCatalog> catalog);
}  // namespace detail

}  // namespace gossamer
