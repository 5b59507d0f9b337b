// `tern generate`: one prompt through the engine (the same path the server
// uses), streaming text to stdout, or one JSON object with --json. Exits
// non-zero with a clear message when the model or the flags are wrong.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "base/logging.h"
#include "chat/ernie_chat_format.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/sampling_flags.h"
#include "engine/request_stream.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tern generate: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt and print it");
  add_engine_options(*cmd, o.engine, true);
  cmd->add_option("--prompt,-p", o.prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o.chat, "Wrap the prompt as one user message in the model's chat template");
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Most tokens to generate")->check(at_least(1))
      ->capture_default_str()->envname("TERN_MAX_TOKENS");
  add_sampling_flags(*cmd, o.sampling);
  cmd->add_flag("--json", o.json, "Print one JSON object (prompt_token_ids, token_ids, text, finish_reason)");
  cmd->add_option("--logprobs", o.logprobs,
                  "With --json: each generated token's log-probability and the N most likely tokens there "
                  "([id, logprob] pairs, most likely first), under the raw logits")
      ->check(between(0, kMaxLogprobs));
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
  request.params = sampling_params(o.sampling, le.generation_defaults, o.max_tokens);
  if (o.logprobs >= 0) {
    if (!o.json) return fail(invalid_argument("--logprobs prints with --json only"));
    request.params.logprobs = o.logprobs;
  }
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
  nlohmann::json out_logprobs = nlohmann::json::array();
  std::string out_text, finish_reason;
  RequestOutput last;
  while (le.engine->has_work()) {
    le.engine->step();
    for (RequestOutput& e : stream->drain()) {
      if (!e.error.is_ok()) return fail(e.error);
      for (const SequenceOutput& s : e.sequences) {
        out_ids.insert(out_ids.end(), s.token_ids.begin(), s.token_ids.end());
        for (const SampleResult& r : s.logprobs) {
          nlohmann::json top = nlohmann::json::array();
          for (const TokenLogprob& t : r.top) top.push_back({t.id, t.logprob});
          out_logprobs.push_back({{"token", r.token}, {"logprob", r.logprob}, {"top", std::move(top)}});
        }
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
  // Both from the request's arrival, as the engine counts them (a clock started here would begin later).
  const double total_ms = last.elapsed_ms;
  const double decode_ms = total_ms - last.ttft_ms;
  double decode_tps = out_ids.size() > 1 ? (static_cast<double>(out_ids.size()) - 1) * 1000.0 / decode_ms : 0.0;
  int threads = le.model->num_threads();

  if (o.json) {
    nlohmann::json j = {{"prompt_token_ids", prompt_ids}, {"token_ids", out_ids}, {"text", out_text},
                        {"finish_reason", finish_reason},
                        {"timings", {{"load_ms", le.load_ms}, {"ttft_ms", last.ttft_ms}, {"total_ms", total_ms},
                                     {"decode_tokens_per_second", decode_tps}, {"threads", threads}}}};
    if (o.logprobs >= 0) j["logprobs"] = std::move(out_logprobs);
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
