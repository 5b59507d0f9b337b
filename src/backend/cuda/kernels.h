// The CUDA backend's kernels, one launcher per op. Every pointer is device
// memory; bf16 tensors are passed as raw 16-bit words (bf16 below) so this
// header needs no CUDA C++ types. Each launcher enqueues on `stream` and
// returns the launch's error (cudaGetLastError), which the caller checks.
// The CPU reference kernels (backend/cpu/reference_kernels.h) are the oracle
// for each of these; tests/gpu/kernels_test.cpp holds them side by side.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tern::cuda {

using bf16 = uint16_t;  // bfloat16 bits

// x[t, :] = fp32(table[ids[t], :]) for t < num_tokens. table is [rows, hidden].
cudaError_t embedding_gather(const bf16* table, const int32_t* ids, int64_t num_tokens, int64_t hidden, float* x,
                             cudaStream_t stream);

// For each output row i < num_rows, with source row r = rows ? rows[i] : i:
//   x[r] += delta[r]                       (when delta is not null; fp32)
//   out[i] = bf16(x[r] / sqrt(mean(x[r]^2) + eps) * weight)   (fp32 math)
// The residual add and the norm in one pass over the row; `rows` gathers
// the rows whose logits are wanted before the final norm.
cudaError_t add_rmsnorm(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        int64_t hidden, float eps, bf16* out, cudaStream_t stream);

// Interleaved (GPT-J) RoPE of the q and k parts of each token's fused qkv
// row, [q: num_heads*head_dim | k: kv_dim | v: kv_dim] with row_stride
// elements between rows, at positions[t]. q is rotated in place; the rotated
// k and the v of token t are written to slot slots[t] of this layer's paged
// K and V planes ([num_blocks * block_size][kv_dim] each, slot = block *
// block_size + offset). inv_freq has head_dim/2 entries.
struct RopeKvParams {
  bf16* qkv = nullptr;
  int64_t row_stride = 0;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const float* inv_freq = nullptr;
  int64_t num_tokens = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
};
cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream);

// Causal GQA attention of a step's tokens over the paged K/V of one layer.
// Token t belongs to sequence token_seq[t], sits at positions[t] and attends
// to positions 0..positions[t] of its sequence, whose block table starts at
// block_tables + table_offsets[token_seq[t]]. Query head h uses kv head
// h / (num_heads / num_kv_heads). out[t, h*head_dim + d] (bf16, out_row_stride
// between rows). With num_splits > 1 each split of split_len keys writes an
// unnormalized partial result to partial_out [T][num_heads][num_splits]
// [head_dim] and its max and sum to partial_ml [T][num_heads][num_splits][2],
// then a second kernel merges them (flash-decoding).
struct PagedAttentionParams {
  const bf16* q = nullptr;
  int64_t q_row_stride = 0;
  const bf16* k_cache = nullptr;  // this layer's K plane
  const bf16* v_cache = nullptr;  // this layer's V plane
  const int32_t* positions = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* table_offsets = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t num_tokens = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  int num_splits = 1;
  int split_len = 0;  // keys per split, a multiple of kAttentionTile; ignored when num_splits == 1
  float* partial_out = nullptr;
  float* partial_ml = nullptr;
  bf16* out = nullptr;
  int64_t out_row_stride = 0;
};
constexpr int kAttentionTile = 32;
// Largest head_dim and q heads per kv head the kernel handles.
constexpr int kMaxAttentionHeadDim = 128;
constexpr int kMaxAttentionGroup = 32;
cudaError_t paged_attention(const PagedAttentionParams& p, cudaStream_t stream);

// out[t, i] = bf16(silu(gate) * up) with gate = gu[t, i], up = gu[t, inter + i]
// (the fused gate|up GEMM's row), fp32 math.
cudaError_t silu_mul(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out, cudaStream_t stream);

}  // namespace tern::cuda
