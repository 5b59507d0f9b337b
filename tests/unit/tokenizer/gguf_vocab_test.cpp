// Tokenizers through GGUF: the tokenizer.ggml.* keys gguf_vocab_from_hf
// writes for the test folders (as llama.cpp's converter writes them), and
// Tokenizer::from_gguf reading them back with the same ids as HF (the
// folders' golden.json, made by AutoTokenizer) and as Tokenizer::load, plus
// the errors for malformed vocabularies.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/utf8.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/sentencepiece_proto.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using nlohmann::json;

std::string data_dir(const std::string& name) { return std::string(TERN_TEST_DATA_DIR) + "/" + name; }

// A GGUF in memory holding `keys`; the bytes live as long as the object.
struct MemoryGguf {
  std::string bytes;
  std::unique_ptr<GgufFile> file;
};

MemoryGguf make_gguf(const std::vector<GgufKeyValue>& keys) {
  GgufWriter w;
  for (const GgufKeyValue& kv : keys) EXPECT_TRUE(w.add(kv.key, kv.value).is_ok()) << kv.key;
  MemoryGguf g;
  g.bytes = w.serialize();
  auto f = GgufFile::parse({reinterpret_cast<const uint8_t*>(g.bytes.data()), g.bytes.size()}, "vocab.gguf");
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (f.is_ok()) g.file = std::make_unique<GgufFile>(std::move(f).value());
  return g;
}

std::vector<GgufKeyValue> vocab_of(const std::string& dir, int64_t n_vocab) {
  auto kv = gguf_vocab_from_hf(dir, n_vocab);
  EXPECT_TRUE(kv.is_ok()) << kv.status().to_string();
  return kv.is_ok() ? *kv : std::vector<GgufKeyValue>{};
}

const GgufValue* find(const std::vector<GgufKeyValue>& kv, const std::string& key) {
  for (const GgufKeyValue& e : kv)
    if (e.key == key) return &e.value;
  return nullptr;
}

TEST(GgufVocab, TinyModelKeysAreLlamaCppConvertersInItsOrder) {
  const std::string dir = data_dir("ernie-tiny");
  std::vector<GgufKeyValue> kv = vocab_of(dir, 1280);
  std::vector<std::string> keys;
  for (const GgufKeyValue& e : kv) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                      "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                      "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
                      "tokenizer.ggml.add_eos_token", "tokenizer.chat_template", "tokenizer.ggml.add_space_prefix"}));
  ASSERT_EQ(kv.size(), keys.size());
  EXPECT_EQ(*find(kv, "tokenizer.ggml.model"), GgufValue("llama"));
  EXPECT_EQ(*find(kv, "tokenizer.ggml.bos_token_id"), GgufValue(uint32_t{1}));
  EXPECT_EQ(*find(kv, "tokenizer.ggml.eos_token_id"), GgufValue(uint32_t{2}));
  EXPECT_EQ(*find(kv, "tokenizer.ggml.padding_token_id"), GgufValue(uint32_t{0}));
  EXPECT_EQ(*find(kv, "tokenizer.ggml.add_bos_token"), GgufValue(false));
  EXPECT_EQ(*find(kv, "tokenizer.ggml.add_space_prefix"), GgufValue(false));

  const auto& tokens = *find(kv, "tokenizer.ggml.tokens")->get_if<std::vector<std::string>>();
  const auto& scores = *find(kv, "tokenizer.ggml.scores")->get_if<std::vector<float>>();
  const auto& types = *find(kv, "tokenizer.ggml.token_type")->get_if<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 1280u);
  ASSERT_EQ(scores.size(), 1280u);
  ASSERT_EQ(types.size(), 1280u);

  auto file = MappedFile::open(dir + "/tokenizer.model");
  ASSERT_TRUE(file.is_ok());
  auto proto = parse_sentencepiece_model(file->bytes(), "tokenizer.model");
  ASSERT_TRUE(proto.is_ok());
  ASSERT_EQ(proto->pieces.size(), 1200u);
  // Named in added_tokens_decoder (special): CONTROL with score -1000, <unk> included.
  for (int id : {0, 1, 2, 3, 4, 12}) {
    EXPECT_EQ(types[id], 3) << id;
    EXPECT_EQ(scores[id], -1000.0f) << id;
    EXPECT_EQ(tokens[id], proto->pieces[id].piece) << id;
  }
  // The other pieces keep their SentencePiece score and type.
  int bytes = 0, normal = 0;
  for (size_t id = 13; id < 1200; ++id) {
    const SentencePieceEntry& p = proto->pieces[id];
    EXPECT_EQ(tokens[id], p.piece) << id;
    EXPECT_EQ(scores[id], p.score) << id;
    EXPECT_EQ(types[id], static_cast<int32_t>(p.type)) << id;
    bytes += types[id] == 6;
    normal += types[id] == 1;
  }
  EXPECT_EQ(bytes, 256);
  EXPECT_GT(normal, 500);
  // added_tokens.json's ids past the pieces, made CONTROL by the decoder.
  EXPECT_EQ(tokens[1200], "<mask:4>");
  EXPECT_EQ(types[1203], 3);
  EXPECT_EQ(scores[1203], -1000.0f);
  // The filler up to vocab_size.
  EXPECT_EQ(tokens[1204], "[PAD1204]");
  EXPECT_EQ(tokens[1279], "[PAD1279]");
  EXPECT_EQ(types[1279], 5);
  EXPECT_EQ(scores[1279], -10000.0f);
}

std::vector<std::string> golden_folders() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(TERN_TEST_DATA_DIR)) {
    if (std::filesystem::exists(e.path() / "golden.json") && std::filesystem::exists(e.path() / "tokenizer.model")) {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t config_vocab(const std::string& dir) {
  json c = json::parse(*read_text_file(dir + "/config.json"));
  return c["vocab_size"].get<int64_t>();
}

TEST(GgufVocab, TokenizerFromGgufGivesHuggingFacesIds) {
  std::vector<std::string> folders = golden_folders();
  ASSERT_FALSE(folders.empty());
  int checked = 0;
  for (const std::string& dir : folders) {
    MemoryGguf g = make_gguf(vocab_of(dir, config_vocab(dir)));
    ASSERT_NE(g.file, nullptr);
    auto tok = Tokenizer::from_gguf(*g.file);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    json golden = json::parse(*read_text_file(dir + "/golden.json"));
    for (const json& c : golden["tokenizer"]) {
      const std::string text = c["text"].get<std::string>();
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok->encode(text, true), ids) << dir << " text=\"" << text << "\"";
      EXPECT_EQ(utf8_sanitize(tok->decode(ids, false)), c["decoded"].get<std::string>()) << text;
      EXPECT_EQ(utf8_sanitize(tok->decode(ids, true)), c["decoded_skip"].get<std::string>()) << text;
      ++checked;
    }
    for (const json& c : golden["chat"]) {
      EXPECT_EQ(tok->encode(c["rendered"].get<std::string>(), false), c["ids"].get<std::vector<int32_t>>());
      ++checked;
    }
    for (const json& p : golden["prompts"]) {
      EXPECT_EQ(tok->encode(p["text"].get<std::string>(), true), p["ids"].get<std::vector<int32_t>>()) << p["name"];
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(GgufVocab, TokenizerFromGgufAgreesWithTheFolderOnEveryId) {
  for (const std::string& dir : golden_folders()) {
    MemoryGguf g = make_gguf(vocab_of(dir, config_vocab(dir)));
    ASSERT_NE(g.file, nullptr);
    auto from_gguf = Tokenizer::from_gguf(*g.file);
    ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().to_string();
    auto from_dir = Tokenizer::load(dir);
    ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
    const Tokenizer& a = *from_gguf;
    const Tokenizer& b = *from_dir;
    EXPECT_EQ(a.vocab_size(), b.vocab_size()) << dir;
    EXPECT_EQ(a.bos_id(), b.bos_id());
    EXPECT_EQ(a.eos_id(), b.eos_id());
    EXPECT_EQ(a.pad_id(), b.pad_id());
    EXPECT_EQ(a.cls_id(), b.cls_id());
    EXPECT_EQ(a.sep_id(), b.sep_id());
    EXPECT_EQ(a.cls_token(), b.cls_token());
    EXPECT_EQ(a.sep_token(), b.sep_token());
    EXPECT_EQ(a.bos_token(), b.bos_token());
    EXPECT_EQ(a.eos_token(), b.eos_token());
    EXPECT_EQ(a.add_bos_token(), b.add_bos_token());
    EXPECT_EQ(a.chat_template(), b.chat_template());
    EXPECT_EQ(a.default_stop_ids(), b.default_stop_ids());
    // Every id the model can produce, the [PAD] filler included, decodes alike.
    for (int32_t id = 0; id < static_cast<int32_t>(config_vocab(dir)); ++id) {
      ASSERT_EQ(a.token_bytes(id), b.token_bytes(id)) << dir << " id " << id;
      ASSERT_EQ(a.is_special(id), b.is_special(id)) << dir << " id " << id;
      ASSERT_EQ(a.id_to_piece(id), b.id_to_piece(id)) << dir << " id " << id;
    }
  }
}

// The tiny vocabulary's keys with one edit.
std::vector<GgufKeyValue> edited(const std::string& key, const GgufValue& value) {
  std::vector<GgufKeyValue> kv = vocab_of(data_dir("ernie-tiny"), 1280);
  for (GgufKeyValue& e : kv)
    if (e.key == key) e.value = value;
  return kv;
}

Status from_keys(const std::vector<GgufKeyValue>& kv) {
  MemoryGguf g = make_gguf(kv);
  if (g.file == nullptr) return internal_error("no file");
  auto tok = Tokenizer::from_gguf(*g.file);
  return tok.is_ok() ? Status::ok() : tok.status();
}

TEST(GgufVocab, MalformedVocabulariesAreRefusedByName) {
  Status st = from_keys(edited("tokenizer.ggml.model", GgufValue("gpt2")));
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("'gpt2'"), std::string::npos) << st.to_string();

  st = from_keys(edited("tokenizer.ggml.scores", GgufValue(std::vector<float>(10, 0.0f))));
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_NE(st.message().find("tokenizer.ggml.scores"), std::string::npos) << st.to_string();

  std::vector<int32_t> types(1280, 1);
  types[77] = 9;
  st = from_keys(edited("tokenizer.ggml.token_type", GgufValue(types)));
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_NE(st.message().find("tokenizer.ggml.token_type[77]"), std::string::npos) << st.to_string();

  std::vector<GgufKeyValue> kv = vocab_of(data_dir("ernie-tiny"), 1280);
  for (GgufKeyValue& e : kv) {
    if (e.key == "tokenizer.ggml.tokens") {
      auto tokens = *e.value.get_if<std::vector<std::string>>();
      tokens[500] = tokens[400];
      e.value = GgufValue(tokens);
    }
  }
  st = from_keys(kv);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("tokens 400 and 500"), std::string::npos) << st.to_string();

  // Past the vocabulary proper (the [PAD] filler is not vocabulary).
  st = from_keys(edited("tokenizer.ggml.eos_token_id", GgufValue(uint32_t{1250})));
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(st.message().find("tokenizer.ggml.eos_token_id"), std::string::npos) << st.to_string();

  std::vector<GgufKeyValue> no_tokens;
  for (const GgufKeyValue& e : vocab_of(data_dir("ernie-tiny"), 1280))
    if (e.key != "tokenizer.ggml.tokens") no_tokens.push_back(e);
  st = from_keys(no_tokens);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("tokenizer.ggml.tokens"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace tern
