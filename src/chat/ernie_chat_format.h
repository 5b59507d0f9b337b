// Chat prompts. The ERNIE 4.5 template rendered exactly (MODEL.md):
// <|begin_of_sentence|> + system "content\n" + user "User: content\n" +
// assistant "Assistant: content<|end_of_sentence|>" + "Assistant: " when
// add_generation_prompt. Other roles are dropped.
#pragma once

#include <string>
#include <vector>

namespace tern {

struct ChatMessage {
  std::string role;
  std::string content;
};

std::string render_ernie_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const std::string& cls_token = "<|begin_of_sentence|>",
                              const std::string& sep_token = "<|end_of_sentence|>");

}  // namespace tern
