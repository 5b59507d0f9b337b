// The decode kernel's weight slots: each block's slices of a layer's
// matrices copied into shared memory ahead of use, and waited for by slot.
// Included by decode_kernel.cu only, after decode_kernel_common.cuh.
#pragma once

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

// A fill of one or two pieces; on sm_90 the pieces may go out at different
// times: kFirst arrives with the whole fill's byte count and copies piece
// 0, kSecond then copies piece 1 (the slot's wait ends when both are in).
// Before sm_90 kFirst issues both pieces and kSecond nothing.
enum class Pieces { kBoth, kFirst, kSecond };

// Pieces of n0 and n1 bytes.
template <Pieces kWhich = Pieces::kBoth>
__device__ __forceinline__ void fill_slot(Slots& sl, int slot, unsigned char* dst0, const unsigned char* src0,
                                          int64_t n0, unsigned char* dst1, const unsigned char* src1, int64_t n1) {
#ifdef TERN_BULK_WEIGHTS
  if (threadIdx.x == 0) {
    const unsigned bar = smem_addr(sl.bars + slot);
    const auto bytes0 = static_cast<unsigned>(n0), bytes1 = static_cast<unsigned>(n1);
    // The slot's last reads (generic proxy, ordered before by a __syncthreads) before the copy's writes.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (kWhich != Pieces::kSecond) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes0 + bytes1)
                   : "memory");
    }
    if (bytes0 > 0 && kWhich != Pieces::kSecond) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst0)),
                   "l"(src0), "r"(bytes0), "r"(bar)
                   : "memory");
    }
    if (bytes1 > 0 && kWhich != Pieces::kFirst) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst1)),
                   "l"(src1), "r"(bytes1), "r"(bar)
                   : "memory");
    }
  }
#else
  (void)sl;
  (void)slot;
  if (kWhich == Pieces::kSecond) return;
  load_async(dst0, src0, n0);
  load_async(dst1, src1, n1);
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

// A layer's matrix as bytes (bf16 words or e4m3 codes, weight_bytes each).
__device__ __forceinline__ const unsigned char* matrix_bytes(const DecodeLayersParams& p, const bf16* w,
                                                             const uint8_t* w8) {
  return p.fp8 ? w8 : reinterpret_cast<const unsigned char*>(w);
}

// Issues the copies of layer l's slices, in phase order.
__device__ __forceinline__ void load_qkv(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.qkv_dim / 2);
  const int64_t e = weight_bytes(p);
  fill_slot(sl, kSlotQkvO, s.w_qkv,
            matrix_bytes(p, p.layers[l].qkv, p.layers[l].qkv8) + static_cast<int64_t>(2 * r.begin) * p.hidden * e,
            static_cast<int64_t>(2 * (r.end - r.begin)) * p.hidden * e, nullptr, nullptr, 0);
}
__device__ __forceinline__ void load_o(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  const Range r = share_of(p.hidden);
  const int64_t e = weight_bytes(p);
  fill_slot(sl, kSlotQkvO, s.w_o,
            matrix_bytes(p, p.layers[l].o, p.layers[l].o8) + static_cast<int64_t>(r.begin) * p.q_dim * e,
            static_cast<int64_t>(r.end - r.begin) * p.q_dim * e, nullptr, nullptr, 0);
}
template <Pieces kWhich = Pieces::kBoth>  // gate rows, then up rows
__device__ __forceinline__ void load_gu(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) {
    if (kWhich != Pieces::kSecond) skip_fill();
    return;
  }
  const Range r = share_of(p.inter);
  const int64_t e = weight_bytes(p);
  const int64_t n = static_cast<int64_t>(r.end - r.begin) * p.hidden * e;
  const unsigned char* w = matrix_bytes(p, p.layers[l].gate_up, p.layers[l].gate_up8);
  fill_slot<kWhich>(sl, kSlotGu, s.w_gu, w + static_cast<int64_t>(r.begin) * p.hidden * e, n,  // gate rows
                    s.w_gu + n, w + static_cast<int64_t>(p.inter + r.begin) * p.hidden * e, n);  // up rows
}
__device__ __forceinline__ void load_down(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.hidden);
  const int64_t e = weight_bytes(p);
  fill_slot(sl, kSlotDown, s.w_down,
            matrix_bytes(p, p.layers[l].down, p.layers[l].down8) + static_cast<int64_t>(r.begin) * p.inter * e,
            static_cast<int64_t>(r.end - r.begin) * p.inter * e, nullptr, nullptr, 0);
}

}  // namespace
}  // namespace tern::cuda
