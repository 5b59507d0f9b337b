// Reads the Hugging Face tokenizer JSON files of a model folder
// (tokenizer_config.json, special_tokens_map.json, added_tokens.json,
// tokenizer.json's "added_tokens", chat_template.jinja/.json) into plain
// structs. Only parsing and type checks live here; Tokenizer::load resolves
// contents to ids. Every file is optional; a malformed one is an error naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tern {

// Which file an added token came from (llama.cpp's converter treats them apart).
enum class AddedTokenSource { kTokenizerJson, kAddedTokensJson, kConfigDecoder };

struct AddedTokenSpec {
  int32_t id = 0;
  AddedTokenSource source = AddedTokenSource::kConfigDecoder;
  std::string content;
  bool special = false;
  bool lstrip = false;  // HF: swallow whitespace to the left of a match
  bool rstrip = false;  // HF: swallow whitespace to the right of a match
};

struct TokenizerFiles {
  // Added tokens in load order; a later entry for the same id or content
  // replaces an earlier one (tokenizer_config.json's added_tokens_decoder,
  // read last, is what current HF versions write).
  std::vector<AddedTokenSpec> added;
  // Named special tokens by content; unset when no file names them.
  std::optional<std::string> bos, eos, unk, pad, cls, sep, mask;
  std::vector<std::string> additional_special;
  std::optional<bool> add_bos_token, add_eos_token, add_prefix_space;
  std::string chat_template;
  // tokenizer_config.json's own "chat_template" (chat_template above prefers
  // chat_template.jinja/.json as transformers does; llama.cpp's converter
  // prefers this one).
  std::optional<std::string> config_chat_template;
  // tokenizer.json was present (llama.cpp's converter reads special ids from
  // its added tokens only then).
  bool has_tokenizer_json = false;
  std::vector<std::string> files_read;  // for logging
};

// Reads whichever of the files exist in `dir`.
Result<TokenizerFiles> read_tokenizer_files(const std::string& dir);

}  // namespace tern
