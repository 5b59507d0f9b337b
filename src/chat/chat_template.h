// The chat renderer the API routes call: the model's Jinja chat template
// (tokenizer_config.json's, or a --chat-template file) rendered with the
// variables transformers' apply_chat_template passes (special tokens,
// add_generation_prompt, chat_template_kwargs); for a model without one, the
// built-in ERNIE 4.5 format (ernie_chat_format.h). A renderer is immutable
// and may run on many threads at once.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace tern {

// messages: the request's list of message objects, as the client sent them;
// kwargs: chat_template_kwargs (an object, or null).
using ChatRenderer = std::function<Result<std::string>(const nlohmann::json& messages, bool add_generation_prompt,
                                                       const nlohmann::json& kwargs)>;

// A renderer for the template `source`; an empty source gives the ERNIE 4.5
// format with the tokenizer's cls and sep tokens. The tokenizer must outlive
// the renderer. Errors: the template's compile error (kParse, kUnsupported,
// kOutOfRange), in the context "chat template".
Result<ChatRenderer> make_chat_renderer(const std::string& source, const Tokenizer& tokenizer);

// The renderer of the template in `template_file` (a --chat-template flag)
// when it is not empty, else of the tokenizer's own template.
Result<ChatRenderer> make_chat_renderer_for(const Tokenizer& tokenizer, const std::string& template_file);

}  // namespace tern
