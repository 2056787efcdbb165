// gossamer-keygen: writes a CURVE key pair for `security:` (sdk security.hpp).
//
//   gossamer-keygen PATH [--force]
//
// PATH gets the secret certificate (mode 0600; it holds the public key too)
// and PATH.pub the public one; give every peer's .pub file to the others
// (security.public_keys: a file or a directory of them). An existing file is
// kept unless --force. Exit status: 0 on success, 1 on an error, 2 on bad
// usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "gossamer/kit/security.hpp"
#include "gossamer/transports/zmq.hpp"

int main(int argc, char** argv) {
  CLI::App app{"gossamer-keygen: write a CURVE key pair (PATH: secret, mode 0600; PATH.pub: public)"};
  std::string path;
  bool force = false;
  app.add_option("path", path, "where to write the secret certificate; the public one goes to PATH.pub")
      ->required();
  app.add_flag("--force", force, "replace existing files");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto [pub, sec] = gossamer::zmq::newCurveKeyPair();
    gossamer::writeCertificates(path, pub, sec, force);
    std::printf("wrote %s (secret, mode 0600) and %s.pub (public key %s)\n", path.c_str(), path.c_str(),
                pub.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossamer-keygen: error: %s\n", e.what());
    return 1;
  }
}
