// The seam between linear_fast's dispatcher (linear_kernels.cpp) and the
// per-instruction-set kernel files (linear_avx2.cpp, linear_avx512.cpp):
// one prepared problem, and a table of row-range functions per ISA. The ISA
// files are compiled for their instruction set, so nothing in them may be
// called before the dispatcher has checked that the CPU has it.
#pragma once

#include <cstdint>

namespace tern::cpu::linear_isa {

// One linear problem with the activations already in the layout the chosen
// kernel reads (see XLayout). Everything is borrowed for the call.
struct LinearTask {
  const void* x = nullptr;  // prepared activations, num_tokens rows of x_stride elements
  int64_t x_stride = 0;
  int64_t num_tokens = 0;
  const void* w = nullptr;  // [rows, cols] row-major weights
  int64_t rows = 0;
  int64_t cols = 0;
  float* y = nullptr;  // [num_tokens, rows]
};

// How a kernel wants x: as given, as fp32 with even/odd elements of each
// chunk split (so bf16 weight pairs widen with one shift and one mask, no
// shuffle), or rounded to bf16.
enum class XLayout { kF32, kF32PairsSplit, kBf16 };

// Computes y[:, r_begin:r_end) of the task. Safe to run concurrently on
// disjoint row ranges.
using RowsFn = void (*)(const LinearTask& task, int64_t r_begin, int64_t r_end);

struct IsaKernels {
  RowsFn bf16_exact = nullptr;  // x in kF32PairsSplit with chunk `pair_chunk`
  RowsFn bf16_dot = nullptr;    // x in kBf16; null where the ISA has none. Check AVX512_BF16 first.
  RowsFn f16 = nullptr;         // x in kF32
  RowsFn f32 = nullptr;         // x in kF32

  int pair_chunk = 0;           // elements per split chunk for bf16_exact
  // bf16 weights in 16-row panels (pack_bf16_panels, quant_pack.h; task.w is
  // the panel data), x rounded to bf16 with an even x_stride, zero-padded;
  // null where the ISA has none. Check AVX512_BF16 first.
  RowsFn bf16_panels = nullptr;
  // out[t * stride + k] = x[t * cols + k] rounded to bf16 as f32_to_bf16
  // rounds it (nearest even, NaN kept NaN, subnormals kept), zero at
  // out[t * stride + cols] when stride > cols; null where the ISA has none.
  void (*round_bf16)(const float* x, int64_t num_tokens, int64_t cols, int64_t stride, uint16_t* out) = nullptr;
};

#if defined(__x86_64__) && defined(__GNUC__)
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
#endif

}  // namespace tern::cpu::linear_isa
