// Feeds certificate text (the ZeroMQ layout gossamer-keygen writes) to
// parseCertificate, and the first line to isZ85Key. Checks: only
// InvalidArgument escapes, naming the certificate; every key read is 40 Z85
// characters; the keys read, written back in gossamer-keygen's layout, read
// back the same.
#include <algorithm>
#include <string_view>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/security.hpp"

namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

bool z85Text(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return c != '\0' && kZ85.find(c) != std::string_view::npos;
         });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = gossamer::fuzz::textOf(data, size);
  const std::string firstLine = text.substr(0, text.find('\n'));
  FUZZ_CHECK(gossamer::isZ85Key(firstLine) == z85Text(firstLine));

  std::pair<std::vector<std::string>, std::vector<std::string>> keys;
  try {
    keys = gossamer::parseCertificate(text, "fuzz.cert");
  } catch (const gossamer::InvalidArgument& e) {
    FUZZ_CHECK(std::string_view(e.what()).find("fuzz.cert:") != std::string_view::npos);
    return 0;
  }
  std::string again = "# Gossamer CURVE certificate (ZeroMQ layout)\nmetadata\ncurve\n";
  for (const auto& k : keys.first) {
    FUZZ_CHECK(gossamer::isZ85Key(k));
    again += "    public-key = \"" + k + "\"\n";
  }
  for (const auto& k : keys.second) {
    FUZZ_CHECK(gossamer::isZ85Key(k));
    again += "    secret-key = \"" + k + "\"\n";
  }
  FUZZ_CHECK(gossamer::parseCertificate(again, "again") == keys);
  return 0;
}
