// HTTP status reason phrases and the OpenAI/vLLM-shaped error body that every
// transport-level error uses: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <string>
#include <string_view>

namespace tern::server {

// "Not Found" for 404; "Unknown" for codes without a phrase.
std::string_view http_reason(int status);

// vLLM's error type for a status: 400 "BadRequestError", 401
// "AuthenticationError", 404 "NotFoundError", ... "InternalServerError".
std::string_view error_type_for_status(int status);

// {"error":{"message":...,"type":...,"param":null|"...","code":<status>}}.
// An empty `type` means error_type_for_status(status); an empty `param` is null.
std::string openai_error_body(int status, std::string_view message, std::string_view type = {},
                              std::string_view param = {});

inline constexpr std::string_view kJsonContentType = "application/json";

}  // namespace tern::server
