#include "cli/number_checks.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>

namespace tern::cli {
namespace {

// The value as a double when the whole text is a number ("1e3", "-2", "0.5"); an integer option's
// own conversion then refuses a fraction.
std::optional<double> parse_number(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const char* begin = text.data();
  if (begin != end && *begin == '+') ++begin;  // from_chars takes no '+'
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

// 1, 0.001, 1000000: as short as the number allows, without an exponent.
std::string show(double v) {
  char buf[400];  // fixed notation of any double
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

}  // namespace

CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        const auto value = parse_number(text);
        if (!value) return "must be a number, got '" + text + "'";
        if (*value < min) return "must be at least " + show(min) + ", got " + text;
        return {};
      },
      ">= " + show(min));
}

CLI::Validator between(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const auto value = parse_number(text);
        if (!value) return "must be a number, got '" + text + "'";
        if (*value < lo || *value > hi) return "must be from " + show(lo) + " to " + show(hi) + ", got " + text;
        return {};
      },
      show(lo) + " to " + show(hi));
}

}  // namespace tern::cli
