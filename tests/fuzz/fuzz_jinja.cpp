// libFuzzer target for the Jinja engine: the input is a chat template, compiled
// and, when it compiles, rendered with a small fixed chat context (three
// messages, a tool, the special tokens) under tighter JinjaLimits than the
// server's, so that each input costs at most a few milliseconds and the fuzzer
// explores rather than waits. Checked: compile and render return a value or an
// error with a message, never throw or crash; a render that succeeds stays
// within max_output_bytes.
// Slow or memory-hungry templates show up as libFuzzer timeouts / RSS limits.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_context.h"
#include "jinja/json.h"
#include "jinja/template.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const tern::JinjaValue& chat_context() {
  static const tern::JinjaValue context = [] {
    const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "你好，请介绍一下你自己。"},
      {"role": "assistant", "content": "我是一个语言模型。",
       "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "北京"}}}]},
      {"role": "tool", "content": "{\"temp\": 21}"}
    ])");
    const auto tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])");
    tern::ChatTemplateInputs in;
    in.messages = tern::jinja_from_json(messages).value();
    in.tools = tern::jinja_from_json(tools).value();
    in.add_generation_prompt = true;
    in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"cls_token", "<|begin_of_sentence|>"},
                         {"sep_token", "<|end_of_sentence|>"}};
    in.chat_template_kwargs = tern::jinja_from_json(nlohmann::json{{"enable_thinking", false}}).value();
    return tern::make_chat_context(in).value();
  }();
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto compiled = tern::JinjaTemplate::compile(source);
  if (!compiled.is_ok()) {
    check(!compiled.status().message().empty());
    return 0;
  }
  tern::JinjaLimits limits;
  limits.max_output_bytes = 256 << 10;
  limits.max_work = 200'000;
  auto rendered = compiled->render(chat_context(), limits);
  if (rendered.is_ok()) {
    check(rendered->size() <= limits.max_output_bytes);
  } else {
    check(!rendered.status().message().empty());
  }
  return 0;
}
