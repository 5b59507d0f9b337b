// The seam between linear_fast's quantized path (quant_linear.cpp: activation
// quantization, the row split) and the per-instruction-set kernels
// (quant_linear.cpp's portable set, quant_avx2.cpp). The ISA files are
// compiled for their instruction set; nothing in them may be called before
// the dispatcher has checked the CPU.
//
// Every kernel computes y = sum over blocks of d_w d_x (integer dot of the
// weight's and the activation's quants), minus the min / offset terms from
// the activation's block sums: the integer parts are exact, so the portable
// and SIMD sets differ only in the order of the fp32 block sums.
#pragma once

#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_pack.h"

namespace tern::cpu::quant_isa {

// Activations for Q8_0 and Q4_0 weights: x = d qs over 32 elements. Like
// ggml's block_q8_0 but with an fp32 d (no fp16 rounding, nothing to widen).
struct BlockQ8A {
  float d;
  int8_t qs[kQK8_0];
};

// One quantized linear problem: x already quantized, one row of activation
// blocks per token (BlockQ8A for Q8_0/Q4_0 weights, BlockQ8K for K-quants).
// Borrowed for the call.
struct QuantTask {
  const uint8_t* x = nullptr;
  int64_t x_row_bytes = 0;
  int64_t num_tokens = 0;
  const uint8_t* w = nullptr;  // rows of whole weight blocks
  int64_t w_row_bytes = 0;
  int64_t rows = 0;
  int64_t blocks = 0;  // blocks per row (cols / block size)
  float* y = nullptr;  // [num_tokens, rows]
};

// y[:, r_begin:r_end) of the task; safe on disjoint row ranges concurrently.
using QuantRowsFn = void (*)(const QuantTask& task, int64_t r_begin, int64_t r_end);
// Quantizes n elements of x (n a multiple of the block size) to BlockQ8A / BlockQ8K.
using QuantizeFn = void (*)(const float* x, int64_t n, void* y);

struct QuantKernels {
  QuantRowsFn q8_0 = nullptr;
  QuantRowsFn q4_0 = nullptr;
  QuantRowsFn q4_k = nullptr;
  QuantRowsFn q5_k = nullptr;
  QuantRowsFn q6_k = nullptr;
  // Both rules: d = max|x| / 127, q = x * (127 / max|x|) rounded to nearest
  // even; the sets give identical bytes.
  QuantizeFn quantize_q8a = nullptr;
  QuantizeFn quantize_q8k = nullptr;
};

// Activations for packed Q8_0 / Q4_0 weights: BlockQ8A and the sum of its
// quants (for Q4_0's -8 offset).
struct BlockQ8S {
  BlockQ8A q;
  int32_t sum = 0;
};

// Activations for packed K-quant weights: BlockQ8K and the sums of each 32
// quants (sub-blocks of Q4_K / Q5_K; pairs of bsums).
struct BlockQ8KS {
  BlockQ8K q;
  int16_t bsum32[kQKK / 32];
};

// One linear problem on a packed matrix (quant_pack.h): x quantized, one row
// of BlockQ8S (Q8_0, Q4_0) or BlockQ8KS (K-quants) per token. Borrowed.
struct PackedTask {
  const uint8_t* x = nullptr;
  int64_t x_row_bytes = 0;
  int64_t num_tokens = 0;
  const PackedWeight* w = nullptr;
  float* y = nullptr;  // [num_tokens, w->rows]
};

// y[:, rows of groups g_begin .. g_end) of the task; safe on disjoint group
// ranges concurrently.
using PackedRowsFn = void (*)(const PackedTask& task, int64_t g_begin, int64_t g_end);

struct PackedKernels {
  PackedRowsFn q8_0 = nullptr;
  PackedRowsFn q4_0 = nullptr;
  PackedRowsFn q4_k = nullptr;
  PackedRowsFn q5_k = nullptr;
  PackedRowsFn q6_k = nullptr;
  // QuantizeFn's contract with BlockQ8S / BlockQ8KS output: the same d and
  // quants as quantize_q8a / quantize_q8k, plus the sums.
  QuantizeFn quantize_q8s = nullptr;
  QuantizeFn quantize_q8ks = nullptr;
};

const QuantKernels& portable_quant_kernels();
#if defined(__x86_64__) && defined(__GNUC__)
const QuantKernels& avx2_quant_kernels();
const PackedKernels& avx2_packed_kernels();
// The same kernels on AVX512-VNNI (vpdpbusd, 256-bit); same bits as avx2_packed_kernels.
// Check AVX-512 F/VL/BW and AVX512_VNNI first.
const PackedKernels& vnni_packed_kernels();
#endif

}  // namespace tern::cpu::quant_isa
