// SamplingParams::validate(): range checks whose messages copy vLLM's
// wording (and Python's float printing) so clients see the errors they know.
#include "engine/sampling_params.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tern {

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: fixed notation for
  // exponents in [-4, 16), scientific with a 2-digit exponent otherwise.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  if (ec != std::errc()) return "nan";
  std::string sci(buf, end);  // "d.ddde+XX" or "de-XX"
  size_t e_pos = sci.find('e');
  int exp = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];

  std::string out = std::signbit(v) ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      auto int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  int mag = std::abs(exp);
  out += std::string("e") + (exp < 0 ? "-" : "+") + (mag < 10 ? "0" : "") + std::to_string(mag);
  return out;
}

namespace {

Status not_finite(const char* name, double v) {
  return invalid_argument(std::string(name) + " must be a finite number, got " + python_float(v) + ".");
}

}  // namespace

Status SamplingParams::validate(std::optional<int64_t> vocab_size, int max_logprobs) const {
  const std::pair<const char*, double> reals[] = {
      {"temperature", temperature},         {"top_p", top_p},
      {"min_p", min_p},                     {"repetition_penalty", repetition_penalty},
      {"presence_penalty", presence_penalty}, {"frequency_penalty", frequency_penalty},
  };
  for (const auto& [name, v] : reals)
    if (!std::isfinite(v)) return not_finite(name, v);

  if (temperature < 0.0)
    return invalid_argument("temperature must be non-negative, got " + python_float(temperature) + ".");
  if (!(top_p > 0.0 && top_p <= 1.0)) return invalid_argument("top_p must be in (0, 1], got " + python_float(top_p) + ".");
  if (top_k < -1)
    return invalid_argument("top_k must be 0 (disable), or at least 1, got " + std::to_string(top_k) + ".");
  if (!(min_p >= 0.0 && min_p <= 1.0)) return invalid_argument("min_p must be in [0, 1], got " + python_float(min_p) + ".");
  if (!(repetition_penalty > 0.0))
    return invalid_argument("repetition_penalty must be greater than zero, got " + python_float(repetition_penalty) + ".");
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    return invalid_argument("presence_penalty must be in [-2, 2], got " + python_float(presence_penalty) + ".");
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + python_float(frequency_penalty) + ".");

  if (max_tokens < 0) return invalid_argument("max_tokens must be at least 0, got " + std::to_string(max_tokens) + ".");
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > max_logprobs)) {
    return invalid_argument("prompt_logprobs must be in [0, " + std::to_string(max_logprobs) + "], got " +
                            std::to_string(*prompt_logprobs) + ".");
  }
  if (min_tokens < 0)
    return invalid_argument("min_tokens must be greater than or equal to 0, got " + std::to_string(min_tokens) + ".");
  if (min_tokens > max_tokens)
    return invalid_argument("min_tokens must be less than or equal to max_tokens=" + std::to_string(max_tokens) +
                            ", got " + std::to_string(min_tokens) + ".");

  if (logprobs) {
    if (*logprobs < 0) return invalid_argument("logprobs must be non-negative, got " + std::to_string(*logprobs) + ".");
    if (*logprobs > max_logprobs)
      return invalid_argument("Requested sample logprobs of " + std::to_string(*logprobs) +
                              ", which is greater than max allowed: " + std::to_string(max_logprobs));
  }

  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (vocab_size && id >= *vocab_size)) {
      std::string msg = "logit_bias token id " + std::to_string(id) + " is out of range";
      if (vocab_size) msg += " (vocabulary size " + std::to_string(*vocab_size) + ")";
      return invalid_argument(msg + ".");
    }
    if (!std::isfinite(bias))
      return invalid_argument("logit_bias value for token id " + std::to_string(id) + " must be a finite number, got " +
                              python_float(bias) + ".");
  }

  if (stop.size() > kMaxStopStrings)
    return invalid_argument("stop cannot contain more than " + std::to_string(kMaxStopStrings) + " strings, got " +
                            std::to_string(stop.size()) + ".");
  for (const std::string& s : stop)
    if (s.empty()) return invalid_argument("stop cannot contain an empty string.");
  return Status::ok();
}

}  // namespace tern
