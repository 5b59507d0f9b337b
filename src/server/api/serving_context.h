// ServingContext: what every API route needs to serve the one loaded model:
// the engine client, the tokenizer, the chat template renderer, limits and
// defaults, and the metrics recorder. Built once by `tern serve`; read-only
// after start-up (the parts it points to are thread-safe), so handlers on any
// io thread share it.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "chat/chat_template.h"
#include "engine/engine_client.h"
#include "model/model_config.h"
#include "server/api/request_limits.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

class Metrics;

struct ServingContext {
  EngineClient* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatRenderer render_chat;
  Metrics* metrics = nullptr;
  std::string model_name;              // --served-model-name or the folder name
  std::string model_path;
  std::string model_notice;            // config.json's tern_notice, shown in /v1/models
  int64_t max_model_len = 0;
  RequestLimits limits;
  int64_t vocab_size = 0;
  GenerationDefaults generation_defaults;
  bool use_generation_defaults = true;  // --generation-config auto (vLLM's default) vs vllm
  bool log_requests = true;
  bool log_requests_text = false;      // the prompt's text in the request log
  int64_t max_log_len = 0;             // bytes of prompt text logged; 0: all
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
  std::atomic<bool> ready{false};       // /health answers 200 once set
  std::atomic<uint64_t> next_request{0};

  std::string new_request_id(std::string_view prefix) {
    return std::string(prefix) + "-" + std::to_string(next_request.fetch_add(1)) + "-" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007);
  }
};

}  // namespace tern::server
