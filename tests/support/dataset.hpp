// Where the data-dependent tests find Fashion-MNIST and the SpamAssassin
// LIBSVM files, and how they require them.
//
// The datasets are declared dependencies (Debian's dataset-fashion-mnist,
// installed by scripts/deps.sh; the spam files, made by scripts/spam-data.sh,
// which scripts/test.sh runs), so a test that needs one fails when it is
// missing rather than passing without checking anything.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "build_paths.hpp"

namespace gossamer::testing {

/// $GOSSAMER_FASHION_MNIST when set (to run the tests on another copy, or to
/// check that they fail without one), else Debian's install folder.
inline std::string fashionMnistDir() {
  const char* env = std::getenv("GOSSAMER_FASHION_MNIST");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("/usr/share/datasets/fashion-mnist");
}

/// Fails the calling test unless the four IDX files are in fashionMnistDir().
inline void requireFashionMnist() {
  const std::filesystem::path dir = fashionMnistDir();
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    INFO(
        "Fashion-MNIST is a dependency of this test (apt-get install dataset-fashion-mnist, or set "
        "GOSSAMER_FASHION_MNIST); missing: "
        << (dir / name).string());
    REQUIRE(std::filesystem::exists(dir / name));
  }
}

/// $GOSSAMER_SPAM_DATA when set, else data/spam of the source tree: where
/// scripts/spam-data.sh writes spam-train.libsvm, spam-test.libsvm and
/// spam-stats.json by default.
inline std::string spamDataDir() {
  const char* env = std::getenv("GOSSAMER_SPAM_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : gossamer::testing::sourceDir() + "/data/spam";
}

/// Fails the calling test unless the files of scripts/spam-data.sh are in
/// spamDataDir().
inline void requireSpamData() {
  const std::filesystem::path dir = spamDataDir();
  for (const char* name : {"spam-train.libsvm", "spam-test.libsvm", "spam-stats.json"}) {
    INFO(
        "the SpamAssassin LIBSVM files are a dependency of this test (run scripts/spam-data.sh, or set "
        "GOSSAMER_SPAM_DATA); missing: "
        << (dir / name).string());
    REQUIRE(std::filesystem::exists(dir / name));
  }
}

}  // namespace gossamer::testing
