// quantization_config as AutoAWQ, AutoGPTQ / GPTQModel and llm-compressor
// write it: the settings tern loads are read, and each one it does not
// (8 bits, other packings, activation quantization, mixed schemes, ...) is
// refused naming the field and the value.
#include "formats/int4_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tern {
namespace {

using ::testing::HasSubstr;

Result<std::optional<Int4Config>> parse(const std::string& quantization_config) {
  return parse_int4_config(R"({"hidden_size": 64, "quantization_config": )" + quantization_config + "}",
                           "config.json");
}

Int4Config parse_ok(const std::string& quantization_config) {
  auto r = parse(quantization_config);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r.is_ok() && r->has_value());
  return r.is_ok() && r->has_value() ? **r : Int4Config{};
}

void expect_refused(const std::string& quantization_config, ErrorCode code, std::initializer_list<std::string> parts) {
  auto r = parse(quantization_config);
  ASSERT_FALSE(r.is_ok()) << quantization_config;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& part : parts) EXPECT_THAT(r.status().message(), HasSubstr(part));
}

const std::string kCompressed = R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
  "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": null,
  "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
    "weights": {"num_bits": 4, "type": "int", "symmetric": WEIGHTS_SYM, "strategy": "group", "group_size": 128,
                "actorder": null, "dynamic": false, "observer": "minmax"}}}})";

std::string compressed(const std::string& sym, const std::string& from = "", const std::string& to = "") {
  std::string s = kCompressed;
  s.replace(s.find("WEIGHTS_SYM"), 11, sym);
  if (!from.empty()) s.replace(s.find(from), from.size(), to);
  return s;
}

TEST(Int4Config, NoQuantizationConfigIsAFloatCheckpoint) {
  auto r = parse_int4_config(R"({"hidden_size": 64})", "config.json");
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  r = parse_int4_config(R"({"quantization_config": null})", "config.json");
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
}

TEST(Int4Config, ReadsAwq) {
  Int4Config c = parse_ok(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMM",
                              "zero_point": true, "modules_to_not_convert": null})");
  EXPECT_EQ(c.scheme, Int4Scheme::kAwqGemm);
  EXPECT_EQ(c.group_size, 128);
  EXPECT_FALSE(c.symmetric);
  // AutoAWQ's own spellings, and one group per row.
  c = parse_ok(R"({"quant_method": "awq", "w_bit": 4, "q_group_size": -1, "version": "gemm"})");
  EXPECT_EQ(c.group_size, 0);
  EXPECT_EQ(c.group_width(1024), 1024);
  EXPECT_EQ(describe_int4_config(c), "AWQ (GEMM), 4-bit, one group per row, asymmetric");
}

TEST(Int4Config, ReadsGptq) {
  Int4Config c = parse_ok(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false,
                              "sym": true, "damp_percent": 0.01, "static_groups": false})");
  EXPECT_EQ(c.scheme, Int4Scheme::kGptq);
  EXPECT_TRUE(c.symmetric);
  EXPECT_FALSE(c.act_order);
  EXPECT_TRUE(c.zero_minus_one);  // no checkpoint_format: the v1 layout
  c = parse_ok(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": true, "sym": false,
                   "checkpoint_format": "gptq_v2"})");
  EXPECT_TRUE(c.act_order);
  EXPECT_FALSE(c.symmetric);
  EXPECT_FALSE(c.zero_minus_one);
  EXPECT_EQ(describe_int4_config(c), "GPTQ, 4-bit, group 32, asymmetric, act-order (g_idx)");
}

TEST(Int4Config, ReadsCompressedTensors) {
  Int4Config c = parse_ok(compressed("true"));
  EXPECT_EQ(c.scheme, Int4Scheme::kCompressedTensors);
  EXPECT_EQ(c.group_size, 128);
  EXPECT_TRUE(c.symmetric);
  c = parse_ok(compressed("false", R"("strategy": "group", "group_size": 128)", R"("strategy": "channel")"));
  EXPECT_FALSE(c.symmetric);
  EXPECT_EQ(c.group_size, 0);
  // actorder "group" (or "dynamic", or true) stores weight_g_idx; "weight" ("static") leaves the layout alone.
  for (const char* order : {R"("group")", R"("dynamic")", "true"}) {
    EXPECT_TRUE(parse_ok(compressed("true", R"("actorder": null)", std::string(R"("actorder": )") + order)).act_order)
        << order;
  }
  for (const char* order : {R"("weight")", R"("static")", "false"}) {
    EXPECT_FALSE(parse_ok(compressed("true", R"("actorder": null)", std::string(R"("actorder": )") + order)).act_order)
        << order;
  }
}

TEST(Int4Config, RefusesWhatTernDoesNotLoad) {
  const ErrorCode kUnsup = ErrorCode::kUnsupported;
  expect_refused(R"({"quant_method": "awq", "bits": 8, "group_size": 128})", kUnsup, {"bits is 8", "4-bit AWQ"});
  expect_refused(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})", kUnsup, {"bits is 8"});
  expect_refused(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})", kUnsup, {"bits is 3"});
  expect_refused(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})", kUnsup,
                 {"version is \"gemv\"", "GEMM"});
  expect_refused(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})", kUnsup,
                 {"zero_point"});
  expect_refused(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"})", kUnsup,
                 {"checkpoint_format is \"marlin\""});
  expect_refused(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})", kUnsup,
                 {"quant_method is \"bitsandbytes\"", "awq, gptq and compressed-tensors"});
  expect_refused(R"({"quant_method": "fp8"})", kUnsup, {"\"fp8\""});
  expect_refused(compressed("true", R"("format": "pack-quantized")", R"("format": "float-quantized")"), kUnsup,
                 {"format is \"float-quantized\""});
  expect_refused(compressed("true", R"("num_bits": 4)", R"("num_bits": 8)"), kUnsup, {"num_bits is 8"});
  expect_refused(compressed("true", R"("input_activations": null)",
                            R"("input_activations": {"num_bits": 8, "type": "int", "dynamic": true})"),
                 kUnsup, {"input_activations", "W4A16"});
  expect_refused(compressed("true", R"("actorder": null)", R"("actorder": "columns")"), kUnsup,
                 {"actorder is string \"columns\""});
  expect_refused(compressed("true", R"("dynamic": false)", R"("dynamic": "local")"), kUnsup, {"dynamic"});
  expect_refused(compressed("true", R"("strategy": "group")", R"("strategy": "tensor")"), kUnsup,
                 {"strategy is \"tensor\""});
  expect_refused(compressed("true", R"("type": "int")", R"("type": "float")"), kUnsup, {"type is \"float\""});
  expect_refused(compressed("true", R"("kv_cache_scheme": null)", R"("kv_cache_scheme": {"num_bits": 8})"), kUnsup,
                 {"kv_cache_scheme"});
  expect_refused(compressed("true", R"("config_groups": {)",
                            R"("config_groups": {"group_1": {"weights": {"num_bits": 8}}, )"),
                 kUnsup, {"config_groups", "2 schemes"});
}

TEST(Int4Config, RefusesMalformedFields) {
  expect_refused(R"({"quant_method": "awq", "bits": 4, "group_size": 0})", ErrorCode::kOutOfRange,
                 {"group_size is 0"});
  expect_refused(R"({"quant_method": "gptq", "bits": 4, "group_size": -2})", ErrorCode::kOutOfRange,
                 {"group_size is -2"});
  expect_refused(R"({"quant_method": "gptq", "bits": 4})", ErrorCode::kParse, {"group_size is missing"});
  expect_refused(R"({"quant_method": "gptq", "bits": "4", "group_size": 128})", ErrorCode::kParse,
                 {"bits is string", "an integer"});
  expect_refused(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": "no"})", ErrorCode::kParse,
                 {"desc_act"});
  expect_refused(R"({"bits": 4})", ErrorCode::kParse, {"quant_method is missing"});
  expect_refused(R"([1, 2])", ErrorCode::kParse, {"quantization_config is array"});
  expect_refused(compressed("true", R"("group_size": 128)", R"("group_size": 0)"), ErrorCode::kOutOfRange,
                 {"group_size is 0"});
}

}  // namespace
}  // namespace tern
