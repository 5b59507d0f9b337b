// Checkpoint tests on real folders in a temp dir: single-file and sharded
// layouts, shard names that try to leave the folder, disagreement between the
// index and the shards, and the messages a user sees for missing or
// wrong-shaped tensors.
#include "formats/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "formats/gguf_writer.h"

namespace tern {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "tern_ckpt_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void write(const std::string& name, const std::string& bytes) {
    std::ofstream out(dir_ + "/" + name, std::ios::binary);
    out << bytes;
    ASSERT_TRUE(out.good());
  }

  // A shard holding bf16 tensors of the given shapes, filled with a pattern.
  void write_shard(const std::string& name, const std::vector<std::pair<std::string, std::vector<int64_t>>>& specs) {
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(specs.size());
    std::vector<TensorToWrite> tensors;
    for (const auto& [tensor, shape] : specs) {
      size_t n = 2;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      buffers.emplace_back(n);
      for (size_t i = 0; i < n; ++i) buffers.back()[i] = static_cast<uint8_t>(i * 31 + tensor.size());
      tensors.push_back({tensor, DType::kBF16, shape, buffers.back()});
    }
    auto bytes = serialize_safetensors(tensors);
    ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
    write(name, *bytes);
  }

  std::string dir_;
};

TEST_F(CheckpointTest, SingleFile) {
  write_shard("model.safetensors", {{"model.norm.weight", {1024}}, {"model.embed_tokens.weight", {16, 1024}}});
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->num_tensors(), 2u);
  EXPECT_EQ(ckpt->source(), dir_ + "/model.safetensors");
  EXPECT_EQ(ckpt->file_of("model.norm.weight"), dir_ + "/model.safetensors");
  EXPECT_EQ(ckpt->file_of("nope"), "");
  EXPECT_EQ(ckpt->tensor_names(), (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));

  auto norm = ckpt->require("model.norm.weight", {1024});
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
  EXPECT_EQ((*norm)->dtype, DType::kBF16);
  EXPECT_EQ((*norm)->data.size(), 2048u);
  EXPECT_EQ((*norm)->data[1], static_cast<uint8_t>(31 + 17));
  EXPECT_EQ(ckpt->find("lm_head.weight"), nullptr);
}

TEST_F(CheckpointTest, MissingTensorAndWrongShapeMessages) {
  write_shard("model.safetensors", {{"model.layers.0.self_attn.q_proj.weight", {2048, 512}}});
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();

  auto missing = ckpt->require("lm_head.weight", {16, 1024});
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir_ + "/model.safetensors: tensor 'lm_head.weight' is missing");

  auto wrong = ckpt->require("model.layers.0.self_attn.q_proj.weight", {2048, 1024});
  EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(),
            dir_ +
                "/model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' has shape [2048, 512], "
                "expected [2048, 1024]");
  EXPECT_THAT(ckpt->require("model.layers.0.self_attn.q_proj.weight", {2048}).status().message(),
              HasSubstr("expected [2048]"));
}

TEST_F(CheckpointTest, ShardedCheckpoint) {
  write_shard("model-00001-of-00002.safetensors", {{"model.embed_tokens.weight", {8, 4}}, {"model.norm.weight", {4}}});
  write_shard("model-00002-of-00002.safetensors", {{"model.layers.0.mlp.up_proj.weight", {6, 4}}});
  write("model.safetensors.index.json", R"({
    "metadata": {"total_size": 120},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00002-of-00002.safetensors"
    }})");
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->num_tensors(), 3u);
  EXPECT_EQ(ckpt->file_of("model.norm.weight"), dir_ + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt->file_of("model.layers.0.mlp.up_proj.weight"), dir_ + "/model-00002-of-00002.safetensors");
  EXPECT_TRUE(ckpt->require("model.layers.0.mlp.up_proj.weight", {6, 4}).is_ok());

  auto wrong = ckpt->require("model.layers.0.mlp.up_proj.weight", {4, 6});
  EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("model-00002-of-00002.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' has shape "
                        "[6, 4], expected [4, 6]"));
  auto missing = ckpt->require("model.layers.1.mlp.up_proj.weight", {6, 4});
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("model.safetensors.index.json: tensor 'model.layers.1.mlp.up_proj.weight' is missing"));
}

TEST_F(CheckpointTest, SingleFileWinsOverIndex) {
  write_shard("model.safetensors", {{"a", {2}}});
  write("model.safetensors.index.json", "not even json");
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  EXPECT_NE(ckpt->find("a"), nullptr);
}

TEST_F(CheckpointTest, MissingFolderAndEmptyFolder) {
  auto r = Checkpoint::open(dir_ + "/nope");
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(dir_ + "/nope: model folder does not exist"));
  r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.status().message(), dir_ + ": no model.safetensors or model.safetensors.index.json in this folder");
}

TEST_F(CheckpointTest, ShardNamesMayNotLeaveTheFolder) {
  for (const char* shard : {"../model.safetensors", "/etc/passwd", "sub/model.safetensors", "..", ""}) {
    write("model.safetensors.index.json", std::string(R"({"weight_map": {"w": ")") + shard + R"("}})");
    auto r = Checkpoint::open(dir_);
    EXPECT_EQ(r.status().code(), ErrorCode::kParse) << shard;
    EXPECT_THAT(r.status().message(), HasSubstr("not a plain file name")) << shard;
  }
}

TEST_F(CheckpointTest, IndexErrors) {
  write("model.safetensors.index.json", "{\"weight_map\": ");
  auto r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("model.safetensors.index.json: not valid JSON"));

  write("model.safetensors.index.json", R"({"metadata": {}})");
  r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("weight_map is missing"));

  write("model.safetensors.index.json", R"({"weight_map": {"w": 3}})");
  r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'w' maps to number, expected a shard file name"));

  write("model.safetensors.index.json", R"({"weight_map": {"w": "absent.safetensors"}})");
  r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("shard 'absent.safetensors' (holding tensor 'w') does not exist"));
}

TEST_F(CheckpointTest, IndexAndShardsMustAgree) {
  write_shard("s1.safetensors", {{"a", {2}}});
  write_shard("s2.safetensors", {{"b", {2}}});
  write("model.safetensors.index.json", R"({"weight_map": {"a": "s2.safetensors", "b": "s2.safetensors"}})");
  auto r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.status().message(),
              HasSubstr("tensor 'a' is mapped to shard 's2.safetensors', which does not contain it"));

  // One tensor in two shards: which bytes are meant is ambiguous.
  write_shard("s2.safetensors", {{"a", {2}}, {"b", {2}}});
  write("model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("s2.safetensors: tensor 'a' is also in " + dir_ + "/s1.safetensors"));
}

TEST_F(CheckpointTest, BrokenShardErrorNamesTheShard) {
  write("bad.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  write("model.safetensors.index.json", R"({"weight_map": {"w": "bad.safetensors"}})");
  auto r = Checkpoint::open(dir_);
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr(dir_ + "/bad.safetensors: header length 16 past end of file"));
}

// A GGUF file as a checkpoint: GGUF names, shapes in PyTorch order (ne
// reversed), the bytes in place; quantized tensors refused by name and type.
TEST_F(CheckpointTest, GgufFileTensorsInPyTorchOrder) {
  std::vector<uint8_t> matrix(3 * 2 * 2), norm(3 * 4);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<uint8_t>(i + 1);
  GgufWriter w;
  ASSERT_TRUE(w.add("general.architecture", GgufValue("ernie4_5")).is_ok());
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", GgmlType::kBF16, {3, 2}, matrix).is_ok());  // [out 2, in 3]
  ASSERT_TRUE(w.add_tensor("blk.0.attn_norm.weight", GgmlType::kF32, {3}, norm).is_ok());
  const std::string path = dir_ + "/model.bin";  // no .gguf suffix: found by its magic
  ASSERT_TRUE(w.write_file(path).is_ok());
  EXPECT_TRUE(is_gguf_file(path));
  EXPECT_FALSE(is_gguf_file(dir_));

  auto ckpt = Checkpoint::open_gguf(path);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  ASSERT_NE(ckpt->gguf(), nullptr);
  EXPECT_EQ(ckpt->num_tensors(), 2u);
  auto q = ckpt->require("blk.0.attn_q.weight", {2, 3});
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ((*q)->dtype, DType::kBF16);
  EXPECT_EQ(std::vector<uint8_t>((*q)->data.begin(), (*q)->data.end()), matrix);
  EXPECT_EQ(ckpt->file_of("blk.0.attn_q.weight"), path);
  auto wrong = ckpt->require("blk.0.attn_q.weight", {3, 2});
  EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("blk.0.attn_q.weight"));
  auto missing = ckpt->require("blk.1.attn_q.weight", {2, 3});
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("blk.1.attn_q.weight"));

  GgufWriter quantized;
  std::vector<uint8_t> q4(18 * 2);  // Q4_0: 32 elements in 18 bytes
  ASSERT_TRUE(quantized.add_tensor("blk.0.ffn_up.weight", GgmlType::kQ4_0, {32, 2}, q4).is_ok());
  ASSERT_TRUE(quantized.write_file(dir_ + "/q.gguf").is_ok());
  auto read = Checkpoint::open_gguf(dir_ + "/q.gguf");
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  auto q4_view = read->require("blk.0.ffn_up.weight", {2, 32});
  ASSERT_TRUE(q4_view.is_ok()) << q4_view.status().to_string();
  EXPECT_EQ((*q4_view)->dtype, DType::kQ4_0);
  EXPECT_EQ((*q4_view)->data.size(), q4.size());

  GgufWriter unread;  // a ggml type tern has no kernels for
  std::vector<uint8_t> q41(20 * 2);  // Q4_1: 32 elements in 20 bytes
  ASSERT_TRUE(unread.add_tensor("blk.0.ffn_up.weight", GgmlType::kQ4_1, {32, 2}, q41).is_ok());
  ASSERT_TRUE(unread.write_file(dir_ + "/q41.gguf").is_ok());
  auto refused = Checkpoint::open_gguf(dir_ + "/q41.gguf");
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(refused.status().message(), HasSubstr("'blk.0.ffn_up.weight' has type Q4_1"));
}

}  // namespace
}  // namespace tern
