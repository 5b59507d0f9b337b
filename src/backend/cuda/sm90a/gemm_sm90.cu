// gemm_sm90.h's GEMM. Persistent CTAs take output tiles of BM x BN (BM 128
// or 64, BN 128 or 256; kSiluMul's tiles hold BN / 2 gate and BN / 2 up
// columns) in turn. Warpgroup 0's first thread loads 64-wide K slices of the
// x and W tiles with TMA (128-byte swizzle) into a ring of stages, each
// filled under an mbarrier that counts its bytes, running on into a CTA's
// next tile; each further warpgroup (two for BM 128, one for 64) takes 64
// rows of a tile and runs four wgmma m64nBNk16 per stage on the shared-memory
// tiles, keeping one stage's MMAs in flight and freeing the stage before (a
// second mbarrier per stage, one arrival per consumer warpgroup, in both CTAs
// of a cluster of two). The epilogue writes the accumulators into a
// shared-memory buffer that one thread stores (or adds) with TMA while its
// warpgroup goes on to the next tile.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemm_sm90.h"

namespace tern::cuda {
namespace {

// A stage holds 128 bytes of K a row: 64 bf16 or 128 e4m3 codes.
constexpr int kRowBytes = 128;

// Bytes of an output element of epilogue E.
[[maybe_unused]] __host__ __device__ constexpr int out_elem_bytes(Sm90Epilogue e) {
  return e == Sm90Epilogue::kBf16 || e == Sm90Epilogue::kSiluMul ? 2 : 4;
}

// A tile of BM x BN products through epilogue E. BM 128: two consumer warpgroups of 64 rows each; 64: one,
// for row counts whose 128-row tiles leave SMs idle. BN 128 or 256 (bf16 only: 128 accumulators a thread,
// and the e4m3 form's per-stage sums would need as many again); W's BN rows of a stage come as two boxes of
// BN / 2. The outputs leave through a buffer of their own in shared memory (boxes of 64 rows x 128 bytes,
// the 128-byte swizzle) that TMA stores from while the consumers go on to their next tile.
template <Sm90Epilogue E, int BM, int BN>
struct Tile {
  static constexpr int kConsumers = BM / 64, kThreads = 128 * (1 + kConsumers);
  static constexpr int kATileBytes = BM * kRowBytes, kBTileBytes = BN * kRowBytes;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kOutCols = E == Sm90Epilogue::kSiluMul ? BN / 2 : BN;  // output columns a tile
  static constexpr int kOutBoxes = kOutCols * out_elem_bytes(E) / 128;         // 128-byte boxes a 64-row part
  static constexpr int kOutBytes = BM * kOutCols * out_elem_bytes(E);
  // Two CTAs an SM for 64 x 128 tiles, else one; as many stages as fit beside the output buffer, at most 5.
  static constexpr int kPerSm = BM == 64 && BN == 128 ? 2 : 1;
  static constexpr int kBudget = 232448 / kPerSm - 1024 - 128;
  static constexpr int kStages = (kBudget - kOutBytes) / kStageBytes < 5 ? (kBudget - kOutBytes) / kStageBytes : 5;
  static_assert(kStages >= 2 && kOutBoxes >= 1);
  // The stages and the output buffer (1,024-byte aligned, as the 128-byte swizzle's pattern is), then
  // 2 x kStages mbarriers.
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kOutBytes + 2 * kStages * 8;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}

// One arrival on the barrier at bar's offset in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t rank) {
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The box at (inner coordinate c0, row c1) of `map` into dst, counted on bar.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// The same box into dst and bar's offsets in the shared memory of each CTA of the cluster in cta_mask.
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                   uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// The box at (c0, c1) of `map` from src (shared memory): stored, or added into global memory (fp32).
template <bool Add>
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* src, int c0, int c1) {
  if constexpr (Add) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(smem_u32(src))
        : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(smem_u32(src))
                 : "memory");
  }
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// This thread's bulk stores have read their shared memory (Read) or are done.
template <bool Read>
__device__ __forceinline__ void bulk_wait_all() {
  if constexpr (Read) {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

// The 128 threads of consumer warpgroup c (named barrier 1 + c).
__device__ __forceinline__ void warpgroup_sync(int c) { asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory"); }

// A K-major operand tile in shared memory with TMA's 128-byte swizzle: rows of
// 128 bytes, 8-row groups 1,024 bytes apart (the stride offset), the leading
// offset unused for this layout.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// d (+)= A[64 x 16] B[16 x 128] from the two descriptors; scale_d 0 starts the sums.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b, uint32_t scale_d) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d (+)= A[64 x 16] B[16 x 256]: the 256-column tiles' instruction.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b, uint32_t scale_d) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(scale_d));
}

// The same for e4m3 codes, 32 of K an instruction (K-major operands only: no transpose immediates).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t a, uint64_t b, uint32_t scale_d) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(scale_d));
}

// Keeps the compiler from moving reads of the accumulators above the wait.
template <int A>
__device__ __forceinline__ void fence_accumulators(float (&d)[A]) {
#pragma unroll
  for (int i = 0; i < A; ++i) asm volatile("" : "+f"(d[i])::"memory");
}


// Writes the epilogue's outputs of consumer warpgroup thread t into `out`, the warpgroup's 64-row part of
// the output buffer (Tile::kOutBoxes boxes of 64 rows x 128 bytes, each with the 128-byte swizzle: row r's
// 16-byte unit u at r * 128 + (u ^ r % 8) * 16, so a warp's stores fall in distinct banks). row_base: the
// part's first row of x; tile_n: the tile's column.
template <Sm90Epilogue E, int BM, int BN, bool F8>
__device__ __forceinline__ void stage_tile(const float (&d)[BN / 2], uint8_t* out, int M, int row_base, int tile_n,
                                           int t, int b_step, int b_second, const float* xs, const float* ws) {
  constexpr int kHalf = BN / 16;  // column groups of 8 in each of the tile's two W boxes
  constexpr int kElem = out_elem_bytes(E);
  // d[4j + 2i + e] is row 16 w + lane / 4 + 8 i, column 8 j + 2 (lane % 4) + e of the warpgroup's 64 x BN.
  const int w = t / 32, lane = t % 32;
  const int r0 = w * 16 + lane / 4, col0 = 2 * (lane % 4);
  // F8: the scales of accumulator row i's x row and of accumulator column 8 j + col0's W row (and the next).
  float x_scale[2] = {1.0f, 1.0f};
  if constexpr (F8) {
#pragma unroll
    for (int i = 0; i < 2; ++i) x_scale[i] = row_base + r0 + 8 * i < M ? __ldg(xs + row_base + r0 + 8 * i) : 0.0f;
  }
  const auto w_scale = [&](int j) {
    if constexpr (F8) {
      // The tile's first BN / 2 W rows start at tile_n * b_step, the next b_second rows further.
      const int wrow = tile_n * b_step + (j < kHalf ? 8 * j : b_second + 8 * (j - kHalf)) + col0;
      return __ldg(reinterpret_cast<const float2*>(ws + wrow));
    } else {
      (void)j;
      (void)tile_n;
      return make_float2(1.0f, 1.0f);
    }
  };
  // Output columns x, x + 1 of row r.
  const auto put = [&](int r, int x, float v0, float v1) {
    const int byte = x * kElem;
    uint8_t* p = out + (byte / 128) * (64 * 128) + r * 128 + ((((byte % 128) / 16) ^ (r % 8)) * 16) + byte % 16;
    if constexpr (kElem == 2) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
    } else {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    }
  };
  if constexpr (E == Sm90Epilogue::kSiluMul) {
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const float2 gs = w_scale(j), us = w_scale(j + kHalf);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float g = d[4 * j + 2 * i + e], u = d[4 * (j + kHalf) + 2 * i + e];
          if constexpr (F8) {
            g = g * x_scale[i] * (e == 0 ? gs.x : gs.y);
            u = u * x_scale[i] * (e == 0 ? us.x : us.y);
          }
          g = round_bf16(g);
          u = round_bf16(u);
          v[e] = g / (1.0f + expf(-g)) * u;
        }
        put(r0 + 8 * i, 8 * j + col0, v[0], v[1]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2 * kHalf; ++j) {
      const float2 sw = w_scale(j);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v0 = d[4 * j + 2 * i], v1 = d[4 * j + 2 * i + 1];
        if constexpr (F8) {
          v0 = v0 * x_scale[i] * sw.x;
          v1 = v1 * x_scale[i] * sw.y;
        }
        put(r0 + 8 * i, 8 * j + col0, v0, v1);
      }
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// b_step: W rows a tile's columns advance by; b_second: the row offset of the
// tile's second BN / 2 W rows from its first (BN / 2, or I for kSiluMul's up rows).
// ty: y's tensor map (64-row boxes of 128 bytes). F8: x and W as e4m3 codes,
// each sum scaled by its row's xs and its W row's ws as it leaves the
// accumulators, else bf16 (xs, ws unused).
// Persistent: the CTAs take units u = b, b + (CTAs), ... of the n_tiles-wide grid of output tiles (columns
// fastest); the producer runs on into the next unit's stages while the consumers finish a tile and store
// it, so only a CTA's first tile waits for its loads. CM: the CTAs of a cluster, along the rows (1 or 2). A
// unit is CM row tiles of one column; in clusters of two, the pair shares the unit's W tile: each CTA loads
// one of its two W boxes and multicasts it to both, so a stage reads half of W's bytes from L2, and a stage
// is free again once the consumers of both CTAs have released it.
template <Sm90Epilogue E, int BM, int BN, bool F8, int CM>
__global__ void __launch_bounds__(Tile<E, BM, BN>::kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                     const __grid_constant__ CUtensorMap ty, int M, int K, int b_step, int b_second, int n_tiles,
                     int units, const float* xs, const float* ws) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<E, BM, BN>;
  static_assert((BN == 128 || (BN == 256 && !F8)) && (CM == 1 || CM == 2));
  constexpr int kStages = T::kStages, kATileBytes = T::kATileBytes, kStageBytes = T::kStageBytes;
  constexpr int kAcc = BN / 2;  // accumulators a thread
  constexpr int kBK = F8 ? kRowBytes : kRowBytes / 2;  // K elements a stage
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* out = smem + kStages * kStageBytes;  // the output buffer
  uint64_t* full = reinterpret_cast<uint64_t*>(out + T::kOutBytes);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  const uint32_t rank = CM == 2 ? cluster_rank() : 0;
  const int first = blockIdx.x / CM, step = gridDim.x / CM;  // this CTA's (cluster's) first unit, the stride
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, T::kConsumers * CM);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (CM == 2) {
    cluster_sync();  // the peer's barriers are initialized before anything reaches them
  } else {
    __syncthreads();
  }

  // g counts the stages this CTA has filled (producer) or read (consumers) over all its tiles: ring slot
  // g % kStages, in its (g / kStages)-th round.
  if (wg == 0) {  // the producer
    // 256-column tiles: the producer gives registers to the consumers (their 128 accumulators a thread).
    if constexpr (BN == 256) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (t == 0) {
      int g = 0;
      for (int u = first; u < units; u += step) {
        const int m0 = ((u / n_tiles) * CM + static_cast<int>(rank)) * BM, n0 = (u % n_tiles) * b_step;
        for (int kt = 0; kt < k_tiles; ++kt, ++g) {
          const int s = g % kStages;
          if (g >= kStages) mbar_wait(empty + s, ((g / kStages) - 1) & 1);
          uint8_t* a = smem + s * kStageBytes;
          uint8_t* b = a + kATileBytes;
          mbar_expect_tx(full + s, kStageBytes);  // with CM 2, half of W's bytes come from the peer's load
          tma_load(a, &ta, full + s, kt * kBK, m0);
          if constexpr (CM == 2) {
            tma_load_multicast(b + rank * (T::kBTileBytes / 2), &tb, full + s, kt * kBK, n0 + (rank ? b_second : 0),
                               0x3);
          } else {
            tma_load(b, &tb, full + s, kt * kBK, n0);
            tma_load(b + T::kBTileBytes / 2, &tb, full + s, kt * kBK, n0 + b_second);
          }
        }
      }
    }
    if constexpr (CM == 2) cluster_sync();  // nothing leaves while the peer may still reach this CTA
    return;
  }

  if constexpr (BN == 256) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int c = wg - 1;  // this warpgroup's 64 rows of each tile
  // Stage s is read: one arrival from this warpgroup on its empty barrier, in both CTAs of a pair.
  const auto release = [&](int s) {
    if (t != 0) return;
    mbar_arrive(empty + s);
    if constexpr (CM == 2) mbar_arrive_remote(empty + s, rank ^ 1);
  };
  // Waits for stage g's bytes; its ring slot, and this warpgroup's descriptors of the x and W tiles there.
  const auto enter_stage = [&](int g, uint64_t& da, uint64_t& db) {
    const int s = g % kStages;
    mbar_wait(full + s, (g / kStages) & 1);
    const uint8_t* stage = smem + s * kStageBytes;
    da = smem_desc(stage + c * (64 * kRowBytes));
    db = smem_desc(stage + kATileBytes);
    wgmma_fence();
    return s;
  };
  int g = 0;
  for (int u = first; u < units; u += step) {
    float d[kAcc];
    if constexpr (F8) {
      // The FP8 tensor cores keep fewer bits than fp32 in their sums: each stage's 128 codes of K are summed
      // on their own and added into d in fp32, so the error does not grow with K.
#pragma unroll
      for (int i = 0; i < 64; ++i) d[i] = 0.0f;
      float p[64];
      for (int kt = 0; kt < k_tiles; ++kt, ++g) {
        uint64_t da = 0, db = 0;
        const int s = enter_stage(g, da, db);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_m64n128k32_e4m3(p, da + 2 * kk, db + 2 * kk, kk > 0 ? 1u : 0u);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(p);
        release(s);
#pragma unroll
        for (int i = 0; i < 64; ++i) d[i] += p[i];
      }
    } else {
      for (int kt = 0; kt < k_tiles; ++kt, ++g) {
        uint64_t da = 0, db = 0;
        enter_stage(g, da, db);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          // Each instruction takes 32 bytes of K (16 bf16): the descriptors' start address moves by 2 units
          // of 16 bytes. The first starts the sums (scale_d 0).
          if constexpr (BN == 256) {
            wgmma_m64n256k16(d, da + 2 * kk, db + 2 * kk, (kt > 0 || kk > 0) ? 1u : 0u);
          } else {
            wgmma_m64n128k16(d, da + 2 * kk, db + 2 * kk, (kt > 0 || kk > 0) ? 1u : 0u);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the stage before this one is read
        if (kt > 0) release((g - 1) % kStages);
      }
      wgmma_wait<0>();
      fence_accumulators(d);
      release((g - 1) % kStages);
    }
    // The outputs go through this warpgroup's part of the output buffer, once the store of its last tile
    // has read it; one thread then stores (or, for kAddF32, adds) them with TMA, which clips the tile at y's
    // edges, while the warpgroup goes on.
    constexpr int kPart = T::kOutBytes / T::kConsumers, kBoxCols = 128 / out_elem_bytes(E);
    uint8_t* part = out + c * kPart;
    const int tile_m = (u / n_tiles) * CM + static_cast<int>(rank), tile_n = u % n_tiles;
    const int row_base = tile_m * BM + c * 64;
    if (t == 0) bulk_wait_all<true>();
    warpgroup_sync(c);
    stage_tile<E, BM, BN, F8>(d, part, M, row_base, tile_n, t, b_step, b_second, xs, ws);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes, seen by the bulk copies
    warpgroup_sync(c);
    if (t == 0) {
#pragma unroll
      for (int b = 0; b < T::kOutBoxes; ++b) {
        tma_store<E == Sm90Epilogue::kAddF32>(&ty, part + b * (64 * 128), tile_n * T::kOutCols + b * kBoxCols,
                                              row_base);
      }
      bulk_commit();
    }
  }
  if (t == 0) bulk_wait_all<false>();  // the stores are done before the CTA's shared memory goes
  if constexpr (CM == 2) cluster_sync();
#else
  (void)ta;
  (void)tb;
  (void)ty;
  (void)M;
  (void)K;
  (void)b_step;
  (void)b_second;
  (void)n_tiles;
  (void)units;
  (void)xs;
  (void)ws;
  __trap();
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
  });
  return encode;
}

// A row-major matrix [rows, cols] of `elem`-byte elements of `type`, in boxes of box_rows x 128 bytes with
// the 128-byte swizzle: x and W tiles as TMA loads them, and y's as it stores them.
[[maybe_unused]] Status make_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                                 CUtensorMapDataType type, int64_t elem, uint32_t box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return internal_error("sm90_linear: the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * elem)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kRowBytes / elem), box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return internal_error("sm90_linear: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                          ") for a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  }
  return Status::ok();
}

// x or W: bf16, or e4m3 codes.
[[maybe_unused]] Status make_operand_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, bool codes,
                                         uint32_t box_rows) {
  return make_map(map, base, rows, cols, codes ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                  codes ? 1 : 2, box_rows);
}

// What both public entry points pass down: the operands as bytes, and the e4m3 forms' scales.
struct Operands {
  const void* x = nullptr;
  const void* w = nullptr;
  const float* x_scales = nullptr;
  const float* w_scales = nullptr;
  bool codes = false;
};

template <Sm90Epilogue E, int BM, int BN, bool F8, int CM>
Status launch(const CUtensorMap& ta, const CUtensorMap& tb, void* y, int64_t M, int64_t N, int64_t K,
              int64_t max_ctas, int sms, const Operands& op, cudaStream_t stream) {
  using T = Tile<E, BM, BN>;
  // y: [M, N] (kSiluMul: N is gate|up's rows, y [M, N / 2]), stored by 64-row parts of a tile.
  const int64_t y_cols = E == Sm90Epilogue::kSiluMul ? N / 2 : N;
  CUtensorMap ty;
  const CUtensorMapDataType y_type =
      out_elem_bytes(E) == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  TERN_RETURN_IF_ERROR(make_map(&ty, y, M, y_cols, y_type, out_elem_bytes(E), 64));
  // A unit: CM row tiles of one column (a last one of a pair past the rows loads zeros and stores nothing).
  const int64_t n_tiles = (y_cols + T::kOutCols - 1) / T::kOutCols;
  const int64_t units = n_tiles * (((M + BM - 1) / BM + CM - 1) / CM);
  if (units > (int64_t{1} << 30)) return invalid_argument("sm90_linear: " + std::to_string(M) + " rows are too many");
  const int64_t resident = static_cast<int64_t>(sms) * T::kPerSm / CM;  // clusters at once
  const int64_t clusters = max_ctas > 0 ? std::max<int64_t>(max_ctas / CM, 1) : resident;
  const int ctas = CM * static_cast<int>(std::min(units, clusters));
  // W rows a tile's columns advance by, and the offset of its second W box (kSiluMul: the up rows).
  const int b_step = E == Sm90Epilogue::kSiluMul ? BN / 2 : BN;
  const int b_second = E == Sm90Epilogue::kSiluMul ? static_cast<int>(N / 2) : BN / 2;
  const auto kernel = gemm_sm90_kernel<E, BM, BN, F8, CM>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  TERN_CUDA_RETURN_IF_ERROR(attr);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(T::kThreads);
  config.dynamicSmemBytes = T::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = CM;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = CM > 1 ? 1 : 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, ta, tb, ty, static_cast<int>(M), static_cast<int>(K),
                                               b_step, b_second, static_cast<int>(n_tiles), static_cast<int>(units),
                                               op.x_scales, op.w_scales));
  return Status::ok();
}

template <int BM, int BN, bool F8, int CM = 1>
[[maybe_unused]] Status launch_tiles(const Operands& op, int64_t M, int64_t K, int64_t N, void* y,
                                     Sm90Epilogue epilogue, cudaStream_t stream, int64_t max_ctas, int sms) {
  CUtensorMap ta, tb;
  TERN_RETURN_IF_ERROR(make_operand_map(&ta, op.x, M, K, F8, BM));
  TERN_RETURN_IF_ERROR(make_operand_map(&tb, op.w, N, K, F8, BN / 2));
  switch (epilogue) {
    case Sm90Epilogue::kBf16:
      return launch<Sm90Epilogue::kBf16, BM, BN, F8, CM>(ta, tb, y, M, N, K, max_ctas, sms, op, stream);
    case Sm90Epilogue::kF32:
      return launch<Sm90Epilogue::kF32, BM, BN, F8, CM>(ta, tb, y, M, N, K, max_ctas, sms, op, stream);
    case Sm90Epilogue::kAddF32:
      return launch<Sm90Epilogue::kAddF32, BM, BN, F8, CM>(ta, tb, y, M, N, K, max_ctas, sms, op, stream);
    case Sm90Epilogue::kSiluMul:
      return launch<Sm90Epilogue::kSiluMul, BM, BN, F8, CM>(ta, tb, y, M, N, K, max_ctas, sms, op, stream);
  }
  return invalid_argument("sm90_linear: unknown epilogue");
}

// Checks the shapes, picks the tiles and launches.
Status run(const Operands& op, int64_t M, int64_t K, int64_t N, void* y, Sm90Epilogue epilogue, cudaStream_t stream,
           Sm90Tiles tiles) {
  if (M <= 0 || N <= 0) return Status::ok();
  const int64_t k_align = op.codes ? 16 : 8;  // 16-byte rows for TMA
  if (K <= 0 || K % k_align != 0 || N % 8 != 0 || M > (1 << 30) || N > (1 << 30) || K > (1 << 30)) {
    return invalid_argument("sm90_linear: a " + std::to_string(M) + " x " + std::to_string(K) + " x " +
                            std::to_string(N) + " product needs K a multiple of " + std::to_string(k_align) +
                            " and N of 8");
  }
  const bool silu = epilogue == Sm90Epilogue::kSiluMul;
  if (silu && N % 128 != 0) {
    return invalid_argument("sm90_linear: SiLU x up needs gate and up of a multiple of 64 rows each, not " +
                            std::to_string(N / 2));
  }
  if (((reinterpret_cast<uintptr_t>(op.x) | reinterpret_cast<uintptr_t>(op.w) | reinterpret_cast<uintptr_t>(y)) &
       15) != 0) {
    return invalid_argument("sm90_linear: x, W and y must be 16-byte aligned");
  }
  if (op.codes && (op.x_scales == nullptr || op.w_scales == nullptr ||
                   (reinterpret_cast<uintptr_t>(op.w_scales) & 7) != 0)) {
    return invalid_argument("sm90_linear_e4m3: needs both scale vectors, W's 8-byte aligned");
  }
  if ((tiles.rows != 0 && tiles.rows != 64 && tiles.rows != 128) ||
      (tiles.cols != 0 && tiles.cols != 128 && tiles.cols != 256) || tiles.max_ctas < 0 ||
      (tiles.cluster != 0 && tiles.cluster != 1 && tiles.cluster != 2) || (tiles.cluster == 2 && tiles.rows == 64)) {
    return invalid_argument("sm90_linear: tiles of " + std::to_string(tiles.rows) + " rows (0, 64 or 128), " +
                            std::to_string(tiles.cols) + " columns (0, 128 or 256), at most " +
                            std::to_string(tiles.max_ctas) + " CTAs (0 or more), clusters of " +
                            std::to_string(tiles.cluster) + " (0, 1, or 2 with 128-row tiles)");
  }
  if (tiles.cols == 256 && (op.codes || (silu && N % 256 != 0))) {
    return invalid_argument(std::string("sm90_linear: 256-column tiles take bf16 operands") +
                            (silu ? " and gate and up of a multiple of 128 rows each" : ""));
  }
#if defined(TERN_HAVE_SM90A)
  int device = 0, sms = 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  TERN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // The forms tern_gemm_bench measured fastest on an H100 at 2,048 rows (bf16): SiLU x up in 128 x 256 tiles,
  // outputs of up to 1,024 columns (o, down) in 64 x 256, the rest in 128 x 128; e4m3 in 128 x 128.
  const bool wide = !op.codes && M >= 1024 && tiles.rows == 0 && tiles.cols == 0;
  if (wide && silu && N % 256 == 0) {
    tiles.rows = 128;
    tiles.cols = 256;
  } else if (wide && !silu && N <= 1024) {
    tiles.rows = 64;
    tiles.cols = 256;
  }
  if (tiles.cols == 0) tiles.cols = 128;
  const int64_t out_cols = silu ? N / 2 : N, tile_cols = silu ? tiles.cols / 2 : tiles.cols;
  const int64_t col_tiles = (out_cols + tile_cols - 1) / tile_cols;
  if (tiles.rows == 0) {  // 128-row tiles unless they would leave more than a third of the SMs idle
    tiles.rows = 3 * col_tiles * ((M + 127) / 128) < 2 * static_cast<int64_t>(sms) ? 64 : 128;
  }
  if (tiles.cluster == 0) tiles.cluster = 1;
  const int64_t most = tiles.max_ctas;
  const bool pairs = tiles.rows == 128 && tiles.cluster == 2;
  if (op.codes) {
    if (tiles.rows == 64) return launch_tiles<64, 128, true>(op, M, K, N, y, epilogue, stream, most, sms);
    return pairs ? launch_tiles<128, 128, true, 2>(op, M, K, N, y, epilogue, stream, most, sms)
                 : launch_tiles<128, 128, true>(op, M, K, N, y, epilogue, stream, most, sms);
  }
  if (tiles.rows == 64) {
    return tiles.cols == 256 ? launch_tiles<64, 256, false>(op, M, K, N, y, epilogue, stream, most, sms)
                             : launch_tiles<64, 128, false>(op, M, K, N, y, epilogue, stream, most, sms);
  }
  if (tiles.cols == 256) {
    return pairs ? launch_tiles<128, 256, false, 2>(op, M, K, N, y, epilogue, stream, most, sms)
                 : launch_tiles<128, 256, false>(op, M, K, N, y, epilogue, stream, most, sms);
  }
  return pairs ? launch_tiles<128, 128, false, 2>(op, M, K, N, y, epilogue, stream, most, sms)
               : launch_tiles<128, 128, false>(op, M, K, N, y, epilogue, stream, most, sms);
#else
  (void)stream;
  (void)tiles;
  return unsupported("sm90_linear: this build has no sm_90a kernels (TERN_CUDA_ARCHS without 90)");
#endif
}

}  // namespace

bool sm90_gemm_available(int device) {
#if defined(TERN_HAVE_SM90A)
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0 && tensor_map_encoder() != nullptr;
#else
  (void)device;
  return false;
#endif
}

Status sm90_linear(const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w, int64_t out_features,
                   void* y, Sm90Epilogue epilogue, cudaStream_t stream, Sm90Tiles tiles) {
  Operands op;
  op.x = x;
  op.w = w;
  return run(op, num_tokens, in_features, out_features, y, epilogue, stream, tiles);
}

Status sm90_linear_e4m3(const uint8_t* x, const float* x_scales, int64_t num_tokens, int64_t in_features,
                        const uint8_t* w, const float* w_scales, int64_t out_features, void* y, Sm90Epilogue epilogue,
                        cudaStream_t stream, Sm90Tiles tiles) {
  Operands op;
  op.x = x;
  op.w = w;
  op.x_scales = x_scales;
  op.w_scales = w_scales;
  op.codes = true;
  return run(op, num_tokens, in_features, out_features, y, epilogue, stream, tiles);
}

}  // namespace tern::cuda
