// Reason phrases and error bodies for the statuses tern sends.
#include "server/http/error.h"

#include "server/http/json_escape.h"

namespace tern::server {

std::string_view http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string_view error_type_for_status(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 408: return "RequestTimeoutError";
    case 409: return "ConflictError";
    case 413: return "RequestTooLargeError";
    case 422: return "UnprocessableEntityError";
    case 429: return "RateLimitError";
    case 431: return "RequestHeaderFieldsTooLargeError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

std::string openai_error_body(int status, std::string_view message, std::string_view type,
                              std::string_view param) {
  std::string out = "{\"error\":{\"message\":\"";
  append_json_escaped(out, message);
  out += "\",\"type\":\"";
  append_json_escaped(out, type.empty() ? error_type_for_status(status) : type);
  out += "\",\"param\":";
  out += param.empty() ? std::string("null") : json_quote(param);
  out += ",\"code\":";
  out += std::to_string(status);
  out += "}}";
  return out;
}

}  // namespace tern::server
