// The CUDA backend's kernels, one launcher per op. Every pointer is device
// memory; bf16 tensors are passed as raw 16-bit words (bf16 below) so this
// header needs no CUDA C++ types. Each launcher enqueues on `stream` and
// returns the launch's error (cudaGetLastError), which the caller checks.
// The CPU reference kernels (backend/cpu/reference_kernels.h) are the oracle
// for each of these; tests/cuda/kernels_test.cpp holds them side by side.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tern::cuda {

using bf16 = uint16_t;  // bfloat16 bits

// x[t, :] = fp32(table[ids[t], :]) for t < num_tokens. table is [rows, hidden].
// Also zeroes clear_keys[0 .. num_clear) (the step's argmax keys, below).
cudaError_t embedding_gather(const bf16* table, const int32_t* ids, int64_t num_tokens, int64_t hidden, float* x,
                             cudaStream_t stream, bool pdl = false, uint64_t* clear_keys = nullptr,
                             int64_t num_clear = 0);

// ids[pairs[2i]] = the token of keys[pairs[2i + 1]] (pick_of, below) for
// i < count: tokens the step before picked on the device become this
// step's input ids without a trip through the host (overlap scheduling).
cudaError_t feed_picks(int32_t* ids, const int32_t* pairs, int64_t count, const uint64_t* keys,
                       cudaStream_t stream);

// For each output row i < num_rows, with source row r = rows ? rows[i] : i:
//   x[r] += delta[r]                       (when delta is not null; fp32)
//   out[i] = bf16(x[r] / sqrt(mean(x[r]^2) + eps) * weight)   (fp32 math)
// The residual add and the norm in one pass over the row; `rows` gathers
// the rows whose logits are wanted before the final norm. With
// delta_count > 1 the delta is the sum of that many, delta_stride floats
// apart (a K-split GEMM's partials, linear_k_split), summed in order before
// the one add into x.
cudaError_t add_rmsnorm(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        int64_t hidden, float eps, bf16* out, cudaStream_t stream, int delta_count = 1,
                        int64_t delta_stride = 0);

// The parts several kernels' parameters share, so a step fills each once:
// the model's heads, the step's tokens (per step), one layer's K/V planes
// (per layer) and the step's block tables (per step).
//
// Attention heads: q head h reads kv head h / (num_heads / num_kv_heads).
struct HeadShape {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
};
// Where a step's tokens sit (the step's metadata): token t is at
// positions[t] (its rotation, and the last key it attends to), and its K/V
// go to slot slots[t] of a layer's planes (block * block_size + offset).
// inv_freq: the head_dim / 2 rotary frequencies.
struct TokenPlaces {
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const float* inv_freq = nullptr;
};
// One layer's paged K and V planes, [num_blocks * block_size][kv_dim] each:
// bf16, or (--kv-cache-dtype fp8) FP8 E4M3 bytes in k_fp8 / v_fp8 instead,
// stored with scale 1 (values beyond +-448 saturate). Every writer and
// reader below takes either; the element type is a template parameter of
// the kernels, so the bf16 code is what it was.
struct KvPlanes {
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
  uint8_t* k_fp8 = nullptr;
  uint8_t* v_fp8 = nullptr;
  bool fp8() const { return k_fp8 != nullptr; }
};
// Token t's keys: the block table of its sequence token_seq[t] starts at
// block_tables + table_offsets[token_seq[t]], block_size positions a block.
struct KvTables {
  const int32_t* token_seq = nullptr;
  const int32_t* table_offsets = nullptr;
  const int32_t* block_tables = nullptr;
  int block_size = 0;
};

// Interleaved (GPT-J) RoPE of the q and k parts of each token's fused qkv
// row, [q: num_heads*head_dim | k: kv_dim | v: kv_dim] with row_stride
// elements between rows, at places.positions[t]. q is rotated in place; the
// rotated k and the v of token t are written to slot places.slots[t] of
// this layer's planes. With kv_only, q is left as it is (the prefill tiles
// rotate it as they load it: PagedAttentionParams::rope_q) and the rows are
// only read.
struct RopeKvParams {
  bf16* qkv = nullptr;
  int64_t row_stride = 0;
  int64_t num_tokens = 0;
  HeadShape heads;
  TokenPlaces places;
  KvPlanes planes;
  bool kv_only = false;
};
cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream, bool pdl = false);

// Causal GQA attention of a step's tokens over the paged K/V of one layer
// (planes). Token t sits at places.positions[t] and attends to positions
// 0..positions[t] of its sequence, found through tables.
// out[t, h*head_dim + d] (bf16, out_row_stride between rows). With num_splits > 1 (flash-decoding) token t's context of
// ctx = positions[t] + 1 keys is cut into num_splits pieces of
// round_up(ceil(ctx / num_splits), kAttentionTile) keys (the last ones may be
// empty), so the launch shape depends only on the number of tokens and the
// contexts are read from device memory (a CUDA graph stays valid for any
// lengths). Each split writes an unnormalized partial result to partial_out
// [T][num_heads][num_splits][head_dim] and its max and sum to partial_ml
// [T][num_heads][num_splits][2]; the last split of a (token, kv head) to
// finish, found with split_counters[t * num_kv_heads + kvh] (zero before the
// launch, left zero after it), merges them in split order, so the result
// does not depend on which split finished last.
struct PagedAttentionParams {
  const bf16* q = nullptr;
  int64_t q_row_stride = 0;
  HeadShape heads;
  TokenPlaces places;  // positions; slots and inv_freq with rope_kv only
  KvPlanes planes;     // read; written with rope_kv only
  KvTables tables;
  int64_t num_tokens = 0;
  int num_splits = 1;
  float* partial_out = nullptr;   // num_splits > 1 only
  float* partial_ml = nullptr;    // num_splits > 1 only
  int* split_counters = nullptr;  // num_splits > 1 only
  bf16* out = nullptr;
  int64_t out_row_stride = 0;
  // Optional: block x serves token token_list[x] (x < num_tokens) instead of
  // token x; the partials and counters are indexed by x. Tensor-core shapes
  // only (head_dim 64 or 128, up to 16 q heads per kv head).
  const int32_t* token_list = nullptr;
  // Optional, for steps where every token is its sequence's only new one
  // (decode), tensor-core shapes only (paged_attention_takes_rope): the
  // work of rope_store_kv done here, one kernel fewer per layer. q's row
  // (q_row_stride apart) holds q, k and v as the q|k|v GEMM wrote them,
  // unrotated; each block rotates its q heads as it loads them (with
  // places.inv_freq), and the split holding the token's own position
  // rotates the row's k of its kv head and writes it and v to slot
  // places.slots[t] of planes before any of its warps reads a key. Results
  // equal rope_store_kv then paged_attention bit for bit.
  bool rope_kv = false;
  // Optional: q's rows are unrotated (rope_store_kv ran with kv_only, so
  // K/V are in the planes) and each block rotates the q rows it loads with
  // places.inv_freq, as rope_store_kv would: the same output bit for bit,
  // without q's round trip through memory. The prefill tiles (shapes where
  // prefill_tiles_take_rope) rotate at the tile's positions, the
  // tensor-core decode form (paged_attention_takes_rope; not with rope_kv)
  // at its token's.
  bool rope_q = false;
  // Tensor-core decode form over a bf16 pool: K/V chunks staged through
  // shared memory where two such blocks fit per SM (sm_90); false: loaded
  // straight into registers, the form GPUs with less shared memory and
  // e4m3 pools run (staging lost to it there on an H100). The same output
  // within rounding of the sums' order.
  bool stage_kv = true;
  // Tensor-core decode form, register loads: each warp prefetches into L2
  // the K/V rows of its chunk this many chunks ahead of the one it computes
  // (0: none). No effect on the output.
  int prefetch_chunks = 1;
  // Tensor-core decode form with at most 8 q heads per kv head: O computed
  // transposed, the q heads as the MMA's columns (half the accumulators and
  // P V MMAs, four blocks per SM in the register form); false: the heads as
  // rows, 16 of them whatever the group. The same output within rounding of
  // the sums' order.
  bool heads_as_columns = true;
  // With heads_as_columns: the scores transposed too, S^T = K q^T with a
  // chunk's 16 keys as the MMA's rows (none padding: half the MMAs of S),
  // the weights moved into P^T's fragment by an 8 x 8 transpose; false: S
  // = q K^T with the heads as rows (8 of 16 padding). The same output within
  // rounding of the sums' order.
  bool scores_transposed = true;
};
constexpr int kAttentionTile = 32;
// Largest head_dim and q heads per kv head the kernel handles, and splits per token.
constexpr int kMaxAttentionHeadDim = 128;
constexpr int kMaxAttentionGroup = 32;
constexpr int kMaxAttentionSplits = 32;
cudaError_t paged_attention(const PagedAttentionParams& p, cudaStream_t stream, bool pdl = false);
// Whether paged_attention takes rope_inv_freq (its tensor-core form) for a shape.
bool paged_attention_takes_rope(int num_heads, int num_kv_heads, int head_dim);

// The same attention for query tiles: tile i is the record tiles[4i .. 4i + 3]:
// its first token, its count (1..tile_tokens) of consecutive tokens of one
// sequence at consecutive positions (as a prefill chunk's tokens are), the
// keys its last token sees (that token's position + 1) and the offset of the
// sequence's block table in p.tables.block_tables. One
// block per (tile, kv head) loads each chunk of chunk_keys (32 or 64) keys
// of K and V into shared memory once for all of the tile's tokens and q
// heads (the MMA rows), so K/V are read once per tile instead of once per
// token. No splits (p.num_splits, token_list and num_tokens are ignored).
// prefill_tile_tokens is the tile size for a shape, 0 when the kernel does
// not take it (it needs head_dim 64 or 128 and q heads per kv head dividing
// 16); prefill_chunk_keys the chunk for a GPU's shared memory per
// multiprocessor (64 where three blocks of it fit, else 32).
int prefill_tile_tokens(int num_heads, int num_kv_heads, int head_dim);
// Whether the tiles can rotate q themselves (PagedAttentionParams::rope_q):
// tiles of at most 16 tokens (4 or more q heads per kv head).
bool prefill_tiles_take_rope(int num_heads, int num_kv_heads, int head_dim);
int prefill_chunk_keys(int head_dim, int smem_per_sm);
cudaError_t paged_attention_prefill(const PagedAttentionParams& p, const int32_t* tiles, int64_t num_tiles,
                                    cudaStream_t stream, int chunk_keys);

// out[t, i] = bf16(silu(gate) * up) with gate = gu[t, i], up = gu[t, inter + i]
// (the fused gate|up GEMM's row), fp32 math.
cudaError_t silu_mul(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out, cudaStream_t stream);

// The decode-sized linear layer: y[t, n] (+)= sum_k in[t, k] * W[n, k] for
// num_tokens <= kMaxGemvTokens, W bf16 [N, K] row-major, fp32 accumulation.
// One warp per output row (a pair of rows for kQkvRope) streams W once with
// 16-byte loads; the block first builds the input rows in shared memory
// (bf16 values, held as fp32), from one of:
//   kBf16:    x_bf16 [T][K] as is;
//   kRmsNorm: bf16(x[r] / sqrt(mean(x[r]^2) + eps) * norm_weight) of the fp32
//             residual rows x_f32 [.][K], r = rows ? rows[t] : t (the
//             add_rmsnorm above without its delta, fused in);
//   kSiluMul: bf16(silu(g) * u) of the gate|up rows x_bf16 [T][2K] (silu_mul fused in);
// and writes y [T][N] as bf16, fp32 (and, with argmax_keys, folds each
// token's outputs into argmax_keys[t] as argmax_rows does), adds into fp32 y (the residual
// stream), or, for kQkvRope, treats the N = (num_heads + 2 num_kv_heads) *
// head_dim outputs as a q|k|v row and does rope_store_kv's work on the fp32
// sums: q rotated into y (bf16, row stride N), k rotated and v into the
// token's slot of planes, bf16 or e4m3 (the q|k|v row's k and v parts of y
// are not written).
// int4 weights (W4A16; backend/cpu/int4_planar.h makes them): W[n, k] =
// (q - z) * d with q the nibble of element n * K + k in codes (the low one
// of a byte for an even element), and d (fp16 bits) and z those of its
// block of 32, (n * K + k) / 32, in scales and zeros. K a multiple of 32;
// codes 16-byte aligned. The fused matrices are their parts' rows appended.
struct Int4Weights {
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const uint8_t* zeros = nullptr;
};
// out[n, k] = bf16(W[n, k]) for n < rows, k < cols: the large steps' int4
// weights for the bf16 GEMM.
cudaError_t dequantize_int4_rows(const Int4Weights& w, int64_t rows, int64_t cols, bf16* out, cudaStream_t stream);

enum class GemvInput { kBf16, kRmsNorm, kSiluMul };
enum class GemvOutput { kBf16, kF32, kAddF32, kQkvRope };

// y[T, N] = x[T, K] . W^T for int4 W on the tensor cores (sm_80+), the codes
// turned into bf16 as dequantize_int4_rows makes them, fp32 sums: y as bf16
// (kBf16), fp32 (kF32) or added into fp32 (kAddF32). Where its tiles are
// fewer than two a multiprocessor, K may be split (int4_gemm_splits): each
// slice's fp32 partials go to the scratch and the tile's last slice adds them
// in slice order, so the bits do not depend on which slice finishes last.
// K a multiple of 128; codes 16-byte, scales 8-byte, zeros 4-byte and x
// 16-byte aligned (int4_gemm_takes); otherwise cudaErrorInvalidValue.
constexpr int kInt4MaxSplits = 8;  // the last slice adds at most 8 partials an output (one pass of its loads)
struct Int4GemmScratch {
  float* partials = nullptr;  // splits x T x N floats
  size_t partial_floats = 0;
  int* counters = nullptr;  // one a tile, zero at first; the kernel leaves them zero
  int num_counters = 0;
};
bool int4_gemm_takes(int64_t K, const Int4Weights& w);
// The kernels' launch settings, made once a process; int4_gemm makes them on first use, and a model calls this
// at load so that no graph capture makes them.
cudaError_t int4_gemm_prepare();
// The slices of K for a T x K x N product on sm_count multiprocessors (1: none), within the scratch.
int int4_gemm_splits(int64_t T, int64_t K, int64_t N, int sm_count, const Int4GemmScratch& scratch);
cudaError_t int4_gemm(const bf16* x, int64_t T, int64_t K, const Int4Weights& w, int64_t N, void* y, GemvOutput out,
                      int splits, const Int4GemmScratch& scratch, cudaStream_t stream);
struct GemvParams {
  GemvInput input = GemvInput::kBf16;
  GemvOutput output = GemvOutput::kBf16;
  const bf16* x_bf16 = nullptr;
  const float* x_f32 = nullptr;
  const int32_t* rows = nullptr;
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  int64_t num_tokens = 0;
  int64_t in_features = 0;   // K: a multiple of 8
  int64_t out_features = 0;  // N
  const bf16* w = nullptr;   // 16-byte aligned
  // Or FP8 weights (--quantization fp8; kRmsNorm -> kF32, the LM head, with
  // --quantize-lm-head): W[n, k] = e4m3(w_fp8[n * K + k]) * w_scale[n],
  // 16-byte aligned.
  const uint8_t* w_fp8 = nullptr;
  const float* w_scale = nullptr;
  // Or int4 weights (every form but kRmsNorm -> kF32), K a multiple of 32.
  Int4Weights w_int4;
  void* y = nullptr;
  // kQkvRope only: as RopeKvParams.
  HeadShape heads;
  TokenPlaces places;
  KvPlanes planes;
  // kF32 only, optional: [T] argmax keys (zero before the launch).
  uint64_t* argmax_keys = nullptr;
};
constexpr int kMaxGemvTokens = 8;
// Whether gemv() takes K for up to kMaxGemvTokens tokens (K % 8 == 0 and the
// input rows fit in shared memory). Call after cudaSetDevice.
bool gemv_supported(int64_t in_features);
// sm_count sizes the grid: one wave of resident blocks, rows strided over their warps.
cudaError_t gemv(const GemvParams& p, int sm_count, cudaStream_t stream, bool pdl = false);

// The argmax of each row of logits[r, 0:vocab] for r < num_rows, folded
// into keys[r] with atomicMax, so several blocks share a row and the LM
// head's GEMV can fold its outputs in as it writes them: the keys start at
// zero (embedding_gather clears them), and pick_of(keys[r]) is the index of
// the largest value, the lowest one on ties, never a NaN (all NaN gives 0):
// the host argmax of engine/sampler.h.
cudaError_t argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, uint64_t* keys, cudaStream_t stream,
                        bool pdl = false);
// Sampling on the device (sample.cu says how), one block per row: the
// host sampler's steps (engine/sampler.h) with the draw keyed by `key`.
// ops[ops_begin, ops_end) adjust the row first, by phase: 0 x += a (logit
// bias), 1 x = -inf (min_tokens), 2 x = x > 0 ? x / a : x * a (repetition),
// 3 x -= a then x -= b (frequency, presence); ids distinct within a phase.
// The row's logits are modified in place. keys[pick] gets the token as an
// argmax key (pick_of below).
struct LogitOp {
  int32_t id = 0;
  int32_t phase = 0;
  float a = 0, b = 0;
};
struct SampleRow {
  int32_t row = 0;   // logits row
  int32_t pick = 0;  // where the token goes in keys
  int32_t ops_begin = 0, ops_end = 0;
  float temperature = 1;  // > 0
  int32_t top_k = 0;      // <= 0: no top-k
  float top_p = 1;        // 1: no top-p
  float min_p = 0;        // 0: no min-p
  uint64_t key = 0;       // the draw's random key
  int32_t greedy = 0;     // nonzero: the argmax after the ops
};
// cuts_first: always cut first, never the draw without the cuts that
// top-p rows try first (sample.cu, draw_if_kept; the same tokens either way,
// which the kernel tests check with it).
cudaError_t sample_rows(float* logits, int64_t vocab, const SampleRow* rows, int64_t num_rows, const LogitOp* ops,
                        uint64_t* keys, cudaStream_t stream, bool cuts_first = false);

// All decoder layers of a one-token step in one cooperative launch of
// `grid` blocks (one per multiprocessor), decode_kernel.cu says how: from
// the residual row x (the embedding, fp32 [hidden]) to x after the last
// layer, writing the token's K/V into its slot of each layer's planes.
// The same math as the GEMV path's five kernels per layer (the order of the
// norm's sum and of attention differ). Each block holds its slices of one layer's weights in
// shared memory: caps are the most q|k|v row pairs, o rows, gate|up units
// (a gate row and its up row) and down rows a block gets, ceil(units /
// grid). barrier: one zeroed counter (decode_layers zeroes it first).
struct DecodeLayerWeights {
  const bf16* qkv = nullptr;       // [q_dim + 2 kv_dim][hidden]
  const bf16* o = nullptr;         // [hidden][q_dim]
  const bf16* gate_up = nullptr;   // [2 inter][hidden]
  const bf16* down = nullptr;      // [hidden][inter]
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  // With DecodeLayersParams::fp8, the four matrices as e4m3 codes (the
  // bf16 pointers above unused) and one fp32 scale per row (GemvParams).
  const uint8_t* qkv8 = nullptr;
  const uint8_t* o8 = nullptr;
  const uint8_t* gate_up8 = nullptr;
  const uint8_t* down8 = nullptr;
  const float* qkv_scale = nullptr;
  const float* o_scale = nullptr;
  const float* gate_up_scale = nullptr;
  const float* down_scale = nullptr;
  // With DecodeLayersParams::int4, the four matrices as int4 weights (Int4Weights: codes, a scale and a
  // zero per block of 32).
  Int4Weights qkv4, o4, gate_up4, down4;
};
struct DecodeLayersParams {
  const DecodeLayerWeights* layers = nullptr;  // device array of num_layers
  bool fp8 = false;   // the layers' FP8 matrices (widths multiples of 16)
  bool int4 = false;  // the layers' int4 matrices (widths multiples of 512)
  int num_layers = 0, hidden = 0, q_dim = 0, qkv_dim = 0, inter = 0;
  HeadShape heads;
  float eps = 0.0f;
  // The pool: [layer][k|v][plane_elems] elements, bf16 or (kv_fp8, --kv-cache-dtype fp8)
  // e4m3 bytes stored with scale 1, as KvPlanes.
  void* kv = nullptr;
  bool kv_fp8 = false;
  int64_t plane_elems = 0;
  // The step's metadata (StepView), tokens 0 .. num_tokens - 1: one
  // token, or up to kMaxDecodeLayersTokens consecutive positions of one
  // sequence (a chunk, such as a token and its drafts), each attending to
  // the keys up to its own; places.inv_freq and tables.block_size are the
  // model's, set with the rest at creation.
  TokenPlaces places;
  KvTables tables;
  int num_tokens = 1;
  float* x = nullptr;           // [num_tokens][hidden]
  bf16* qkv_out = nullptr;      // q, [num_tokens][q_dim]
  bf16* act = nullptr;          // SiLU products, [num_tokens][inter]
  float* partial_out = nullptr;  // [num_tokens][num_heads][kMaxDecodeLayersSplits][head_dim]
  float* partial_ml = nullptr;   // [num_tokens][num_heads][kMaxDecodeLayersSplits][2]
  unsigned int* barrier = nullptr;
  // Optional, for profiling: every block's clock at the start and at each
  // of the kDecodeLayersMarks phase boundaries per layer, [grid][marks] in
  // ns (globaltimer), then [grid][marks] in SM cycles.
  unsigned long long* timeline = nullptr;
  int cap_qkv_pairs = 0, cap_o_rows = 0, cap_gu_units = 0, cap_down_rows = 0;
  // SM cycles the blocks that do not attend wait in phase B before issuing
  // their o copy, and then before their up copy (sm_90; decode_kernel.cu).
  int b_o_delay_cycles = 0, b_up_delay_cycles = 0;
};
constexpr int kDecodeLayersThreads = 512;
// The delays above in ns: the attending blocks' K/V loads go out ahead of the o copy, and those
// and the o copy ahead of the up copy (bench/kernels/NOTES.md, phase 8).
constexpr int kDecodeLayersODelayNs = 600, kDecodeLayersUpDelayNs = 1500;
constexpr int kDecodeLayersMarks = 19;
constexpr int kMaxDecodeLayersSplits = 32;
constexpr int kMaxDecodeLayersHeads = 32;
// The most tokens of one sequence a launch takes (num_tokens > 1 runs an
// instance with room for this many tokens' inputs in shared memory).
constexpr int kMaxDecodeLayersTokens = 4;
// Dynamic shared memory per block for p's shapes, caps and token count.
int64_t decode_layers_smem(const DecodeLayersParams& p);
// Null when decode_layers takes p's shapes and token count on this device
// with `grid` blocks; otherwise why not. Call after cudaSetDevice, before capture.
const char* decode_layers_unsupported(const DecodeLayersParams& p, int grid);
cudaError_t decode_layers(const DecodeLayersParams& p, int grid, cudaStream_t stream);

// A key holds the value's bits in float order above (2^32 - 1 - index).
constexpr int32_t pick_of(uint64_t key) {
  return key == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu));
}

}  // namespace tern::cuda
