// The quantized DTypes: block sizes and bytes agree with ggml's table, the
// GGUF mapping goes both ways, and a safetensors header cannot name one.
#include <gtest/gtest.h>

#include "formats/dtype.h"
#include "formats/gguf_types.h"

namespace tern {
namespace {

TEST(QuantDtype, BlocksAgreeWithGgmlAndMapBothWays) {
  const std::pair<DType, GgmlType> pairs[] = {
      {DType::kQ8_0, GgmlType::kQ8_0}, {DType::kQ4_0, GgmlType::kQ4_0}, {DType::kQ4_K, GgmlType::kQ4_K},
      {DType::kQ5_K, GgmlType::kQ5_K}, {DType::kQ6_K, GgmlType::kQ6_K}, {DType::kQ8_K, GgmlType::kQ8_K},
  };
  for (const auto& [dtype, ggml] : pairs) {
    const GgmlTypeInfo& info = ggml_type_info(ggml);
    EXPECT_TRUE(is_quantized(dtype)) << info.name;
    EXPECT_EQ(dtype_block_size(dtype), info.block_size) << info.name;
    EXPECT_EQ(dtype_block_bytes(dtype), info.block_bytes) << info.name;
    EXPECT_EQ(dtype_name(dtype), info.name);
    EXPECT_EQ(ggml_type_to_dtype(ggml), dtype) << info.name;
    EXPECT_EQ(dtype_to_ggml_type(dtype), ggml) << info.name;
    EXPECT_EQ(dtype_size(dtype), 0u) << info.name;                             // no per-element size
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), std::nullopt) << info.name;  // not a safetensors dtype
  }
  EXPECT_FALSE(is_quantized(DType::kBF16));
  EXPECT_EQ(dtype_block_size(DType::kBF16), 1);
  EXPECT_EQ(dtype_block_bytes(DType::kBF16), 2);
  EXPECT_EQ(dtype_block_bytes(DType::kF32), 4);
  EXPECT_FALSE(ggml_type_to_dtype(GgmlType::kQ5_0).has_value());
}

}  // namespace
}  // namespace tern
