// Device-side helpers shared by the kernels: bf16 loads and stores as fp32,
// warp and block reductions. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/kernels.h"

namespace tern::cuda {

__device__ __forceinline__ float load_bf16(const bf16* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}

__device__ __forceinline__ void store_bf16(bf16* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
}

// The low and high bf16 of a 32-bit word of two, as fp32; v rounded to bf16 and back.
__device__ __forceinline__ float lo_bf16(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// d += A B on the tensor cores: m16n8k16, A row-major (a0..a3: rows g and
// g + 8, columns 2c, 2c + 1 and 8 + 2c, 8 + 2c + 1 for lane 4g + c), B
// column-major (b0, b1: rows 2c, 2c + 1 and 8 + 2c, 8 + 2c + 1 of column g),
// fp32 accumulators d (rows g, g + 8; columns 2c, 2c + 1). sm_80 and later.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The transpose of an 8 x 8 tile of 16-bit values held as MMA fragments (lane 4 r + c: row r,
// columns 2c and 2c + 1 in its low and high halves): each lane gets the same place of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t v) {
  uint32_t t = v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(t) : "r"(v));
#endif
  return t;
}

// A block of split `counter` names: whether it is the last of `splits` to
// get here, every thread told (CUDA's threadFenceReduction pattern: the
// block's global writes published, counted, and the last block's later
// reads ordered after them). The last one resets the counter for the next
// launch. Every thread of the block calls it.
__device__ __forceinline__ bool last_split_to_arrive(int* counter, int splits) {
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(counter, 1);
    is_last = arrived == splits - 1;
    if (is_last) *counter = 0;
  }
  __syncthreads();
  if (is_last) __threadfence();
  return is_last;
}

// 2^x on the special-function unit (PTX ex2.approx.ftz: relative error near
// 2^-22, results below 2^-126 flush to zero), one instruction where exp2f
// adds a range fix-up for such results.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as bf16 (round to nearest even) in one word, a in the low half (the lower address).
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Interleaved RoPE of one pair held as a bf16x2 word (a = dim 2i in the low
// half, b = dim 2i + 1), rotated by (c, s) = cos/sin of its angle, rounded
// back to bf16. rope_store_kv and the decode attention's fused form both
// use it, so they agree bit for bit (the GEMV path and the decode kernel
// rotate their fp32 dot products before rounding, not bf16 values).
__device__ __forceinline__ float2 rope_pair_f32(uint32_t ab, float c, float s) {
  const float a = lo_bf16(ab), b = hi_bf16(ab);
  return make_float2(fmaf(a, c, -b * s), fmaf(b, c, a * s));
}
__device__ __forceinline__ uint32_t rope_pair(uint32_t ab, float c, float s) {
  const float2 r = rope_pair_f32(ab, c, s);
  return pack_bf16x2(r.x, r.y);
}

// ---- The KV cache's element types: bf16 or FP8 E4M3 (uint8_t). Kernels
// take the element type as a template parameter and reach the planes
// through these, so the bf16 instantiation compiles to what it was.
using fp8e4m3 = uint8_t;

template <typename Cache>
__device__ __forceinline__ Cache* k_plane(const KvPlanes& p) {
  if constexpr (sizeof(Cache) == 1) {
    return p.k_fp8;
  } else {
    return p.k_cache;
  }
}
template <typename Cache>
__device__ __forceinline__ Cache* v_plane(const KvPlanes& p) {
  if constexpr (sizeof(Cache) == 1) {
    return p.v_fp8;
  } else {
    return p.v_cache;
  }
}

// Two e4m3 (x in the low byte) as a bf16x2 word: exact (every e4m3 value is
// a bf16), through the hardware's e4m3x2 -> f16x2 conversion on sm_89+.
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x, f.y);
}
// Two floats as e4m3 (a in the low byte), round to nearest even, saturating
// at +-448 (cvt.rn.satfinite on sm_89+), NaN kept.
__device__ __forceinline__ uint16_t fp8x2_of(float a, float b) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// 8 e4m3 codes (8 bytes, the first in the low byte) as 8 bf16, exactly.
__device__ __forceinline__ uint4 e4m3x8_to_bf16(uint2 w) {
  return make_uint4(fp8x2_to_bf16x2(w.x & 0xffffu), fp8x2_to_bf16x2(w.x >> 16), fp8x2_to_bf16x2(w.y & 0xffffu),
                    fp8x2_to_bf16x2(w.y >> 16));
}
// 8 consecutive elements of a K/V row as 8 bf16 (16 bytes): one 16-byte
// load of bf16, or an 8-byte load of e4m3 converted exactly.
__device__ __forceinline__ uint4 load_kv8(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 load_kv8(const fp8e4m3* p) {
  return e4m3x8_to_bf16(*reinterpret_cast<const uint2*>(p));
}
// The same through L2 only (ld.global.cg), for K/V another block of the
// same launch may have written (L1 is not coherent).
__device__ __forceinline__ uint4 load_kv8_cg(const bf16* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint4 load_kv8_cg(const fp8e4m3* p) {
  return e4m3x8_to_bf16(__ldcg(reinterpret_cast<const uint2*>(p)));
}
// One K/V element as fp32.
__device__ __forceinline__ float load_kv(const bf16* p) { return load_bf16(p); }
__device__ __forceinline__ float load_kv(const fp8e4m3* p) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(*p), __NV_E4M3);
  return __half2float(*reinterpret_cast<const __half*>(&h));
}
// A pair of K/V elements (dims 2i, 2i + 1) from fp32 values: a bf16x2 word
// or an e4m3x2 half-word at element offset `at` (even) of the plane.
__device__ __forceinline__ void store_kv2(bf16* plane, int64_t at, float a, float b) {
  reinterpret_cast<uint32_t*>(plane + at)[0] = pack_bf16x2(a, b);
}
__device__ __forceinline__ void store_kv2(fp8e4m3* plane, int64_t at, float a, float b) {
  reinterpret_cast<uint16_t*>(plane + at)[0] = fp8x2_of(a, b);
}
// The same from a bf16x2 word as it is (bf16: copied; e4m3: rounded).
__device__ __forceinline__ void store_kv2(bf16* plane, int64_t at, uint32_t word2) {
  reinterpret_cast<uint32_t*>(plane + at)[0] = word2;
}
__device__ __forceinline__ void store_kv2(fp8e4m3* plane, int64_t at, uint32_t word2) {
  reinterpret_cast<uint16_t*>(plane + at)[0] = fp8x2_of(lo_bf16(word2), hi_bf16(word2));
}

// The maximum of v over the 4 lanes of an MMA fragment row (lanes 4g .. 4g + 3).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// One online-softmax round of an MMA accumulator's two rows (g and g + 8,
// log2 units): row_max holds this lane's maxima of the round's scores and
// is reduced over the row's 4 lanes; the running maxima m rise to include
// it, the sums l are rescaled, and corr gets the factor the row's output
// accumulators take.
__device__ __forceinline__ void mma_rows_rescale(float (&row_max)[2], float (&m)[2], float (&l)[2],
                                                 float (&corr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = quad_max(row_max[r]);
    const float m_new = fmaxf(m[r], row_max[r]);
    corr[r] = exp2f(m[r] - m_new);
    m[r] = m_new;
    l[r] *= corr[r];
  }
}

// The output accumulators of an MMA online softmax (o[h][j]: rows g in [0],
// [1], g + 8 in [2], [3]) times the rows' factors from mma_rows_rescale,
// skipped by a warp vote when no row of the warp moved its maximum (every
// factor is then 1, and a product with 1 changes nothing).
template <int H>
__device__ __forceinline__ void mma_rows_scale(float (&o)[H][8][4], const float (&corr)[2]) {
  if (!__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) return;
#pragma unroll
  for (int h = 0; h < H; ++h) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[h][j][0] *= corr[0];
      o[h][j][1] *= corr[0];
      o[h][j][2] *= corr[1];
      o[h][j][3] *= corr[1];
    }
  }
}

// A shared-memory pointer as the 32-bit address PTX's shared-space operands take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// cp.async (sm_80+): 16 bytes global -> shared without a register round trip,
// grouped by commit_async, waited for by wait_async<N> (at most N of this
// thread's groups still pending).
__device__ __forceinline__ void copy_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// K/V rows staged in shared memory for the MMA fragments: HD bf16 a row, no
// padding, their 16-byte units XOR-swizzled so the fragment loads hit distinct
// banks: K is read by rows g, g + 8 at unit 4 j + c, V by rows 2c, 2c + 1,
// 2c + 8, 2c + 9 at unit 8 h + g (g = lane / 4, c = lane % 4).
__device__ __forceinline__ int k_unit(int row, int unit) { return unit ^ ((row & 1) << 2); }
__device__ __forceinline__ int v_unit(int row, int unit) { return unit ^ (((row >> 1) & 3) << 1); }

// ldmatrix.x4.trans (sm_75+): four 8x8 matrices of b16, lane l naming the
// 16-byte row l % 8 of matrix l / 8; r[i] is matrix i transposed into an MMA
// fragment: lane (g = l / 4, c = l % 4) holds its elements (2c, g), (2c + 1, g).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row))
               : "memory");
}

// 32-bit word i of a 16-byte value.
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The argmax key of value v at index (kernels.h, argmax_rows): the float's
// bits as an unsigned number in the float's order (-0 counts as +0, as the
// host's > does; the caller leaves NaN out), then 2^32 - 1 - index, so the
// larger key is the larger value or, on ties, the lower index.
__device__ __forceinline__ uint64_t pick_key(float v, int64_t index) {
  const uint32_t u = __float_as_uint(v + 0.0f);
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. Uses 33 floats of shared memory.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int num_warps = static_cast<int>(blockDim.x >> 5);
    float s = lane < num_warps ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// Largest value over the block (blockDim.x a multiple of 32, at most 1024);
// every thread gets it. One barrier, so at most one call per kernel; a
// maximum is exact in any order.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  for (int w = 0; w < warps; ++w) v = fmaxf(v, partial[w]);
  return v;
}

// Lets Kernel take up to the device's opt-in shared memory per block; done
// once per kernel (the first call's device), so launches inside a CUDA graph
// capture make no attribute calls. A template on the kernel itself: every
// instantiation of a kernel template has the same type, so the once must
// be per function, not per type.
template <auto Kernel>
cudaError_t allow_large_smem() {
  static const cudaError_t once = [] {
    // The opt-in limit counts the kernel's static shared memory too.
    int device = 0, optin = 0;
    cudaFuncAttributes attributes{};
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, Kernel);
    if (e == cudaSuccess) {
      const int dynamic = optin - static_cast<int>(attributes.sharedSizeBytes);
      e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic);
    }
    return e;
  }();
  return once;
}

// Programmatic dependent launch (sm_90 and later; no-ops before). A kernel
// launched with pdl = true (launch_kernel below) may start while the kernel
// before it on the stream is still running: it may read only what no
// kernel writes (weights, step metadata) before grid_dependency_wait(),
// which returns once the previous kernel has finished and its writes are
// visible, and it writes nothing before that. allow_dependent_launch() lets
// the next kernel start early; each kernel here calls it on entry.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic
// dependent launch when pdl is set; returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

inline unsigned int blocks_for(int64_t n, int threads) {
  return static_cast<unsigned int>((n + threads - 1) / threads);
}

}  // namespace tern::cuda
