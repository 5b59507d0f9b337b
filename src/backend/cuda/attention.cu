// Paged GQA attention for decode and one-token chunks (paged_attention);
// query tiles of prefill chunks are attention_prefill.cu. Two forms: the
// scalar kernel below for any shape, the tensor-core kernel
// (attention_mma.cu) for head_dim 64 or 128. Scalar form: one block per (token, kv head, key split);
// warp w of the block serves q head kvh * group + w, so the group's heads
// share each K/V tile, loaded once into shared memory (fp32, K rows padded
// against bank conflicts). Lane j scores key j of a 32-key tile; the online
// softmax state (max, sum, and each lane's head_dim / 32 output dims) lives
// in registers. With several splits (flash-decoding), each writes its
// unnormalized partial result and the last split to finish merges them (a
// counter per token and kv head), so a split decode is one launch; splitting
// is what keeps the GPU busy on decode batches too small to fill it. Split
// lengths come from each token's own context, read on the device: the launch
// shape depends only on the numbers of tokens and splits, as a CUDA graph
// needs. Both forms read a bf16 or an FP8 E4M3 pool (the element type a
// template parameter: e4m3 is converted to bf16 exactly as it is loaded).
#include <cfloat>

#include "backend/cuda/attention_mma.h"
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kTile = kAttentionTile;

template <int kDimsPerLane, typename Cache>
__global__ void paged_attention_kernel(PagedAttentionParams p) {
  allow_dependent_launch();
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int group = p.heads.num_heads / p.heads.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = p.heads.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * hd;
  const int ctx = p.places.positions[t] + 1;
  const int32_t* table = p.tables.block_tables + p.tables.table_offsets[p.tables.token_seq[t]];
  int begin = 0, end = ctx;
  if (p.num_splits > 1) {
    const int per = ((ctx + p.num_splits - 1) / p.num_splits + kTile - 1) / kTile * kTile;
    begin = split * per;
    end = min(ctx, begin + per);  // empty (begin >= end) for splits past the context
  }

  grid_dependency_wait();  // q and this step's K/V come from the kernels before

  extern __shared__ float smem[];
  float* q_s = smem;                    // [group][hd], pre-scaled by 1/sqrt(hd)
  float* k_s = q_s + group * hd;        // [kTile][hd + 1]
  float* v_s = k_s + kTile * (hd + 1);  // [kTile][hd]

  const float scale = rsqrtf(static_cast<float>(hd));
  const bf16* q = p.q + t * p.q_row_stride + static_cast<int64_t>(kvh) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) q_s[i] = load_bf16(q + i) * scale;

  const float* qh = q_s + warp * hd;
  float m = -FLT_MAX, l = 0.0f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;

  for (int tile = begin; tile < end; tile += kTile) {
    __syncthreads();  // the previous tile is consumed (and q_s is written, on the first pass)
    const int n = min(kTile, end - tile);
    if (hd % 8 == 0) {  // 16-byte loads of 8 dims
      const int per_key = hd / 8;
      for (int i = threadIdx.x; i < n * per_key; i += blockDim.x) {
        const int j = i / per_key, d = (i - j * per_key) * 8;
        const int key = tile + j;
        const int64_t block = table[key / p.tables.block_size];
        const int64_t off =
            (block * p.tables.block_size + key % p.tables.block_size) * kv_dim + static_cast<int64_t>(kvh) * hd + d;
        const uint4 kw = load_kv8(k_plane<Cache>(p.planes) + off);
        const uint4 vw = load_kv8(v_plane<Cache>(p.planes) + off);
        const uint32_t kx[4] = {kw.x, kw.y, kw.z, kw.w}, vx[4] = {vw.x, vw.y, vw.z, vw.w};
        float* kd = k_s + j * (hd + 1) + d;
        float* vd = v_s + j * hd + d;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          kd[2 * h] = __uint_as_float(kx[h] << 16);
          kd[2 * h + 1] = __uint_as_float(kx[h] & 0xffff0000u);
          vd[2 * h] = __uint_as_float(vx[h] << 16);
          vd[2 * h + 1] = __uint_as_float(vx[h] & 0xffff0000u);
        }
      }
    } else {
      for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
        const int j = i / hd, d = i - j * hd;
        const int key = tile + j;
        const int64_t block = table[key / p.tables.block_size];
        const int64_t off =
            (block * p.tables.block_size + key % p.tables.block_size) * kv_dim + static_cast<int64_t>(kvh) * hd + d;
        k_s[j * (hd + 1) + d] = load_kv(k_plane<Cache>(p.planes) + off);
        v_s[j * hd + d] = load_kv(v_plane<Cache>(p.planes) + off);
      }
    }
    __syncthreads();

    float s = -FLT_MAX;
    if (lane < n) {
      const float* kr = k_s + lane * (hd + 1);
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qh[d] * kr[d];
      s = dot;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float correction = __expf(m - m_new);
    const float prob = lane < n ? __expf(s - m_new) : 0.0f;
    l = l * correction + warp_sum(prob);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= correction;
    for (int j = 0; j < n; ++j) {
      const float pj = __shfl_sync(0xffffffffu, prob, j);
      const float* vr = v_s + j * hd;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] += pj * vr[d];
      }
    }
    m = m_new;
  }

  const int64_t head = static_cast<int64_t>(kvh) * group + warp;
  if (p.num_splits == 1) {
    const float inv = 1.0f / l;
    bf16* o = p.out + t * p.out_row_stride + head * hd;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) store_bf16(o + d, acc[i] * inv);
    }
    return;
  }
  const int64_t base = (t * p.heads.num_heads + head) * p.num_splits;
  float* o = p.partial_out + (base + split) * hd;
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) o[d] = acc[i];
  }
  if (lane == 0) {
    p.partial_ml[(base + split) * 2] = m;  // -FLT_MAX and l = 0 for an empty split
    p.partial_ml[(base + split) * 2 + 1] = l;
  }

  // The last split of this (token, kv head) to arrive merges all of them
  // (CUDA's threadFenceReduction pattern: publish, count, then read past L1).
  if (!last_split_to_arrive(p.split_counters + t * p.heads.num_kv_heads + kvh, p.num_splits)) return;
  // Lane s holds split s's statistics; out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),
  // summed in split order whichever split merges.
  float ms = -FLT_MAX, ls = 0.0f;
  if (lane < p.num_splits) {
    ms = __ldcg(p.partial_ml + (base + lane) * 2);
    ls = __ldcg(p.partial_ml + (base + lane) * 2 + 1);
  }
  const float m_max = warp_max(ms);
  const float weight = lane < p.num_splits ? __expf(ms - m_max) : 0.0f;
  const float inv = 1.0f / warp_sum(ls * weight);
  float merged[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) merged[i] = 0.0f;
  for (int sp = 0; sp < p.num_splits; ++sp) {
    const float ws = __shfl_sync(0xffffffffu, weight, sp);
    const float* po = p.partial_out + (base + sp) * hd;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) merged[i] += __ldcg(po + d) * ws;
    }
  }
  bf16* out = p.out + t * p.out_row_stride + head * hd;
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) store_bf16(out + d, merged[i] * inv);
  }
}

template <int kDimsPerLane, typename Cache>
cudaError_t launch(const PagedAttentionParams& p, dim3 grid, int threads, size_t smem, cudaStream_t stream,
                   bool pdl) {
  if (smem + 1024 > 48 * 1024) {  // the default limit counts the static shared memory too
    const cudaError_t e = allow_large_smem<paged_attention_kernel<kDimsPerLane, Cache>>();
    if (e != cudaSuccess) return e;
  }
  return launch_kernel(paged_attention_kernel<kDimsPerLane, Cache>, grid, dim3(threads), smem, stream, pdl, p);
}

template <int kDimsPerLane>
cudaError_t launch(const PagedAttentionParams& p, dim3 grid, int threads, size_t smem, cudaStream_t stream,
                   bool pdl) {
  return p.planes.fp8() ? launch<kDimsPerLane, fp8e4m3>(p, grid, threads, smem, stream, pdl)
                        : launch<kDimsPerLane, bf16>(p, grid, threads, smem, stream, pdl);
}

}  // namespace

bool paged_attention_takes_rope(int num_heads, int num_kv_heads, int head_dim) {
  return num_kv_heads > 0 && num_heads % num_kv_heads == 0 && num_heads / num_kv_heads <= 16 &&
         (head_dim == 64 || head_dim == 128);
}

cudaError_t paged_attention(const PagedAttentionParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return cudaSuccess;
  const int group = p.heads.num_heads / p.heads.num_kv_heads;
  if (p.heads.head_dim > kMaxAttentionHeadDim || group > kMaxAttentionGroup || p.num_splits < 1 ||
      p.num_splits > kMaxAttentionSplits || (p.num_splits > 1 && p.split_counters == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned int>(p.num_tokens), static_cast<unsigned int>(p.heads.num_kv_heads),
                  static_cast<unsigned int>(p.num_splits));
  if (paged_attention_takes_rope(p.heads.num_heads, p.heads.num_kv_heads, p.heads.head_dim)) {
    const bool planes = p.planes.fp8() ? p.planes.v_fp8 != nullptr
                                       : p.planes.k_cache != nullptr && p.planes.v_cache != nullptr;
    if (p.rope_kv && (p.places.inv_freq == nullptr || p.places.slots == nullptr || !planes)) {
      return cudaErrorInvalidValue;
    }
    if (p.rope_q && (p.rope_kv || p.places.inv_freq == nullptr)) return cudaErrorInvalidValue;
    return paged_attention_mma(p, grid, stream, pdl);
  }
  // The scalar kernel serves tokens 0..T-1 and leaves RoPE to rope_store_kv.
  if (p.token_list != nullptr || p.rope_kv || p.rope_q) return cudaErrorInvalidValue;
  const int threads = 32 * group;
  const size_t smem = sizeof(float) * (static_cast<size_t>(group) * p.heads.head_dim +
                                       static_cast<size_t>(kTile) * (2 * p.heads.head_dim + 1));
  cudaError_t e;
  if (p.heads.head_dim <= 32) {
    e = launch<1>(p, grid, threads, smem, stream, pdl);
  } else if (p.heads.head_dim <= 64) {
    e = launch<2>(p, grid, threads, smem, stream, pdl);
  } else {
    e = launch<4>(p, grid, threads, smem, stream, pdl);
  }
  return e;
}

}  // namespace tern::cuda
