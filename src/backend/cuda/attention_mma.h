// The tensor-core form of paged_attention (attention_mma.cu): head_dim 64 or
// 128, up to 16 q heads per kv head (paged_attention_takes_rope's shapes).
// The grid is paged_attention's: (tokens, kv heads, splits).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace tern::cuda {

cudaError_t paged_attention_mma(const PagedAttentionParams& p, dim3 grid, cudaStream_t stream, bool pdl);

}  // namespace tern::cuda
