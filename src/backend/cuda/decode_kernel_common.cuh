// The decode kernel's shared pieces: its block shape, each block's share
// of a matrix's rows, the carving of its dynamic shared memory, and the
// profiling timeline. Included by decode_kernel.cu only (one translation
// unit: these live in its unnamed namespace).
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = kDecodeLayersThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyTile = 32;

// Block b's share [begin, end) of `units` units.
struct Range {
  int begin = 0, end = 0;
};
__device__ __forceinline__ Range share_of(int units) {  // units * grid < 2^31
  const int b = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
  return Range{b * units / g, (b + 1) * units / g};
}

// The weight slots hold bf16 words or, with p.fp8, e4m3 codes (bytes).
struct Smem {
  unsigned char *w_qkv, *w_o, *w_gu, *w_down;  // w_qkv == w_o: one slot
  bf16* xs;  // the phase's input row; attention's tiles (fp32) share its space
};

__host__ __device__ __forceinline__ int64_t weight_bytes(const DecodeLayersParams& p) { return p.fp8 ? 1 : 2; }

__host__ __device__ __forceinline__ int64_t shared_slot_elems(const DecodeLayersParams& p) {
  const int64_t qkv = static_cast<int64_t>(p.cap_qkv_pairs) * 2 * p.hidden;
  const int64_t o = static_cast<int64_t>(p.cap_o_rows) * p.q_dim;
  return qkv > o ? qkv : o;
}

__device__ __forceinline__ Smem carve(const DecodeLayersParams& p, unsigned char* base) {
  Smem s;
  const int64_t e = weight_bytes(p);
  s.w_qkv = s.w_o = base;
  s.w_gu = s.w_qkv + shared_slot_elems(p) * e;
  s.w_down = s.w_gu + static_cast<int64_t>(p.cap_gu_units) * 2 * p.hidden * e;
  s.xs = reinterpret_cast<bf16*>(s.w_down + static_cast<int64_t>(p.cap_down_rows) * p.inter * e);
  return s;
}

// Layer l's K (kind 0) or V (kind 1) plane of the pool, in the cache's
// elements (bf16, or fp8e4m3 with p.kv_fp8).
template <typename Cache>
__device__ __forceinline__ Cache* kv_plane(const DecodeLayersParams& p, int l, int kind) {
  return static_cast<Cache*>(p.kv) + (static_cast<int64_t>(l) * 2 + kind) * p.plane_elems;
}

// Every block's clocks at mark `at` (p.timeline: [grid][marks] ns, then
// [grid][marks] SM cycles).
__device__ __forceinline__ void timeline_mark(const DecodeLayersParams& p, int at) {
  if (p.timeline != nullptr && threadIdx.x == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const int64_t marks = 1 + static_cast<int64_t>(p.num_layers) * kDecodeLayersMarks;
    const int64_t at_block = static_cast<int64_t>(blockIdx.x) * marks + at;
    p.timeline[at_block] = now;
    p.timeline[static_cast<int64_t>(gridDim.x) * marks + at_block] = clock64();
  }
}

// Thread 0 waits this many SM cycles (the others go on).
__device__ __forceinline__ void spin_cycles(int cycles) {
  if (cycles <= 0 || threadIdx.x != 0) return;
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace
}  // namespace tern::cuda
