// The linear layers' GEMM of our own for sm_90 (H100, H200): wgmma on
// TMA-loaded tiles, so the product can leave the tensor cores through an
// epilogue cuBLAS has no form of. y = x W^T with x [T, K] and W [N, K] bf16
// row-major (PyTorch's layout, as linear() in gemm.h), fp32 accumulation.
//
// Epilogues:
//   kBf16     y [T, N] bf16
//   kF32      y [T, N] fp32
//   kAddF32   y [T, N] fp32 += the product (the residual stream)
//   kSiluMul  W is gate|up stacked ([2I, K], gate rows first, N = 2I);
//             y [T, I] bf16 = silu(g) * u with g and u rounded to bf16 first:
//             silu_mul's arithmetic on the bf16 output the unfused GEMM writes,
//             so the intermediate [T, 2I] is never written.
//
// Built for sm_90a (wgmma is an arch-specific instruction); elsewhere, and in
// builds without the 90 architecture, sm90_gemm_available() is false and
// sm90_linear refuses.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "base/status.h"

namespace tern::cuda {

enum class Sm90Epilogue { kBf16, kF32, kAddF32, kSiluMul };

// The epilogue that writes what linear() writes for `out`.
constexpr Sm90Epilogue sm90_epilogue(GemmOut out) {
  return out == GemmOut::kBf16  ? Sm90Epilogue::kBf16
         : out == GemmOut::kF32 ? Sm90Epilogue::kF32
                                : Sm90Epilogue::kAddF32;
}

// Whether this build has the sm_90a kernels and `device` is an sm_90 GPU.
bool sm90_gemm_available(int device);

// The output tiles a CTA computes, and how many CTAs take them.
struct Sm90Tiles {
  // Rows of x a tile takes: 128 (two consumer warpgroups), 64 (one), or 0: 64 where 128-row tiles would
  // leave more than a third of the SMs idle, else 128.
  int64_t rows = 0;
  // W rows (output columns) a tile takes: 128, 256 (bf16 only; with kSiluMul, gate and up multiples of
  // 128 rows each), or 0: 128.
  int64_t cols = 0;
  // The kernel is persistent: at most max_ctas CTAs (0: as many as are resident at once) take the tiles
  // in turn, each loading its next tile while it stores the last.
  int64_t max_ctas = 0;
  // CTAs a cluster takes along the rows: 1, 2 (128-row tiles only: a pair takes two row tiles of one column
  // and shares its W tile, each CTA loading half of it from L2 and multicasting it to both), or 0: 1.
  int64_t cluster = 0;
};

// Enqueues y = epilogue(x W^T) on `stream`. K a multiple of 8 (TMA's 16-byte
// strides), N a multiple of 8, and for kSiluMul N / 2 a multiple of 64;
// pointers 16-byte aligned.
Status sm90_linear(const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w, int64_t out_features,
                   void* y, Sm90Epilogue epilogue, cudaStream_t stream, Sm90Tiles tiles = {});

// The same on e4m3 codes (W8A8, the FP8 tensor cores): x [T, K] with a scale
// per row (x_scales [T], quantize_rows_e4m3's), W [N, K] with a scale per row
// (w_scales [N], the FP8 weights' per-output-channel scales); each sum leaves
// the accumulators as sum * x_scale * w_scale (kAddF32: that product, rounded,
// then added into y by the TMA store), so no pass over fp32 sums follows. K a
// multiple of 16. Each 128 codes of K are summed on the
// tensor cores and added into fp32 sums (the FP8 tensor cores' own sums keep
// fewer bits), as cuBLASLt does without fast accumulation.
Status sm90_linear_e4m3(const uint8_t* x, const float* x_scales, int64_t num_tokens, int64_t in_features,
                        const uint8_t* w, const float* w_scales, int64_t out_features, void* y, Sm90Epilogue epilogue,
                        cudaStream_t stream, Sm90Tiles tiles = {});

}  // namespace tern::cuda
