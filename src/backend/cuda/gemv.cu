// Decode-sized linear layers (up to kMaxGemvTokens tokens): a GEMM at these
// shapes is a pass over the weights, so the kernel is built around streaming
// W once at full bandwidth. One warp per output row (two for the fused
// q|k|v + RoPE form): each lane loads 8 bf16 of W per 16-byte load, several
// in flight; the first loads of the warp's next row are issued before the
// current row's reduction, and the first row's before the block builds its
// inputs (and, in a programmatic dependent launch, before the previous
// kernel has finished). The inputs (T rows of K values, bf16-rounded, held
// as fp32 so the inner loop has no conversions) sit in shared memory, made
// on the way in from the residual stream (RMSNorm) or the gate|up rows
// (SiLU * up), which removes those kernels from the decode step; the q|k|v
// form also does RoPE and the KV-cache write, which removes rope_store_kv.
// The LM head's form can also take the argmax of its rows (argmax_keys):
// each warp keeps its best row per token, the block's best goes to one
// atomicMax, which replaces a separate argmax kernel.
// FP8 weights (w_fp8, --quantization fp8) take the same kernel with 8-byte
// loads of 8 codes, twice as many in flight, converted in registers; each
// row's sums are multiplied by its scale before they are stored. int4
// weights (w_int4, W4A16) load 8 codes as 4 bytes with their block's scale
// and zero: each lane's 8 elements lie in one block of 32, so it sums
// (q - z) * x over them and multiplies by the block's scale once.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/int4_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kChunk = 32 * 8;  // elements of K one warp-wide load covers

// Per weight type (bf16 words, e4m3 codes or int4 codes): the load of the 8
// weights from element e = n * K + k on, and how many are in flight per lane.
template <typename W>
struct WeightLoad;
template <>
struct WeightLoad<bf16> {
  using Vec = uint4;
  static constexpr int kLoads = 8;
  static __device__ __forceinline__ Vec load(const GemvParams& p, int64_t e) {
    return __ldg(reinterpret_cast<const uint4*>(p.w + e));
  }
};
template <>
struct WeightLoad<uint8_t> {
  using Vec = uint2;
  static constexpr int kLoads = 16;
  static __device__ __forceinline__ Vec load(const GemvParams& p, int64_t e) {
    return __ldg(reinterpret_cast<const uint2*>(p.w_fp8 + e));
  }
};
template <>
struct WeightLoad<Int4Weights> {
  using Vec = Int4x8;
  static constexpr int kLoads = 16;
  static __device__ __forceinline__ Vec load(const GemvParams& p, int64_t e) { return load_int4x8(p.w_int4, e); }
};

__device__ __forceinline__ float dot8(const uint4 w, const float4 a, const float4 b, float acc) {
  acc = fmaf(lo_bf16(w.x), a.x, acc);
  acc = fmaf(hi_bf16(w.x), a.y, acc);
  acc = fmaf(lo_bf16(w.y), a.z, acc);
  acc = fmaf(hi_bf16(w.y), a.w, acc);
  acc = fmaf(lo_bf16(w.z), b.x, acc);
  acc = fmaf(hi_bf16(w.z), b.y, acc);
  acc = fmaf(lo_bf16(w.w), b.z, acc);
  acc = fmaf(hi_bf16(w.w), b.w, acc);
  return acc;
}
__device__ __forceinline__ float dot8(const uint2 w, const float4 a, const float4 b, float acc) {
  return dot8_e4m3(w, a, b, acc);
}
__device__ __forceinline__ float dot8(const Int4x8 w, const float4 a, const float4 b, float acc) {
  return dot8_int4(w, a, b, acc);
}

// Loads step k0 of the R consecutive rows n .. n + R - 1 (K elements each):
// lane covers k0 + u * kChunk + lane * 8 for u < U.
template <int R, int U, typename W, typename Vec>
__device__ __forceinline__ void load_step(const GemvParams& p, int64_t n, int K, int k0, int lane, Vec (&wv)[R][U]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = k0 + u * kChunk + lane * 8;
      wv[r][u] = k < K ? WeightLoad<W>::load(p, (n + r) * K + k) : Vec{};
    }
  }
}

template <int T, int R, int U, typename Vec>
__device__ __forceinline__ void compute_step(const Vec (&wv)[R][U], const float* xs, int K, int k0, int lane,
                                             float (&acc)[R][T]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * kChunk + lane * 8;
    if (k < K) {
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float4 a = *reinterpret_cast<const float4*>(xs + t * K + k);
        const float4 b = *reinterpret_cast<const float4*>(xs + t * K + k + 4);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] = dot8(wv[r][u], a, b, acc[r][t]);
      }
    }
  }
}

// Builds the T input rows of K values in shared memory (see GemvInput).
template <int T, GemvInput In>
__device__ __forceinline__ void build_input(const GemvParams& p, int K, float* xs) {
  const int k8 = K / 8;
  if constexpr (In == GemvInput::kBf16) {
    const uint4* src = reinterpret_cast<const uint4*>(p.x_bf16);
    for (int i = threadIdx.x; i < T * k8; i += kThreads) {
      const uint4 v = src[i];
      reinterpret_cast<float4*>(xs)[2 * i] = make_float4(lo_bf16(v.x), hi_bf16(v.x), lo_bf16(v.y), hi_bf16(v.y));
      reinterpret_cast<float4*>(xs)[2 * i + 1] = make_float4(lo_bf16(v.z), hi_bf16(v.z), lo_bf16(v.w), hi_bf16(v.w));
    }
  } else if constexpr (In == GemvInput::kSiluMul) {
    // Element for element as silu_mul (silu_mul.cu): bf16(g / (1 + e^-g) * u), fp32 math.
    for (int i = threadIdx.x; i < T * k8; i += kThreads) {
      const int t = i / k8, j = i - t * k8;
      const bf16* row = p.x_bf16 + static_cast<int64_t>(t) * 2 * K;
      const uint4 g = *reinterpret_cast<const uint4*>(row + j * 8);
      const uint4 u = *reinterpret_cast<const uint4*>(row + K + j * 8);
      const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
      float out[8];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float g0 = lo_bf16(gw[h]), g1 = hi_bf16(gw[h]);
        out[2 * h] = round_bf16(g0 / (1.0f + expf(-g0)) * lo_bf16(uw[h]));
        out[2 * h + 1] = round_bf16(g1 / (1.0f + expf(-g1)) * hi_bf16(uw[h]));
      }
      reinterpret_cast<float4*>(xs)[2 * i] = make_float4(out[0], out[1], out[2], out[3]);
      reinterpret_cast<float4*>(xs)[2 * i + 1] = make_float4(out[4], out[5], out[6], out[7]);
    }
  } else {
    // Warp t normalizes token t (T <= kWarps), as add_rmsnorm without a delta (its squares summed in
    // another order).
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < T) {
      const int64_t r = p.rows != nullptr ? p.rows[warp] : warp;
      const float4* xr = reinterpret_cast<const float4*>(p.x_f32 + r * K);
      const float4* wt = reinterpret_cast<const float4*>(p.norm_weight);
      float sum_sq = 0.0f;
      for (int j = lane; j < K / 4; j += 32) {
        const float4 v = xr[j];
        sum_sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      const float scale = 1.0f / sqrtf(warp_sum(sum_sq) / static_cast<float>(K) + p.eps);
      float4* dst = reinterpret_cast<float4*>(xs + warp * K);
      for (int j = lane; j < K / 4; j += 32) {
        const float4 v = xr[j], w = wt[j];
        dst[j] = make_float4(round_bf16(v.x * scale * w.x), round_bf16(v.y * scale * w.y),
                             round_bf16(v.z * scale * w.z), round_bf16(v.w * scale * w.w));
      }
    }
  }
}

// Writes token t's sums of rows n .. n + R - 1.
template <int R, GemvOutput Out>
__device__ __forceinline__ void store_rows(const GemvParams& p, int t, int64_t n, const float (&v)[R]) {
  const int64_t at = static_cast<int64_t>(t) * p.out_features + n;
  if constexpr (Out == GemvOutput::kBf16) {
    store_bf16(static_cast<bf16*>(p.y) + at, v[0]);
  } else if constexpr (Out == GemvOutput::kF32) {
    static_cast<float*>(p.y)[at] = v[0];
  } else if constexpr (Out == GemvOutput::kAddF32) {
    static_cast<float*>(p.y)[at] += v[0];
  } else {
    // The pair (n, n + 1) is dims (2i, 2i + 1) of a q, k or v head; as
    // rope_store_kv, into a bf16 or an FP8 pool (e4m3 rounded from the fp32
    // rotation).
    const int64_t q_dim = static_cast<int64_t>(p.heads.num_heads) * p.heads.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * p.heads.head_dim;
    const int64_t slot_at = static_cast<int64_t>(p.places.slots[t]) * kv_dim;
    const auto store_pair = [&](bf16* plane, fp8e4m3* plane8, int64_t off, float a, float b) {
      if (plane8 != nullptr) {
        store_kv2(plane8, slot_at + off, a, b);
      } else {
        store_bf16(plane + slot_at + off, a);
        store_bf16(plane + slot_at + off + 1, b);
      }
    };
    if (n >= q_dim + kv_dim) {  // v
      store_pair(p.planes.v_cache, p.planes.v_fp8, n - q_dim - kv_dim, v[R - 2], v[R - 1]);
      return;
    }
    const int i = static_cast<int>(n % p.heads.head_dim) / 2;
    float s, c;
    sincosf(p.places.inv_freq[i] * static_cast<float>(p.places.positions[t]), &s, &c);
    const float a = v[R - 2], b = v[R - 1];
    const float ra = a * c - b * s, rb = b * c + a * s;
    if (n < q_dim) {
      store_bf16(static_cast<bf16*>(p.y) + at, ra);
      store_bf16(static_cast<bf16*>(p.y) + at + 1, rb);
    } else {
      store_pair(p.planes.k_cache, p.planes.k_fp8, n - q_dim, ra, rb);
    }
  }
}

template <int T, GemvInput In, GemvOutput Out, typename W>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams p) {
  constexpr int R = Out == GemvOutput::kQkvRope ? 2 : 1;  // rows per warp
  constexpr int U = WeightLoad<W>::kLoads / R;            // loads per row per step
  constexpr int kStep = kChunk * U;
  constexpr bool kScaled = std::is_same_v<W, uint8_t>;  // a scale per row (fp8); int4's are per block
  using Vec = typename WeightLoad<W>::Vec;
  allow_dependent_launch();
  extern __shared__ float4 smem_vec[];
  float* xs = reinterpret_cast<float*>(smem_vec);
  const int K = static_cast<int>(p.in_features);
  const int64_t N = p.out_features;  // a multiple of R
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps * R;
  int64_t n = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  __shared__ unsigned long long block_best[T];
  const bool argmax = Out == GemvOutput::kF32 && p.argmax_keys != nullptr;
  uint64_t best = 0;  // lane t: token t's best key among this warp's rows
  if (argmax && threadIdx.x < T) block_best[threadIdx.x] = 0;

  Vec wv[R][U];
  if (n < N) load_step<R, U, W>(p, n, K, 0, lane, wv);  // weights: no wait needed
  grid_dependency_wait();
  build_input<T, In>(p, K, xs);
  __syncthreads();

  for (; n < N; n += stride) {
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
    }
    for (int k0 = 0;;) {
      compute_step<T, R, U>(wv, xs, K, k0, lane, acc);
      k0 += kStep;
      if (k0 >= K) break;
      load_step<R, U, W>(p, n, K, k0, lane, wv);
    }
    if (n + stride < N) load_step<R, U, W>(p, n + stride, K, 0, lane, wv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float scale = kScaled ? __ldg(p.w_scale + n + r) : 1.0f;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        acc[r][t] = warp_sum(acc[r][t]);
        if constexpr (kScaled) acc[r][t] *= scale;
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (lane != t) continue;
      float v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = acc[r][t];
      store_rows<R, Out>(p, t, n, v);
      if (argmax && v[0] == v[0]) best = max(best, pick_key(v[0], n));
    }
  }
  if (argmax) {
    if (lane < T && best != 0) atomicMax(&block_best[lane], static_cast<unsigned long long>(best));
    __syncthreads();
    if (threadIdx.x < T && block_best[threadIdx.x] != 0) {
      atomicMax(reinterpret_cast<unsigned long long*>(p.argmax_keys) + threadIdx.x, block_best[threadIdx.x]);
    }
  }
}

// Blocks of this kernel that fit on one multiprocessor with `smem` bytes of
// inputs: the grid is one wave of them, rows strided over their warps.
template <int T, GemvInput In, GemvOutput Out, typename W>
int resident_blocks(size_t smem) {
  struct Limits {
    int regs = 0, regs_per_sm = 0, smem_per_sm = 0;
  };
  static const Limits lim = [] {
    Limits l;
    cudaFuncAttributes a{};
    int device = 0;
    if (cudaFuncGetAttributes(&a, gemv_kernel<T, In, Out, W>) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&l.regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&l.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
      cudaGetLastError();
      return Limits{};
    }
    l.regs = a.numRegs;
    return l;
  }();
  if (lim.regs <= 0) return 1;
  const int by_threads = 2048 / kThreads;
  const int by_regs = lim.regs_per_sm / (((lim.regs + 7) / 8 * 8) * kThreads);
  const int by_smem = lim.smem_per_sm / static_cast<int>(smem + 1024);  // 1 KiB reserved per block
  return std::max(1, std::min({by_threads, by_regs, by_smem}));
}

template <int T, GemvInput In, GemvOutput Out, typename W>
cudaError_t launch(const GemvParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  constexpr int R = Out == GemvOutput::kQkvRope ? 2 : 1;
  const size_t smem = static_cast<size_t>(T) * static_cast<size_t>(p.in_features) * sizeof(float);
  if (smem + 1024 > 48 * 1024) {  // the default limit counts the static shared memory too
    const cudaError_t e = allow_large_smem<gemv_kernel<T, In, Out, W>>();
    if (e != cudaSuccess) return e;
  }
  const int64_t row_blocks = (p.out_features / R + kWarps - 1) / kWarps;
  const int64_t wave = static_cast<int64_t>(resident_blocks<T, In, Out, W>(smem)) * (sm_count > 0 ? sm_count : 1);
  const auto grid = static_cast<unsigned int>(std::min(row_blocks, wave));
  return launch_kernel(gemv_kernel<T, In, Out, W>, dim3(grid), dim3(kThreads), smem, stream, pdl, p);
}

template <GemvInput In, GemvOutput Out, typename W>
cudaError_t dispatch_tokens(const GemvParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  switch (p.num_tokens) {
    case 1: return launch<1, In, Out, W>(p, sm_count, stream, pdl);
    case 2: return launch<2, In, Out, W>(p, sm_count, stream, pdl);
    case 3: return launch<3, In, Out, W>(p, sm_count, stream, pdl);
    case 4: return launch<4, In, Out, W>(p, sm_count, stream, pdl);
    case 5: return launch<5, In, Out, W>(p, sm_count, stream, pdl);
    case 6: return launch<6, In, Out, W>(p, sm_count, stream, pdl);
    case 7: return launch<7, In, Out, W>(p, sm_count, stream, pdl);
    case 8: return launch<8, In, Out, W>(p, sm_count, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool gemv_supported(int64_t in_features) {
  if (in_features <= 0 || in_features % 8 != 0 || in_features > INT_MAX / 2) return false;
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Less 1 KiB for the kernel's static shared memory (the argmax keys).
  return kMaxGemvTokens * in_features * static_cast<int64_t>(sizeof(float)) <= optin - 1024;
}

namespace {

template <typename W>
cudaError_t gemv_of(const GemvParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  using In = GemvInput;
  using Out = GemvOutput;
  // The combinations the model uses.
  if (p.input == In::kRmsNorm && p.output == Out::kBf16) {
    return dispatch_tokens<In::kRmsNorm, Out::kBf16, W>(p, sm_count, stream, pdl);
  }
  if (p.input == In::kRmsNorm && p.output == Out::kF32 && !std::is_same_v<W, Int4Weights>) {  // the LM head
    return dispatch_tokens<In::kRmsNorm, Out::kF32, W>(p, sm_count, stream, pdl);
  }
  if (p.input == In::kBf16 && p.output == Out::kAddF32) {
    return dispatch_tokens<In::kBf16, Out::kAddF32, W>(p, sm_count, stream, pdl);
  }
  if (p.input == In::kSiluMul && p.output == Out::kAddF32) {
    return dispatch_tokens<In::kSiluMul, Out::kAddF32, W>(p, sm_count, stream, pdl);
  }
  if (p.input == In::kBf16 && p.output == Out::kBf16) {
    return dispatch_tokens<In::kBf16, Out::kBf16, W>(p, sm_count, stream, pdl);
  }
  if (p.input == In::kRmsNorm && p.output == Out::kQkvRope) {
    const int64_t rows = (static_cast<int64_t>(p.heads.num_heads) + 2 * p.heads.num_kv_heads) * p.heads.head_dim;
    if (p.heads.head_dim <= 0 || p.heads.head_dim % 2 != 0 || p.out_features != rows) return cudaErrorInvalidValue;
    return dispatch_tokens<In::kRmsNorm, Out::kQkvRope, W>(p, sm_count, stream, pdl);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t gemv(const GemvParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0 || p.out_features <= 0) return cudaSuccess;
  if (p.num_tokens > kMaxGemvTokens || p.in_features <= 0 || p.in_features % 8 != 0 || p.in_features > INT_MAX / 2) {
    return cudaErrorInvalidValue;
  }
  if (p.w_fp8 != nullptr) {
    if (p.w_scale == nullptr) return cudaErrorInvalidValue;
    return gemv_of<uint8_t>(p, sm_count, stream, pdl);
  }
  if (p.w_int4.codes != nullptr) {
    if (p.w_int4.scales == nullptr || p.w_int4.zeros == nullptr || p.in_features % 32 != 0) {
      return cudaErrorInvalidValue;
    }
    return gemv_of<Int4Weights>(p, sm_count, stream, pdl);
  }
  return gemv_of<bf16>(p, sm_count, stream, pdl);
}

}  // namespace tern::cuda
