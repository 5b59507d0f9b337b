// --kv-cache-dtype's values.
#include "model/kv_cache_dtype.h"

namespace tern {

Result<KvCacheDType> parse_kv_cache_dtype(std::string_view text) {
  if (text == "auto") return KvCacheDType::kAuto;
  if (text == "float32" || text == "fp32") return KvCacheDType::kF32;
  if (text == "bfloat16" || text == "bf16") return KvCacheDType::kBf16;
  if (text == "fp8" || text == "fp8_e4m3") return KvCacheDType::kFp8E4m3;
  if (text == "fp8_e5m2") {
    return invalid_argument("--kv-cache-dtype fp8_e5m2 is not supported: tern stores an fp8 KV cache as e4m3; "
                            "accepted values: auto, float32, bfloat16, fp8, fp8_e4m3");
  }
  return invalid_argument("--kv-cache-dtype '" + std::string(text) +
                          "' is not one of the accepted values: auto, float32, bfloat16, fp8, fp8_e4m3");
}

const char* kv_cache_dtype_name(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::kF32:
      return "float32";
    case KvCacheDType::kBf16:
      return "bfloat16";
    case KvCacheDType::kFp8E4m3:
      return "fp8_e4m3";
    case KvCacheDType::kAuto:
      break;
  }
  return "auto";
}

}  // namespace tern
