// CLI11 checks the programs share. CLI11's own Range and NonNegativeNumber
// compare with < and >, which a NaN passes.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace gossamer::apps {

/// A CLI check: the whole text is a finite number in [min, max].
/// The error names the text and the range.
inline CLI::Validator finiteIn(double min, double max = std::numeric_limits<double>::max()) {
  const std::string range =
      max == std::numeric_limits<double>::max()
          ? ">= " + CLI::detail::to_string(min)
          : "in [" + CLI::detail::to_string(min) + ", " + CLI::detail::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](const std::string& text) -> std::string {
        std::size_t used = 0;
        double v = std::nan("");
        try {
          v = std::stod(text, &used);
        } catch (const std::logic_error&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v) || v < min || v > max)
          return "'" + text + "' is not a finite number " + range;
        return "";
      },
      "NUMBER " + range);
}

}  // namespace gossamer::apps
