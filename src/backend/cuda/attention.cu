// Paged GQA attention for prefill chunks and decode in one kernel. One block
// per (token, kv head, key split); warp w of the block serves q head
// kvh * group + w, so the group's heads share each K/V tile, loaded once
// into shared memory (fp32, K rows padded against bank conflicts). Lane j
// scores key j of a 32-key tile; the online softmax state (max, sum, and
// each lane's head_dim / 32 output dims) lives in registers. With several
// splits (flash-decoding), each writes its unnormalized partial result and a
// second kernel merges them; this is what keeps the GPU busy on decode
// batches too small to fill it.
#include <cfloat>

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kTile = kAttentionTile;

template <int kDimsPerLane>
__global__ void paged_attention_kernel(PagedAttentionParams p) {
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = p.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * hd;
  const int ctx = p.positions[t] + 1;
  const int32_t* table = p.block_tables + p.table_offsets[p.token_seq[t]];
  const int begin = p.num_splits == 1 ? 0 : split * p.split_len;
  const int end = p.num_splits == 1 ? ctx : min(ctx, begin + p.split_len);

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
    for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
      const int j = i / hd, d = i - j * hd;
      const int key = tile + j;
      const int64_t block = table[key / p.block_size];
      const int64_t off = (block * p.block_size + key % p.block_size) * kv_dim + static_cast<int64_t>(kvh) * hd + d;
      k_s[j * (hd + 1) + d] = load_bf16(p.k_cache + off);
      v_s[j * hd + d] = load_bf16(p.v_cache + off);
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
  } else {
    const int64_t base = (t * p.num_heads + head) * p.num_splits + split;
    float* o = p.partial_out + base * hd;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) o[d] = acc[i];
    }
    if (lane == 0) {
      p.partial_ml[base * 2] = m;  // -FLT_MAX and l = 0 for a split past the context
      p.partial_ml[base * 2 + 1] = l;
    }
  }
}

// Merges the splits of one (token, head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void merge_splits_kernel(PagedAttentionParams p) {
  const int64_t t = blockIdx.x, head = blockIdx.y;
  const int64_t base = (t * p.num_heads + head) * p.num_splits;
  float m_max = -FLT_MAX;
  for (int s = 0; s < p.num_splits; ++s) m_max = fmaxf(m_max, p.partial_ml[(base + s) * 2]);
  float sum = 0.0f;
  for (int s = 0; s < p.num_splits; ++s) {
    sum += p.partial_ml[(base + s) * 2 + 1] * __expf(p.partial_ml[(base + s) * 2] - m_max);
  }
  const float inv = 1.0f / sum;
  bf16* o = p.out + t * p.out_row_stride + head * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < p.num_splits; ++s) {
      v += p.partial_out[(base + s) * p.head_dim + d] * __expf(p.partial_ml[(base + s) * 2] - m_max);
    }
    store_bf16(o + d, v * inv);
  }
}

template <int kDimsPerLane>
cudaError_t launch(const PagedAttentionParams& p, dim3 grid, int threads, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(paged_attention_kernel<kDimsPerLane>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  paged_attention_kernel<kDimsPerLane><<<grid, threads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  const int group = p.num_heads / p.num_kv_heads;
  if (p.head_dim > kMaxAttentionHeadDim || group > kMaxAttentionGroup || p.num_splits < 1 ||
      (p.num_splits > 1 && (p.split_len <= 0 || p.split_len % kTile != 0))) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned int>(p.num_tokens), static_cast<unsigned int>(p.num_kv_heads),
                  static_cast<unsigned int>(p.num_splits));
  const int threads = 32 * group;
  const size_t smem = sizeof(float) * (static_cast<size_t>(group) * p.head_dim +
                                       static_cast<size_t>(kTile) * (2 * p.head_dim + 1));
  cudaError_t e;
  if (p.head_dim <= 32) {
    e = launch<1>(p, grid, threads, smem, stream);
  } else if (p.head_dim <= 64) {
    e = launch<2>(p, grid, threads, smem, stream);
  } else {
    e = launch<4>(p, grid, threads, smem, stream);
  }
  if (e != cudaSuccess || p.num_splits == 1) return e;
  const dim3 merge_grid(static_cast<unsigned int>(p.num_tokens), static_cast<unsigned int>(p.num_heads));
  merge_splits_kernel<<<merge_grid, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tern::cuda
