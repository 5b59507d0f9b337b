// ApiError: the one validation/serving error type of the API routes, mapped
// to an HTTP status and an OpenAI-shaped body in one place (openai routes) or
// TGI's shape (tgi routes).
#pragma once

#include <string>

#include "base/status.h"

namespace tern::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;        // the offending request field, "" if none
  int retry_after_s = 0;    // > 0: send Retry-After (queue full)
};

inline ApiError bad_request(std::string message, std::string param = {}) {
  return {400, std::move(message), std::move(param), 0};
}

// Engine and tokenizer errors as the client should see them: the client's
// mistakes are 400, a full queue or a shutting-down server 503 with
// Retry-After, everything else 500.
ApiError api_error_from_status(const Status& status);

}  // namespace tern::server
