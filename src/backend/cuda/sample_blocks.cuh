// The device sampler's building blocks (sample.cu includes this, and only
// it): the row's order keys and fixed-point weights, the cluster a row is
// spread over and each block's slice of it, the vectorized pass over a
// slice, the shared-memory state, block and warp scans, and the bins of
// (m - x) / T.
#pragma once

#include <climits>
#include <cmath>

#include <cooperative_groups.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace tern::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr float kMaxSpan = 32.0f;    // nats of (m - x) / T the bins cover at most; the last bin takes the rest
constexpr int kCandidates = 2048;    // entries of one cut bin sorted in shared memory
constexpr float kMassScaleF = 1099511627776.0f;  // 2^40: a weight in (0, 1] as an integer
// The unrestricted draw keeps the row's this many best scores: the first of
// them that the cuts keep is the draw, and all of them fall outside a
// nucleus of mass top_p about (1 - top_p)^4 of the time.
constexpr int kDrawCandidates = 4;

__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  return __uint_as_float(u);
}

__device__ __forceinline__ bool finite_logit(float v) { return v > -INFINITY && v == v; }

// log2(x) on the special-function units (PTX lg2.approx; its absolute error
// near x = 1 is about 2^-22.6, and subnormals flush to zero); fast_exp2 is
// device_utils.cuh's.
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// The row's weights as fixed-point masses: exp((v - m) / T) * 2^40, rounded
// down, with exp((v - m) / T) = 2^((v - m) * log2(e) / T) on the
// special-function unit (at most 1: a weight's mass is at most 2^40). A NaN
// logit's weight is NaN and its mass 0 (a float-to-integer conversion takes
// NaN to 0), as is -inf's, so sums need not test for them.
struct Weights {
  float m, inv_t;
  float scale;  // bins per nat: the bins below the last span the row's finite range, at most kMaxSpan nats
  float log2e_inv_t;  // log2(e) / T
  __device__ __forceinline__ float weight(float v) const {
    const float e = fast_exp2((v - m) * log2e_inv_t);
    return e > 1.0f ? 1.0f : e;  // keeps NaN
  }
  // w * 2^40 is exact in float (a power-of-two scale), so this equals the double product.
  __device__ __forceinline__ uint64_t mass(float v) const { return static_cast<uint64_t>(weight(v) * kMassScaleF); }
  // The bin of (m - v) / T; NaN and the tail past kMaxSpan go to the last bin.
  __device__ __forceinline__ int bin(float v) const {
    const float d = (m - v) * inv_t * scale;
    return d < static_cast<float>(kBins - 1) ? (d > 0.0f ? static_cast<int>(d) : 0) : kBins - 1;
  }
};

// The draw's score of logit v at id: (v / T + Gumbel noise) * log2(e), the
// noise a hash of (row key, id), so the same whichever block of a cluster
// reads the id and whatever the batch. With u uniform on 2^23 points in
// (0, 1) and E = -log2(u) (an exponential variate, in bits), the noise is
// -log2(E) up to a constant shift, which no argmax sees. E comes from the
// series -ln(1 - t) = t + t^2/2 + ... (t = 1 - u) where u > 7/8, as lg2's
// absolute error there would be large against E; elsewhere from lg2. The
// scores' errors are then a few units in the float's last place, as the
// sum's own rounding. log2e_inv_t = log2(e) / T.
__device__ __forceinline__ float draw_score(float v, float log2e_inv_t, uint64_t key, int64_t id) {
  uint32_t h = static_cast<uint32_t>(key) ^ (static_cast<uint32_t>(key >> 32) * 0x9e3779b9u);
  h ^= static_cast<uint32_t>(id) * 0x85ebca6bu;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  const float j = static_cast<float>(h >> 9);
  const float u = (j + 0.5f) * 0x1.0p-23f;        // exact
  const float t = (8388607.5f - j) * 0x1.0p-23f;  // 1 - u, exact
  // log2(e) * (1 + t/2 + t^2/3 + ... + t^7/8): its truncation is below t^8 / 9 < 2^-24 of the sum for t < 1/8.
  float p = kLog2e / 8.0f;
  p = fmaf(p, t, kLog2e / 7.0f);
  p = fmaf(p, t, kLog2e / 6.0f);
  p = fmaf(p, t, kLog2e / 5.0f);
  p = fmaf(p, t, kLog2e / 4.0f);
  p = fmaf(p, t, kLog2e / 3.0f);
  p = fmaf(p, t, kLog2e / 2.0f);
  p = fmaf(p, t, kLog2e);
  const float from_log = -fast_log2(u);  // computed for every lane: no branch between a warp's lanes
  const float e = t < 0.125f ? p * t : from_log;
  return fmaf(v, log2e_inv_t, -fast_log2(e));
}

// Below this vocabulary, per-bin masses are summed in three 32-bit limbs
// (14 + 14 + 12 bits of a mass <= 2^40) with native shared-memory atomics,
// exact as long as a limb's sum over the whole row fits 32 bits; at or above
// it, in one 64-bit atomic (a compare-and-swap loop, slow when most logits
// share a bin).
constexpr int64_t kLimbVocab = 262144;

// The blocks that share one row: a thread block cluster on sm_90 (each
// block a slice of the row, the row-wide sums read through distributed
// shared memory), else the one block.
struct Cluster {
  bool solo = false;  // one block alone, whatever its launch
  __device__ static Cluster single() {
    Cluster c;
    c.solo = true;
    return c;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __device__ unsigned rank() const { return solo ? 0 : cooperative_groups::this_cluster().block_rank(); }
  __device__ unsigned size() const { return solo ? 1 : cooperative_groups::this_cluster().num_blocks(); }
  __device__ void sync() const {
    if (solo) {
      __syncthreads();
    } else {
      cooperative_groups::this_cluster().sync();
    }
  }
  template <class T>
  __device__ T* at(T* p, unsigned r) const {
    return solo ? p : cooperative_groups::this_cluster().map_shared_rank(p, r);
  }
#else
  __device__ unsigned rank() const { return 0; }
  __device__ unsigned size() const { return 1; }
  __device__ void sync() const { __syncthreads(); }
  template <class T>
  __device__ T* at(T* p, unsigned) const {
    return p;
  }
#endif
};

// A block's slice of the row: ids [lo, hi), a multiple of 32 long but the last.
struct Slice {
  int64_t lo, hi;
  // How many 4-float groups from lo are read with 16-byte loads (0 when the
  // slice does not start on a 16-byte boundary); ids past them one at a time.
  __device__ int64_t vectors(const float* x) const {
    return (reinterpret_cast<uintptr_t>(x + lo) & 15u) == 0 ? (hi - lo) / 4 : 0;
  }
};

// The slice's logits, each thread its own ids, in no particular order:
// quad(v, i) for each 16-byte group of four (ids i .. i + 3), one(v, i)
// for the ids past them (no warp-wide steps inside either). The passes over
// a row are bound by the latency of their loads, so each thread keeps two
// 16-byte loads in flight.
template <class Quad, class One>
__device__ __forceinline__ void for_each_quad(const float* x, const Slice& sl, Quad&& quad, One&& one) {
  const int64_t nvec = sl.vectors(x);
  const auto* v4 = reinterpret_cast<const float4*>(x + sl.lo);
  const auto step = static_cast<int64_t>(blockDim.x);
  int64_t j = threadIdx.x;
  for (; j + step < nvec; j += 2 * step) {
    const float4 a = v4[j], b = v4[j + step];
    quad(a, sl.lo + 4 * j);
    quad(b, sl.lo + 4 * (j + step));
  }
  if (j < nvec) quad(v4[j], sl.lo + 4 * j);
  for (int64_t i = sl.lo + 4 * nvec + threadIdx.x; i < sl.hi; i += step) one(x[i], i);
}

// f(value, id) for every id of the slice (for_each_quad, one id at a time).
template <class F>
__device__ __forceinline__ void for_each_logit(const float* x, const Slice& sl, F&& f) {
  for_each_quad(
      x, sl,
      [&](const float4 v, int64_t i) {
        f(v.x, i);
        f(v.y, i + 1);
        f(v.z, i + 2);
        f(v.w, i + 3);
      },
      f);
}

struct Shared {
  unsigned long long mass_bins[kBins];
  unsigned int mass_lo[kBins], mass_mid[kBins], mass_hi[kBins];
  int count_bins[kBins];
  unsigned long long candidates[kCandidates];  // argmax keys (pick_key) of one bin's entries, sorted largest first
  unsigned long long gathered[kCandidates];    // this block's entries of that bin, before the cluster's are joined
  unsigned long long tot_mass[kBins];          // the cluster's bins: every block's counts and masses summed
  int tot_count[kBins];
  unsigned long long warp_totals[kWarps];
  // This block's share of the row, read by the cluster's other blocks.
  unsigned long long block_best, block_top;  // argmax keys: of the logits, of the draw's scores
  unsigned int block_min_key;
  int block_finite, block_gathered;
  int num_candidates;
  int found;
  float max_value;
  int finite;
  unsigned long long best;
  unsigned int min_key;  // the smallest finite logit's order key
  // Radix select state (thread 0 writes, all read after a barrier).
  uint32_t prefix, mask;
  long long remaining_count;
  unsigned long long remaining_mass;
  int cut_id;
  // The binned cuts' plan (thread 0 writes, all read after a barrier).
  int k_bin, p_bin;
  long long k_need;
  unsigned long long p_need;
  unsigned long long cut;  // the last kept entry's argmax key; 0: none yet
  // The unrestricted draw (draw_if_kept): the block's and the cluster's
  // best scores (argmax keys, largest first; 0 where fewer entries), the
  // block's sums of the masses (the row's, then before each candidate),
  // read by the cluster's other blocks, and the cluster's.
  unsigned long long block_tops[kDrawCandidates], all_tops[kDrawCandidates];
  unsigned int block_max_key, max_key;  // order keys of the block's largest logit, then the cluster's
  unsigned long long block_sums[kDrawCandidates + 1], all_sums[kDrawCandidates + 1];
};

__device__ __forceinline__ uint64_t block_max_u64(uint64_t v, unsigned long long* slot) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  if ((threadIdx.x & 31) == 0 && v != 0) atomicMax(slot, static_cast<unsigned long long>(v));
  __syncthreads();
  return *slot;
}

__device__ __forceinline__ uint64_t warp_inclusive_sum(uint64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint64_t o = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += o;
  }
  return v;
}

// Inclusive sum over the block in thread order (integers: exact).
__device__ uint64_t block_inclusive_sum(uint64_t v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_inclusive_sum(v);
  if (lane == 31) s.warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) s.warp_totals[lane] = warp_inclusive_sum(s.warp_totals[lane]);
  __syncthreads();
  if (warp > 0) v += s.warp_totals[warp - 1];
  __syncthreads();
  return v;
}

// Warp 0's search of kBins values in bin order: the first bin b at which
// their running sum reaches `need`, and what of `need` is left for bin b
// (need less the sum before it); bin -1 when the whole sum stays below it.
// bin and rest point to shared memory (the lane that finds them writes them).
// Lane l sums bins [8l, 8l + 8), a warp scan finds the lane, that lane its bin.
__device__ void warp_first_reaching(const unsigned long long* v, unsigned long long need, int* bin,
                                    unsigned long long* rest) {
  static_assert(kBins % 32 == 0);
  constexpr int kPer = kBins / 32;
  const int lane = threadIdx.x & 31;
  uint64_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) mine += v[lane * kPer + j];
  const uint64_t through = warp_inclusive_sum(mine);
  const uint32_t ballot = __ballot_sync(0xffffffffu, through >= need);
  if (ballot == 0) {
    if (lane == 0) *bin = -1;
    return;
  }
  if (lane == __ffs(ballot) - 1) {
    uint64_t left = need - (through - mine);
    int b = lane * kPer;
    for (int j = 0; j < kPer - 1 && v[b] < left; ++j, ++b) left -= v[b];
    *bin = b;
    *rest = left;
  }
}

// Adds a fixed-point mass to bin b (limbs below kLimbVocab).
__device__ __forceinline__ void add_mass(Shared& s, int b, uint64_t w, bool limbs) {
  if (limbs) {
    atomicAdd(&s.mass_lo[b], static_cast<unsigned int>(w & 0x3fffu));
    atomicAdd(&s.mass_mid[b], static_cast<unsigned int>((w >> 14) & 0x3fffu));
    atomicAdd(&s.mass_hi[b], static_cast<unsigned int>(w >> 28));
  } else {
    atomicAdd(&s.mass_bins[b], static_cast<unsigned long long>(w));
  }
}

__device__ __forceinline__ unsigned long long bin_mass(const Shared& s, int b) {
  return s.mass_bins[b] + (static_cast<unsigned long long>(s.mass_hi[b]) << 28) +
         (static_cast<unsigned long long>(s.mass_mid[b]) << 14) + s.mass_lo[b];
}

__device__ void clear_bins(Shared& s) {
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    s.mass_bins[b] = 0;
    s.mass_lo[b] = s.mass_mid[b] = s.mass_hi[b] = 0;
    s.count_bins[b] = 0;
  }
  __syncthreads();
}

}  // namespace
}  // namespace tern::cuda
