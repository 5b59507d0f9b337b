// SiLU(gate) * up over the fused gate|up GEMM output, fp32 math, bf16 out.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void silu_mul_kernel(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out) {
  const int64_t n = num_tokens * inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / inter, i = idx - t * inter;
    const bf16* row = gu + t * 2 * inter;
    const float g = load_bf16(row + i), u = load_bf16(row + inter + i);
    store_bf16(out + idx, g / (1.0f + expf(-g)) * u);
  }
}

// The same, 8 values per thread (16-byte loads and stores) with 32-bit
// index math; blockIdx.y is the token. For inter % 8 == 0.
__global__ void silu_mul_vec_kernel(const bf16* gu, int inter, bf16* out) {
  const int64_t t = blockIdx.y;
  const int n8 = inter / 8;
  const uint4* g8 = reinterpret_cast<const uint4*>(gu + t * 2 * inter);
  const uint4* u8 = reinterpret_cast<const uint4*>(gu + t * 2 * inter + inter);
  uint4* o8 = reinterpret_cast<uint4*>(out + t * inter);
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n8; j += gridDim.x * blockDim.x) {
    const uint4 gv = g8[j], uv = u8[j];
    const uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w};
    uint32_t ow[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float g0 = __uint_as_float(gw[h] << 16), g1 = __uint_as_float(gw[h] & 0xffff0000u);
      const float u0 = __uint_as_float(uw[h] << 16), u1 = __uint_as_float(uw[h] & 0xffff0000u);
      const __nv_bfloat162 r = __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
      ow[h] = *reinterpret_cast<const uint32_t*>(&r);
    }
    o8[j] = make_uint4(ow[0], ow[1], ow[2], ow[3]);
  }
}

}  // namespace

cudaError_t silu_mul(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out, cudaStream_t stream) {
  const int64_t n = num_tokens * inter;
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  if (inter % 8 == 0 && inter <= (1 << 30) && num_tokens <= 65535) {
    const unsigned int x = blocks_for(inter / 8, kThreads);
    silu_mul_vec_kernel<<<dim3(x, static_cast<unsigned int>(num_tokens)), kThreads, 0, stream>>>(
        gu, static_cast<int>(inter), out);
    return cudaGetLastError();
  }
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned int grid = static_cast<unsigned int>(blocks < 65536 ? blocks : 65536);
  silu_mul_kernel<<<grid, kThreads, 0, stream>>>(gu, num_tokens, inter, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
