// spdlog patterns for the two log formats.
#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace tern {

void configure_logging(LogFormat format, std::string_view level) {
  // A second call (an embedding program changing the level) replaces the logger.
  spdlog::drop("tern");
  auto logger = spdlog::stderr_color_mt("tern");
  if (format == LogFormat::kJson) {
    logger->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":"%v"})");
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(logger);
}

}  // namespace tern
