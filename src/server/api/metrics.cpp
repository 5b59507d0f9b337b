// Prometheus text format (version 0.0.4) with vLLM's metric names.
#include "server/api/metrics.h"

#include <cmath>
#include <cstdio>

namespace tern::server {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                         0.075, 0.1,    0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};
const std::vector<double> kTokenBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                           100000};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", labels + ",le=\"" + le + "\"", static_cast<double>(cumulative));
  }
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, static_cast<double>(count_));
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(kLatencyBuckets),
      itl_(kItlBuckets),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets),
      prompt_tokens_(kTokenBuckets),
      generation_tokens_(kTokenBuckets),
      success_by_reason_{{"stop", 0}, {"length", 0}, {"abort", 0}, {"error", 0}} {}

void Metrics::record(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [reason, count] : success_by_reason_)
    if (reason == r.finish_reason) ++count;
  if (r.ttft_s > 0) ttft_.observe(r.ttft_s);
  for (double gap : r.inter_token_s) itl_.observe(gap);
  e2e_.observe(r.e2e_s);
  queue_.observe(r.queue_s);
  prompt_tokens_.observe(static_cast<double>(r.prompt_tokens));
  generation_tokens_.observe(static_cast<double>(r.generation_tokens));
}

void Metrics::set_cpu_info(int threads, std::string kernels, std::string isa, bool bf16_products) {
  cpu_threads_ = threads;
  cpu_kernels_ = std::move(kernels);
  cpu_isa_ = std::move(isa);
  cpu_bf16_products_ = bf16_products;
}

void Metrics::set_cache_config(int64_t block_size, std::string cache_dtype, int64_t num_blocks) {
  block_size_ = block_size;
  cache_dtype_ = std::move(cache_dtype);
  num_blocks_ = num_blocks;
}

std::string Metrics::render(const EngineStats& s, const HttpCounters& http) const {
  const std::string m = "model_name=\"" + escape_label(model_name_) + "\"";
  std::string out;
  auto gauge = [&](const std::string& name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, m, v);
  };
  auto counter = [&](const std::string& name, const char* help, double v) {
    header(out, name, "counter", help);
    sample(out, name, m, v);
  };
  gauge("vllm:num_requests_running", "Requests in the running batch.", static_cast<double>(s.num_running));
  gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", static_cast<double>(s.num_waiting));
  gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).", s.kv_cache_usage);
  counter("vllm:prompt_tokens_total", "Prompt tokens received.", static_cast<double>(s.prompt_tokens_total));
  counter("vllm:generation_tokens_total", "Tokens generated.", static_cast<double>(s.generation_tokens_total));
  counter("vllm:num_preemptions_total", "Sequences preempted (KV cache full).", static_cast<double>(s.num_preemptions));
  counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_cache_queries));
  counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(s.prefix_cache_hits));
  counter("vllm:spec_decode_num_drafts_total", "Speculative decoding: sequences' steps that verified drafts.",
          static_cast<double>(s.spec_drafts));
  counter("vllm:spec_decode_num_draft_tokens_total", "Speculative decoding: draft tokens verified.",
          static_cast<double>(s.spec_draft_tokens));
  counter("vllm:spec_decode_num_accepted_tokens_total", "Speculative decoding: draft tokens accepted.",
          static_cast<double>(s.spec_accepted_tokens));

  std::lock_guard<std::mutex> lock(mu_);
  header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, count] : success_by_reason_)
    sample(out, "vllm:request_success_total", m + ",finished_reason=\"" + reason + "\"", static_cast<double>(count));
  auto hist = [&](const Histogram& h, const std::string& name, const char* help) {
    header(out, name, "histogram", help);
    h.render(out, name, m);
  };
  hist(ttft_, "vllm:time_to_first_token_seconds", "Time to first token.");
  hist(itl_, "vllm:inter_token_latency_seconds", "Time between streamed tokens.");
  hist(e2e_, "vllm:e2e_request_latency_seconds", "End-to-end request latency.");
  hist(queue_, "vllm:request_queue_time_seconds", "Time from arrival to first scheduling.");
  hist(prompt_tokens_, "vllm:request_prompt_tokens", "Prompt tokens per request.");
  hist(generation_tokens_, "vllm:request_generation_tokens", "Generated tokens per request.");

  gauge("tern:kv_cache_free_blocks", "KV cache blocks free or evictable.", static_cast<double>(s.num_free_blocks));
  gauge("tern:kv_cache_total_blocks", "KV cache blocks in all.", static_cast<double>(s.num_total_blocks));
  if (!cache_dtype_.empty()) {
    header(out, "vllm:cache_config_info", "gauge", "The KV cache's configuration (labels); always 1.");
    sample(out, "vllm:cache_config_info",
           m + ",block_size=\"" + std::to_string(block_size_) + "\",cache_dtype=\"" + escape_label(cache_dtype_) +
               "\",num_gpu_blocks=\"" + std::to_string(num_blocks_) + "\"",
           1.0);
    gauge("tern:kv_cache_capacity_tokens", "Tokens the KV cache holds (blocks x block size).",
          static_cast<double>(block_size_ * num_blocks_));
  }
  if (!cpu_kernels_.empty()) {
    header(out, "tern:cpu_info", "gauge", "How the CPU forward runs (labels); always 1.");
    sample(out, "tern:cpu_info",
           m + ",threads=\"" + std::to_string(cpu_threads_) + "\",kernels=\"" + escape_label(cpu_kernels_) +
               "\",isa=\"" + escape_label(cpu_isa_) + "\",bf16_products=\"" +
               (cpu_bf16_products_ ? "true" : "false") + "\"",
           1.0);
  }
  counter("tern:engine_steps_total", "Engine steps run.", static_cast<double>(s.num_steps));
  counter("tern:engine_overlapped_steps_total",
          "Engine steps launched while the step before them still ran (--async-scheduling).",
          static_cast<double>(s.num_overlapped_steps));
  gauge("tern:last_step_seconds", "Duration of the last engine step.", s.last_step_ms / 1000);
  gauge("tern:last_step_batch_tokens", "Tokens computed in the last step.", static_cast<double>(s.last_step_tokens));
  gauge("tern:last_step_batch_sequences", "Sequences in the last step.", static_cast<double>(s.last_step_seqs));

  HttpStatsSnapshot h = http.snapshot();
  header(out, "tern:http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, count] : h.responses_by_status)
    sample(out, "tern:http_responses_total", m + ",status=\"" + std::to_string(status) + "\"",
           static_cast<double>(count));
  gauge("tern:http_connections_open", "Open HTTP connections.", static_cast<double>(h.connections_open));
  gauge("tern:http_requests_in_flight", "HTTP requests being served.", static_cast<double>(h.requests_in_flight));
  counter("tern:http_client_disconnects_total", "Requests whose client left early.",
          static_cast<double>(h.client_disconnects));
  counter("tern:http_tls_handshake_failures_total",
          "HTTPS connections whose TLS handshake failed (plain HTTP, untrusted or missing client certificate).",
          static_cast<double>(h.tls_handshake_failures));
  counter("tern:http_tls_reloads_total", "Times --enable-ssl-refresh loaded changed certificate files.",
          static_cast<double>(h.tls_reloads));
  return out;
}

}  // namespace tern::server
