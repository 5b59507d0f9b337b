// Process-wide logging setup over spdlog: text or JSON lines on stderr.
// Call configure_logging from main before other threads start; a later call
// replaces the earlier setup.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace tern {

enum class LogFormat { kText, kJson };

// level: trace|debug|info|warn|error|off. Unknown names fall back to info.
void configure_logging(LogFormat format, std::string_view level);

}  // namespace tern
