// The `tern` subcommands: their options and entry points.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/engine_setup.h"
#include "cli/sampling_flags.h"

namespace tern::cli {

struct GenerateOptions {
  EngineOptions engine;
  std::string prompt;
  bool chat = false;
  int64_t max_tokens = 128;
  SamplingFlags sampling;
  bool json = false;
  int logprobs = -1;  // with --json: the N most likely tokens at each generated position (-1: none)
  std::string log_level = "warn";
};

void add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate(const GenerateOptions& options);

struct BenchOptions {
  EngineOptions engine;
  std::string scenario = "offline";
  int64_t concurrency = 256;  // conc: sequences kept running (the engine's --max-num-seqs)
  int64_t num_requests = 256;
  int64_t input_min = 100, input_max = 1024;
  int64_t output_min = 100, output_max = 1024;
  uint64_t seed = 0;
  double temperature = 0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;
  // pp-tg (llama-bench's -p, -n, -r): prompt tokens, generated tokens, timed runs.
  int64_t n_prompt = 512, n_gen = 128, repetitions = 3;
  std::string json_out;
  std::string log_level = "warn";
};

void add_bench_command(CLI::App& app, BenchOptions& options);
int run_bench(const BenchOptions& options);
// bench pp-tg (bench_pp_tg.cpp): llama-bench's prompt and generation tests on the model alone.
int run_bench_pp_tg(const BenchOptions& options);

struct ConvertOptions {
  std::string model;            // Hugging Face folder
  std::string outfile;          // the GGUF to write
  std::string outtype = "auto";  // f32, f16, bf16, q8_0 or auto
  std::string log_level = "warn";
};

void add_convert_command(CLI::App& app, ConvertOptions& options);
int run_convert(const ConvertOptions& options);

struct QuantizeOptions {
  std::string input;   // GGUF to read
  std::string output;  // GGUF to write
  std::string type;    // q8_0, q4_0, q4_k_m, q5_k_m, q6_k
  std::string log_level = "warn";
};

void add_quantize_command(CLI::App& app, QuantizeOptions& options);
int run_quantize(const QuantizeOptions& options);

struct PerplexityOptions {
  EngineOptions engine;
  std::string file;             // text to score (not needed with --kl-divergence: the base holds the tokens)
  int64_t n_ctx = 512;          // window: the first half is context, the second half is scored
  int64_t n_chunks = -1;        // windows to score; -1: as many as the text fills
  std::string kl_base;          // llama-perplexity's --kl-divergence-base file (written, or read with kl_divergence)
  bool kl_divergence = false;   // score against kl_base instead of writing it
  std::string json_out;
  std::string log_level = "warn";
};

void add_perplexity_command(CLI::App& app, PerplexityOptions& options);
int run_perplexity(const PerplexityOptions& options);

struct ChatOptions {
  EngineOptions engine;
  int64_t max_tokens = 0;  // 0: up to the end of the context
  SamplingFlags sampling;
  std::string system;         // the system prompt; empty: none
  std::string chat_template;  // a Jinja file; empty: the model's
  std::string log_level = "warn";
};

void add_chat_command(CLI::App& app, ChatOptions& options);
int run_chat(const ChatOptions& options);

struct DownloadOptions {
  std::string repo;                  // ORG/NAME[@REVISION][:FILE]
  std::vector<std::string> include;  // shell-style patterns; empty: the model's files
  std::string log_level = "info";
};

void add_download_command(CLI::App& app, DownloadOptions& options);
int run_download(const DownloadOptions& options);

}  // namespace tern::cli
