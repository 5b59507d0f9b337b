// `tern generate`: one prompt through the engine (the same path the server
// uses), streaming text to stdout, or one JSON object with --json. Exits
// non-zero with a clear message when the model or the flags are wrong.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "base/logging.h"
#include "chat/ernie_chat_format.h"
#include "cli/commands.h"
#include "engine/request_stream.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tern generate: %s\n", s.to_string().c_str());
  return 1;
}

// Flags win; generation_config.json fills what they leave out (as vLLM's --generation-config auto).
SamplingParams sampling_params(const GenerateOptions& o, const GenerationDefaults& d) {
  SamplingParams p;
  bool do_sample = d.do_sample.value_or(true);
  p.temperature = o.temperature.value_or(do_sample ? d.temperature.value_or(1.0) : 0.0);
  p.top_p = o.top_p.value_or(d.top_p.value_or(1.0));
  p.top_k = o.top_k.value_or(d.top_k.value_or(0));
  p.min_p = o.min_p.value_or(0.0);
  p.repetition_penalty = o.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  p.seed = o.seed;
  p.max_tokens = o.max_tokens;
  p.ignore_eos = o.ignore_eos;
  p.stop = o.stop;
  return p;
}

}  // namespace

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt and print it");
  add_engine_options(*cmd, o.engine);
  cmd->add_option("--prompt,-p", o.prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o.chat, "Wrap the prompt as one user message in the model's chat template");
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Most tokens to generate")->check(CLI::PositiveNumber)
      ->capture_default_str()->envname("TERN_MAX_TOKENS");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 is greedy (default: generation_config.json)");
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass (default: generation_config.json)");
  cmd->add_option("--top-k", o.top_k, "Sample among the k most likely tokens; 0 disables");
  cmd->add_option("--min-p", o.min_p, "Drop tokens less likely than min-p times the most likely one");
  cmd->add_option("--repetition-penalty", o.repetition_penalty, "Penalty > 1 for tokens already seen");
  cmd->add_option("--seed", o.seed, "Random seed, for reproducible sampling");
  cmd->add_option("--stop", o.stop, "Stop when this text appears (repeatable); it is not printed");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", o.json, "Print one JSON object (prompt_token_ids, token_ids, text, finish_reason)");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_generate(const GenerateOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  EngineOptions eo = o.engine;
  eo.run.max_num_seqs = 1;
  auto loaded = load_engine(eo);
  if (!loaded.is_ok()) return fail(loaded.status());
  LoadedEngine& le = *loaded;

  std::string text = o.prompt;
  if (o.chat) text = render_ernie_chat({{"user", o.prompt}}, true, le.tokenizer->cls_token(), le.tokenizer->sep_token());
  Request request;
  request.id = "generate-0";
  request.prompt = le.tokenizer->encode(text, !o.chat);
  request.params = sampling_params(o, le.generation_defaults);
  int64_t room = le.max_model_len - static_cast<int64_t>(request.prompt.size());
  if (room > 0 && request.params.max_tokens > room) {
    return fail(invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                                 " tokens and --max-tokens asks for " + std::to_string(o.max_tokens) +
                                 ", more than the maximum context of " + std::to_string(le.max_model_len) +
                                 " tokens"));
  }
  std::vector<int32_t> prompt_ids = request.prompt;
  auto stream = std::make_shared<RequestStream>();
  Status st = le.engine->add_request(std::move(request), stream);
  if (!st.is_ok()) return fail(st);

  std::vector<int32_t> out_ids;
  std::string out_text, finish_reason;
  RequestOutput last;
  auto start = std::chrono::steady_clock::now();
  while (le.engine->has_work()) {
    le.engine->step();
    for (RequestOutput& e : stream->drain()) {
      if (!e.error.is_ok()) return fail(e.error);
      for (const SequenceOutput& s : e.sequences) {
        out_ids.insert(out_ids.end(), s.token_ids.begin(), s.token_ids.end());
        out_text += s.text;
        if (!o.json && !s.text.empty()) {
          std::fwrite(s.text.data(), 1, s.text.size(), stdout);
          std::fflush(stdout);
        }
        if (s.finish) finish_reason = std::string(finish_reason_name(*s.finish));
      }
      last = std::move(e);
    }
  }
  double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  double decode_ms = total_ms - last.ttft_ms;
  double decode_tps = out_ids.size() > 1 ? (static_cast<double>(out_ids.size()) - 1) * 1000.0 / decode_ms : 0.0;
  int threads = le.model->num_threads();

  if (o.json) {
    nlohmann::json j = {{"prompt_token_ids", prompt_ids}, {"token_ids", out_ids}, {"text", out_text},
                        {"finish_reason", finish_reason},
                        {"timings", {{"load_ms", le.load_ms}, {"ttft_ms", last.ttft_ms}, {"total_ms", total_ms},
                                     {"decode_tokens_per_second", decode_tps}, {"threads", threads}}}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    std::fputc('\n', stdout);
    std::fprintf(stderr,
                 "[%zu prompt tokens, first token after %.1f ms; %zu generated at %.2f tok/s; finish: %s; "
                 "%d threads]\n",
                 prompt_ids.size(), last.ttft_ms, out_ids.size(), decode_tps, finish_reason.c_str(), threads);
  }
  return 0;
}

}  // namespace tern::cli
