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

struct AddedTokenSpec {
  int32_t id = 0;
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
  std::vector<std::string> files_read;  // for logging
};

// Reads whichever of the files exist in `dir`.
Result<TokenizerFiles> read_tokenizer_files(const std::string& dir);

}  // namespace tern
