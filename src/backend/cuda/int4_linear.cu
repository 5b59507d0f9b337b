// int4 weights (W4A16) at GEMM sizes: dequantize_int4_rows writes them out
// as bf16 for the largest steps' bf16 GEMM (one thread per 8 elements: a
// 4-byte load of codes, their block's scale and zero, one 16-byte store);
// int4_gemm multiplies them on the tensor cores with the codes turned into
// bf16 in shared memory, a quarter of the weight bytes read.
#include <algorithm>
#include <cstdint>

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


namespace {

// ---- int4_gemm: W4A16 on the tensor cores ----------------------------------------------------------------
//
// A block computes a tile of kRows weight rows (outputs) x BT tokens over its slice of K, in stages of
// kStageK: cp.async brings each stage's codes, block scales and zeros and the tokens' inputs into a ring of
// kStages slots; each warp turns its 16 rows' codes into bf16 in a tile of its own (the dequantizer's values,
// bit for bit), and m16n8k16 takes the weights as A (rows: outputs) and the inputs as B (columns: tokens),
// both through ldmatrix. Shared-memory rows are 16-byte units XOR-swizzled by the row's low 3 bits, so the
// ldmatrix rows and the dequantizer's stores hit distinct banks.
constexpr int kInt4Rows = 64;      // weight rows a block: 4 warps x 16
constexpr int kInt4StageK = 128;   // K a stage: 4 int4 blocks of 32
constexpr int kInt4Stages = 3;
constexpr int kInt4Threads = 128;
constexpr int kInt4Units = kInt4StageK / 8;  // 16-byte units of a bf16 row of a stage

template <int BT>
struct Int4GemmSmem {
  static constexpr int kCodes = kInt4Rows * kInt4StageK / 2;  // 64 bytes a row
  static constexpr int kScales = kInt4Rows * 4 * 2;           // 4 fp16 a row
  static constexpr int kZeros = kInt4Rows * 4;                // 4 bytes a row
  static constexpr int kX = BT * kInt4StageK * 2;
  static constexpr int kStage = kCodes + kScales + kZeros + kX;
  static constexpr int kWeights = kInt4Rows * kInt4StageK * 2;  // the warps' bf16 tiles
  static constexpr int kBytes = kInt4Stages * kStage + kWeights;
};

// The unit's bits 0-2 flipped by the row's low 3 bits, and bit 2 also by the unit's bit 3: 8 rows at one
// unit land in 8 distinct bank groups, and so do the dequantizer's 8 stores (rows 4 i .. 4 i + 3, at a unit u of
// the first half and u + 8).
__device__ __forceinline__ int int4_swizzle(int row, int unit) { return unit ^ (row & 7) ^ ((unit & 8) >> 1); }

// cp.async of 16, 8 or 4 bytes; src_bytes 0 fills the destination with zeros (rows past the matrix).
template <int Bytes>
__device__ __forceinline__ void copy_async_zfill(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(smem_addr(smem)), "l"(gmem), "n"(Bytes),
                 "r"(src_bytes)
                 : "memory");
  }
}

// ldmatrix.x4 (sm_75+): four 8x8 matrices of b16, lane l naming the 16-byte row l % 8 of matrix l / 8; lane
// (g = l / 4, c = l % 4) gets elements (g, 2c) and (g, 2c + 1) of each.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row))
               : "memory");
}

struct Int4GemmArgs {
  const bf16* x;
  int64_t T, K, N;
  Int4Weights w;
  void* y;
  GemvOutput out;
  int64_t k_steps;  // K / kInt4StageK
  float* partials;  // [gridDim.z][T][N] when gridDim.z > 1
  int* counters;    // one a tile when gridDim.z > 1
};

__device__ __forceinline__ void int4_store(const Int4GemmArgs& a, int64_t t, int64_t n, float v) {
  const int64_t at = t * a.N + n;
  if (a.out == GemvOutput::kBf16) {
    store_bf16(static_cast<bf16*>(a.y) + at, v);
  } else if (a.out == GemvOutput::kAddF32) {
    static_cast<float*>(a.y)[at] += v;
  } else {
    static_cast<float*>(a.y)[at] = v;
  }
}

template <int BT>
__global__ void __launch_bounds__(kInt4Threads) int4_gemm_kernel(Int4GemmArgs a) {
  using S = Int4GemmSmem<BT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kInt4Rows, t0 = static_cast<int64_t>(blockIdx.y) * BT;
  const int splits = gridDim.z, z = blockIdx.z;
  const int64_t step_begin = a.k_steps * z / splits, step_end = a.k_steps * (z + 1) / splits;
  const int64_t steps = step_end - step_begin;
  const int64_t row_codes = a.K / 2, row_blocks = a.K / 32;

  const auto slot = [&](int s) { return smem + s * S::kStage; };
  const auto load_stage = [&](int64_t step, int s) {
    unsigned char* base = slot(s);
    const int64_t k0 = (step_begin + step) * kInt4StageK;
    // Codes: 4 units a row.
#pragma unroll
    for (int i = 0; i < kInt4Rows * 4 / kInt4Threads; ++i) {
      const int u = tid + i * kInt4Threads, r = u / 4, part = u % 4;
      const bool valid = n0 + r < a.N;
      const uint8_t* src = a.w.codes + (valid ? (n0 + r) * row_codes + k0 / 2 + part * 16 : 0);
      copy_async_zfill<16>(base + r * 64 + part * 16, src, valid);
    }
    // Scales (8 bytes a row) by the first 64 threads, zeros (4) by the others.
    const int r = tid % kInt4Rows;
    const bool valid = n0 + r < a.N;
    const int64_t block = valid ? (n0 + r) * row_blocks + k0 / 32 : 0;
    if (tid < kInt4Rows) {
      copy_async_zfill<8>(base + S::kCodes + r * 8, a.w.scales + block, valid);
    } else {
      copy_async_zfill<4>(base + S::kCodes + S::kScales + r * 4, a.w.zeros + block, valid);
    }
    // Inputs: kInt4Units units a token.
    unsigned char* xs = base + S::kCodes + S::kScales + S::kZeros;
#pragma unroll
    for (int i = 0; i < BT * kInt4Units / kInt4Threads; ++i) {
      const int u = tid + i * kInt4Threads, t = u / kInt4Units, unit = u % kInt4Units;
      const bool ok = t0 + t < a.T;
      const bf16* src = a.x + (ok ? (t0 + t) * a.K + k0 + unit * 8 : 0);
      copy_async_zfill<16>(xs + (t * kInt4Units + int4_swizzle(t, unit)) * 16, src, ok);
    }
  };

  // The warp's 16 rows as bf16: lane l makes row l / 2's half l % 2 (two int4 blocks).
  unsigned char* wtile = smem + kInt4Stages * S::kStage + warp * 16 * kInt4StageK * 2;
  const auto dequantize = [&](int s) {
    const unsigned char* base = slot(s);
    const int r = lane / 2, row = warp * 16 + r, half = lane % 2;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int blk = half * 2 + b;
      const uint4 codes = *reinterpret_cast<const uint4*>(base + row * 64 + blk * 16);
      const uint32_t dz = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(base + S::kCodes)[row * 4 + blk]) |
                          (static_cast<uint32_t>((base + S::kCodes + S::kScales)[row * 4 + blk]) << 16);
      const float bias = int4_bias(dz), d = int4_scale(dz);
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // 8 weights of word i: one 16-byte unit
        const uint32_t c = word(codes, i);
        uint32_t pairs[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          pairs[j] = pack_bf16x2(int4_minus_zero(c, 2 * j, bias) * d, int4_minus_zero(c, 2 * j + 1, bias) * d);
        }
        const int unit = blk * 4 + i;
        *reinterpret_cast<uint4*>(wtile + (r * kInt4Units + int4_swizzle(r, unit)) * 16) =
            make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
      }
    }
  };

  float acc[BT / 8][4];
#pragma unroll
  for (int j = 0; j < BT / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

#pragma unroll
  for (int s = 0; s < kInt4Stages - 1; ++s) {
    if (s < steps) load_stage(s, s);
    commit_async();
  }
  for (int64_t kt = 0; kt < steps; ++kt) {
    wait_async<kInt4Stages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1's slot is free
    const int64_t next = kt + kInt4Stages - 1;
    if (next < steps) load_stage(next, static_cast<int>(next % kInt4Stages));
    commit_async();
    const int s = static_cast<int>(kt % kInt4Stages);
    __syncwarp();  // the warp's reads of its tile (the stage before) are done
    dequantize(s);
    __syncwarp();
    const unsigned char* xs = slot(s) + S::kCodes + S::kScales + S::kZeros;
#pragma unroll
    for (int j = 0; j < kInt4StageK / 16; ++j) {
      uint32_t af[4];
      const int ar = (lane & 7) + 8 * ((lane >> 3) & 1);
      ldmatrix_x4(af, wtile + (ar * kInt4Units + int4_swizzle(ar, 2 * j + (lane >> 4))) * 16);
#pragma unroll
      for (int p = 0; p < BT / 16; ++p) {
        uint32_t bf[4];
        const int t = 16 * p + (lane & 7) + 8 * (lane >> 4);
        ldmatrix_x4(bf, xs + (t * kInt4Units + int4_swizzle(t, 2 * j + ((lane >> 3) & 1))) * 16);
        mma_bf16(acc[2 * p], af[0], af[1], af[2], af[3], bf[0], bf[1]);
        mma_bf16(acc[2 * p + 1], af[0], af[1], af[2], af[3], bf[2], bf[3]);
      }
    }
  }
  wait_async<0>();

  // acc[j]: rows (outputs) g, g + 8 of the warp's 16; columns (tokens) 8 j + 2 c, + 1.
  const int g = lane / 4, c = lane % 4;
  const int64_t row0 = n0 + warp * 16 + g;
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < BT / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t n = row0 + (e >= 2 ? 8 : 0), t = t0 + 8 * j + 2 * c + (e & 1);
        if (n < a.N && t < a.T) int4_store(a, t, n, acc[j][e]);
      }
    }
    return;
  }
  float* part = a.partials + static_cast<int64_t>(z) * a.T * a.N;
#pragma unroll
  for (int j = 0; j < BT / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t n = row0 + (e >= 2 ? 8 : 0), t = t0 + 8 * j + 2 * c + (e & 1);
      if (n < a.N && t < a.T) __stcg(part + t * a.N + n, acc[j][e]);
    }
  }
  // The tile's last split to finish sums the partials in split order (the same bits whichever finishes last).
  // A thread takes kRun outputs at once and issues the loads of kSlices slices of each before adding them, so
  // the L2 round trips overlap instead of following each other.
  if (!last_split_to_arrive(a.counters + blockIdx.y * gridDim.x + blockIdx.x, splits)) return;
  constexpr int kRun = 4, kSlices = 8;
  const int64_t slice = a.T * a.N;
  for (int e0 = tid; e0 < kInt4Rows * BT; e0 += kInt4Threads * kRun) {
    const float* at[kRun];
    bool valid[kRun];
    float sum[kRun];
#pragma unroll
    for (int r = 0; r < kRun; ++r) {
      const int e = e0 + r * kInt4Threads;
      const int64_t n = n0 + e % kInt4Rows, t = t0 + e / kInt4Rows;
      valid[r] = e < kInt4Rows * BT && n < a.N && t < a.T;
      at[r] = a.partials + (valid[r] ? t * a.N + n : 0);
      sum[r] = 0.0f;
    }
    for (int s0 = 0; s0 < splits; s0 += kSlices) {
      float v[kRun][kSlices];
#pragma unroll
      for (int r = 0; r < kRun; ++r) {
#pragma unroll
        for (int j = 0; j < kSlices; ++j) {
          v[r][j] = valid[r] && s0 + j < splits ? __ldcg(at[r] + (s0 + j) * slice) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < kRun; ++r) {
#pragma unroll
        for (int j = 0; j < kSlices; ++j) {
          if (s0 + j < splits) sum[r] += v[r][j];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRun; ++r) {
      if (valid[r]) {
        const int e = e0 + r * kInt4Threads;
        int4_store(a, t0 + e / kInt4Rows, n0 + e % kInt4Rows, sum[r]);
      }
    }
  }
}

// The kernels' shared memory past 48 KiB, asked for once a process (before any graph capture where the
// model calls int4_gemm_prepare at load).
cudaError_t opt_in_shared_memory() {
  static const cudaError_t opted = [] {
    const cudaError_t a = cudaFuncSetAttribute(int4_gemm_kernel<32>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               Int4GemmSmem<32>::kBytes);
    return a != cudaSuccess ? a
                            : cudaFuncSetAttribute(int4_gemm_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   Int4GemmSmem<64>::kBytes);
  }();
  return opted;
}

template <int BT>
cudaError_t launch_int4_gemm(const Int4GemmArgs& a, int splits, cudaStream_t stream) {
  const int bytes = Int4GemmSmem<BT>::kBytes;
  if (const cudaError_t e = opt_in_shared_memory(); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((a.N + kInt4Rows - 1) / kInt4Rows), static_cast<unsigned>((a.T + BT - 1) / BT),
                  static_cast<unsigned>(splits));
  int4_gemm_kernel<BT><<<grid, kInt4Threads, bytes, stream>>>(a);
  return cudaGetLastError();
}

// Tokens a block takes for T tokens, and the tiles of a T x N output.
int64_t int4_tile_tokens(int64_t T) { return T <= 32 ? 32 : 64; }
int64_t int4_tiles(int64_t T, int64_t N) {
  const int64_t bt = int4_tile_tokens(T);
  return ((N + kInt4Rows - 1) / kInt4Rows) * ((T + bt - 1) / bt);
}

}  // namespace

cudaError_t int4_gemm_prepare() { return opt_in_shared_memory(); }

bool int4_gemm_takes(int64_t K, const Int4Weights& w) {
  const auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  return K > 0 && K % kInt4StageK == 0 && aligned(w.codes, 16) && aligned(w.scales, 8) && aligned(w.zeros, 4);
}

int int4_gemm_splits(int64_t T, int64_t K, int64_t N, int sm_count, const Int4GemmScratch& scratch) {
  if (T <= 0 || N <= 0 || K < kInt4StageK) return 1;
  const int64_t tiles = int4_tiles(T, N);
  const int64_t target = 2 * static_cast<int64_t>(std::max(sm_count, 1));  // two blocks an SM fit
  if (tiles >= target || tiles > scratch.num_counters) return 1;
  int64_t splits = std::min({(target + tiles - 1) / tiles, K / kInt4StageK, int64_t{kInt4MaxSplits}});
  while (splits > 1 && static_cast<size_t>(splits * T * N) > scratch.partial_floats) --splits;
  return static_cast<int>(splits);
}

cudaError_t int4_gemm(const bf16* x, int64_t T, int64_t K, const Int4Weights& w, int64_t N, void* y, GemvOutput out,
                      int splits, const Int4GemmScratch& scratch, cudaStream_t stream) {
  if (T <= 0 || N <= 0) return cudaSuccess;
  if (!int4_gemm_takes(K, w) || out == GemvOutput::kQkvRope || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      splits < 1 || splits > K / kInt4StageK) {
    return cudaErrorInvalidValue;
  }
  if (splits > 1 &&
      (int4_tiles(T, N) > scratch.num_counters || static_cast<size_t>(splits * T * N) > scratch.partial_floats)) {
    return cudaErrorInvalidValue;
  }
  const Int4GemmArgs a{x, T, K, N, w, y, out, K / kInt4StageK, scratch.partials, scratch.counters};
  return int4_tile_tokens(T) == 32 ? launch_int4_gemm<32>(a, splits, stream)
                                    : launch_int4_gemm<64>(a, splits, stream);
}

}  // namespace tern::cuda
