// Key files of `security:` (sdk security.hpp): what gossamer-keygen writes,
// what loadCurveKeys accepts and what it refuses.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/builtins.hpp"
#include "gossamer/transports/zmq.hpp"
#include "process.hpp"

using namespace gossamer;
using gossamer::testing::TempDir;

namespace {

std::string newPair(const TempDir& dir, const std::string& name) {
  const auto [pub, sec] = zmq::newCurveKeyPair();
  writeCertificates(dir / name, pub, sec, false);
  return pub;
}

void writeText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("security: a key pair written for a peer loads back, its secret readable by its owner only",
          "[security]") {
  TempDir dir;
  const std::string a = newPair(dir, "a"), b = newPair(dir, "b");
  CHECK(a != b);
  struct stat st {};
  REQUIRE(::stat((dir / "a").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A directory of admitted keys: both public certificates (the secret ones
  // in it are skipped).
  const auto keys = loadCurveKeys(dir / "a", dir.path());
  CHECK(keys.publicKey == a);
  CHECK(isZ85Key(keys.secretKey));
  CHECK(keys.admitted.size() == 2);
  CHECK(keys.admits(a));
  CHECK(keys.admits(b));
  // One file of admitted keys.
  CHECK(loadCurveKeys(dir / "b", dir / "b.pub").admitted == std::vector<std::string>{b});
}

TEST_CASE("security: keygen keeps existing files unless forced", "[security]") {
  TempDir dir;
  const std::string first = newPair(dir, "a");
  const auto [pub, sec] = zmq::newCurveKeyPair();
  CHECK_THROWS_WITH(writeCertificates(dir / "a", pub, sec, false), Catch::Contains("exists"));
  CHECK(readCertificate(dir / "a.pub").first == std::vector<std::string>{first});
  writeCertificates(dir / "a", pub, sec, true);
  CHECK(readCertificate(dir / "a.pub").first == std::vector<std::string>{pub});
  CHECK(readCertificate(dir / "a").second == std::vector<std::string>{sec});
  // Its public file gone, the secret one left: refused, and no new public
  // key is written beside the old secret one (or beside a dangling link).
  std::filesystem::remove(dir / "a.pub");
  const auto [pub2, sec2] = zmq::newCurveKeyPair();
  CHECK_THROWS_WITH(writeCertificates(dir / "a", pub2, sec2, false), Catch::Contains("exists"));
  CHECK_FALSE(std::filesystem::exists(dir / "a.pub"));
  std::filesystem::create_symlink(dir / "nowhere", dir / "s");
  CHECK_THROWS_WITH(writeCertificates(dir / "s", pub2, sec2, false), Catch::Contains("exists"));
  CHECK_FALSE(std::filesystem::exists(dir / "s.pub"));
}

TEST_CASE("security: a key path that names no file is refused before anything is written", "[security]") {
  TempDir dir;
  const auto [pub, sec] = zmq::newCurveKeyPair();
  CHECK_THROWS_WITH(writeCertificates("", pub, sec, false), Catch::Contains("path is empty"));
  CHECK_THROWS_WITH(writeCertificates(dir.path(), pub, sec, false), Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(writeCertificates(dir / "", pub, sec, false), Catch::Contains("names a directory"));
  CHECK_THROWS_WITH(writeCertificates(dir / "..", pub, sec, true), Catch::Contains("names a directory"));
  // No stray ".pub" beside or inside it.
  CHECK_FALSE(std::filesystem::exists(dir / ".pub"));
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("security: bad key files are refused with the file, the line and the reason", "[security]") {
  TempDir dir;
  const std::string a = newPair(dir, "a");
  newPair(dir, "b");
  // The secret file readable by others.
  ::chmod((dir / "a").c_str(), 0644);
  CHECK_THROWS_WITH(loadCurveKeys(dir / "a", dir / "a.pub"), Catch::Contains("chmod 600"));
  ::chmod((dir / "a").c_str(), 0600);
  // Its own key not admitted: the others would refuse it.
  CHECK_THROWS_WITH(loadCurveKeys(dir / "a", dir / "b.pub"), Catch::Contains("not among"));
  // A malformed key names the file and line.
  writeText(dir / "bad.pub", "# admitted\ncurve\n    public-key = \"tooshort\"\n");
  CHECK_THROWS_WITH(loadCurveKeys(dir / "a", dir / "bad.pub"), Catch::Contains("bad.pub:3: public-key"));
  // Missing files, and a file with no key.
  CHECK_THROWS_WITH(loadCurveKeys(dir / "missing", dir / "a.pub"), Catch::Contains("missing"));
  writeText(dir / "empty.pub", "# nothing\n");
  CHECK_THROWS_WITH(loadCurveKeys(dir / "a", dir / "empty.pub"), Catch::Contains("no public key"));
  // A secret file with two pairs.
  writeText(dir / "two",
            "public-key = \"" + a + "\"\npublic-key = \"" + a + "\"\nsecret-key = \"" + a + "\"\n");
  ::chmod((dir / "two").c_str(), 0600);
  CHECK_THROWS_WITH(loadCurveKeys(dir / "two", dir / "a.pub"), Catch::Contains("expected one of each"));
}

TEST_CASE("security: a transport that cannot authenticate refuses to start with security on", "[security]") {
  Config c;
  c.set("security.enabled", true);
  CHECK_THROWS_WITH(requireNoSecurity(c, "socket"), Catch::Contains("use transport.kind: zmq"));
  c.set("security.enabled", false);
  CHECK_NOTHROW(requireNoSecurity(c, "socket"));
  CHECK_FALSE(curveKeysFrom(c, 0).has_value());
}

TEST_CASE("security: certificate text reads as its file does", "[security]") {
  TempDir dir;
  const std::string pub = newPair(dir, "a");
  std::ifstream in(dir / "a");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(parseCertificate(text, "a") == readCertificate(dir / "a"));
  CHECK(parseCertificate(text, "a").first == std::vector<std::string>{pub});
  CHECK_THROWS_WITH(parseCertificate("curve\n  secret-key = \"x\"\n", "inline.cert"),
                    Catch::Contains("inline.cert:2: secret-key"));
  CHECK(parseCertificate("", "empty") == std::pair<std::vector<std::string>, std::vector<std::string>>{});
}

TEST_CASE("security: composite names the secret key file of its inner transports by the job rank",
          "[security]") {
  // Rank 1 of two, each an island of its own: its local transport is rank 0
  // of a group of one, and it must still load keys/rank1, the only key
  // file on its host. It gets past the keys and waits for rank 0, which
  // never comes (TimeoutError), instead of looking for keys/rank0.
  TempDir dir;
  std::filesystem::create_directory(dir / "keys");
  newPair(dir, "keys/rank1");
  Registry reg;
  transports::registerBuiltins(reg);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  const std::string yaml =
      "world_size: 2\n"
      "transport: {kind: composite, local_scope: island, timeout_seconds: 1}\n"
      "network: {islands: [[0], [1]]}\n"
      "security:\n  enabled: true\n  secret_key: " +
      (dir / "keys") + "/rank{rank}\n  public_keys: " + (dir / "keys") + "/rank1.pub\n";
  const Config c = parseConfig(yaml, reg.schema(), "composite-keys.yaml");
  MemoryStore store;
  try {
    auto t = reg.transport("composite")(TransportContext{c, 1, store, &reg});
    FAIL("rank 1 came up without rank 0");
  } catch (const TimeoutError&) {
    SUCCEED("it loaded its own key and waited for rank 0");
  } catch (const std::exception& e) {
    FAIL("unexpected: " << e.what());
  }
}
