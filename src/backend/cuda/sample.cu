// Sampling on the device, one block per row, with the host sampler's
// semantics (engine/sampler.h) so only a token id crosses to the host:
//   1. the row's logit ops, phase by phase (bias, min_tokens mask,
//      repetition, frequency + presence), in place;
//   2. greedy rows: the argmax (lowest id on ties, NaN never);
//   3. the finite logits' maximum m; weights w = exp((x - m) / T);
//   4. top-k: the k-th largest logit by a radix select over the logits'
//      order-preserving 32-bit keys (4 passes of 8 bits, counts);
//   5. top-p: over what top-k kept, the logit at which the mass counted from
//      the most likely reaches top_p of the total, by the same select over
//      fixed-point masses (integer sums: the same answer whatever order the
//      atomics land in);
//   6. ties at the cut keep the lowest ids, as the host's sort does: one
//      warp walks the ids in order to find the last one kept;
//   7. min-p: w >= min_p;
//   8. the draw: the kept token with the largest (x - m) / T + Gumbel noise,
//      the noise a hash of (row key, id). That is an exact draw from the
//      kept tokens' renormalised softmax; the key comes from the sequence's
//      own generator, so a seeded request repeats its tokens.
#include <cfloat>
#include <climits>
#include <cmath>

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 256;
constexpr double kMassScale = 1099511627776.0;  // 2^40: a weight in (0, 1] as an integer

__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  return __uint_as_float(u);
}

__device__ __forceinline__ bool finite_logit(float v) { return v > -INFINITY && v == v; }

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard Gumbel noise for (key, id): -log(-log(u)), u uniform in (0, 1).
__device__ __forceinline__ double gumbel(uint64_t key, int64_t id) {
  const uint64_t bits = mix64(key + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(id + 1));
  const double u = (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
  return -log(-log(u));
}

// Below this vocabulary, top-p's per-bin masses are summed in three 32-bit
// limbs (14 + 14 + 12 bits of a mass <= 2^40) with native shared-memory
// atomics, exact as long as a limb's sum over the whole row fits 32 bits;
// at or above it, in one 64-bit atomic (a compare-and-swap loop, slow when
// most logits share a bin).
constexpr int64_t kLimbVocab = 262144;

struct Shared {
  unsigned long long mass_bins[kBins];
  unsigned int mass_lo[kBins], mass_mid[kBins], mass_hi[kBins];
  int count_bins[kBins];
  float max_value;
  int finite;
  unsigned long long best;
  // Radix select state (thread 0 writes, all read after a barrier).
  uint32_t prefix, mask;
  long long remaining_count;
  unsigned long long remaining_mass;
  int cut_id;
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

// Top-k's cut: the key k* of the k-th largest finite logit, counted from
// the largest. After it, s.prefix = k* and s.remaining_count = how many of
// the entries equal to k* are among the k.
__device__ void select_kth_key(const float* x, int64_t vocab, Shared& s) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) s.count_bins[b] = 0;
    __syncthreads();
    const uint32_t prefix = s.prefix, mask = s.mask;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i];
      if (!finite_logit(v)) continue;
      const uint32_t k = order_key(v);
      if ((k & mask) == prefix) atomicAdd(&s.count_bins[(k >> shift) & 0xffu], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int b = kBins - 1; b >= 0; --b) {
        const long long c = s.count_bins[b];
        if (c >= s.remaining_count || b == 0) {
          s.prefix |= static_cast<uint32_t>(b) << shift;
          break;
        }
        s.remaining_count -= c;
      }
      s.mask |= 0xffu << shift;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int64_t vocab, const SampleRow* rows,
                                                          const LogitOp* ops, uint64_t* keys) {
  __shared__ Shared s;
  const SampleRow r = rows[blockIdx.x];
  float* x = logits + static_cast<int64_t>(r.row) * vocab;

  // 1. The logit ops, in the host sampler's order; within a phase the ids are distinct.
  for (int phase = 0; phase < 4; ++phase) {
    for (int i = r.ops_begin + static_cast<int>(threadIdx.x); i < r.ops_end; i += blockDim.x) {
      const LogitOp op = ops[i];
      if (op.phase != phase || op.id < 0 || op.id >= vocab) continue;
      float& v = x[op.id];
      if (phase == 0) {
        v += op.a;
      } else if (phase == 1) {
        v = -INFINITY;
      } else if (phase == 2) {
        v = v > 0.0f ? v / op.a : v * op.a;
      } else {
        v -= op.a;
        v -= op.b;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    s.best = 0;
    s.max_value = -INFINITY;
    s.finite = 0;
  }
  __syncthreads();

  // 2-3. The argmax (greedy, or nothing finite) and the finite maximum.
  uint64_t best = 0;
  int finite = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i];
    if (v == v) {
      const uint64_t k = pick_key(v, i);
      best = k > best ? k : best;
    }
    finite += finite_logit(v) ? 1 : 0;
  }
  finite = __reduce_add_sync(0xffffffffu, finite);
  if ((threadIdx.x & 31) == 0 && finite > 0) atomicAdd(&s.finite, finite);
  best = block_max_u64(best, &s.best);
  const int num_finite = s.finite;
  if (r.greedy || num_finite == 0) {
    if (threadIdx.x == 0) keys[r.pick] = best;
    return;
  }
  const float m = key_value(static_cast<uint32_t>(best >> 32));  // the largest value is finite here
  const float inv_t = 1.0f / r.temperature;
  auto weight_of = [&](float v) { return expf((v - m) * inv_t); };
  auto fixed_mass = [&](float v) { return static_cast<uint64_t>(static_cast<double>(weight_of(v)) * kMassScale); };

  // 4. top-k: cut at the k-th largest key; keep_eq entries equal to it.
  bool cut = false;
  uint32_t cut_key = 0;
  long long keep_eq = 0;
  if (r.top_k > 0 && r.top_k < num_finite) {
    if (threadIdx.x == 0) {
      s.prefix = 0;
      s.mask = 0;
      s.remaining_count = r.top_k;
    }
    __syncthreads();
    select_kth_key(x, vocab, s);
    cut = true;
    cut_key = s.prefix;
    keep_eq = s.remaining_count;
  }

  // 5. top-p over the top-k set: its mass, then the cut where the mass from the top reaches top_p of it.
  if (r.top_p < 1.0f) {
    if (threadIdx.x == 0) s.remaining_mass = 0;
    __syncthreads();
    unsigned long long mass = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i];
      if (!finite_logit(v)) continue;
      const uint32_t k = order_key(v);
      if (!cut || k > cut_key) mass += fixed_mass(v);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) mass += __shfl_xor_sync(0xffffffffu, mass, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(&s.remaining_mass, mass);
    __syncthreads();
    // Entries equal to the top-k cut count keep_eq times (they are equal).
    const unsigned long long eq_mass = cut ? static_cast<unsigned long long>(keep_eq) * fixed_mass(key_value(cut_key)) : 0;
    const unsigned long long total = s.remaining_mass + eq_mass;
    const auto target = static_cast<unsigned long long>(ceil(static_cast<double>(r.top_p) * static_cast<double>(total)));
    __syncthreads();
    if (threadIdx.x == 0) {
      s.prefix = 0;
      s.mask = 0;
      s.remaining_mass = target > 0 ? target : 1;
    }
    __syncthreads();
    // Entries at the top-k cut take part through a stand-in: only keep_eq of them are in the set, so
    // their bin gets keep_eq x their weight from thread 0 instead of one weight per entry.
    const bool limbs = vocab < kLimbVocab;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
        s.mass_bins[b] = 0;
        s.mass_lo[b] = s.mass_mid[b] = s.mass_hi[b] = 0;
      }
      __syncthreads();
      const uint32_t prefix = s.prefix, mask = s.mask;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x[i];
        if (!finite_logit(v)) continue;
        const uint32_t k = order_key(v);
        if ((k & mask) != prefix || (cut && k <= cut_key)) continue;
        const uint32_t bin = (k >> shift) & 0xffu;
        const uint64_t w = fixed_mass(v);
        if (limbs) {
          atomicAdd(&s.mass_lo[bin], static_cast<unsigned int>(w & 0x3fffu));
          atomicAdd(&s.mass_mid[bin], static_cast<unsigned int>((w >> 14) & 0x3fffu));
          atomicAdd(&s.mass_hi[bin], static_cast<unsigned int>(w >> 28));
        } else {
          atomicAdd(&s.mass_bins[bin], static_cast<unsigned long long>(w));
        }
      }
      if (threadIdx.x == 0 && cut && (cut_key & mask) == prefix) atomicAdd(&s.mass_bins[(cut_key >> shift) & 0xffu], eq_mass);
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int b = kBins - 1; b >= 0; --b) {
          const unsigned long long bm = s.mass_bins[b] + (static_cast<unsigned long long>(s.mass_hi[b]) << 28) +
                                        (static_cast<unsigned long long>(s.mass_mid[b]) << 14) + s.mass_lo[b];
          if (bm >= s.remaining_mass || b == 0) {
            s.prefix |= static_cast<uint32_t>(b) << shift;
            break;
          }
          s.remaining_mass -= bm;
        }
        s.mask |= 0xffu << shift;
      }
      __syncthreads();
    }
    const uint32_t p_key = s.prefix;
    const unsigned long long w = fixed_mass(key_value(p_key));
    // Entries equal to the cut needed to reach the target (at least one).
    long long need = w > 0 ? static_cast<long long>((s.remaining_mass + w - 1) / w) : 1;
    need = need < 1 ? 1 : need;
    if (!cut || p_key > cut_key) {
      cut = true;
      cut_key = p_key;
      keep_eq = need;
    } else {  // the same key as the top-k cut: the fewer of the two
      keep_eq = need < keep_eq ? need : keep_eq;
    }
  }

  // 6. Ties at the cut: the lowest ids win. Only when more entries equal the
  // cut than are kept (rare) does warp 0 walk the ids in order.
  int last_eq_id = INT_MAX;
  if (cut) {
    if (threadIdx.x == 0) {
      s.cut_id = INT_MAX;
      s.finite = 0;
    }
    __syncthreads();
    int eq = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i];
      eq += finite_logit(v) && order_key(v) == cut_key ? 1 : 0;
    }
    eq = __reduce_add_sync(0xffffffffu, eq);
    if ((threadIdx.x & 31) == 0 && eq > 0) atomicAdd(&s.finite, eq);
    __syncthreads();
  }
  if (cut && s.finite > keep_eq) {
    if (threadIdx.x < 32) {
      long long seen = 0;
      for (int64_t base = 0; base < vocab && seen < keep_eq; base += 32) {
        const int64_t i = base + threadIdx.x;
        const bool eq = i < vocab && finite_logit(x[i]) && order_key(x[i]) == cut_key;
        const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
        const int n = __popc(ballot);
        if (seen + n >= keep_eq) {
          // The (keep_eq - seen)-th set bit of the ballot is the last id kept.
          uint32_t bits = ballot;
          for (long long j = 1; j < keep_eq - seen; ++j) bits &= bits - 1;
          if (threadIdx.x == 0) s.cut_id = static_cast<int>(base + __ffs(bits) - 1);
        }
        seen += n;
      }
    }
    __syncthreads();
    last_eq_id = s.cut_id;
  }

  // 7-8. min-p and the draw.
  if (threadIdx.x == 0) s.best = 0;
  __syncthreads();
  double top = -DBL_MAX;
  int top_id = -1;
  const float inv_t_draw = inv_t;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i];
    if (!finite_logit(v)) continue;
    if (cut) {
      const uint32_t k = order_key(v);
      if (k < cut_key || (k == cut_key && i > last_eq_id)) continue;
    }
    if (r.min_p > 0.0f && weight_of(v) < r.min_p) continue;
    const double score = static_cast<double>((v - m) * inv_t_draw) + gumbel(r.key, i);
    if (score > top) {
      top = score;
      top_id = static_cast<int>(i);
    }
  }
  // The largest score; its id (ties, vanishingly rare, to the lower id).
  uint64_t packed = 0;
  if (top_id >= 0) packed = pick_key(static_cast<float>(top), top_id);
  packed = block_max_u64(packed, &s.best);
  if (threadIdx.x == 0) keys[r.pick] = packed != 0 ? packed : best;
}

}  // namespace

cudaError_t sample_rows(float* logits, int64_t vocab, const SampleRow* rows, int64_t num_rows, const LogitOp* ops,
                        uint64_t* keys, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT32_MAX) return cudaErrorInvalidValue;
  return launch_kernel(sample_kernel, dim3(static_cast<unsigned int>(num_rows)), dim3(kThreads), 0, stream, false,
                       logits, vocab, rows, ops, keys);
}

}  // namespace tern::cuda
