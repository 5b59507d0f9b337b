// `tern serve` options and entry point.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/engine_setup.h"

namespace tern::cli {

struct ServeOptions {
  EngineOptions engine;
  std::string host = "0.0.0.0";
  uint16_t port = 8000;
  std::string served_model_name;
  std::string api_key;
  std::string allowed_origins = "*";
  std::string chat_template;
  std::string generation_config = "auto";
  int64_t max_queued_requests = 0;
  std::string log_format = "text";
  std::string log_level = "info";
  bool disable_log_requests = false;
  bool log_requests_text = false;
  int64_t max_log_len = 0;
  double shutdown_timeout_s = 30;
  double http_read_timeout_s = 60;
  double timeout_keep_alive_s = 75;
  double http_write_timeout_s = 60;
  int http_threads = 2;
  uint64_t max_body_bytes = 16ull << 20;
  uint32_t max_header_bytes = 16 * 1024;
  int64_t max_connections = 10000;
  size_t max_logit_bias = 1024;
  int64_t max_n = 128;
  size_t max_prompts = 256;
  size_t max_stop_sequences = 16;
  size_t max_stop_bytes = 1024;
  std::string ssl_keyfile;
  std::string ssl_certfile;
  std::string ssl_ca_certs;
  int ssl_cert_reqs = 0;
  bool enable_ssl_refresh = false;
  bool no_webui = false;
  std::string web_root;
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  std::string dtype = "auto";
};

void add_serve_command(CLI::App& app, ServeOptions& options);
int run_serve(const ServeOptions& options);

}  // namespace tern::cli
