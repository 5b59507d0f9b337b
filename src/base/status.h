// Errors as values: Status (a stable code plus a readable message) and
// Result<T> (a value or a Status). Every module boundary returns these;
// parsers of untrusted input never throw or abort.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tern {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong (bad request, bad flag)
  kNotFound,          // a file, tensor or token that should exist does not
  kIo,                // the operating system refused a read, write or map
  kParse,             // bytes on disk or on the wire are malformed
  kOutOfRange,        // a size or index past a limit
  kUnsupported,       // well-formed but not something tern implements
  kResourceExhausted, // memory, KV blocks or queue slots ran out
  kCancelled,
  kInternal,          // a bug in tern
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "parse error: model.safetensors: header length 99 past end of file (size 12)"
  std::string to_string() const;

  // Returns a copy with `context + ": "` in front of the message.
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIo, std::move(m)}; }
inline Status parse_error(std::string m) { return {ErrorCode::kParse, std::move(m)}; }
inline Status out_of_range(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tern

// Propagate a failed Status from an expression returning Status.
#define TERN_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::tern::Status tern_status_ = (expr);       \
    if (!tern_status_.is_ok()) return tern_status_; \
  } while (0)

#define TERN_CONCAT_INNER(a, b) a##b
#define TERN_CONCAT(a, b) TERN_CONCAT_INNER(a, b)

// TERN_ASSIGN_OR_RETURN(auto x, expr): unwraps a Result<T> or returns its Status.
#define TERN_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto TERN_CONCAT(tern_result_, __LINE__) = (expr);                       \
  if (!TERN_CONCAT(tern_result_, __LINE__).is_ok())                        \
    return TERN_CONCAT(tern_result_, __LINE__).status();                   \
  lhs = std::move(TERN_CONCAT(tern_result_, __LINE__)).value()
