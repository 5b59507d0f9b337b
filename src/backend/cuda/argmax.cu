// Greedy picks on the device: one block per logits row finds the index of
// the largest value, so only an int32 per row crosses to the host. Same
// answer as the host argmax (engine/sampler.h): lowest index among equal
// maxima, NaN never chosen, 0 when every value is NaN.
#include <climits>

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kNone = INT_MAX;

struct Best {
  float value;
  int index;  // kNone: nothing seen yet
};

// Whether (v, i) beats b; NaN never does.
__device__ __forceinline__ bool beats(float v, int i, const Best& b) {
  if (v != v) return false;
  return b.index == kNone || v > b.value || (v == b.value && i < b.index);
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, b.index, offset);
    if (i != kNone && beats(v, i, b)) b = Best{v, i};
  }
  return b;
}

__global__ void argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
  allow_dependent_launch();
  grid_dependency_wait();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  Best b{0.0f, kNone};
  // Each thread visits its indices in increasing order, so a strict > keeps the first of equal values.
  if (vocab % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t j = threadIdx.x; j < vocab / 4; j += kThreads) {
      const float4 v = row4[j];
      const int i = static_cast<int>(j * 4);
      if (beats(v.x, i, b)) b = Best{v.x, i};
      if (beats(v.y, i + 1, b)) b = Best{v.y, i + 1};
      if (beats(v.z, i + 2, b)) b = Best{v.z, i + 2};
      if (beats(v.w, i + 3, b)) b = Best{v.w, i + 3};
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      if (beats(row[j], static_cast<int>(j), b)) b = Best{row[j], static_cast<int>(j)};
    }
  }
  __shared__ float values[kThreads / 32];
  __shared__ int indices[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  b = warp_best(b);
  if (lane == 0) {
    values[warp] = b.value;
    indices[warp] = b.index;
  }
  __syncthreads();
  if (warp == 0) {
    b = Best{values[lane], indices[lane]};  // kThreads / 32 == 32 warps
    b = warp_best(b);
    if (lane == 0) out[blockIdx.x] = b.index == kNone ? 0 : b.index;
  }
}

}  // namespace

cudaError_t argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, int32_t* out, cudaStream_t stream,
                        bool pdl) {
  if (num_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= kNone) return cudaErrorInvalidValue;
  return launch_kernel(argmax_kernel, dim3(static_cast<unsigned int>(num_rows)), dim3(kThreads), 0, stream, pdl,
                       logits, vocab, out);
}

}  // namespace tern::cuda
