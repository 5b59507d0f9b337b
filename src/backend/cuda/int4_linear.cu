// int4 weights written out as bf16 for the large steps' GEMM (W4A16: the
// weights' bytes are saved in memory and in the GEMV, the GEMM runs as for
// bf16 weights). One thread per 8 elements: a 4-byte load of codes, their
// block's scale and zero, one 16-byte store.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/int4_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void dequantize_int4_kernel(Int4Weights w, int64_t groups, bf16* out) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Int4x8 v = load_int4x8(w, g * 8);
    const float bias = int4_bias(v.dz), d = int4_scale(v.dz);
    uint32_t pairs[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      pairs[j] = pack_bf16x2(int4_minus_zero(v.codes, 2 * j, bias) * d, int4_minus_zero(v.codes, 2 * j + 1, bias) * d);
    }
    reinterpret_cast<uint4*>(out)[g] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

}  // namespace

cudaError_t dequantize_int4_rows(const Int4Weights& w, int64_t rows, int64_t cols, bf16* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols % 32 != 0 || w.codes == nullptr || w.scales == nullptr || w.zeros == nullptr) return cudaErrorInvalidValue;
  const int64_t groups = rows * cols / 8;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((groups + 255) / 256, 4096));
  dequantize_int4_kernel<<<blocks, 256, 0, stream>>>(w, groups, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
