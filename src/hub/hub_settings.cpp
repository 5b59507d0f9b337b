// Hub settings from environment variables, as huggingface_hub reads them.
#include "hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tern::hub {
namespace {

std::optional<std::string> non_empty(const EnvLookup& env, const char* name) {
  std::optional<std::string> v = env(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

std::string expand_home(const std::string& path, const EnvLookup& env) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return env("HOME").value_or("") + path.substr(1);
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

bool is_truthy(const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

HubSettings hub_settings_from(const EnvLookup& env) {
  HubSettings s;
  if (auto endpoint = non_empty(env, "HF_ENDPOINT")) {
    s.endpoint = *endpoint;
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  }
  std::string home;
  if (auto hf_home = non_empty(env, "HF_HOME")) {
    home = expand_home(*hf_home, env);
  } else if (auto xdg = non_empty(env, "XDG_CACHE_HOME")) {
    home = expand_home(*xdg, env) + "/huggingface";
  } else {
    home = env("HOME").value_or("") + "/.cache/huggingface";
  }
  if (auto cache = non_empty(env, "HF_HUB_CACHE")) {
    s.cache_dir = expand_home(*cache, env);
  } else if (auto legacy = non_empty(env, "HUGGINGFACE_HUB_CACHE")) {
    s.cache_dir = expand_home(*legacy, env);
  } else {
    s.cache_dir = home + "/hub";
  }
  if (auto token = non_empty(env, "HF_TOKEN")) {
    s.token = trim(*token);
    s.token_source = "HF_TOKEN";
  } else if (auto legacy = non_empty(env, "HUGGING_FACE_HUB_TOKEN")) {
    s.token = trim(*legacy);
    s.token_source = "HUGGING_FACE_HUB_TOKEN";
  } else {
    std::string path = expand_home(non_empty(env, "HF_TOKEN_PATH").value_or(home + "/token"), env);
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      s.token = trim(text.str());
      if (!s.token.empty()) s.token_source = "the token file " + path;
    }
  }
  s.offline = is_truthy(env("HF_HUB_OFFLINE").value_or("")) || is_truthy(env("TRANSFORMERS_OFFLINE").value_or(""));
  return s;
}

}  // namespace tern::hub
