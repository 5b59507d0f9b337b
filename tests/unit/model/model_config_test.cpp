// config.json / generation_config.json parsing: the real ERNIE-4.5-0.3B-PT
// files (values from MODEL.md), the variants older and newer transformers
// write, and configs that must be refused with a message naming the field.
#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tern {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// baidu/ERNIE-4.5-0.3B-PT config.json as published.
constexpr const char* kErnie03bConfig = R"({
  "architectures": ["Ernie4_5ForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "intermediate_size": 3072,
  "max_position_embeddings": 131072,
  "model_type": "ernie4_5",
  "num_attention_heads": 16,
  "num_hidden_layers": 18,
  "num_key_value_heads": 2,
  "pad_token_id": 0,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.54.0.dev0",
  "use_bias": false,
  "use_cache": true,
  "vocab_size": 103424
})";

// The real config with `patch` merged in (null values delete a field).
std::string patched(const char* patch) {
  json base = json::parse(kErnie03bConfig);
  base.merge_patch(json::parse(patch));
  return base.dump();
}

Status parse_error_of(const std::string& text) {
  auto r = parse_model_config(text, "config.json");
  EXPECT_FALSE(r.is_ok()) << text;
  return r.status();
}

TEST(ModelConfig, RealErnie03b) {
  auto r = parse_model_config(kErnie03bConfig, "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.architecture, "Ernie4_5ForCausalLM");
  EXPECT_EQ(c.model_type, "ernie4_5");
  EXPECT_EQ(c.vocab_size, 103424);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_layers, 18);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 256);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.use_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.pad_token_id, 0);
}

TEST(ModelConfig, OlderAndNewerTransformersSpellings) {
  // Older remote-code copies: the underscored class name.
  auto r = parse_model_config(patched(R"({"architectures": ["Ernie4_5_ForCausalLM"]})"), "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->architecture, "Ernie4_5_ForCausalLM");

  // Newer transformers: "dtype" and rope_parameters.rope_theta.
  r = parse_model_config(patched(R"({"torch_dtype": null, "dtype": "float32", "rope_theta": null,
                                     "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}})"),
                         "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->torch_dtype, "float32");
  EXPECT_DOUBLE_EQ(r->rope_theta, 250000.0);

  // No architectures list: model_type decides.
  r = parse_model_config(patched(R"({"architectures": null})"), "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->architecture, "Ernie4_5ForCausalLM");

  // eos as a list.
  r = parse_model_config(patched(R"({"eos_token_id": [2, 100272]})"), "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{2, 100272}));
}

TEST(ModelConfig, Defaults) {
  auto r = parse_model_config(R"({"model_type": "ernie4_5", "vocab_size": 1000, "hidden_size": 64,
                                  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "max_position_embeddings": 512})",
                              "tiny/config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->num_kv_heads, 4);
  EXPECT_EQ(r->head_dim, 16);
  EXPECT_DOUBLE_EQ(r->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(r->rms_norm_eps, 1e-5);
  EXPECT_TRUE(r->tie_word_embeddings);
  EXPECT_EQ(r->eos_token_ids, std::vector<int32_t>{2});
}

TEST(ModelConfig, UnsupportedArchitectureNamesItAndTheSupportedOnes) {
  Status s = parse_error_of(patched(R"({"architectures": ["LlamaForCausalLM"]})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("config.json: architecture 'LlamaForCausalLM' is not supported"));
  EXPECT_THAT(s.message(), HasSubstr("Ernie4_5ForCausalLM, Ernie4_5_ForCausalLM"));

  s = parse_error_of(patched(R"({"architectures": ["Ernie4_5_MoeForCausalLM"]})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("'Ernie4_5_MoeForCausalLM'"));

  s = parse_error_of(patched(R"({"architectures": null, "model_type": "llama"})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("model_type 'llama' is not supported"));

  s = parse_error_of(patched(R"({"architectures": null, "model_type": null})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("neither 'architectures' nor 'model_type'"));

  s = parse_error_of(patched(R"({"architectures": "Ernie4_5ForCausalLM"})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("field 'architectures' is string"));
}

TEST(ModelConfig, MissingAndMistypedFields) {
  Status s = parse_error_of(patched(R"({"hidden_size": null})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_EQ(s.message(), "config.json: field 'hidden_size' is missing");

  s = parse_error_of(patched(R"({"hidden_size": "1024"})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_EQ(s.message(), "config.json: field 'hidden_size' is string \"1024\", expected an integer");

  s = parse_error_of(patched(R"({"num_hidden_layers": 18.5})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("'num_hidden_layers' is number 18.5, expected an integer"));

  s = parse_error_of(patched(R"({"tie_word_embeddings": "yes"})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("'tie_word_embeddings' is string \"yes\", expected true or false"));

  s = parse_error_of(patched(R"({"rms_norm_eps": "small"})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("'rms_norm_eps'"));
}

TEST(ModelConfig, OutOfRangeValues) {
  Status s = parse_error_of(patched(R"({"hidden_size": -1024})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("field 'hidden_size' is -1024, expected a positive integer at most 16777216"));

  s = parse_error_of(patched(R"({"vocab_size": 0})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("'vocab_size' is 0"));

  s = parse_error_of(patched(R"({"intermediate_size": 16777217})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);

  s = parse_error_of(patched(R"({"num_hidden_layers": 18446744073709551615})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("below 2^63"));

  s = parse_error_of(patched(R"({"rms_norm_eps": 0})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("'rms_norm_eps'"));

  s = parse_error_of(patched(R"({"rope_theta": -1})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("'rope_theta'"));

  s = parse_error_of(patched(R"({"eos_token_id": 103424})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("'eos_token_id' is 103424, expected an id below vocab_size 103424"));

  s = parse_error_of(patched(R"({"bos_token_id": -1})"));
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("'bos_token_id'"));
}

TEST(ModelConfig, InconsistentShapes) {
  Status s = parse_error_of(patched(R"({"num_key_value_heads": 3})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("num_attention_heads 16 is not a multiple of num_key_value_heads 3"));

  s = parse_error_of(patched(R"({"head_dim": 127})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("head_dim 127 is odd"));

  s = parse_error_of(patched(R"({"head_dim": null, "num_attention_heads": 24, "num_key_value_heads": 8})"));
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("hidden_size 1024 is not a multiple of num_attention_heads 24"));
}

TEST(ModelConfig, UnsupportedFeatures) {
  Status s = parse_error_of(patched(R"({"use_bias": true})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("use_bias true is not supported"));

  s = parse_error_of(patched(R"({"rope_scaling": {"type": "linear", "factor": 2.0}})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("rope_scaling"));
  EXPECT_THAT(s.message(), HasSubstr("not supported"));

  s = parse_error_of(patched(R"({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("rope_type 'yarn'"));

  s = parse_error_of(patched(R"({"hidden_act": "gelu"})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("hidden_act 'gelu'"));

  s = parse_error_of(patched(R"({"torch_dtype": "float8_e4m3fn"})"));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("'float8_e4m3fn'"));
}

TEST(ModelConfig, NotJsonOrNotAnObject) {
  Status s = parse_error_of("{\"vocab_size\": ");
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_EQ(s.message(), "config.json: not valid JSON");

  s = parse_error_of("[1, 2, 3]");
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("expected a JSON object, found array"));

  s = parse_error_of("");
  EXPECT_EQ(s.code(), ErrorCode::kParse);

  // A deeply nested value in a field that gets quoted back must not recurse.
  const int depth = 200000;
  std::string deep = "\"rope_scaling\":" + std::string(depth, '[') + std::string(depth, ']') + ",";
  s = parse_error_of(patched(R"({"rope_scaling": null})").insert(1, deep));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("rope_scaling array [[[[...]]]"));
}

TEST(GenerationConfig, RealErnie03b) {
  auto r = parse_generation_config(R"({"bos_token_id": 1, "do_sample": true, "eos_token_id": 2,
                                       "pad_token_id": 0, "repetition_penalty": 1.0, "temperature": 0.8,
                                       "top_p": 0.8, "frequency_penalty": 0.0, "presence_penalty": 0.0,
                                       "transformers_version": "4.54.0.dev0"})",
                                   "generation_config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->do_sample, true);
  EXPECT_DOUBLE_EQ(r->temperature.value(), 0.8);
  EXPECT_DOUBLE_EQ(r->top_p.value(), 0.8);
  EXPECT_DOUBLE_EQ(r->repetition_penalty.value(), 1.0);
  EXPECT_EQ(r->top_k, std::nullopt);
  EXPECT_EQ(r->eos_token_ids, std::vector<int32_t>{2});
}

TEST(GenerationConfig, AllOptional) {
  auto r = parse_generation_config("{}", "generation_config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->do_sample, std::nullopt);
  EXPECT_EQ(r->temperature, std::nullopt);
  EXPECT_TRUE(r->eos_token_ids.empty());

  r = parse_generation_config(R"({"top_k": 20, "eos_token_id": [2, 100272], "temperature": null})", "g.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->top_k, 20);
  EXPECT_EQ(r->temperature, std::nullopt);
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{2, 100272}));
}

TEST(GenerationConfig, BadValues) {
  auto r = parse_generation_config(R"({"top_p": 1.5})", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(r.status().message(), HasSubstr("generation_config.json: field 'top_p' is 1.5"));

  r = parse_generation_config(R"({"temperature": "hot"})", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("'temperature' is string \"hot\", expected a number"));

  r = parse_generation_config(R"({"do_sample": 1})", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("'do_sample'"));

  r = parse_generation_config(R"({"eos_token_id": [2, "x"]})", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("expected a token id or a list of token ids"));

  r = parse_generation_config(R"({"top_k": -1})", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);

  r = parse_generation_config("nope", "generation_config.json");
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("generation_config.json: not valid JSON"));
}

}  // namespace
}  // namespace tern
