// Where the hub client talks to and stores files, from the environment
// variables huggingface_hub reads: HF_ENDPOINT, HF_HOME, HF_HUB_CACHE (and
// the older HUGGINGFACE_HUB_CACHE), HF_TOKEN (else the token file
// `huggingface-cli login` writes), HF_HUB_OFFLINE. So tern and the Python
// tools share one cache and one login.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tern::hub {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // no trailing '/'
  std::string cache_dir;                            // the hub cache: models--ORG--NAME/ folders
  std::string token;                                // empty: anonymous
  std::string token_source;                         // "HF_TOKEN" or the token file's path, for messages
  bool offline = false;
};

// Reads one environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The process environment.
EnvLookup process_environment();

// Settings from `env`; the token file (HF_TOKEN_PATH, else HF_HOME/token) is
// read when HF_TOKEN is unset. '~' at the start of a path is the home folder.
HubSettings hub_settings_from(const EnvLookup& env);

// huggingface_hub's truthy values: 1, ON, YES, TRUE (any case).
bool is_truthy(const std::string& value);

}  // namespace tern::hub
