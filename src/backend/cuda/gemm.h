// The linear layers on cuBLAS: y[T, N] = x[T, K] . W^T with W in PyTorch
// [N, K] row-major layout (so fused weights are row blocks stacked on
// upload), bf16 operands, fp32 accumulation, bf16 or fp32 output, or fp32
// added into y (y += x W^T: the residual stream takes a layer's output
// without a separate add).
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "base/status.h"

namespace tern::cuda {

enum class GemmOut { kBf16, kF32, kAddF32 };

// The same output form as the own kernels name it (int4_gemm, gemv).
inline GemvOutput gemv_output_of(GemmOut out) {
  return out == GemmOut::kBf16 ? GemvOutput::kBf16 : out == GemmOut::kF32 ? GemvOutput::kF32 : GemvOutput::kAddF32;
}

// Enqueues on the handle's stream. Shapes must fit in int (cuBLAS's API).
Status linear(cublasHandle_t handle, const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w,
              int64_t out_features, void* y, GemmOut out_type);

// The same product split over K: partials[s][T][N] = x[:, slice s] . W[:, slice s]^T (fp32) for the
// `splits` equal slices of in_features (a multiple of 8 * splits), one strided-batched call. At a few
// hundred rows a GEMM whose K is long against its N runs as few tiles, each a long serial K loop; the
// slices give the GPU `splits` times the tiles, each 1 / splits of the loop. The consumer sums the
// partials (add_rmsnorm's deltas), in slice order.
Status linear_k_split(cublasHandle_t handle, const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w,
                      int64_t out_features, float* partials, int splits);

}  // namespace tern::cuda
