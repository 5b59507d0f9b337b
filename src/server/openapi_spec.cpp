// OpenAPI document (filled in with full schemas by the API spec work).
#include "server/openapi_spec.h"

#include <nlohmann/json.hpp>

namespace tern::server {

std::string openapi_spec(const std::string& model_name) {
  nlohmann::json spec = {{"openapi", "3.0.3"},
                         {"info", {{"title", "tern"}, {"version", TERN_VERSION_STRING},
                                   {"description", "Serving " + model_name}}},
                         {"paths", nlohmann::json::object()}};
  return spec.dump();
}

}  // namespace tern::server
