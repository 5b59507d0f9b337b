// Reference CPU kernels: the correctness oracle every faster CPU or CUDA
// kernel is tested against. Plain loops, fp32 math with fp32 accumulation in
// a fixed order (so results do not depend on the thread count or on how many
// tokens are processed together), multi-threaded over output rows.
// All pointers are borrowed; nothing here allocates more than scratch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "formats/dtype.h"  // the DType enum only; tern_backend_cpu does not link tern_formats

namespace tern::cpu {

struct PackedWeight;  // quant_pack.h

// A weight matrix in PyTorch [out, in] layout, row-major: row r holds the
// `cols` input weights of output feature r. dtype is kF32, kF16 or kBF16 and
// `data` must be aligned to the element size, or one of the quantized weight
// dtypes (is_quantized_weight_dtype): then each row is cols / block_size
// whole blocks (quant_blocks.h; cols a multiple of the block size) and `data`
// is 2-byte aligned. Borrowed (usually a memory map).
struct WeightMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features
  // The same matrix repacked for the optimized kernels (quant_pack.h), or
  // nullptr. Borrowed; the reference kernels never read it.
  const PackedWeight* packed = nullptr;
};

// A 1-D weight (norm scales); same dtypes and alignment rule as WeightMatrix.
struct WeightVector {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t size = 0;
};

// True for the element types these kernels read weights in (vectors and matrices).
bool is_weight_dtype(DType dtype);
// Bytes per element of a weight dtype (0 for any other dtype).
size_t weight_element_size(DType dtype);
// True for the block-quantized types a WeightMatrix may have: Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K (the reference kernels dequantize them; linear_fast
// multiplies them with 8-bit-quantized activations).
bool is_quantized_weight_dtype(DType dtype);

// Where the K (or V) rows of one layer of one sequence live. Position p is at
// blocks[p / block_size] + (p % block_size) * row_stride. A contiguous cache
// is one block with block_size = capacity; a paged cache passes its block
// table. Attention reads the cache only through this, so the cache layout can
// change without touching the kernel. An FP8 E4M3 cache (base/fp8_e4m3.h)
// sets fp8_blocks instead of blocks: element e of a row stands for
// fp8_e4m3_to_f32(e) * scale. A bf16 cache sets bf16_blocks: element e
// stands for bf16_to_f32(e).
struct KvRowTable {
  std::span<const float* const> blocks;
  int64_t block_size = 0;  // positions per block
  int64_t row_stride = 0;  // elements between consecutive positions in a block
  std::span<const uint8_t* const> fp8_blocks;
  float scale = 1.0f;  // fp8 only
  std::span<const uint16_t* const> bf16_blocks;

  bool is_fp8() const { return !fp8_blocks.empty(); }
  bool is_bf16() const { return !bf16_blocks.empty(); }
  // Rows that are not fp32: read through a conversion.
  bool is_coded() const { return is_fp8() || is_bf16(); }
  const float* row(int64_t pos) const {
    return blocks[static_cast<size_t>(pos / block_size)] + (pos % block_size) * row_stride;
  }
  const uint8_t* row_fp8(int64_t pos) const {
    return fp8_blocks[static_cast<size_t>(pos / block_size)] + (pos % block_size) * row_stride;
  }
  const uint16_t* row_bf16(int64_t pos) const {
    return bf16_blocks[static_cast<size_t>(pos / block_size)] + (pos % block_size) * row_stride;
  }
};

struct AttentionShape {
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // divides num_heads; kv head j serves q heads j*g .. j*g+g-1
  int64_t head_dim = 0;
};

// out[i, :] = fp32 copy of row ids[i] of `table` (out is [ids.size(), cols]).
// The caller has checked every id is in [0, table.rows).
void embedding_lookup(const WeightMatrix& table, std::span<const int32_t> ids, float* out);

// One weight row converted to fp32 (cols floats; quantized rows dequantized).
void weight_row_to_f32(const WeightMatrix& w, int64_t row, float* out);
// The whole vector converted to fp32.
std::vector<float> weight_vector_to_f32(const WeightVector& w);

// y[T, w.rows] = x[T, w.cols] . W^T with fp32 accumulation. Parallel over
// weight rows; tokens are processed in tiles so each weight row is read from
// memory once per tile rather than once per token. y must not alias x.
// Quantized rows are dequantized to fp32 (once per token tile) and then take
// the same fp32 dot product, so the result is that of the dequantized matrix.
// Uses AVX2 when the CPU has it, with the same bits as the portable path.
void linear(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y);
// linear() restricted to baseline x86-64 instructions (for tests of the above).
void linear_portable(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y);

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, fp32 (the weight is
// used as is, not offset by 1). y may equal x.
void rmsnorm(const float* x, int64_t num_tokens, const WeightVector& w, float eps, float* y);

// inv_freq[i] = 1 / theta^(2i / head_dim) for i < head_dim/2, computed in
// fp32 the way HF transformers computes its default rotary frequencies.
std::vector<float> rope_inv_freq(int64_t head_dim, double theta);

// Interleaved (GPT-J) rotary embedding in place on x [T, num_heads*head_dim]:
// for each head and i < head_dim/2, with a = inv_freq[i] * positions[t] (fp32),
//   x[2i]   <- x[2i] cos a - x[2i+1] sin a
//   x[2i+1] <- x[2i+1] cos a + x[2i] sin a
void rope_interleaved(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                      std::span<const int64_t> positions, std::span<const float> inv_freq);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. out may alias either.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// One sequence's share of a batched attention call: q and out rows
// [first_token, first_token + num_tokens) are its tokens, and they attend to
// its K/V rows through `k` and `v`.
struct AttentionSequence {
  int64_t first_token = 0;
  int64_t num_tokens = 0;
  KvRowTable k, v;
};

// What an attention_batch call reads: the K/V rows over every token and kv
// head (each token's context, positions[r] + 1, times num_kv_heads), and the
// longest context. Both kernel sets split their work by `rows`.
struct AttentionCost {
  int64_t rows = 0;
  int64_t max_len = 0;
};
AttentionCost attention_cost(std::span<const int64_t> positions, std::span<const AttentionSequence> seqs,
                             int64_t num_kv_heads);

// Causal grouped-query attention for T query tokens of one sequence.
// q: [T, num_heads*head_dim]; token t sits at positions[t] and attends to
// the K/V rows at positions 0..positions[t] (which must already be written).
// Scores are scaled by 1/sqrt(head_dim); softmax in fp32, max-subtracted.
// out: [T, num_heads*head_dim]. Same work split as attention_batch.
void attention(ThreadPool& pool, const float* q, std::span<const int64_t> positions, const KvRowTable& k,
               const KvRowTable& v, const AttentionShape& shape, float* out);

// attention() for the tokens of several sequences in one call (one engine
// step): row r of q/out sits at positions[r] of the sequence whose range
// holds r; rows outside every range are not written. Work is split by cost
// (K/V rows read) over the pool, so long and short sequences mix well. Each
// output element has the same bits as attention() on that sequence alone.
void attention_batch(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                     std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out);

}  // namespace tern::cpu
