// configure_logging: a JSON log line stays one valid JSON object whatever the
// message holds (quotes, backslashes, newlines, control bytes, invalid UTF-8).
#include "base/logging.h"

#include <gtest/gtest.h>

#include <string>

namespace tern {
namespace {

std::string log_one(LogFormat format, const std::string& message) {
  configure_logging(format, "info");
  testing::internal::CaptureStderr();
  spdlog::info("{}", message);
  spdlog::default_logger()->flush();
  std::string out = testing::internal::GetCapturedStderr();
  configure_logging(LogFormat::kText, "info");
  return out;
}

TEST(Logging, JsonMessagesAreEscaped) {
  std::string out = log_one(LogFormat::kJson, "say \"hi\" \\ now\n{\"level\":\"error\"}\r\t\x01 \xff end");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // one line
  EXPECT_NE(out.find(R"("msg":"say \"hi\" \\ now\n{\"level\":\"error\"}\r\t\u0001 )" "\xef\xbf\xbd" R"( end"})"),
            std::string::npos)
      << out;
}

TEST(Logging, TextFormatKeepsTheMessage) {
  std::string out = log_one(LogFormat::kText, "plain \"text\"");
  EXPECT_NE(out.find("info"), std::string::npos) << out;
  EXPECT_NE(out.find(" plain \"text\"\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace tern
