// The environment variables huggingface_hub reads, read the same way.
#include <gtest/gtest.h>

#include <map>

#include "hub/hub_settings.h"
#include "support/temp_dir.h"

namespace tern::hub {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(HubSettings, Defaults) {
  HubSettings s = hub_settings_from(env_of({{"HOME", "/home/u"}}));
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_EQ(s.cache_dir, "/home/u/.cache/huggingface/hub");
  EXPECT_TRUE(s.token.empty());
  EXPECT_FALSE(s.offline);
}

TEST(HubSettings, CacheFolderPrecedence) {
  EXPECT_EQ(hub_settings_from(env_of({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}})).cache_dir, "/x/huggingface/hub");
  EXPECT_EQ(hub_settings_from(env_of({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"HF_HOME", "~/hf"}})).cache_dir,
            "/h/hf/hub");
  EXPECT_EQ(hub_settings_from(env_of({{"HF_HOME", "/hf"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"}})).cache_dir,
            "/legacy");
  EXPECT_EQ(hub_settings_from(env_of({{"HF_HOME", "/hf"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"},
                                      {"HF_HUB_CACHE", "/cache"}}))
                .cache_dir,
            "/cache");
}

TEST(HubSettings, EndpointTokenOffline) {
  HubSettings s = hub_settings_from(env_of({{"HF_ENDPOINT", "http://127.0.0.1:9/"}, {"HF_TOKEN", " hf_abc\n"},
                                            {"HF_HUB_OFFLINE", "yes"}}));
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9");
  EXPECT_EQ(s.token, "hf_abc");
  EXPECT_EQ(s.token_source, "HF_TOKEN");
  EXPECT_TRUE(s.offline);
  EXPECT_FALSE(hub_settings_from(env_of({{"HF_HUB_OFFLINE", "0"}})).offline);
  EXPECT_TRUE(hub_settings_from(env_of({{"TRANSFORMERS_OFFLINE", "1"}})).offline);
}

TEST(HubSettings, TokenFileWhenHfTokenIsUnset) {
  testing::TempDir dir;
  dir.write("token", "hf_from_file\n");
  HubSettings s = hub_settings_from(env_of({{"HF_HOME", dir.path()}}));
  EXPECT_EQ(s.token, "hf_from_file");
  EXPECT_NE(s.token_source.find(dir.file("token")), std::string::npos);
  EXPECT_EQ(hub_settings_from(env_of({{"HF_HOME", dir.path()}, {"HF_TOKEN", "hf_env"}})).token, "hf_env");
}

}  // namespace
}  // namespace tern::hub
