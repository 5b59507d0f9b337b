// Tokenizer: text <-> token ids, matching Hugging Face's AutoTokenizer on the
// same model folder (the reference vLLM uses). SentencePiece (libsentencepiece)
// encodes plain text; added/special tokens (read from tokenizer_config.json,
// added_tokens.json, tokenizer.json, special_tokens_map.json) are split out
// first and become single ids. Immutable after load; safe to share between
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tern {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = true;  // special tokens can be skipped when decoding
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Loads tokenizer.model and the tokenizer JSON files from a model folder.
  static Result<Tokenizer> load(const std::string& dir);

  // Text -> ids. Special tokens written in the text become their ids (as HF
  // does). A BOS is prepended only when add_bos_token is set in the config
  // and `add_special_tokens` is true.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids -> text. Byte-fallback pieces are joined into bytes; the result may
  // end in an incomplete UTF-8 sequence if the ids do (see Detokenizer).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // The bytes one token contributes when it follows other tokens (the
  // SentencePiece "▁" becomes a space, <0xNN> becomes that byte). Special
  // tokens give their text.
  std::string token_bytes(int32_t id) const;

  // The piece as stored in the vocabulary ("▁the", "<0x0A>", "<|end_of_sentence|>").
  std::string id_to_piece(int32_t id) const;
  std::optional<int32_t> piece_to_id(std::string_view piece) const;

  bool is_special(int32_t id) const;
  // Size of the id space the tokenizer knows (SentencePiece pieces plus added
  // tokens); the model's vocab_size may be larger.
  int32_t vocab_size() const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  std::optional<int32_t> cls_id() const { return cls_id_; }  // <|begin_of_sentence|>
  std::optional<int32_t> sep_id() const { return sep_id_; }  // <|end_of_sentence|>
  bool add_bos_token() const { return add_bos_token_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& cls_token() const { return cls_token_; }
  const std::string& sep_token() const { return sep_token_; }

  // chat_template from tokenizer_config.json ("" when there is none).
  const std::string& chat_template() const { return chat_template_; }

  // Ids that end generation by default: eos plus <|end_of_sentence|> when present.
  std::vector<int32_t> default_stop_ids() const;

  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

 private:
  Tokenizer();
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<AddedToken> added_tokens_;  // sorted by length, longest first
  std::unordered_map<int32_t, size_t> added_by_id_;
  int32_t sp_size_ = 0;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = 1, eos_id_ = 2, pad_id_ = 0;
  std::optional<int32_t> cls_id_, sep_id_;
  std::string bos_token_ = "<s>", eos_token_ = "</s>", cls_token_, sep_token_;
  bool add_bos_token_ = false;
  std::string chat_template_;
};

}  // namespace tern
