// Tokenizer: loading a model folder and encoding/decoding like HF's
// LlamaTokenizerFast conversion of ERNIE's SentencePiece model (legacy,
// add_prefix_space=False, byte fallback). Added tokens are split out of the
// text first; each plain segment goes to SentencePiece with its normalizer
// replaced so that only ' ' -> U+2581 happens, as in HF.
#include "tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "base/logging.h"
#include "base/mapped_file.h"
#include "base/utf8.h"
#include "tokenizer/tokenizer_files.h"

namespace tern {
namespace {

// Added-token ids come from JSON files; ids past this are refused so that a
// bad file cannot make the per-id tables allocate gigabytes.
constexpr int32_t kMaxTokenId = 1 << 24;

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581, SentencePiece's space

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// "<0x0A>" -> 0x0A; -1 when the piece is not of that form.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (char c : piece.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

// HF's decoder is Replace("▁", " ") then ByteFallback then Fuse.
std::string replace_space_symbol(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out += ' ';
      i += kSpaceSymbol.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Result<Tokenizer> Tokenizer::load(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return not_found(dir + ": no such model folder");

  const std::string model_path = dir + "/tokenizer.model";
  if (!std::filesystem::exists(model_path, ec)) {
    return not_found(model_path + ": missing (tern needs the SentencePiece tokenizer.model)");
  }
  TERN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(model_path));
  TERN_ASSIGN_OR_RETURN(SentencePieceModelProto proto, parse_sentencepiece_model(file.bytes(), model_path));
  TERN_ASSIGN_OR_RETURN(std::string rewritten, rewrite_sentencepiece_normalizer(file.bytes(), model_path,
                                                                                hf_compatible_normalizer()));

  Tokenizer tok;
  TERN_RETURN_IF_ERROR(tok.init_sentencepiece(rewritten, std::move(proto.pieces), model_path));

  TERN_ASSIGN_OR_RETURN(TokenizerFiles files, read_tokenizer_files(dir));

  // Added tokens by id; a later source replaces an earlier entry for the same
  // id or the same content.
  std::vector<AddedToken> added;
  auto upsert = [&added](AddedToken t) {
    std::erase_if(added, [&](const AddedToken& a) { return a.id == t.id || a.content == t.content; });
    added.push_back(std::move(t));
  };
  for (const AddedTokenSpec& s : files.added) {
    if (s.id >= kMaxTokenId) {
      return out_of_range(dir + ": added token \"" + s.content + "\" has id " + std::to_string(s.id) +
                          ", past the limit " + std::to_string(kMaxTokenId));
    }
    upsert(AddedToken{s.id, s.content, s.special, s.lstrip, s.rstrip});
  }
  auto find_content = [&](const std::string& content) -> AddedToken* {
    for (AddedToken& a : added)
      if (a.content == content) return &a;
    return nullptr;
  };

  // Named special tokens: the content comes from the files, the id from the
  // added tokens or the SentencePiece vocabulary. HF adds them to its added
  // vocabulary, so they are split out of text and skipped when decoding.
  auto resolve = [&](const std::optional<std::string>& content) -> std::optional<int32_t> {
    if (!content || content->empty()) return std::nullopt;
    if (AddedToken* a = find_content(*content)) {
      a->special = true;
      return a->id;
    }
    auto it = tok.piece_ids_.find(*content);
    if (it == tok.piece_ids_.end()) {
      spdlog::warn("{}: special token \"{}\" is not in the vocabulary; ignored", dir, *content);
      return std::nullopt;
    }
    upsert(AddedToken{it->second, *content, true, false, false});
    return it->second;
  };
  // SentencePiece's own defaults stand in for tokens no file names.
  auto sp_piece = [&](int id) -> std::optional<std::string> {
    if (id < 0 || id >= tok.sp_size_) return std::nullopt;
    return tok.pieces_[static_cast<size_t>(id)].piece;
  };
  std::optional<std::string> unk = files.unk ? files.unk : sp_piece(tok.sp_->unk_id());
  std::optional<std::string> bos = files.bos ? files.bos : sp_piece(tok.sp_->bos_id());
  std::optional<std::string> eos = files.eos ? files.eos : sp_piece(tok.sp_->eos_id());
  std::optional<std::string> pad = files.pad ? files.pad : sp_piece(tok.sp_->pad_id());
  std::optional<int32_t> unk_id = resolve(unk);
  std::optional<int32_t> bos_id = resolve(bos);
  std::optional<int32_t> eos_id = resolve(eos);
  std::optional<int32_t> pad_id = resolve(pad);
  tok.cls_id_ = resolve(files.cls);
  tok.sep_id_ = resolve(files.sep);
  resolve(files.mask);
  for (const std::string& s : files.additional_special) resolve(s);
  if (!eos_id) {
    return not_found(model_path + ": has no piece for the eos token \"" + eos.value_or("") +
                     "\" (and no added token names it)");
  }
  tok.eos_id_ = *eos_id;
  tok.eos_token_ = *eos;
  tok.bos_id_ = bos_id.value_or(-1);
  tok.bos_token_ = bos_id ? *bos : "";
  tok.pad_id_ = pad_id ? *pad_id : unk_id.value_or(0);
  if (files.cls && tok.cls_id_) tok.cls_token_ = *files.cls;
  if (files.sep && tok.sep_id_) tok.sep_token_ = *files.sep;
  tok.add_bos_token_ = files.add_bos_token.value_or(false);
  tok.add_eos_token_ = files.add_eos_token.value_or(false);
  if (tok.add_bos_token_ && tok.bos_id_ < 0)
    return not_found(dir + ": add_bos_token is set but there is no bos token");
  if (files.add_prefix_space.value_or(false)) {
    // HF's legacy conversion would then prepend "▁" to every segment; ERNIE
    // never sets it, and matching that is not implemented.
    spdlog::warn("{}: add_prefix_space=true is not supported; encoding without a prefix space", dir);
  }

  // HF (SpmConverter) also registers SentencePiece user-defined pieces as
  // non-special added tokens: matched whole in the text, kept when decoding.
  for (size_t i = 0; i < tok.pieces_.size(); ++i) {
    const SentencePieceEntry& p = tok.pieces_[i];
    if (p.type == PieceType::kUserDefined && !find_content(p.piece)) {
      bool id_taken =
          std::any_of(added.begin(), added.end(), [&](const AddedToken& a) { return a.id == int32_t(i); });
      if (!id_taken) added.push_back(AddedToken{static_cast<int32_t>(i), p.piece, false, false, false});
    }
  }

  tok.chat_template_ = std::move(files.chat_template);
  tok.finish(std::move(added));
  return tok;
}

Status Tokenizer::init_sentencepiece(const std::string& serialized, std::vector<SentencePieceEntry> pieces,
                                     const std::string& name) {
  auto st = sp_->LoadFromSerializedProto(serialized);
  if (!st.ok()) return parse_error(name + ": SentencePiece rejected the model: " + st.ToString());
  if (sp_->GetPieceSize() != static_cast<int>(pieces.size())) {
    return internal_error(name + ": SentencePiece and tern disagree on the piece count");
  }
  pieces_ = std::move(pieces);
  sp_size_ = static_cast<int32_t>(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) piece_ids_.emplace(pieces_[i].piece, static_cast<int32_t>(i));
  return Status::ok();
}

void Tokenizer::finish(std::vector<AddedToken> added) {
  std::stable_sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  added_tokens_ = std::move(added);
  trie_.assign(1, TrieNode{});
  int32_t max_id = sp_size_ - 1;
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& a = added_tokens_[i];
    added_by_id_[a.id] = i;
    added_by_content_[a.content] = i;
    trie_insert(a.content, static_cast<int32_t>(i));
    max_id = std::max(max_id, a.id);
  }
  vocab_size_ = max_id + 1;
  build_id_tables();
}

void Tokenizer::build_id_tables() {
  token_text_.assign(static_cast<size_t>(vocab_size_), std::string());
  special_.assign(static_cast<size_t>(vocab_size_), 0);
  for (int32_t id = 0; id < sp_size_; ++id) {
    const SentencePieceEntry& p = pieces_[static_cast<size_t>(id)];
    std::string& text = token_text_[static_cast<size_t>(id)];
    int byte = p.type == PieceType::kByte ? byte_piece_value(p.piece) : -1;
    if (byte >= 0) {
      text.assign(1, static_cast<char>(byte));
    } else {
      text = replace_space_symbol(p.piece);
    }
    // <unk>, <s>, </s> and other control pieces are special in HF too (they
    // are named special tokens there).
    special_[static_cast<size_t>(id)] = p.type == PieceType::kControl || p.type == PieceType::kUnknown;
  }
  for (const AddedToken& a : added_tokens_) {
    token_text_[static_cast<size_t>(a.id)] = replace_space_symbol(a.content);
    special_[static_cast<size_t>(a.id)] = a.special;
  }
}

void Tokenizer::trie_insert(std::string_view content, int32_t token) {
  uint32_t node = 0;
  for (char ch : content) {
    auto byte = static_cast<unsigned char>(ch);
    uint32_t child = 0;
    for (const auto& [b, n] : trie_[node].next) {
      if (b == byte) child = n;
    }
    if (child == 0) {
      child = static_cast<uint32_t>(trie_.size());
      trie_[node].next.emplace_back(byte, child);
      trie_.emplace_back();
    }
    node = child;
  }
  trie_[node].token = token;
}

const AddedToken* Tokenizer::match_added(std::string_view text, size_t pos) const {
  // The deepest token node on the path is the longest match (HF's
  // leftmost-longest rule, given that callers scan positions left to right).
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    uint32_t child = 0;
    for (const auto& [b, n] : trie_[node].next) {
      if (b == byte) {
        child = n;
        break;
      }
    }
    if (child == 0) break;
    node = child;
    if (trie_[node].token >= 0) best = trie_[node].token;
  }
  return best < 0 ? nullptr : &added_tokens_[static_cast<size_t>(best)];
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  // Cannot fail on a loaded model; an empty result would show up in tests.
  if (!sp_->Encode(text, &ids).ok()) return;
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string sanitized;
  if (!utf8_valid(text)) {
    sanitized = utf8_sanitize(text);
    text = sanitized;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 2 + 2);
  if (add_special_tokens && add_bos_token_) out.push_back(bos_id_);
  size_t segment = 0;  // start of the plain text not yet encoded
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = match_added(text, pos);
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t end = pos;
    if (match->lstrip) {
      while (end > segment && is_ascii_space(text[end - 1])) --end;
    }
    encode_plain(text.substr(segment, end - segment), out);
    out.push_back(match->id);
    pos += match->content.size();
    if (match->rstrip) {
      while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
    }
    segment = pos;
  }
  encode_plain(text.substr(segment), out);
  if (add_special_tokens && add_eos_token_) out.push_back(eos_id_);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
    out += token_text_[static_cast<size_t>(id)];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return token_text_[static_cast<size_t>(id)];
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_tokens_[it->second].content;
  if (id < 0 || id >= sp_size_) return {};
  return pieces_[static_cast<size_t>(id)].piece;
}

std::optional<int32_t> Tokenizer::piece_to_id(std::string_view piece) const {
  std::string key(piece);
  if (auto it = added_by_content_.find(key); it != added_by_content_.end())
    return added_tokens_[it->second].id;
  if (auto it = piece_ids_.find(key); it != piece_ids_.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_[static_cast<size_t>(id)] != 0;
}

int32_t Tokenizer::vocab_size() const { return vocab_size_; }

std::vector<int32_t> Tokenizer::default_stop_ids() const {
  std::vector<int32_t> ids{eos_id_};
  if (auto end = piece_to_id("<|end_of_sentence|>"); end && *end != eos_id_) ids.push_back(*end);
  return ids;
}

}  // namespace tern
