// Reference quantizers and dequantizers of ggml's block types (layouts in
// quant_blocks.h): plain C++, the oracle for the fast quantized kernels and
// the way tests and tools make quantized weights. Byte layouts are ggml's;
// the rules that choose the bytes are:
//  - Q8_0, Q4_0, Q8_K: ggml's (round to nearest, d from the largest |x|);
//    Q8_0 and Q4_0 give the same bytes as gguf-py / ggml's reference.
//  - Q4_K, Q5_K: per 32-element sub-block a least-squares fit of
//    x ~ s q - m (m >= 0) started from min/max and five nearby scales, two
//    refits each; the 8 scales and mins then take 6 bits against the block's
//    fp16 d and dmin, and q is recomputed with the scales as stored.
//  - Q6_K: per 16-element sub-block a least-squares scale started from
//    max |x| / 32 and nearby values; int8 scales against the fp16 d; q redone.
// `n` is a multiple of the type's block size; no function allocates.
// Thread-safe (no state).
#pragma once

#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "formats/dtype.h"

namespace tern::cpu {

void quantize_row_q8_0(const float* x, int64_t n, BlockQ8_0* y);
void quantize_row_q4_0(const float* x, int64_t n, BlockQ4_0* y);
void quantize_row_q4_k(const float* x, int64_t n, BlockQ4K* y);
void quantize_row_q5_k(const float* x, int64_t n, BlockQ5K* y);
void quantize_row_q6_k(const float* x, int64_t n, BlockQ6K* y);
void quantize_row_q8_k(const float* x, int64_t n, BlockQ8K* y);

// Each computes in fp32 in ggml's order: (d * scale) * q - dmin * min.
void dequantize_row_q8_0(const BlockQ8_0* x, int64_t n, float* y);
void dequantize_row_q4_0(const BlockQ4_0* x, int64_t n, float* y);
void dequantize_row_q4_k(const BlockQ4K* x, int64_t n, float* y);
void dequantize_row_q5_k(const BlockQ5K* x, int64_t n, float* y);
void dequantize_row_q6_k(const BlockQ6K* x, int64_t n, float* y);
void dequantize_row_q8_k(const BlockQ8K* x, int64_t n, float* y);

// The above by dtype (a quantized DType; `y` / `x` hold n / block_size blocks).
void quantize_row(DType dtype, const float* x, int64_t n, void* y);
void dequantize_row(DType dtype, const void* x, int64_t n, float* y);

// Bytes of one row of `cols` elements of `dtype` (any weight dtype), or -1
// when cols is not a whole number of blocks.
int64_t row_bytes(DType dtype, int64_t cols);

}  // namespace tern::cpu
