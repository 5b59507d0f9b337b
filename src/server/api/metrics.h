// Metrics: the Prometheus text exposition of /metrics with vLLM's metric
// names (so existing dashboards and autoscalers work) plus tern: ones.
// Counters and histograms are fed by the API routes as requests finish;
// gauges are read from the engine's stats and the HTTP counters at scrape
// time. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_stats.h"
#include "server/http/counters.h"

namespace tern::server {

// One finished request, as the routes saw it.
struct RequestRecord {
  std::string finish_reason;  // "stop", "length", "abort", "error"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  double queue_s = 0;
  double ttft_s = 0;       // 0 when no token came
  double e2e_s = 0;
  std::vector<double> inter_token_s;  // gaps between streamed tokens
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  // The KV cache as built (vLLM's vllm:cache_config_info labels): positions
  // per block, the element type as stored ("bf16", "fp32", "fp8_e4m3") and
  // the blocks; rendered with the token capacity. Call before serving.
  void set_cache_config(int64_t block_size, std::string cache_dtype, int64_t num_blocks);
  // On the CPU, how the forward runs (tern:cpu_info's labels): threads, the
  // kernel set, the instruction set and whether it multiplies bf16 weights
  // with bf16-rounded activations. Call before serving.
  void set_cpu_info(int threads, std::string kernels, std::string isa, bool bf16_products);
  void record(const RequestRecord& r);
  // The whole /metrics body (text/plain; version=0.0.4).
  std::string render(const EngineStats& engine, const HttpCounters& http) const;

 private:
  std::string model_name_;
  int64_t block_size_ = 0, num_blocks_ = 0;
  std::string cache_dtype_;
  int cpu_threads_ = 0;
  std::string cpu_kernels_, cpu_isa_;
  bool cpu_bf16_products_ = false;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_, prompt_tokens_, generation_tokens_;
  std::vector<std::pair<std::string, uint64_t>> success_by_reason_;
};

}  // namespace tern::server
