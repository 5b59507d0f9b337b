// Names and formatting for Status.
#include "base/status.h"

namespace tern {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kParse: return "parse error";
    case ErrorCode::kOutOfRange: return "out of range";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string out(error_code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

}  // namespace tern
