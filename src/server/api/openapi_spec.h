// The OpenAPI 3 document served at /openapi.json: every route, its request
// and response schemas and error shapes.
#pragma once

#include <string>

namespace tern::server {

std::string openapi_spec(const std::string& model_name);

}  // namespace tern::server
