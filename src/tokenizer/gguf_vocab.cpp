// Tokenizers in and out of GGUF. Writing emulates llama.cpp's converter;
// reading rebuilds a SentencePiece ModelProto from the piece list and loads
// it through the same libsentencepiece path as tokenizer.model, so encoding
// is the code tern already checks against HF.
//
// What does not round-trip through tokenizer.ggml.*, and what tern assumes:
// - The SentencePiece model type: "llama" vocabularies are encoded as BPE
//   (llama.cpp's SPM tokenizer is BPE merging by score too); a Unigram
//   tokenizer.model would encode differently. ERNIE 4.5's is BPE.
// - The trainer and normalizer specs: tern replaces the normalizer with the
//   one HF uses anyway (only ' ' -> U+2581); byte_fallback is on exactly when
//   the vocabulary has BYTE pieces.
// - Which CONTROL tokens HF splits out of text: every CONTROL (and UNKNOWN)
//   token becomes a special added token, as llama.cpp treats them. HF does
//   the same for ERNIE, whose control pieces are all named special tokens.
// - Added-token flags (lstrip, rstrip, normalized): all false, as ERNIE's.
// - The cls token has no GGUF key written by the converter:
//   tokenizer.ggml.cls_token_id if present, else the piece
//   "<|begin_of_sentence|>" (sep likewise with "<|end_of_sentence|>").
// - The converter's "[PAD{i}]" filler (type UNUSED) is not vocabulary: such
//   ids decode to nothing, as in llama.cpp, and vocab_size() ends at the last
//   id that is not UNUSED, as HF's tokenizer does.
// - Scores of pieces an added token replaced (-1000): irrelevant, those
//   tokens never reach SentencePiece.
#include "tokenizer/gguf_vocab.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/logging.h"
#include "base/mapped_file.h"
#include "tokenizer/sentencepiece_proto.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"

namespace tern {
namespace {

// As Tokenizer::load: past this a vocabulary is refused before the per-id
// tables are allocated.
constexpr uint64_t kMaxVocab = uint64_t{1} << 24;

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581

// Scores the converter gives filler and added tokens.
constexpr float kPadScore = -10000.0f;
constexpr float kAddedScore = -1000.0f;

// The special-token types of gguf.SpecialVocab in its order, with the key
// each is written under ("" where the converter has no writer).
struct SpecialType {
  const char* name;
  const char* key;
};
constexpr SpecialType kSpecialTypes[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", ""},
    {"mask", "tokenizer.ggml.mask_token_id"},
};

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(std::string_view t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.substr(0, open.size()) == open &&
           t.substr(t.size() - close.size()) == close;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

const std::optional<std::string>& named_token(const TokenizerFiles& f, std::string_view type) {
  static const std::optional<std::string> kNone;
  if (type == "bos") return f.bos;
  if (type == "eos") return f.eos;
  if (type == "unk") return f.unk;
  if (type == "sep") return f.sep;
  if (type == "pad") return f.pad;
  if (type == "cls") return f.cls;
  if (type == "mask") return f.mask;
  return kNone;
}

// config.json's <type>_token_id integers (a list, as some eos ids are, is
// skipped as the converter skips it).
Result<std::unordered_map<std::string, int64_t>> config_token_ids(const std::string& dir) {
  std::unordered_map<std::string, int64_t> ids;
  const std::string path = dir + "/config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return ids;
  TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return parse_error(path + ": not a JSON object");
  for (const SpecialType& t : kSpecialTypes) {
    auto it = j.find(std::string(t.name) + "_token_id");
    if (it != j.end() && it->is_number_integer()) ids[t.name] = it->get<int64_t>();
  }
  return ids;
}

}  // namespace

Result<std::vector<GgufKeyValue>> gguf_vocab_from_hf(const std::string& dir, int64_t n_vocab) {
  const std::string model_path = dir + "/tokenizer.model";
  std::error_code ec;
  if (!std::filesystem::exists(model_path, ec)) {
    return not_found(model_path + ": missing (a SentencePiece tokenizer.model is needed)");
  }
  TERN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(model_path));
  TERN_ASSIGN_OR_RETURN(SentencePieceModelProto proto, parse_sentencepiece_model(file.bytes(), model_path));
  const auto sp_size = static_cast<int64_t>(proto.pieces.size());
  if (n_vocab <= 0) n_vocab = sp_size;
  if (static_cast<uint64_t>(n_vocab) > kMaxVocab) {
    return out_of_range(dir + ": vocabulary of " + std::to_string(n_vocab) + " tokens, past the limit " +
                        std::to_string(kMaxVocab));
  }
  const auto n = static_cast<size_t>(n_vocab);
  std::vector<std::string> tokens(n);
  std::vector<float> scores(n, kPadScore);
  std::vector<int32_t> types(n, static_cast<int32_t>(PieceType::kUnused));
  for (size_t i = 0; i < n; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  if (sp_size > n_vocab) {
    spdlog::warn("{}: pieces from id {} on are dropped (vocab_size {})", model_path, n_vocab, n_vocab);
  }
  for (size_t i = 0; i < std::min(n, proto.pieces.size()); ++i) {
    const SentencePieceEntry& p = proto.pieces[i];
    tokens[i] = p.piece;
    scores[i] = p.score;
    // The converter asks IsUnknown / IsControl / IsUnused / IsByte; anything
    // else, user-defined pieces included, is NORMAL.
    PieceType t = p.type;
    if (t == PieceType::kUserDefined) t = PieceType::kNormal;
    types[i] = static_cast<int32_t>(t);
  }

  TERN_ASSIGN_OR_RETURN(TokenizerFiles files, read_tokenizer_files(dir));
  auto place = [&](const AddedTokenSpec& a, PieceType type, std::string text) {
    if (a.id < 0 || static_cast<uint64_t>(a.id) >= n) {
      spdlog::warn("{}: added token \"{}\" has id {}, past vocab_size {}; not written", dir, a.content, a.id, n);
      return;
    }
    const auto id = static_cast<size_t>(a.id);
    tokens[id] = std::move(text);
    scores[id] = kAddedScore;
    types[id] = static_cast<int32_t>(type);
  };
  for (const AddedTokenSpec& a : files.added) {
    if (a.source == AddedTokenSource::kAddedTokensJson) place(a, PieceType::kUserDefined, a.content);
  }
  for (const AddedTokenSpec& a : files.added) {
    if (a.source != AddedTokenSource::kConfigDecoder) continue;
    if (a.special || looks_special(a.content)) {
      place(a, PieceType::kControl, a.content);
    } else {
      place(a, PieceType::kUserDefined, replace_all(a.content, kSpaceSymbol, " "));
    }
  }

  std::vector<GgufKeyValue> kv;
  kv.push_back({"tokenizer.ggml.model", GgufValue("llama")});
  kv.push_back({"tokenizer.ggml.pre", GgufValue("default")});
  kv.push_back({"tokenizer.ggml.tokens", GgufValue(std::move(tokens))});
  kv.push_back({"tokenizer.ggml.scores", GgufValue(std::move(scores))});
  kv.push_back({"tokenizer.ggml.token_type", GgufValue(std::move(types))});

  // gguf.SpecialVocab: the first id found for a type wins; tokenizer.json's
  // added tokens first (only when the file exists), then config.json.
  std::vector<std::pair<std::string, uint32_t>> special;  // in the order found
  auto set_special = [&](const std::string& type, int64_t id) -> Status {
    if (id < 0) return parse_error(dir + ": " + type + "_token id " + std::to_string(id) + " is negative");
    if (static_cast<uint64_t>(id) >= n) {
      spdlog::warn("{}: {} token id {} is past vocab_size {}; not written", dir, type, id, n);
      return Status::ok();
    }
    for (const auto& [t, _] : special)
      if (t == type) return Status::ok();
    special.emplace_back(type, static_cast<uint32_t>(id));
    return Status::ok();
  };
  const bool has_config = std::find(files.files_read.begin(), files.files_read.end(), "tokenizer_config.json") !=
                          files.files_read.end();
  if (files.has_tokenizer_json && has_config) {
    for (const SpecialType& t : kSpecialTypes) {
      const std::optional<std::string>& content = named_token(files, t.name);
      if (!content) continue;
      for (const AddedTokenSpec& a : files.added) {
        if (a.source == AddedTokenSource::kTokenizerJson && a.content == *content) {
          TERN_RETURN_IF_ERROR(set_special(t.name, a.id));
          break;
        }
      }
    }
  }
  TERN_ASSIGN_OR_RETURN(auto config_ids, config_token_ids(dir));
  for (const SpecialType& t : kSpecialTypes) {
    if (auto it = config_ids.find(t.name); it != config_ids.end()) TERN_RETURN_IF_ERROR(set_special(t.name, it->second));
  }
  for (const auto& [type, id] : special) {
    for (const SpecialType& t : kSpecialTypes) {
      if (type == t.name && *t.key != '\0') kv.push_back({t.key, GgufValue(id)});
    }
  }
  if (has_config) {
    if (files.add_bos_token) kv.push_back({"tokenizer.ggml.add_bos_token", GgufValue(*files.add_bos_token)});
    if (files.add_eos_token) kv.push_back({"tokenizer.ggml.add_eos_token", GgufValue(*files.add_eos_token)});
    std::string chat_template = files.config_chat_template.value_or(files.chat_template);
    if (!chat_template.empty()) kv.push_back({"tokenizer.chat_template", GgufValue(std::move(chat_template))});
    if (files.add_prefix_space) {
      kv.push_back({"tokenizer.ggml.add_space_prefix", GgufValue(*files.add_prefix_space)});
    }
  }
  return kv;
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& src = file.name();
  TERN_ASSIGN_OR_RETURN(std::string_view model, file.get_string("tokenizer.ggml.model"));
  if (model != "llama") {
    return unsupported(src + ": tokenizer.ggml.model is '" + std::string(model) +
                       "'; tern reads SentencePiece vocabularies ('llama')");
  }
  TERN_ASSIGN_OR_RETURN(std::span<const std::string> tokens, file.get_string_array("tokenizer.ggml.tokens"));
  const size_t count = tokens.size();
  if (count == 0 || count > kMaxVocab) {
    return out_of_range(src + ": tokenizer.ggml.tokens holds " + std::to_string(count) + " tokens, expected 1.." +
                        std::to_string(kMaxVocab));
  }
  // Scores and types are optional in llama.cpp (0 and NORMAL); present, they
  // must cover every token.
  std::vector<float> scores(count, 0.0f);
  std::vector<int32_t> types(count, static_cast<int32_t>(PieceType::kNormal));
  if (file.find("tokenizer.ggml.scores") != nullptr) {
    TERN_ASSIGN_OR_RETURN(std::span<const float> s, file.get_f32_array("tokenizer.ggml.scores"));
    if (s.size() != count) {
      return parse_error(src + ": tokenizer.ggml.scores holds " + std::to_string(s.size()) + " values for " +
                         std::to_string(count) + " tokens");
    }
    scores.assign(s.begin(), s.end());
  }
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    TERN_ASSIGN_OR_RETURN(std::span<const int32_t> t, file.get_i32_array("tokenizer.ggml.token_type"));
    if (t.size() != count) {
      return parse_error(src + ": tokenizer.ggml.token_type holds " + std::to_string(t.size()) + " values for " +
                         std::to_string(count) + " tokens");
    }
    for (size_t i = 0; i < count; ++i) {
      if (t[i] < static_cast<int32_t>(PieceType::kNormal) || t[i] > static_cast<int32_t>(PieceType::kByte)) {
        return parse_error(src + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                           std::to_string(t[i]) + ", expected 1..6");
      }
    }
    types.assign(t.begin(), t.end());
  }
  auto type_of = [&](size_t i) { return static_cast<PieceType>(types[i]); };

  // The vocabulary ends at the last token that is not filler.
  size_t n = count;
  while (n > 0 && type_of(n - 1) == PieceType::kUnused) --n;
  if (n == 0) return parse_error(src + ": every token in tokenizer.ggml.tokens is UNUSED");

  auto optional_id = [&](const char* key) -> Result<std::optional<int32_t>> {
    if (file.find(key) == nullptr) return std::optional<int32_t>();
    TERN_ASSIGN_OR_RETURN(uint64_t id, file.get_uint(key));
    if (id >= n) {
      return out_of_range(src + ": " + key + " is " + std::to_string(id) + ", past the vocabulary of " +
                          std::to_string(n) + " tokens");
    }
    return std::optional<int32_t>(static_cast<int32_t>(id));
  };
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> unk_key, optional_id("tokenizer.ggml.unknown_token_id"));
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> bos_key, optional_id("tokenizer.ggml.bos_token_id"));
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> eos_key, optional_id("tokenizer.ggml.eos_token_id"));
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> pad_key, optional_id("tokenizer.ggml.padding_token_id"));
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> cls_key, optional_id("tokenizer.ggml.cls_token_id"));
  TERN_ASSIGN_OR_RETURN(std::optional<int32_t> sep_key, optional_id("tokenizer.ggml.seperator_token_id"));

  // SentencePiece needs exactly one UNKNOWN piece: the unknown id's (the key,
  // else the first UNKNOWN token, else llama.cpp's default 0). The converter
  // may have made <unk> CONTROL (it is in added_tokens_decoder).
  int32_t unk = 0;
  if (unk_key) {
    unk = *unk_key;
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (type_of(i) == PieceType::kUnknown) {
        unk = static_cast<int32_t>(i);
        break;
      }
    }
  }
  std::vector<SentencePieceEntry> pieces(n);
  std::unordered_map<std::string_view, size_t> seen;
  bool byte_fallback = false;
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i].empty()) return parse_error(src + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is empty");
    auto [it, inserted] = seen.emplace(tokens[i], i);
    if (!inserted) {
      return unsupported(src + ": tokens " + std::to_string(it->second) + " and " + std::to_string(i) + " are both \"" +
                         tokens[i] + "\"; a SentencePiece vocabulary needs distinct pieces");
    }
    PieceType t = type_of(i);
    if (static_cast<int32_t>(i) == unk) {
      t = PieceType::kUnknown;
    } else if (t == PieceType::kUnknown) {
      t = PieceType::kControl;
    }
    byte_fallback = byte_fallback || t == PieceType::kByte;
    pieces[i] = SentencePieceEntry{tokens[i], scores[i], t};
  }
  TERN_ASSIGN_OR_RETURN(std::string serialized, serialize_sentencepiece_model(pieces, SentencePieceModelType::kBpe,
                                                                               byte_fallback, hf_compatible_normalizer()));
  Tokenizer tok;
  TERN_RETURN_IF_ERROR(tok.init_sentencepiece(serialized, std::move(pieces), src));

  // CONTROL and UNKNOWN tokens are special added tokens, USER_DEFINED ones
  // plain added tokens, as HF registers ERNIE's.
  std::vector<AddedToken> added;
  for (size_t i = 0; i < n; ++i) {
    const PieceType t = type_of(i);
    if (t == PieceType::kControl || t == PieceType::kUnknown || t == PieceType::kUserDefined) {
      added.push_back(AddedToken{static_cast<int32_t>(i), tokens[i], t != PieceType::kUserDefined, false, false});
    }
  }
  // Named tokens are special whatever their type, as in Tokenizer::load.
  auto make_special = [&](int32_t id) {
    for (AddedToken& a : added) {
      if (a.id == id) {
        a.special = true;
        return;
      }
    }
    added.push_back(AddedToken{id, tokens[static_cast<size_t>(id)], true, false, false});
  };
  auto piece_id = [&](std::string_view piece) -> std::optional<int32_t> {
    auto it = seen.find(piece);
    if (it == seen.end()) return std::nullopt;
    return static_cast<int32_t>(it->second);
  };
  // llama.cpp's SentencePiece defaults when a key is absent: bos 1, eos 2.
  const int32_t bos = bos_key.value_or(1), eos = eos_key.value_or(2);
  if (static_cast<size_t>(std::max(bos, eos)) >= n) {
    return out_of_range(src + ": the default bos (1) or eos (2) id is past the vocabulary of " + std::to_string(n));
  }
  tok.bos_id_ = bos;
  tok.eos_id_ = eos;
  tok.pad_id_ = pad_key.value_or(unk);
  tok.bos_token_ = tokens[static_cast<size_t>(bos)];
  tok.eos_token_ = tokens[static_cast<size_t>(eos)];
  tok.cls_id_ = cls_key ? cls_key : piece_id("<|begin_of_sentence|>");
  tok.sep_id_ = sep_key ? sep_key : piece_id("<|end_of_sentence|>");
  if (tok.cls_id_) tok.cls_token_ = tokens[static_cast<size_t>(*tok.cls_id_)];
  if (tok.sep_id_) tok.sep_token_ = tokens[static_cast<size_t>(*tok.sep_id_)];
  for (std::optional<int32_t> id : {std::optional<int32_t>(bos), std::optional<int32_t>(eos),
                                    std::optional<int32_t>(unk), pad_key, tok.cls_id_, tok.sep_id_}) {
    if (id) make_special(*id);
  }

  // llama.cpp's SentencePiece defaults: add_bos true, add_eos false.
  tok.add_bos_token_ = true;
  if (file.find("tokenizer.ggml.add_bos_token") != nullptr) {
    TERN_ASSIGN_OR_RETURN(tok.add_bos_token_, file.get_bool("tokenizer.ggml.add_bos_token"));
  }
  if (file.find("tokenizer.ggml.add_eos_token") != nullptr) {
    TERN_ASSIGN_OR_RETURN(tok.add_eos_token_, file.get_bool("tokenizer.ggml.add_eos_token"));
  }
  if (file.find("tokenizer.ggml.add_space_prefix") != nullptr) {
    TERN_ASSIGN_OR_RETURN(bool prefix, file.get_bool("tokenizer.ggml.add_space_prefix"));
    if (prefix) spdlog::warn("{}: add_space_prefix=true is not supported; encoding without a prefix space", src);
  }
  if (file.find("tokenizer.chat_template") != nullptr) {
    TERN_ASSIGN_OR_RETURN(std::string_view tmpl, file.get_string("tokenizer.chat_template"));
    tok.chat_template_ = std::string(tmpl);
  }
  tok.finish(std::move(added));
  // Filler decodes to nothing (llama.cpp's token_to_piece gives UNUSED tokens no text).
  for (size_t i = 0; i < n; ++i) {
    if (type_of(i) == PieceType::kUnused) tok.token_text_[i].clear();
  }
  return tok;
}

}  // namespace tern
