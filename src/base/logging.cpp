// spdlog patterns for the two log formats. JSON lines escape the message
// (quotes, backslashes, control characters, invalid UTF-8), so no message,
// whatever text a client put in it, can break a line or forge another.
#include "base/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <string>

#include "base/utf8.h"

namespace tern {

namespace {

void append_escaped(std::string_view text, spdlog::memory_buf_t& dest) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string clean = utf8_sanitize(text);
  for (char ch : clean) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': dest.append(std::string_view("\\\"")); break;
      case '\\': dest.append(std::string_view("\\\\")); break;
      case '\n': dest.append(std::string_view("\\n")); break;
      case '\r': dest.append(std::string_view("\\r")); break;
      case '\t': dest.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          dest.append(esc, esc + sizeof esc);
        } else {
          dest.push_back(ch);
        }
    }
  }
}

// %* in a pattern: the message as the inside of a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    append_escaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

}  // namespace

void configure_logging(LogFormat format, std::string_view level) {
  // A second call (an embedding program changing the level) replaces the logger.
  spdlog::drop("tern");
  auto logger = spdlog::stderr_color_mt("tern");
  if (format == LogFormat::kJson) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('*');
    formatter->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":"%*"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(logger);
}

}  // namespace tern
