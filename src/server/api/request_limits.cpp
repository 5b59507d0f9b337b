// The limit checks' messages: the field, the limit, what was asked, and the flag.
#include "server/api/request_limits.h"

namespace tern::server {

std::optional<ApiError> check_logprobs(const char* field, int64_t value, const RequestLimits& limits) {
  if (value >= 0 && value <= limits.max_logprobs) return std::nullopt;
  return bad_request(std::string(field) + " must be between 0 and " + std::to_string(limits.max_logprobs) + ", got " +
                         std::to_string(value) + " (the server's limit, --max-logprobs)",
                     field);
}

std::optional<ApiError> check_stop(const std::vector<std::string>& stop, const RequestLimits& limits) {
  if (stop.size() > limits.max_stop) {
    return bad_request("stop holds " + std::to_string(stop.size()) + " strings; the server's limit is " +
                           std::to_string(limits.max_stop) + " stop strings per request (--max-stop-sequences)",
                       "stop");
  }
  for (const std::string& s : stop) {
    if (s.size() > limits.max_stop_bytes) {
      return bad_request("a stop string of " + std::to_string(s.size()) +
                             " bytes is longer than the server's limit of " + std::to_string(limits.max_stop_bytes) +
                             " bytes per stop string (--max-stop-bytes)",
                         "stop");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> check_logit_bias(size_t entries, const RequestLimits& limits) {
  if (entries <= limits.max_logit_bias) return std::nullopt;
  return bad_request("logit_bias holds " + std::to_string(entries) + " entries; the server's limit is " +
                         std::to_string(limits.max_logit_bias) + " (--max-logit-bias)",
                     "logit_bias");
}

}  // namespace tern::server
