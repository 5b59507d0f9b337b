// `tern chat`: an interactive chat with the model in the terminal. Each
// answer streams as it is generated and ends with a status line (tokens,
// time to first token, tokens/s). The conversation is kept and re-rendered
// with the model's chat template every turn, the oldest exchanges dropped
// when it outgrows the context. /reset, /system TEXT, /exit; Ctrl-C stops
// the answer being written, not the program; Ctrl-D quits.
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "base/logging.h"
#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/line_editor.h"
#include "engine/request_stream.h"

namespace tern::cli {
namespace {

// Set by SIGINT; the one piece of state a signal handler may touch.
volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

// SIGINT sets g_interrupted instead of ending the process, and interrupts a
// blocking read (no SA_RESTART), for as long as this lives.
class SigintCatcher {
 public:
  SigintCatcher() {
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    sigaction(SIGINT, &action, &previous_);
  }
  ~SigintCatcher() { sigaction(SIGINT, &previous_, nullptr); }
  SigintCatcher(const SigintCatcher&) = delete;
  SigintCatcher& operator=(const SigintCatcher&) = delete;

 private:
  struct sigaction previous_ {};
};

int fail(const Status& s) {
  std::fprintf(stderr, "tern chat: %s\n", s.to_string().c_str());
  return 1;
}

struct Answer {
  std::string text;
  int64_t tokens = 0;
  int64_t prompt_tokens = 0;
  double ttft_ms = 0;
  double tokens_per_second = 0;  // decode speed: tokens after the first over the time after it
  bool stopped = false;          // Ctrl-C
  Status error;
};

// Steps the engine until the request ends, printing its text as it comes.
Answer stream_answer(Engine& engine, Request request) {
  Answer a;
  const std::string id = request.id;
  auto stream = std::make_shared<RequestStream>();
  a.error = engine.add_request(std::move(request), stream);
  if (!a.error.is_ok()) return a;
  double elapsed_ms = 0;
  while (engine.has_work()) {
    if (g_interrupted && !a.stopped) {
      a.stopped = true;
      engine.abort_request(id);
    }
    engine.step();
    for (RequestOutput& e : stream->drain()) {
      if (!e.error.is_ok()) a.error = e.error;
      for (const SequenceOutput& s : e.sequences) {
        a.text += s.text;
        std::fwrite(s.text.data(), 1, s.text.size(), stdout);
      }
      a.tokens = e.num_output_tokens;
      a.prompt_tokens = e.num_prompt_tokens;
      if (e.ttft_ms > 0) a.ttft_ms = e.ttft_ms;
      elapsed_ms = e.elapsed_ms;
    }
    std::fflush(stdout);
  }
  const double decode_ms = elapsed_ms - a.ttft_ms;
  a.tokens_per_second = a.tokens > 1 && decode_ms > 0 ? static_cast<double>(a.tokens - 1) * 1000.0 / decode_ms : 0;
  return a;
}

nlohmann::json conversation(const std::string& system, const nlohmann::json& turns) {
  nlohmann::json messages = nlohmann::json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  for (const nlohmann::json& t : turns) messages.push_back(t);
  return messages;
}

// The prompt's tokens, dropping the oldest exchanges until it leaves room to answer.
Result<std::vector<int32_t>> fit_prompt(const ChatRenderer& render, const Tokenizer& tok, const std::string& system,
                                        nlohmann::json& turns, int64_t max_model_len) {
  for (;;) {
    TERN_ASSIGN_OR_RETURN(std::string text, render(conversation(system, turns), true, nlohmann::json()));
    std::vector<int32_t> ids = tok.encode(text, false);
    if (static_cast<int64_t>(ids.size()) < max_model_len) return ids;
    if (turns.size() <= 1) {
      return invalid_argument("the message is " + std::to_string(ids.size()) + " tokens with the chat template, " +
                              "more than the context of " + std::to_string(max_model_len) + " tokens");
    }
    turns.erase(turns.begin(), turns.begin() + std::min<size_t>(2, turns.size() - 1));
    std::fprintf(stderr, "(the oldest exchange was dropped to fit the context of %lld tokens)\n",
                 static_cast<long long>(max_model_len));
  }
}

void print_help() {
  std::fprintf(stderr,
               "commands: /reset clears the conversation; /system TEXT sets the system prompt (/system alone "
               "removes it); /exit quits (so does Ctrl-D); Ctrl-C stops an answer\n");
}

}  // namespace

void add_chat_command(CLI::App& app, ChatOptions& o) {
  auto* cmd = app.add_subcommand("chat", "Chat with the model in the terminal (history, streaming, /reset, "
                                         "/system TEXT, /exit; Ctrl-C stops an answer)");
  add_engine_options(*cmd, o.engine, true);
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Most tokens per answer (default: up to the end of the context)")
      ->check(at_least(0))->envname("TERN_MAX_TOKENS");
  add_sampling_flags(*cmd, o.sampling);
  cmd->add_option("--system", o.system, "System prompt to start with (/system TEXT changes it)");
  cmd->add_option("--chat-template", o.chat_template, "Jinja chat template file (default: the model's)");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_chat(const ChatOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  EngineOptions eo = o.engine;
  eo.run.max_num_seqs = 1;
  auto loaded = load_engine(eo);
  if (!loaded.is_ok()) return fail(loaded.status());
  LoadedEngine& le = *loaded;
  auto render = make_chat_renderer_for(*le.tokenizer, o.chat_template);
  if (!render.is_ok()) return fail(render.status());

  const std::string name = !le.model_name.empty() ? le.model_name
                                                   : std::filesystem::path(le.model_path).lexically_normal().string();
  std::fprintf(stderr, "tern chat: %s on %s, context %lld tokens\n", name.c_str(), le.device.c_str(),
               static_cast<long long>(le.max_model_len));
  print_help();

  SigintCatcher sigint;
  LineEditor editor("tern", "> ");
  std::string system = o.system;
  nlohmann::json turns = nlohmann::json::array();
  int64_t answers = 0;
  for (;;) {
    g_interrupted = 0;
    std::string line;
    LineEditor::Outcome outcome = editor.read_line(line);
    if (outcome == LineEditor::Outcome::kEnd) break;
    if (outcome == LineEditor::Outcome::kInterrupted) {
      std::fputc('\n', stderr);
      continue;
    }
    // A Ctrl-C that came between the prompt and the read set the flag without ending the read.
    g_interrupted = 0;
    if (line.empty()) continue;
    editor.add_history(line);
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      turns = nlohmann::json::array();
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line == "/system" || line.rfind("/system ", 0) == 0) {
      system = line.size() > 8 ? line.substr(8) : "";
      std::fprintf(stderr, system.empty() ? "(system prompt removed)\n" : "(system prompt set)\n");
      continue;
    }
    if (line == "/help") {
      print_help();
      continue;
    }
    if (line[0] == '/') {
      std::fprintf(stderr, "unknown command %s; ", line.c_str());
      print_help();
      continue;
    }
    turns.push_back({{"role", "user"}, {"content", line}});
    auto prompt = fit_prompt(*render, *le.tokenizer, system, turns, le.max_model_len);
    if (!prompt.is_ok()) {
      turns.erase(turns.end() - 1);
      std::fprintf(stderr, "tern chat: %s\n", prompt.status().message().c_str());
      continue;
    }
    Request request;
    request.id = "chat-" + std::to_string(answers++);
    const int64_t room = le.max_model_len - static_cast<int64_t>(prompt->size());
    request.prompt = std::move(prompt).value();
    request.params = sampling_params(o.sampling, le.generation_defaults,
                                     o.max_tokens > 0 ? std::min(o.max_tokens, room) : room);
    Answer answer = stream_answer(*le.engine, std::move(request));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!answer.error.is_ok()) {
      turns.erase(turns.end() - 1);
      std::fprintf(stderr, "tern chat: %s\n", answer.error.to_string().c_str());
      continue;
    }
    turns.push_back({{"role", "assistant"}, {"content", answer.text}});
    std::fprintf(stderr, "[%lld tokens (prompt %lld), TTFT %.0f ms, %.1f tokens/s%s]\n",
                 static_cast<long long>(answer.tokens), static_cast<long long>(answer.prompt_tokens), answer.ttft_ms,
                 answer.tokens_per_second, answer.stopped ? ", stopped" : "");
  }
  return 0;
}

}  // namespace tern::cli
