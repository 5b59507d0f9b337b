// Fast CPU linear layers: y[T, N] = x[T, K] . W^T for bf16, f16 and f32
// weights, with SIMD micro-kernels chosen at run time (AVX-512, AVX2+FMA, or
// the reference kernel as the portable fallback). Same contract as
// cpu::linear, but the summation order differs from the reference, so results
// agree with it to a tolerance (stated in linear_kernels_test.cpp), not bitwise.
// Quantized weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) take int8 dot products
// with the activations quantized to 8 bits per block (quant_linear.h; AVX2 or
// portable C++; the tolerance is in quant_linear_test.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"

namespace tern::cpu {

// Instruction sets the fast kernels are written for, weakest first.
// kAvx512 needs AVX-512 F/BW/VL/DQ; kAvx2 needs AVX2, FMA and F16C.
enum class CpuIsa { kPortable, kAvx2, kAvx512 };

// The strongest CpuIsa this CPU runs.
CpuIsa best_cpu_isa();

// True where the CPU runs kAvx512 and AVX512_BF16 (vdpbf16ps).
bool cpu_has_avx512_bf16();

// What x is rounded to before the products, for bf16 weights.
enum class Activations {
  // fp32 x times the exact weight: the only error is fp32 summation.
  kExact,
  // x rounded to bf16 so AVX-512 BF16 (vdpbf16ps) multiplies two pairs per
  // lane in one instruction: about twice the compute rate, for a relative
  // error of at most 2^-9 of sum |x||w| per output. Used only with bf16
  // weights on a CPU with AVX512_BF16; otherwise kExact is used.
  kBf16,
};

struct LinearOptions {
  // Highest instruction set to use; a weaker one is used when the CPU lacks it
  // (tests pass each value to check every path the CPU can run).
  CpuIsa max_isa = CpuIsa::kAvx512;
  Activations activations = Activations::kExact;
};

// y[T, w.rows] = x[T, w.cols] . W^T with fp32 accumulation. Parallel over
// weight rows on `pool`; called from the pool's owner thread only. All
// pointers are borrowed; y must not alias x. Scratch for the rearranged
// activations is a buffer of the calling thread, grown to the largest T*K
// seen and then reused (no allocation per call in steady state).
void linear_fast(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                 const LinearOptions& options = {});

// linear_fast of several matrices on the same x (q|k|v, gate|up): ys[i]
// gets [T, ws[i]->rows], with the bits of separate calls. Packed quantized
// matrices that take the same activations share one activation
// quantization and one pool call (linear_quantized_many); others run one by one.
void linear_fast_many(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys, const LinearOptions& options = {});

}  // namespace tern::cpu
