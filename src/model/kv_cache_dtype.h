// The element type of the paged KV cache (vLLM's --kv-cache-dtype): auto
// stores K/V as the backend computes them (fp32 on the CPU, bf16 on CUDA);
// fp8 stores FP8 E4M3 bytes (base/fp8_e4m3.h), each layer's K and V divided by
// its scale on the way in and multiplied by it on the way out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tern {

enum class KvCacheDType { kAuto, kFp8E4m3 };

// "auto", "fp8" or its alias "fp8_e4m3"; anything else (fp8_e5m2 included)
// is InvalidArgument naming --kv-cache-dtype and the accepted values.
Result<KvCacheDType> parse_kv_cache_dtype(std::string_view text);
// "auto" or "fp8_e4m3": for logs and metrics.
const char* kv_cache_dtype_name(KvCacheDType dtype);
// Bytes per K or V element: 1 for fp8, else `auto_bytes` (the backend's own).
inline int64_t kv_element_bytes(KvCacheDType dtype, int64_t auto_bytes) {
  return dtype == KvCacheDType::kFp8E4m3 ? 1 : auto_bytes;
}

}  // namespace tern
