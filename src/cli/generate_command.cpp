// `tern generate`: loads a model folder, encodes one prompt (optionally as a
// chat message), decodes up to --max-tokens tokens and streams the text to
// stdout, or prints one JSON object with --json. Exits non-zero with a clear
// message when the model or the flags are wrong.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "base/logging.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "model/arch/ernie4_5.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int fail(const Status& s) {
  std::fprintf(stderr, "tern generate: %s\n", s.to_string().c_str());
  return 1;
}

// Sampling parameters: flags win; generation_config.json fills what they leave out.
Result<SamplingParams> sampling_params(const GenerateOptions& o) {
  GenerationDefaults defaults;
  std::string path = o.model + "/generation_config.json";
  if (std::filesystem::exists(path)) {
    TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    TERN_ASSIGN_OR_RETURN(defaults, parse_generation_config(text, path));
  }
  SamplingParams p;
  bool do_sample = defaults.do_sample.value_or(true);
  p.temperature = o.temperature.value_or(do_sample ? defaults.temperature.value_or(1.0) : 0.0);
  p.top_p = o.top_p.value_or(defaults.top_p.value_or(1.0));
  p.top_k = o.top_k.value_or(defaults.top_k.value_or(0));
  p.min_p = o.min_p.value_or(0.0);
  p.seed = o.seed;
  p.max_tokens = o.max_tokens;
  p.ignore_eos = o.ignore_eos;
  p.stop_token_ids = defaults.eos_token_ids;
  TERN_RETURN_IF_ERROR(p.validate());
  return p;
}

}  // namespace

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt and print it");
  cmd->add_option("--model,-m", o.model, "Model folder (Hugging Face layout)")->required()->envname("TERN_MODEL");
  cmd->add_option("--prompt,-p", o.prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o.chat, "Wrap the prompt as one user message in the model's chat template");
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Most tokens to generate")->check(CLI::PositiveNumber)
      ->capture_default_str()->envname("TERN_MAX_TOKENS");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 is greedy (default: generation_config.json)");
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass (default: generation_config.json)");
  cmd->add_option("--top-k", o.top_k, "Sample among the k most likely tokens; 0 disables");
  cmd->add_option("--min-p", o.min_p, "Drop tokens less likely than min-p times the most likely one");
  cmd->add_option("--seed", o.seed, "Random seed, for reproducible sampling");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", o.json, "Print one JSON object (prompt_token_ids, token_ids, text, finish_reason)");
  cmd->add_option("--threads,-t", o.threads, "CPU threads (default: all cores)")->envname("TERN_THREADS");
  cmd->add_option("--device", o.device, "cpu (cuda comes with the GPU backend)")->check(CLI::IsMember({"cpu"}))
      ->capture_default_str();
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_generate(const GenerateOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  auto params = sampling_params(o);
  if (!params.is_ok()) return fail(params.status());

  auto tokenizer = Tokenizer::load(o.model);
  if (!tokenizer.is_ok()) return fail(tokenizer.status());
  int threads = o.threads > 0 ? o.threads : default_thread_count();
  auto t_load = Clock::now();
  auto model = Ernie45Model::load(o.model, threads);
  if (!model.is_ok()) return fail(model.status());
  double load_ms = ms_since(t_load);
  const ModelConfig& cfg = (*model)->config();

  std::string text = o.prompt;
  if (o.chat) {
    text = render_ernie_chat({{"user", o.prompt}}, true, tokenizer->cls_token(), tokenizer->sep_token());
  }
  std::vector<int32_t> prompt_ids = tokenizer->encode(text, !o.chat);
  if (prompt_ids.empty()) return fail(invalid_argument("the prompt encodes to no tokens"));
  int64_t total = static_cast<int64_t>(prompt_ids.size()) + params->max_tokens;
  if (total > cfg.max_position_embeddings) {
    return fail(invalid_argument("prompt (" + std::to_string(prompt_ids.size()) + " tokens) plus --max-tokens (" +
                                 std::to_string(params->max_tokens) + ") exceeds the model's maximum context of " +
                                 std::to_string(cfg.max_position_embeddings) + " tokens"));
  }

  std::vector<int32_t> stop_ids = tokenizer->default_stop_ids();
  stop_ids.insert(stop_ids.end(), params->stop_token_ids.begin(), params->stop_token_ids.end());
  stop_ids.insert(stop_ids.end(), cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
  auto is_stop = [&](int32_t id) { return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end(); };

  KvCache cache = (*model)->make_cache(total);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  Sampler sampler(*params);
  Detokenizer detok(*tokenizer, /*skip_special_tokens=*/true);

  auto t_prefill = Clock::now();
  Status st = (*model)->forward(prompt_ids, cache, logits);
  if (!st.is_ok()) return fail(st);
  double prefill_ms = ms_since(t_prefill);

  std::vector<int32_t> out_ids;
  std::string out_text;
  std::string finish_reason = "length";
  auto t_decode = Clock::now();
  for (int64_t i = 0; i < params->max_tokens; ++i) {
    int32_t id = sampler.sample(logits);
    out_ids.push_back(id);
    if (!params->ignore_eos && is_stop(id)) {
      finish_reason = "stop";
      break;
    }
    std::string piece = detok.push(id);
    out_text += piece;
    if (!o.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == params->max_tokens) break;
    int32_t next[1] = {id};
    st = (*model)->forward(next, cache, logits);
    if (!st.is_ok()) return fail(st);
  }
  std::string tail = detok.flush();
  out_text += tail;
  double decode_ms = ms_since(t_decode);
  double decode_tps = out_ids.size() > 1 ? (static_cast<double>(out_ids.size()) - 1) * 1000.0 / decode_ms : 0.0;

  if (o.json) {
    nlohmann::json j = {{"prompt_token_ids", prompt_ids}, {"token_ids", out_ids}, {"text", out_text},
                        {"finish_reason", finish_reason},
                        {"timings", {{"load_ms", load_ms}, {"prefill_ms", prefill_ms}, {"decode_ms", decode_ms},
                                     {"decode_tokens_per_second", decode_tps}, {"threads", threads}}}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fprintf(stderr,
                 "[%zu prompt tokens in %.1f ms (%.1f tok/s); %zu generated in %.1f ms (%.2f tok/s decode); "
                 "finish: %s; %d threads]\n",
                 prompt_ids.size(), prefill_ms, prompt_ids.size() * 1000.0 / prefill_ms, out_ids.size(),
                 decode_ms, decode_tps, finish_reason.c_str(), threads);
  }
  return 0;
}

}  // namespace tern::cli
