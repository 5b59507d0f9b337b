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
#include "tokenizer/sentencepiece_proto.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tern {

class GgufFile;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = true;  // special tokens can be skipped when decoding
  bool lstrip = false;  // as HF: a match also swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Loads tokenizer.model and the tokenizer JSON files from a model folder.
  static Result<Tokenizer> load(const std::string& dir);
  // Builds the tokenizer from a GGUF's tokenizer.ggml.* keys (a SentencePiece
  // "llama" vocabulary, as llama.cpp's converter writes it), giving the same
  // ids as load() on the folder it was converted from; gguf_vocab.cpp says
  // what does not round-trip. The GgufFile may go once this returns.
  static Result<Tokenizer> from_gguf(const GgufFile& file);

  // Text -> ids. Special tokens written in the text become their ids (as HF
  // does). A BOS is prepended only when add_bos_token is set in the config
  // and `add_special_tokens` is true (EOS likewise with add_eos_token).
  // Whitespace is kept exactly: ' ' becomes U+2581, no dummy prefix, no
  // collapsing, nothing stripped around added tokens (unless their lstrip/rstrip
  // says so). Invalid UTF-8 in `text` is replaced by U+FFFD first.
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

  int32_t bos_id() const { return bos_id_; }  // -1 when the tokenizer has no bos token
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  std::optional<int32_t> cls_id() const { return cls_id_; }  // <|begin_of_sentence|>
  std::optional<int32_t> sep_id() const { return sep_id_; }  // <|end_of_sentence|>
  bool add_bos_token() const { return add_bos_token_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& cls_token() const { return cls_token_; }
  const std::string& sep_token() const { return sep_token_; }

  // The chat template: chat_template.jinja, else chat_template.json, else
  // tokenizer_config.json's "chat_template" ("" when there is none).
  const std::string& chat_template() const { return chat_template_; }

  // Ids that end generation by default: eos plus <|end_of_sentence|> when present.
  std::vector<int32_t> default_stop_ids() const;

  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  // The SentencePiece vocabulary as read from tokenizer.model (index = id).
  const std::vector<SentencePieceEntry>& pieces() const { return pieces_; }

 private:
  Tokenizer();
  // Loads `serialized` (a ModelProto with tern's normalizer) into sp_ and
  // keeps `pieces`, its vocabulary; `name` is for messages.
  Status init_sentencepiece(const std::string& serialized, std::vector<SentencePieceEntry> pieces,
                            const std::string& name);
  // Indexes the added tokens (longest first, in the trie), sets vocab_size_
  // and builds the id tables.
  void finish(std::vector<AddedToken> added);
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // The longest added token whose content starts at text[pos], or nullptr.
  const AddedToken* match_added(std::string_view text, size_t pos) const;
  void trie_insert(std::string_view content, int32_t token);
  // Fills token_text_ and special_ once all ids are known.
  void build_id_tables();

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<SentencePieceEntry> pieces_;  // the SentencePiece vocabulary, index = id
  std::unordered_map<std::string, int32_t> piece_ids_;
  std::vector<AddedToken> added_tokens_;  // sorted by length, longest first
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, size_t> added_by_content_;
  // Byte trie over added-token contents for leftmost-longest matching in
  // O(token length) per position; node 0 is the root.
  struct TrieNode {
    std::vector<std::pair<unsigned char, uint32_t>> next;  // byte -> child node
    int32_t token = -1;                                    // index into added_tokens_, -1 if none ends here
  };
  std::vector<TrieNode> trie_;
  std::vector<std::string> token_text_;  // token_bytes() for every id below vocab_size_
  std::vector<uint8_t> special_;         // is_special() for every id below vocab_size_
  int32_t sp_size_ = 0;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = 1, eos_id_ = 2, pad_id_ = 0;
  std::optional<int32_t> cls_id_, sep_id_;
  std::string bos_token_ = "<s>", eos_token_ = "</s>", cls_token_, sep_token_;
  bool add_bos_token_ = false;
  bool add_eos_token_ = false;
  std::string chat_template_;
};

}  // namespace tern
