// The committed chat templates (tests/data/chat_templates) rendered for a
// fixed conversation, against what Python jinja2 renders under transformers;
// and the ERNIE template of the tiny model against MODEL.md and the built-in
// render_ernie_chat. The differential test covers random conversations.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "chat/ernie_chat_format.h"
#include "chat/chat_context.h"
#include "jinja/json.h"
#include "jinja/template.h"

namespace tern {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string template_path(const std::string& name) {
  return std::string(TERN_TEST_DATA_DIR) + "/chat_templates/" + name + ".jinja";
}

constexpr std::string_view kConversation = R"([
  {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 你好"},
  {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather in Paris?"}])";
constexpr std::string_view kToolConversation = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null,
   "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "content": "18C"}])";
constexpr std::string_view kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather for a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

std::string render_file(const std::string& name, std::string_view messages, std::string_view tools = "null",
                        std::size_t skip_messages = 0) {
  auto tmpl = JinjaTemplate::compile(read(template_path(name)));
  EXPECT_TRUE(tmpl.is_ok()) << name << ": " << tmpl.status().to_string();
  if (!tmpl.is_ok()) return "";
  nlohmann::ordered_json m = nlohmann::ordered_json::parse(messages);
  m.erase(m.begin(), m.begin() + static_cast<long>(skip_messages));
  ChatTemplateInputs in;
  in.messages = jinja_from_json(m).value();
  in.tools = jinja_from_json(nlohmann::ordered_json::parse(tools)).value();
  in.add_generation_prompt = true;
  in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto out = tmpl->render(make_chat_context(in).value());
  EXPECT_TRUE(out.is_ok()) << name << ": " << out.status().to_string();
  return out.is_ok() ? out.value() : "";
}

TEST(JinjaChatTemplates, ChatMl) {
  EXPECT_EQ(render_file("chatml", kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 你好<|im_end|>\n<|im_start|>assistant\n"
            "Hello!<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(JinjaChatTemplates, Llama3) {
  EXPECT_EQ(render_file("llama_3", kConversation),
            "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi 你好<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
}

TEST(JinjaChatTemplates, Llama31WithTools) {
  EXPECT_EQ(render_file("llama_3_1", kToolConversation, kTools),
            "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December "
            "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the "
            "following functions, please respond with a JSON for a function call with its proper arguments that best "
            "answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary "
            "of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    "
            "\"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Weather for a city\",\n"
            "        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n"
            "                \"city\": {\n                    \"type\": \"string\"\n                }\n            },\n"
            "            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in "
            "Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
            "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"18C\""
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(JinjaChatTemplates, Qwen25WithTools) {
  EXPECT_EQ(render_file("qwen_2_5", kToolConversation, kTools),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
            "You may call one or more functions to assist with the user query.\n\nYou are provided with function "
            "signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
            "\"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each "
            "function call, return a json object with function name and arguments within <tool_call></tool_call> XML "
            "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
            "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

TEST(JinjaChatTemplates, MistralAndGemma) {
  EXPECT_EQ(render_file("mistral", kConversation, "null", 1),
            "<s> [INST] Hi 你好 [/INST] Hello!</s> [INST] Weather in Paris? [/INST]");
  EXPECT_EQ(render_file("gemma", kConversation, "null", 1),
            "<s><start_of_turn>user\nHi 你好<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n");
  // Both refuse a conversation that does not alternate, with the template's message.
  auto tmpl = JinjaTemplate::compile(read(template_path("gemma")));
  ASSERT_TRUE(tmpl.is_ok());
  ChatTemplateInputs in;
  in.messages = jinja_from_json(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "a"},
                                                                   {"role": "user", "content": "b"}])"))
                    .value();
  auto out = tmpl->render(make_chat_context(in).value());
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(JinjaChatTemplates, ErnieMatchesModelMdAndTheBuiltInRenderer) {
  auto config = nlohmann::json::parse(read(std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny/tokenizer_config.json"));
  auto tmpl = JinjaTemplate::compile(config["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  EXPECT_EQ(read(template_path("ernie_4_5")), config["chat_template"].get<std::string>());

  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"system", "SYS"}, {"user", "U"}, {"assistant", "A"}},
      {{"user", "你好"}, {"assistant", "你好！"}, {"tool", "dropped"}, {"user", "  two\n\nlines  "}},
      {},
  };
  for (const auto& conversation : conversations) {
    for (bool gen : {true, false}) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      for (const ChatMessage& m : conversation) messages.push_back({{"role", m.role}, {"content", m.content}});
      ChatTemplateInputs in;
      in.messages = jinja_from_json(messages).value();
      in.add_generation_prompt = gen;
      in.special_tokens = {{"bos_token", "<s>"},
                           {"eos_token", "</s>"},
                           {"cls_token", "<|begin_of_sentence|>"},
                           {"sep_token", "<|end_of_sentence|>"}};
      auto out = tmpl->render(make_chat_context(in).value());
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      EXPECT_EQ(out.value(), render_ernie_chat(conversation, gen));
    }
  }
  // MODEL.md's example, and the template's own default when add_generation_prompt is absent.
  auto ctx = jinja_from_json(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "system", "content": "SYS"}, {"role": "user", "content": "U"},
                       {"role": "assistant", "content": "A"}]})"));
  EXPECT_EQ(tmpl->render(ctx.value()).value(),
            "<|begin_of_sentence|>SYS\nUser: U\nAssistant: A<|end_of_sentence|>Assistant: ");
}

TEST(JinjaChatTemplates, EveryCommittedTemplateCompiles) {
  for (const char* name :
       {"chatml", "ernie_4_5", "gemma", "gemma_3", "kitchen_sink", "llama_3", "llama_3_1", "mistral", "qwen_2_5"}) {
    EXPECT_TRUE(JinjaTemplate::compile(read(template_path(name))).is_ok()) << name;
  }
}

}  // namespace
}  // namespace tern
