// Thread-local last error and the Status <-> tern_status mapping.
#include "capi/api_error.h"

namespace tern::capi {
namespace {

thread_local std::string t_last_error;

}  // namespace

tern_status status_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return TERN_OK;
    case ErrorCode::kInvalidArgument: return TERN_ERR_INVALID_ARGUMENT;
    case ErrorCode::kNotFound: return TERN_ERR_NOT_FOUND;
    case ErrorCode::kIo: return TERN_ERR_IO;
    case ErrorCode::kParse: return TERN_ERR_PARSE;
    case ErrorCode::kOutOfRange: return TERN_ERR_OUT_OF_RANGE;
    case ErrorCode::kUnsupported: return TERN_ERR_UNSUPPORTED;
    case ErrorCode::kResourceExhausted: return TERN_ERR_RESOURCE_EXHAUSTED;
    case ErrorCode::kCancelled: return TERN_ERR_CANCELLED;
    case ErrorCode::kInternal: return TERN_ERR_INTERNAL;
  }
  return TERN_ERR_INTERNAL;
}

tern_status fail(const Status& status) { return fail(status_code(status.code()), status.message()); }

tern_status fail(tern_status code, std::string message) {
  if (message.empty()) message = "unknown error";
  t_last_error = std::move(message);
  return code;
}

tern_status succeed() {
  t_last_error.clear();
  return TERN_OK;
}

const char* last_error() { return t_last_error.c_str(); }

}  // namespace tern::capi
