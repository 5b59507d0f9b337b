// Sampling on the device, one block per row, with the host sampler's
// semantics (engine/sampler.h) so only a token id crosses to the host:
//   1. the row's logit ops, phase by phase (bias, min_tokens mask,
//      repetition, frequency + presence), in place;
//   2. greedy rows: the argmax (lowest id on ties, NaN never);
//   3. the finite logits' maximum m; weights w = exp((x - m) / T), as
//      fixed-point masses (integer sums: the same answer whatever order the
//      atomics land in);
//   4. the cuts, in the order of the host's sort (largest logit first, the
//      lowest id first on ties). One pass puts every logit in one of 255
//      bins of (m - x) / T spanning the row's finite range (at most 32
//      nats; a 256th holds everything past, whose masses round to 0) with
//      its count and mass; the bins'
//      running sums find the bin holding top-k's k-th entry and top-p's cut
//      (top-p over what top-k kept: the entry at which the mass counted from
//      the most likely reaches top_p of the top-k set's); that bin's entries
//      are gathered, sorted and summed, which places the cut exactly. A cut
//      bin of more than kCandidates entries (a nearly flat row) falls back to
//      a radix select over the logits' order-preserving 32-bit keys;
//   5. min-p: w >= min_p;
//   6. the draw: the kept token with the largest x / T + Gumbel noise,
//      the noise a hash of (row key, id). That is an exact draw from the
//      kept tokens' renormalised softmax; the key comes from the sequence's
//      own generator, so a seeded request repeats its tokens.
// A top-p row without top-k (the models' default) first finds the best few
// scores over every finite logit and the maximum m in one pass, and in a
// second draws the first of them that the cuts would keep (all but about
// (1 - top_p)^4 of the time; draw_if_kept): two passes over the row instead
// of four or more.
// On sm_90 a few rows share the GPU as clusters of up to 8 blocks, each
// block a slice of its row, the sums and maxima joined through distributed
// shared memory; the results do not depend on the slicing.
// Why bins: the radix select's first byte is the logits' sign and exponent,
// which most of a row shares, and its shared-memory atomics into those few
// bins serialised (hundreds of microseconds a row); the bins of (m - x) / T
// spread a row over many counters and leave the far tail out.
#include "backend/cuda/sample_blocks.cuh"

namespace tern::cuda {
namespace {

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

// The cuts by radix select over the whole row (the fallback for a cut bin
// too large to sort): the argmax key of the last kept entry, or 0 for none.
__device__ uint64_t radix_cut(const float* x, int64_t vocab, const SampleRow& r, const Weights& w, int num_finite,
                              Shared& s) {
  // top-k: cut at the k-th largest key; keep_eq entries equal to it.
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

  // top-p over the top-k set: its mass, then the cut where the mass from the top reaches top_p of it.
  if (r.top_p < 1.0f) {
    if (threadIdx.x == 0) s.remaining_mass = 0;
    __syncthreads();
    unsigned long long mass = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i];
      if (!finite_logit(v)) continue;
      const uint32_t k = order_key(v);
      if (!cut || k > cut_key) mass += w.mass(v);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) mass += __shfl_xor_sync(0xffffffffu, mass, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(&s.remaining_mass, mass);
    __syncthreads();
    // Entries equal to the top-k cut count keep_eq times (they are equal).
    const unsigned long long eq_mass = cut ? static_cast<unsigned long long>(keep_eq) * w.mass(key_value(cut_key)) : 0;
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
      clear_bins(s);
      const uint32_t prefix = s.prefix, mask = s.mask;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x[i];
        if (!finite_logit(v)) continue;
        const uint32_t k = order_key(v);
        if ((k & mask) != prefix || (cut && k <= cut_key)) continue;
        add_mass(s, static_cast<int>((k >> shift) & 0xffu), w.mass(v), limbs);
      }
      if (threadIdx.x == 0 && cut && (cut_key & mask) == prefix) atomicAdd(&s.mass_bins[(cut_key >> shift) & 0xffu], eq_mass);
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int b = kBins - 1; b >= 0; --b) {
          const unsigned long long bm = bin_mass(s, b);
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
    const unsigned long long pw = w.mass(key_value(p_key));
    // Entries equal to the cut needed to reach the target (at least one).
    long long need = pw > 0 ? static_cast<long long>((s.remaining_mass + pw - 1) / pw) : 1;
    need = need < 1 ? 1 : need;
    if (!cut || p_key > cut_key) {
      cut = true;
      cut_key = p_key;
      keep_eq = need;
    } else {  // the same key as the top-k cut: the fewer of the two
      keep_eq = need < keep_eq ? need : keep_eq;
    }
  }
  if (!cut) return 0;

  // Ties at the cut: the lowest ids win. Only when more entries equal the
  // cut than are kept (rare) does warp 0 walk the ids in order.
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
  if (s.finite > keep_eq) {
    if (threadIdx.x < 32) {
      long long seen = 0;
      for (int64_t base = 0; base < vocab && seen < keep_eq; base += 32) {
        const int64_t i = base + threadIdx.x;
        const bool is_eq = i < vocab && finite_logit(x[i]) && order_key(x[i]) == cut_key;
        const uint32_t ballot = __ballot_sync(0xffffffffu, is_eq);
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
    return (static_cast<uint64_t>(cut_key) << 32) | (0xffffffffu - static_cast<uint32_t>(s.cut_id));
  }
  return static_cast<uint64_t>(cut_key) << 32;  // every entry equal to the cut is kept
}

// Sorts s.candidates[0, n), largest first (the host's order), padding to a power of two with 0.
__device__ void sort_candidates(int n, Shared& s) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += blockDim.x) s.candidates[i] = 0;
  __syncthreads();
  // Bitonic sort; padding (0) sinks to the end.
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int other = i ^ j;
        if (other <= i) continue;
        const unsigned long long a = s.candidates[i], c = s.candidates[other];
        if (((i & k) == 0) ? a < c : a > c) {
          s.candidates[i] = c;
          s.candidates[other] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Gathers the argmax keys of bin b's finite entries, every block of the
// cluster its slice, joins them in every block's s.candidates and sorts
// them there. Returns their number, or -1 when they are more than
// kCandidates (the same answer in every block).
__device__ int gather_bin(const float* x, const Slice& sl, const Weights& w, int b, Shared& s, const Cluster& cl) {
  if (threadIdx.x == 0) s.block_gathered = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  // Appends the warp's entries of bin b (every lane takes part).
  const auto append = [&](float v, int64_t i) {
    const bool in = finite_logit(v) && w.bin(v) == b;
    const uint32_t ballot = __ballot_sync(0xffffffffu, in);
    if (ballot == 0) return;
    const int leader = __ffs(ballot) - 1;
    int slot = 0;
    if (lane == leader) slot = atomicAdd(&s.block_gathered, __popc(ballot));
    slot = __shfl_sync(0xffffffffu, slot, leader) + __popc(ballot & ((1u << lane) - 1u));
    if (in && slot < kCandidates) s.gathered[slot] = pick_key(v, i);
  };
  const int64_t nvec = sl.vectors(x);
  const auto* v4 = reinterpret_cast<const float4*>(x + sl.lo);
  for (int64_t first = threadIdx.x - lane; first < nvec; first += blockDim.x) {  // the same trips in a warp
    const int64_t j = first + lane;
    const float4 v = j < nvec ? v4[j] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    const int64_t i = sl.lo + 4 * j;
    append(v.x, i);
    append(v.y, i + 1);
    append(v.z, i + 2);
    append(v.w, i + 3);
  }
  for (int64_t base = sl.lo + 4 * nvec; base < sl.hi; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    append(i < sl.hi ? x[i] : -INFINITY, i);
  }
  cl.sync();
  int n = 0;
  for (unsigned r = 0; r < cl.size(); ++r) {
    const Shared* other = cl.at(&s, r);
    const int count = other->block_gathered;
    if (n + count <= kCandidates) {
      for (int j = threadIdx.x; j < count; j += blockDim.x) s.candidates[n + j] = other->gathered[j];
    }
    n += count;
  }
  cl.sync();  // every block has read the others' entries before any gathers again
  if (n > kCandidates) return -1;
  sort_candidates(n, s);
  return n;
}

__device__ __forceinline__ float candidate_value(unsigned long long key) {
  return key_value(static_cast<uint32_t>(key >> 32));
}

// The first of the sorted candidates [0, n) at which their running mass
// reaches `need` (n - 1 when it never does); n <= 2 * blockDim.x.
__device__ int first_reaching(const Weights& w, int n, unsigned long long need, Shared& s) {
  const int a = 2 * static_cast<int>(threadIdx.x), b = a + 1;
  const uint64_t ma = a < n ? w.mass(candidate_value(s.candidates[a])) : 0;
  const uint64_t mb = b < n ? w.mass(candidate_value(s.candidates[b])) : 0;
  if (threadIdx.x == 0) s.found = n - 1;
  const uint64_t through_b = block_inclusive_sum(ma + mb, s);  // has a barrier after its last shared write
  const uint64_t through_a = through_b - mb;
  if (a < n && through_a >= need) {
    atomicMin(&s.found, a);
  } else if (b < n && through_b >= need) {
    atomicMin(&s.found, b);
  }
  __syncthreads();
  return s.found;
}

// The sum of the sorted candidates' masses [0, n).
__device__ uint64_t candidates_mass(const Weights& w, int n, Shared& s) {
  const int a = 2 * static_cast<int>(threadIdx.x), b = a + 1;
  uint64_t m = a < n ? w.mass(candidate_value(s.candidates[a])) : 0;
  m += b < n ? w.mass(candidate_value(s.candidates[b])) : 0;
  block_inclusive_sum(m, s);
  return s.warp_totals[kWarps - 1];
}

// The cuts through bins of (m - x) / T (the header says how): the argmax
// key of the last kept entry in `cut` (0: no cut), the same in every block
// of the cluster. Returns false when a cut bin holds more entries than can
// be sorted (then the caller falls back).
__device__ bool binned_cut(const float* x, int64_t vocab, const Slice& sl, const SampleRow& r, const Weights& w,
                           int num_finite, Shared& s, const Cluster& cl, uint64_t& cut) {
  const bool top_k = r.top_k > 0 && r.top_k < num_finite, top_p = r.top_p < 1.0f;
  cut = 0;
  if (!top_k && !top_p) return true;
  const bool limbs = vocab < kLimbVocab;
  clear_bins(s);
  int tail = 0;  // the last bin's entries (most of a peaked row), counted per thread; their masses are 0
  for_each_logit(x, sl, [&](float v, int64_t) {
    if (!finite_logit(v)) return;
    const int b = w.bin(v);
    if (b == kBins - 1) {
      ++tail;
      return;
    }
    if (top_k) atomicAdd(&s.count_bins[b], 1);
    if (top_p) add_mass(s, b, w.mass(v), limbs);
  });
  tail = __reduce_add_sync(0xffffffffu, tail);
  if (top_k && (threadIdx.x & 31) == 0 && tail != 0) atomicAdd(&s.count_bins[kBins - 1], tail);
  // The cluster's bins, summed in every block.
  cl.sync();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    unsigned long long m = 0;
    int c = 0;
    for (unsigned q = 0; q < cl.size(); ++q) {
      const Shared* other = cl.at(&s, q);
      m += bin_mass(*other, b);
      c += other->count_bins[b];
    }
    s.tot_mass[b] = m;
    s.tot_count[b] = c;
  }
  cl.sync();  // every block has read the others' bins before any clears them

  // top-k: the bin holding the k-th entry, and how many of its entries are in.
  int n = 0;
  unsigned long long k_mass = 0;  // the top-k set's mass in k_bin
  // The bins' running sums are searched by warp 0 in s.mass_bins (free once the cluster's sums are read).
  unsigned long long* scan = s.mass_bins;
  if (top_k) {
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) scan[b] = static_cast<unsigned long long>(s.tot_count[b]);
    __syncthreads();
    // top_k < num_finite: a bin is found.
    if (threadIdx.x < 32) warp_first_reaching(scan, static_cast<unsigned long long>(r.top_k), &s.k_bin, &s.p_need);
    __syncthreads();
    if (threadIdx.x == 0) s.k_need = static_cast<long long>(s.p_need);
    __syncthreads();
    n = gather_bin(x, sl, w, s.k_bin, s, cl);
    if (n < 0) return false;
    const int need = static_cast<int>(s.k_need < n ? s.k_need : n);
    cut = s.candidates[need - 1];
    if (!top_p) return true;
    n = need;  // the bin's entries in the top-k set, for top-p below
    k_mass = candidates_mass(w, n, s);
  }

  // top-p over the top-k set: the bin where the running mass reaches top_p
  // of the set's, then the entry in it.
  {
    // The top-k set's masses by bin: whole bins before k_bin, its kept entries in k_bin, nothing after.
    const int last = top_k ? s.k_bin : kBins - 1;
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      scan[b] = b < last ? s.tot_mass[b] : b > last ? 0 : top_k ? k_mass : s.tot_mass[b];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      uint64_t total = 0;
#pragma unroll
      for (int j = 0; j < kBins / 32; ++j) total += scan[threadIdx.x * (kBins / 32) + j];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
      const auto target =
          static_cast<unsigned long long>(ceil(static_cast<double>(r.top_p) * static_cast<double>(total)));
      warp_first_reaching(scan, target > 0 ? target : 1, &s.p_bin, &s.p_need);
    }
    __syncthreads();
  }
  const int p_bin = s.p_bin;
  if (p_bin < 0) return true;  // no mass reaches the target (nothing but zero masses): keep the top-k cut
  if (!top_k || p_bin != s.k_bin) {
    n = gather_bin(x, sl, w, p_bin, s, cl);
    if (n < 0) return false;
  }
  cut = s.candidates[first_reaching(w, n, s.p_need, s)];
  return true;
}

__device__ __forceinline__ bool kept(float v, int64_t i, uint64_t cut, const SampleRow& r, const Weights& w) {
  return finite_logit(v) && pick_key(v, i) >= cut && (r.min_p <= 0.0f || w.weight(v) >= r.min_p);
}

// The draw: the kept entry with the largest score, x / T + Gumbel noise
// (draw_score), which is an exact draw from the kept entries' renormalised softmax and
// does not depend on how the row is sliced (a seeded request draws the same
// token in any batch). Block 0 writes its argmax key to keys[r.pick]
// (`fallback` if nothing is kept).
__device__ void draw(const float* x, const Slice& sl, const SampleRow& r, const Weights& w, uint64_t cut,
                     uint64_t fallback, uint64_t* keys, Shared& s, const Cluster& cl) {
  uint64_t top = 0;  // the score's order key above (2^32 - 1 - id), as pick_key
  for_each_logit(x, sl, [&](float v, int64_t i) {
    if (!kept(v, i, cut, r, w)) return;
    const uint64_t k = pick_key(draw_score(v, w.log2e_inv_t, r.key, i), i);
    top = k > top ? k : top;
  });
  if (threadIdx.x == 0) s.best = 0;
  __syncthreads();
  top = block_max_u64(top, &s.best);
  if (threadIdx.x == 0) s.block_top = top;
  cl.sync();
  if (threadIdx.x == 0 && cl.rank() == 0) {
    for (unsigned q = 1; q < cl.size(); ++q) {
      const unsigned long long other = cl.at(&s, q)->block_top;
      top = other > top ? other : top;
    }
    const int id = static_cast<int>(0xffffffffu - static_cast<uint32_t>(top & 0xffffffffu));
    keys[r.pick] = top != 0 ? pick_key(x[id], id) : fallback;
  }
  cl.sync();  // block 0 has read the others' before any leaves
}

// Inserts argmax key k into t, largest first, when it beats t's last.
__device__ __forceinline__ void insert_top(uint64_t (&t)[kDrawCandidates], uint64_t k) {
  if (k <= t[kDrawCandidates - 1]) return;
#pragma unroll
  for (int j = kDrawCandidates - 1; j >= 0; --j) {
    const uint64_t above = j > 0 ? t[j - 1] : ~0ull;
    if (k > t[j]) t[j] = k > above ? above : k;
  }
}

// The cluster's kDrawCandidates largest argmax keys into s.all_tops, from
// every thread's own, largest first (t): the block's by rounds of the block
// maximum (each round's winner, one thread as the keys are distinct, moves
// past it), then thread 0 of each block joins the cluster's blocks'. The
// slots s.block_tops are 0 on entry. Ends with a cluster sync after which
// every block may read s.all_tops.
__device__ void cluster_tops(uint64_t (&t)[kDrawCandidates], Shared& s, const Cluster& cl) {
#pragma unroll
  for (int r = 0; r < kDrawCandidates; ++r) {
    const uint64_t m = block_max_u64(t[0], &s.block_tops[r]);
    if (m != 0 && t[0] == m) {
#pragma unroll
      for (int j = 0; j + 1 < kDrawCandidates; ++j) t[j] = t[j + 1];
      t[kDrawCandidates - 1] = 0;
    }
  }
  cl.sync();
  if (threadIdx.x == 0) {
    int next[8] = {};  // each block's first key not yet taken (clusters are at most 8 blocks)
    for (int r = 0; r < kDrawCandidates; ++r) {
      unsigned long long m = 0;
      unsigned from = 0;
      for (unsigned q = 0; q < cl.size(); ++q) {
        const unsigned long long k = next[q] < kDrawCandidates ? cl.at(&s, q)->block_tops[next[q]] : 0;
        if (k > m) {
          m = k;
          from = q;
        }
      }
      s.all_tops[r] = m;
      if (m != 0) ++next[from];
    }
  }
  cl.sync();
}

// Sums of fixed-point masses over the cluster, every thread's share of each
// in: the block's totals through shared memory, then thread 0 of each block
// adds up the cluster's into s.all_sums (read after the cluster sync that
// ends this; a second one before return keeps each block's totals until
// all have read them).
__device__ void cluster_mass_sums(unsigned long long (&sums)[kDrawCandidates + 1], Shared& s, const Cluster& cl) {
  if (threadIdx.x <= kDrawCandidates) s.block_sums[threadIdx.x] = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j <= kDrawCandidates; ++j) {
    unsigned long long v = sums[j];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0 && v != 0) atomicAdd(&s.block_sums[j], v);
  }
  cl.sync();
  if (threadIdx.x <= kDrawCandidates) {
    unsigned long long total = 0;
    for (unsigned q = 0; q < cl.size(); ++q) total += cl.at(&s, q)->block_sums[threadIdx.x];
    s.all_sums[threadIdx.x] = total;
  }
  cl.sync();
}

// The draw without the cuts, when no top-k cut applies: draw() takes the
// largest score over the kept entries. The first pass over the row found
// the kDrawCandidates largest scores over every finite entry (s.all_tops);
// the first of them that is kept is draw()'s answer (every larger score is
// not kept): the same token, found without the bins, the gather and sort of
// the cut bin, and the draw's own pass. A candidate c is kept when its
// weight passes min-p and the mass of the entries before it in the host's
// order (larger logits, lower ids on ties; pick_key) is below top-p's
// target, ceil(top_p * the finite entries' mass), for then the cut (the
// first entry at which the running mass reaches the target) is c or after
// it. One pass: the total mass and the mass before each candidate. Returns
// true once block 0 has written the draw's key; false, alike in every block
// of the cluster, when no candidate is kept (about (1 - top_p)^4 of the
// time) and the caller cuts and draws.
__device__ bool draw_if_kept(const float* x, const Slice& sl, const SampleRow& r, const Weights& w, uint64_t* keys,
                             Shared& s, const Cluster& cl) {
  uint64_t c_key[kDrawCandidates];
#pragma unroll
  for (int j = 0; j < kDrawCandidates; ++j) {
    const uint64_t top = s.all_tops[j];
    const auto c = static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(top & 0xffffffffu));
    c_key[j] = top != 0 ? pick_key(x[c], c) : ~0ull;  // no candidate: nothing is before it, never kept
  }
  unsigned long long sums[kDrawCandidates + 1] = {};
  for_each_logit(x, sl, [&](float v, int64_t i) {
    const unsigned long long m = w.mass(v);  // 0 for NaN and -inf
    const uint64_t k = pick_key(v, i);
    sums[0] += m;
#pragma unroll
    for (int j = 0; j < kDrawCandidates; ++j) sums[j + 1] += k > c_key[j] ? m : 0;
  });
  cluster_mass_sums(sums, s, cl);
  auto target = static_cast<unsigned long long>(ceil(static_cast<double>(r.top_p) * static_cast<double>(s.all_sums[0])));
  target = target > 0 ? target : 1;
  for (int j = 0; j < kDrawCandidates; ++j) {
    if (c_key[j] == ~0ull) return false;
    if (r.min_p > 0.0f && !(w.weight(key_value(static_cast<uint32_t>(c_key[j] >> 32))) >= r.min_p)) continue;
    if (s.all_sums[j + 1] >= target) continue;
    if (threadIdx.x == 0 && cl.rank() == 0) keys[r.pick] = c_key[j];
    return true;
  }
  return false;
}

// One row per cluster of `blocks` blocks (1 without clusters), each block a slice of the row.
__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int64_t vocab, const SampleRow* rows,
                                                          const LogitOp* ops, uint64_t* keys, bool cuts_first) {
  __shared__ Shared s;
  const Cluster cl{};
  const unsigned blocks = cl.size(), rank = cl.rank();
  const SampleRow r = rows[blockIdx.x / blocks];
  float* x = logits + static_cast<int64_t>(r.row) * vocab;
  const int64_t chunk = ((vocab + blocks - 1) / blocks + 31) / 32 * 32;
  const Slice sl{rank * chunk < vocab ? rank * chunk : vocab, (rank + 1) * chunk < vocab ? (rank + 1) * chunk : vocab};

  // 1. The logit ops of the slice's ids, in the host sampler's order; within a phase the ids are distinct.
  for (int phase = 0; phase < 4; ++phase) {
    for (int i = r.ops_begin + static_cast<int>(threadIdx.x); i < r.ops_end; i += blockDim.x) {
      const LogitOp op = ops[i];
      if (op.phase != phase || op.id < sl.lo || op.id >= sl.hi) continue;
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
  const float inv_t = r.greedy ? 1.0f : 1.0f / r.temperature, log2e_inv_t = kLog2e * inv_t;

  // A top-p row without top-k (not cutting first) first finds its draw's
  // candidates, the best scores over every finite logit, and the row's
  // maximum m, in one pass; draw_if_kept draws from them in a second. Only
  // when no candidate is kept does the row take the full path below.
  if (!cuts_first && !r.greedy && r.top_p < 1.0f && r.top_k <= 0) {
    if (threadIdx.x == 0) s.block_max_key = 0;
    if (threadIdx.x < kDrawCandidates) s.block_tops[threadIdx.x] = 0;
    __syncthreads();
    uint64_t tops[kDrawCandidates] = {};
    float mx = -INFINITY;    // fmaxf passes NaN by
    float last = -INFINITY;  // the score of tops' last key, -inf while tops has room
    // Inserts the draw's argmax key of logit v at id i, score sc, if v is finite.
    const auto insert = [&](float v, float sc, int64_t i) {
      if (finite_logit(v)) insert_top(tops, pick_key(sc, i));
    };
    // The scores as floats, so the common case (no score of the group reaches tops' last) takes one
    // comparison and no branch between a thread's four logits: a key above tops' last has a score at
    // least its score (keys order scores, then ids), and NaN scores (NaN logits) are never kept.
    for_each_quad(
        x, sl,
        [&](const float4 v, int64_t i) {
          mx = fmaxf(fmaxf(mx, v.x), fmaxf(fmaxf(v.y, v.z), v.w));
          const float s0 = draw_score(v.x, log2e_inv_t, r.key, i), s1 = draw_score(v.y, log2e_inv_t, r.key, i + 1),
                      s2 = draw_score(v.z, log2e_inv_t, r.key, i + 2), s3 = draw_score(v.w, log2e_inv_t, r.key, i + 3);
          if (fmaxf(fmaxf(s0, s1), fmaxf(s2, s3)) >= last) {  // rare once the thread has seen a few groups
            insert(v.x, s0, i);
            insert(v.y, s1, i + 1);
            insert(v.z, s2, i + 2);
            insert(v.w, s3, i + 3);
            const uint64_t k = tops[kDrawCandidates - 1];
            last = k != 0 ? key_value(static_cast<uint32_t>(k >> 32)) : -INFINITY;
          }
        },
        [&](float v, int64_t i) {
          mx = fmaxf(mx, v);
          insert(v, draw_score(v, log2e_inv_t, r.key, i), i);
        });
    const uint32_t mk = __reduce_max_sync(0xffffffffu, order_key(mx));
    if ((threadIdx.x & 31) == 0) atomicMax(&s.block_max_key, mk);
    cluster_tops(tops, s, cl);  // its syncs also publish s.block_max_key to the block and the cluster
    if (threadIdx.x == 0) {
      uint32_t all = 0;
      for (unsigned q = 0; q < blocks; ++q) all = max(all, cl.at(&s, q)->block_max_key);
      s.max_key = all;
    }
    __syncthreads();
    // A candidate means a finite logit, so m is finite or +inf, as the full path's. The bins are not used.
    const Weights w{key_value(s.max_key), inv_t, 1.0f, log2e_inv_t};
    if (s.all_tops[0] != 0 && draw_if_kept(x, sl, r, w, keys, s, cl)) return;  // its syncs follow the reads above
    cl.sync();  // every block has read the others' block_max_key before any goes on
  }

  // 2-3. The argmax (greedy, or nothing finite), the finite maximum and minimum: the slice's, then the row's.
  if (threadIdx.x == 0) {
    s.best = 0;
    s.finite = 0;
    s.min_key = UINT_MAX;
  }
  __syncthreads();
  uint64_t best = 0;
  int finite = 0;
  uint32_t min_key = UINT_MAX;
  for_each_logit(x, sl, [&](float v, int64_t i) {
    const uint64_t k = v == v ? pick_key(v, i) : 0;  // no branches, so a thread's four logits interleave
    best = k > best ? k : best;
    const bool f = finite_logit(v);
    finite += f ? 1 : 0;
    min_key = f ? min(min_key, order_key(v)) : min_key;
  });
  finite = __reduce_add_sync(0xffffffffu, finite);
  min_key = __reduce_min_sync(0xffffffffu, min_key);
  if ((threadIdx.x & 31) == 0 && finite > 0) {
    atomicAdd(&s.finite, finite);
    atomicMin(&s.min_key, min_key);
  }
  best = block_max_u64(best, &s.best);
  if (threadIdx.x == 0) {
    s.block_best = best;
    s.block_finite = s.finite;
    s.block_min_key = s.min_key;
  }
  cl.sync();
  if (threadIdx.x == 0) {
    for (unsigned q = 0; q < blocks; ++q) {
      const Shared* other = cl.at(&s, q);
      s.best = other->block_best > s.best ? other->block_best : s.best;
      s.min_key = min(s.min_key, other->block_min_key);
      if (q != rank) s.finite += other->block_finite;
    }
  }
  cl.sync();  // every block has read the others' before any goes on (or leaves)
  best = s.best;
  const int num_finite = s.finite;
  if (r.greedy || num_finite == 0) {
    if (threadIdx.x == 0 && rank == 0) keys[r.pick] = best;
    return;
  }
  // The largest value is finite here. The bins below the last span the row from m down to its smallest
  // logit, or kMaxSpan nats (a nearly flat row gets narrow bins, a peaked one wide bins and a long tail).
  const float m = key_value(static_cast<uint32_t>(best >> 32));
  const float span = fminf((m - key_value(s.min_key)) * inv_t, kMaxSpan);
  const Weights w{m, inv_t, span > 0.0f ? (static_cast<float>(kBins) - 1.5f) / span : 1.0f, log2e_inv_t};

  // 4. The cuts (bins, else the radix select by the first block over the whole row), 5-6. min-p and the draw.
  uint64_t cut = 0;
  if (binned_cut(x, vocab, sl, r, w, num_finite, s, cl, cut)) {
    draw(x, sl, r, w, cut, best, keys, s, cl);
  } else if (rank == 0) {
    cut = radix_cut(x, vocab, r, w, num_finite, s);
    draw(x, Slice{0, vocab}, r, w, cut, best, keys, s, Cluster::single());
  }
}

// Blocks per row: on sm_90, a cluster of up to 8 while the rows leave SMs
// idle. The kernel must have been compiled for sm_90 too: code built for an
// older target (compute_80 PTX run on an H100) treats each block as a row
// of its own, so it gets one block per row whatever the device.
int blocks_per_row(int64_t num_rows) {
  static int clusters[64] = {};  // 0 not asked yet, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 1;
  if (clusters[device] == 0) {
    int major = 0;
    cudaFuncAttributes attributes{};
    const bool asked = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                       cudaFuncGetAttributes(&attributes, sample_kernel) == cudaSuccess;
    if (!asked) return 1;
    clusters[device] = major >= 9 && attributes.ptxVersion >= 90 ? 2 : 1;
  }
  if (clusters[device] == 1) return 1;
  return num_rows <= 16 ? 8 : num_rows <= 33 ? 4 : num_rows <= 66 ? 2 : 1;
}

}  // namespace

cudaError_t sample_rows(float* logits, int64_t vocab, const SampleRow* rows, int64_t num_rows, const LogitOp* ops,
                        uint64_t* keys, cudaStream_t stream, bool cuts_first) {
  if (num_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT32_MAX) return cudaErrorInvalidValue;
  const int blocks = blocks_per_row(num_rows);
  if (blocks > 1) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned int>(num_rows * blocks));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned int>(blocks);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, sample_kernel, logits, vocab, rows, ops, keys, cuts_first) == cudaSuccess) {
      return cudaSuccess;
    }
    (void)cudaGetLastError();  // no room for such clusters: one block per row
  }
  return launch_kernel(sample_kernel, dim3(static_cast<unsigned int>(num_rows)), dim3(kThreads), 0, stream, false,
                       logits, vocab, rows, ops, keys, cuts_first);
}

}  // namespace tern::cuda
