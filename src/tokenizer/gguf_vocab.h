// The tokenizer in GGUF files: the tokenizer.ggml.* key/values llama.cpp's
// convert_hf_to_gguf.py writes for a SentencePiece model folder (this
// header), and Tokenizer::from_gguf, which reads them back (tokenizer.h;
// defined in gguf_vocab.cpp with what does not round-trip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/gguf.h"

namespace tern {

// The tokenizer key/values of the folder `dir` (tokenizer.model and the HF
// JSON files), in the order and with the value types convert_hf_to_gguf.py
// writes them for ERNIE 4.5 (_set_vocab_sentencepiece, gguf.SpecialVocab,
// then Ernie4_5Model's add_space_prefix):
//   tokenizer.ggml.model "llama", tokenizer.ggml.pre "default";
//   tokenizer.ggml.tokens / scores / token_type: `n_vocab` entries (the
//     model's vocab_size; <= 0 means the piece count), "[PAD{i}]" with score
//     -10000 and type UNUSED where nothing else lands; the SentencePiece
//     pieces with their scores and types (user-defined pieces as NORMAL);
//     then added_tokens.json's tokens (USER_DEFINED) and
//     tokenizer_config.json's added_tokens_decoder (CONTROL when special or
//     "<|...|>", else USER_DEFINED with U+2581 written as ' '), score -1000;
//   special ids (u32): from tokenizer.json's added tokens named by
//     tokenizer_config.json (only when tokenizer.json exists), then
//     config.json's <type>_token_id, for bos, eos, unk, sep ("seperator", as
//     llama.cpp spells it), pad and mask (cls has no key), ids past n_vocab
//     dropped;
//   add_bos_token / add_eos_token (bool) as tokenizer_config.json says;
//   tokenizer.chat_template: tokenizer_config.json's, else
//     chat_template.jinja / .json;
//   tokenizer.ggml.add_space_prefix when tokenizer_config.json has
//     add_prefix_space.
// Not emulated: tokenizer.json's post_processor heuristics, add_sep_token,
// named extra chat templates. Errors name the file at fault.
Result<std::vector<GgufKeyValue>> gguf_vocab_from_hf(const std::string& dir, int64_t n_vocab);

}  // namespace tern
