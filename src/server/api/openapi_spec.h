// The OpenAPI 3 document served at /openapi.json: every route, its request
// and response schemas and error shapes.
#pragma once

#include <string>

#include "server/api/request_limits.h"

namespace tern::server {

// `limits` sets the request schemas' bounds (logprobs, n).
std::string openapi_spec(const std::string& model_name, const RequestLimits& limits);

}  // namespace tern::server
