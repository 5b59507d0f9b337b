// linear_fast's path for quantized weight matrices: the activations are
// quantized per block to 8 bits (Q8_0-style with an fp32 scale for Q8_0/Q4_0
// weights, Q8_K for the K-quants, as ggml does), then integer dot products
// with the weight blocks, threaded over output rows. Results differ from the
// reference (fp32 x times the dequantized weights) by the activation
// rounding: at most d_x / 2 per element times |w| (the bound
// quant_linear_test.cpp checks).
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"

namespace tern::cpu {

// y[T, w.rows] = x[T, w.cols] . W^T for a quantized w
// (is_quantized_weight_dtype). isa kPortable runs the plain C++ kernels, kAvx2
// or above the AVX2 ones where the CPU has them. Called from the pool's owner
// thread; the quantized activations live in that thread's reused scratch.
void linear_quantized(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                      CpuIsa isa);

// linear_quantized of up to 4 matrices on the same x (ys[i] gets [T,
// ws[i]->rows]) in one pool call with one activation quantization, with the
// bits of separate calls. Only for packed matrices of one width whose types
// take the same activations (Q8_0 / Q4_0, or the K-quants) on a CPU with
// AVX2; returns false, having done nothing, for any other set.
bool linear_quantized_many(ThreadPool& pool, const float* x, int64_t num_tokens,
                           std::span<const WeightMatrix* const> ws, std::span<float* const> ys, CpuIsa isa);

}  // namespace tern::cpu
