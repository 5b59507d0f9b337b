// The element type of the paged KV cache (vLLM's --kv-cache-dtype): auto
// stores K/V as the backend computes them (fp32 on the CPU, bf16 on CUDA;
// engine setup turns the CPU's auto into bf16 under the fast kernel set,
// whose products round activations to bf16 anyway); float32 keeps them
// fp32 (the CPU only); bfloat16 stores K/V
// rounded to bf16 (on CUDA the same as auto); fp8 stores FP8 E4M3 bytes
// (base/fp8_e4m3.h), each layer's K and V divided by its scale on the way in
// and multiplied by it on the way out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tern {

enum class KvCacheDType { kAuto, kF32, kBf16, kFp8E4m3 };

// "auto", "float32" (alias "fp32"), "bfloat16" (alias "bf16"), "fp8" or its alias "fp8_e4m3"; anything
// else (fp8_e5m2 included) is InvalidArgument naming --kv-cache-dtype and the
// accepted values.
Result<KvCacheDType> parse_kv_cache_dtype(std::string_view text);
// "auto", "float32", "bfloat16" or "fp8_e4m3": for logs and metrics.
const char* kv_cache_dtype_name(KvCacheDType dtype);
// Bytes per K or V element: 1 for fp8, 2 for bf16, 4 for float32, else `auto_bytes` (the backend's own).
inline int64_t kv_element_bytes(KvCacheDType dtype, int64_t auto_bytes) {
  return dtype == KvCacheDType::kFp8E4m3 ? 1 : dtype == KvCacheDType::kBf16 ? 2 : dtype == KvCacheDType::kF32 ? 4 : auto_bytes;
}

}  // namespace tern
