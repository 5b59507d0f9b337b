// Small helpers for reporting on untrusted JSON (config files, safetensors
// headers). Stateless and thread-safe; nothing here throws.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tern {

// A short rendering of a JSON value for the "found ..." part of an error
// message: its type name, then at most ~60 characters of it, nested at most
// 3 levels deep ("array [1,2,{...}]", "string \"abc\""). Bounded in time and
// output whatever the value holds (100 MB strings, 10^6-deep nesting), unlike
// nlohmann's dump(), which recurses and copies everything.
std::string json_brief(const nlohmann::json& v);

}  // namespace tern
