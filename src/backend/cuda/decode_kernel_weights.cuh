// The decode kernel's weight slots: each block's slices of a layer's
// matrices copied into shared memory ahead of use, and waited for by slot.
// Included by decode_kernel.cu only, after decode_kernel_common.cuh.
#pragma once

#include <type_traits>

#include "backend/cuda/decode_kernel_common.cuh"

namespace tern::cuda {
namespace {

// Weights reach shared memory through the copy engine on sm_90
// (TERN_BULK_WEIGHTS, fill_slot below), through cp.async before.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TERN_BULK_WEIGHTS 1
#endif

#ifndef TERN_BULK_WEIGHTS
// cp.async groups go out in the order q|k|v(0), gate|up(0), down(0), then per
// layer l: o(l), q|k|v(l + 1), gate|up(l + 1), down(l + 1) (empty groups past
// the last layer), so before phase A the slice needed has 2 newer groups
// (wait_async<2>), before C none, before D and E 3.
// Copies `bytes` (a multiple of 16, 16-byte aligned) into shared memory; no commit.
__device__ __forceinline__ void load_async(unsigned char* dst, const unsigned char* src, int64_t bytes) {
  for (int64_t i = threadIdx.x; i < bytes / 16; i += kThreads) copy_async16(dst + i * 16, src + i * 16);
}
#endif

// A weight slot is filled by one or two pieces of consecutive rows. On
// sm_90 one thread hands each piece to the copy engine (cp.async.bulk) and
// an mbarrier per slot counts its bytes in, so the block's warps issue no
// loads for weights at all; the slot's n-th fill is waited for with parity
// n & 1. Before sm_90 every thread issues 16-byte cp.async copies, one
// commit group per fill (empty past the last layer), waited for by count
// (wait_async above).
constexpr int kSlotQkvO = 0, kSlotGu = 1, kSlotDown = 2;
// When the copies go out. A grid barrier's release waits for every memory
// operation its block has in flight, bulk copies included, and a phase's
// first loads wait behind whatever bytes were issued just before them. So
// on sm_90 each copy is issued inside a phase, just after that phase's own
// first loads, sized to land before the phase ends: layer l's down slice in
// A(l) after the norm's loads, its o slice and the up half of its gate|up
// slice in B(l) after the attention's loads (the blocks that do not attend
// wait kDecodeLayersODelayNs before o and kDecodeLayersUpDelayNs more before
// up, so the attention's K/V loads are not queued behind them), layer
// l + 1's q|k|v in D(l)
// after the norm's loads and the gate half of its gate|up in E(l) after the
// activations' loads. Before sm_90 (cp.async, waited for by count) every
// fill goes out whole just before a barrier: o(l) before A's, q|k|v(l + 1)
// before C's, gate|up(l + 1) before D's, down(l + 1) before E's.
#ifdef TERN_BULK_WEIGHTS
constexpr bool kCopiesInPhases = true;
#else
constexpr bool kCopiesInPhases = false;
#endif
struct Slots {
  uint64_t* bars;      // [3] mbarriers (sm_90)
  unsigned waited[3];  // fills waited for, per slot
};

// A fill of one or two parts, each a run of a matrix's rows (one piece of
// bytes, or with int4 weights three: codes, scales, zeros) copied to
// consecutive bytes of the slot. On sm_90 the parts may go out at
// different times: kFirst arrives with the whole fill's byte count and
// copies part 0, kSecond then copies part 1 (the slot's wait ends when
// both are in). Before sm_90 kFirst issues both parts and kSecond nothing.
enum class Pieces { kBoth, kFirst, kSecond };

struct Part {
  unsigned char* dst = nullptr;
  const unsigned char* src[3] = {nullptr, nullptr, nullptr};
  int64_t n[3] = {0, 0, 0};  // bytes, multiples of 16
  __device__ __forceinline__ int64_t bytes() const { return n[0] + n[1] + n[2]; }
};

#ifdef TERN_BULK_WEIGHTS
__device__ __forceinline__ void bulk_copy_part(const Part& part, unsigned bar) {
  unsigned char* dst = part.dst;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    if (part.n[i] > 0) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst)),
                   "l"(part.src[i]), "r"(static_cast<unsigned>(part.n[i])), "r"(bar)
                   : "memory");
    }
    dst += part.n[i];
  }
}
#else
__device__ __forceinline__ void load_async_part(const Part& part) {
  unsigned char* dst = part.dst;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    load_async(dst, part.src[i], part.n[i]);
    dst += part.n[i];
  }
}
#endif

template <Pieces kWhich = Pieces::kBoth>
__device__ __forceinline__ void fill_slot(Slots& sl, int slot, const Part& a, const Part& b) {
#ifdef TERN_BULK_WEIGHTS
  if (threadIdx.x == 0) {
    const unsigned bar = smem_addr(sl.bars + slot);
    // The slot's last reads (generic proxy, ordered before by a __syncthreads) before the copy's writes.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (kWhich != Pieces::kSecond) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                   "r"(static_cast<unsigned>(a.bytes() + b.bytes()))
                   : "memory");
      bulk_copy_part(a, bar);
    }
    if (kWhich != Pieces::kFirst) bulk_copy_part(b, bar);
  }
#else
  (void)sl;
  (void)slot;
  if (kWhich == Pieces::kSecond) return;
  load_async_part(a);
  load_async_part(b);
  commit_async();
#endif
}

// Past the last layer: nothing to load (an empty commit group keeps the cp.async counts).
__device__ __forceinline__ void skip_fill() {
#ifndef TERN_BULK_WEIGHTS
  commit_async();
#endif
}

// Waits for the slot's next fill; `pending` is the cp.async form's count
// of newer groups allowed (wait_async). The caller's __syncthreads follows.
template <int Pending>
__device__ __forceinline__ void wait_slot(Slots& sl, int slot) {
#ifdef TERN_BULK_WEIGHTS
  const unsigned bar = smem_addr(sl.bars + slot), parity = sl.waited[slot] & 1u;
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
  ++sl.waited[slot];
#else
  (void)sl;
  (void)slot;
  wait_async<Pending>();
#endif
}

__device__ __forceinline__ void init_slots(Slots& sl) {
  sl.waited[0] = sl.waited[1] = sl.waited[2] = 0;
#ifdef TERN_BULK_WEIGHTS
  if (threadIdx.x == 0) {
    for (int i = 0; i < 3; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(sl.bars + i)) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
#endif
  __syncthreads();
}

// Rows [row0, row0 + rows) of a layer's matrix (K weights a row, of the
// kernel's weight type W) as a part landing at dst.
template <typename W>
__device__ __forceinline__ Part matrix_rows(const bf16* w, const uint8_t* w8, const Int4Weights& w4, int64_t row0,
                                            int64_t rows, int64_t K, unsigned char* dst) {
  Part part;
  part.dst = dst;
  if constexpr (std::is_same_v<W, Int4Slot>) {
    part.src[0] = w4.codes + row0 * K / 2;
    part.n[0] = rows * K / 2;
    part.src[1] = reinterpret_cast<const unsigned char*>(w4.scales + row0 * K / 32);
    part.n[1] = rows * K / 32 * 2;
    part.src[2] = w4.zeros + row0 * K / 32;
    part.n[2] = rows * K / 32;
  } else if constexpr (std::is_same_v<W, uint8_t>) {
    part.src[0] = w8 + row0 * K;
    part.n[0] = rows * K;
  } else {
    part.src[0] = reinterpret_cast<const unsigned char*>(w + row0 * K);
    part.n[0] = rows * K * 2;
  }
  return part;
}

// Issues the copies of layer l's slices, in phase order.
template <typename W>
__device__ __forceinline__ void load_qkv(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.qkv_dim / 2);
  const DecodeLayerWeights& w = p.layers[l];
  fill_slot(sl, kSlotQkvO, matrix_rows<W>(w.qkv, w.qkv8, w.qkv4, 2 * r.begin, 2 * (r.end - r.begin), p.hidden, s.w_qkv),
            Part{});
}
template <typename W>
__device__ __forceinline__ void load_o(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  const Range r = share_of(p.hidden);
  const DecodeLayerWeights& w = p.layers[l];
  fill_slot(sl, kSlotQkvO, matrix_rows<W>(w.o, w.o8, w.o4, r.begin, r.end - r.begin, p.q_dim, s.w_o), Part{});
}
template <typename W, Pieces kWhich = Pieces::kBoth>  // gate rows, then up rows
__device__ __forceinline__ void load_gu(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) {
    if (kWhich != Pieces::kSecond) skip_fill();
    return;
  }
  const Range r = share_of(p.inter);
  const int64_t units = r.end - r.begin;
  const DecodeLayerWeights& w = p.layers[l];
  fill_slot<kWhich>(sl, kSlotGu, matrix_rows<W>(w.gate_up, w.gate_up8, w.gate_up4, r.begin, units, p.hidden, s.w_gu),
                    matrix_rows<W>(w.gate_up, w.gate_up8, w.gate_up4, p.inter + r.begin, units, p.hidden,
                                s.w_gu + slice_bytes_of<W>(units, p.hidden)));
}
template <typename W>
__device__ __forceinline__ void load_down(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.hidden);
  const DecodeLayerWeights& w = p.layers[l];
  fill_slot(sl, kSlotDown, matrix_rows<W>(w.down, w.down8, w.down4, r.begin, r.end - r.begin, p.inter, s.w_down),
            Part{});
}

}  // namespace
}  // namespace tern::cuda
