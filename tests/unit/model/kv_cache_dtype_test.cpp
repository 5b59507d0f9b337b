// --kv-cache-dtype's values: auto, float32 and its alias fp32, bfloat16 and
// its alias bf16, fp8 and its
// alias fp8_e4m3; fp8_e5m2 and
// anything else refused with the flag and the accepted values named.
#include "model/kv_cache_dtype.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(KvCacheDType, ParsesVllmNames) {
  EXPECT_EQ(parse_kv_cache_dtype("auto").value(), KvCacheDType::kAuto);
  EXPECT_EQ(parse_kv_cache_dtype("fp8").value(), KvCacheDType::kFp8E4m3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3").value(), KvCacheDType::kFp8E4m3);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16").value(), KvCacheDType::kBf16);
  EXPECT_EQ(parse_kv_cache_dtype("bf16").value(), KvCacheDType::kBf16);
  EXPECT_EQ(parse_kv_cache_dtype("float32").value(), KvCacheDType::kF32);
  EXPECT_EQ(parse_kv_cache_dtype("fp32").value(), KvCacheDType::kF32);
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDType::kF32), "float32");
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDType::kAuto), "auto");
  EXPECT_EQ(kv_element_bytes(KvCacheDType::kF32, 2), 4);
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDType::kBf16), "bfloat16");
  EXPECT_EQ(kv_element_bytes(KvCacheDType::kBf16, 4), 2);
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDType::kFp8E4m3), "fp8_e4m3");
  EXPECT_EQ(kv_element_bytes(KvCacheDType::kFp8E4m3, 2), 1);
  EXPECT_EQ(kv_element_bytes(KvCacheDType::kAuto, 2), 2);
}

TEST(KvCacheDType, RefusesOtherValuesNamingTheFlag) {
  for (const char* bad : {"fp8_e5m2", "FP8", "BF16", "float16", "", "int8", "fp8 "}) {
    Result<KvCacheDType> r = parse_kv_cache_dtype(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--kv-cache-dtype"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("auto, float32, bfloat16, fp8, fp8_e4m3"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tern
