// The decode kernel's shared pieces: its block shape, each block's share
// of a matrix's rows, the carving of its dynamic shared memory, and the
// profiling timeline. Included by decode_kernel.cu only (one translation
// unit: these live in its unnamed namespace).
#pragma once

#include <type_traits>

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

// The weight slots hold bf16 words or, with p.fp8, e4m3 codes (bytes), or
// with p.int4 a slice of rows as its codes (rows x K / 2 bytes), then its
// blocks' fp16 scales (rows x K / 32), then their zeros (bytes): each part
// a whole number of 16-byte pieces (widths multiples of 512).
struct Smem {
  unsigned char *w_qkv, *w_o, *w_gu, *w_down;  // w_qkv == w_o: one slot
  bf16* xs;  // the phase's input row; attention's tiles (fp32) share its space
};

// The kernel's weight type for int4 slots (bf16 and FP8 slots: bf16 and uint8_t).
struct Int4Slot {};

// Bytes of `rows` rows of K weights in a slot.
__host__ __device__ __forceinline__ int64_t slice_bytes(const DecodeLayersParams& p, int64_t rows, int64_t K) {
  if (p.int4) return rows * (K / 2 + K / 32 * 3);
  return rows * K * (p.fp8 ? 1 : 2);
}

// The same for the kernel's weight type W (bf16, uint8_t: FP8, Int4Slot).
template <typename W>
__device__ __forceinline__ int64_t slice_bytes_of(int64_t rows, int64_t K) {
  if constexpr (std::is_same_v<W, Int4Slot>) {
    return rows * (K / 2 + K / 32 * 3);
  } else {
    return rows * K * static_cast<int64_t>(sizeof(W));
  }
}

__host__ __device__ __forceinline__ int64_t shared_slot_bytes(const DecodeLayersParams& p) {
  const int64_t qkv = slice_bytes(p, static_cast<int64_t>(p.cap_qkv_pairs) * 2, p.hidden);
  const int64_t o = slice_bytes(p, p.cap_o_rows, p.q_dim);
  return qkv > o ? qkv : o;
}

template <typename W>
__device__ __forceinline__ Smem carve(const DecodeLayersParams& p, unsigned char* base) {
  Smem s;
  s.w_qkv = s.w_o = base;
  const int64_t qkv = slice_bytes_of<W>(static_cast<int64_t>(p.cap_qkv_pairs) * 2, p.hidden);
  const int64_t o = slice_bytes_of<W>(p.cap_o_rows, p.q_dim);
  s.w_gu = s.w_qkv + (qkv > o ? qkv : o);
  s.w_down = s.w_gu + 2 * slice_bytes_of<W>(p.cap_gu_units, p.hidden);
  s.xs = reinterpret_cast<bf16*>(s.w_down + slice_bytes_of<W>(p.cap_down_rows, p.inter));
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
