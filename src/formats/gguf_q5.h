// Q5_0 and Q5_1, ggml's 5-bit types with blocks of 32: the types llama-quantize
// falls back to when a matrix's rows do not split into the 256-value blocks of
// Q4_K (Q5_0) or Q5_K (Q5_1), so narrow models quantized to a K mix hold them.
// tern has no kernels for them: the checkpoint expands them to F32 at load
// (exact, four times their bytes), and `tern quantize` writes them as
// llama-quantize does. Block layouts and rounding as ggml's reference
// quantizers. Thread-compatible: no state.
#pragma once

#include <cstdint>

#include "formats/gguf_types.h"

namespace tern {

constexpr bool is_q5_type(GgmlType t) { return t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1; }

// `n` values (a multiple of 32) from Q5_0 / Q5_1 blocks at `blocks`.
void dequantize_q5_row(GgmlType type, const uint8_t* blocks, int64_t n, float* out);
// `n` values (a multiple of 32) into Q5_0 / Q5_1 blocks at `blocks`.
void quantize_q5_row(GgmlType type, const float* x, int64_t n, uint8_t* blocks);

}  // namespace tern
