// DeviceModel: the ERNIE 4.5 dense decoder on one CUDA GPU. Uploads the
// weights once as bf16 (q|k|v and gate|up concatenated so each is one GEMM),
// plans the activation workspace once for max_num_batched_tokens, owns the
// paged bf16 KV pool ([layer][k|v][block][block_size][kv_dim]) sized from a
// byte budget, and runs one engine step (a batch of SequenceChunks) per
// forward_step call: the argmax of plain-greedy rows is taken on the GPU and
// only its int32 comes back; fp32 logits come back for the rows the host
// samples. Decode steps (one token per sequence) run padded to a batch-size
// bucket (1, 2, 4, ..., 256) over fixed metadata buffers, replayed from a
// CUDA graph captured per bucket at creation unless enforce_eager; eager
// and graph steps enqueue the same kernels, so their results are identical.
// This header has no CUDA includes so host-only code can hold a DeviceModel.
// Thread: one caller at a time (the engine thread); the GPU work of a call
// is finished when it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/kernels.h"
#include "base/status.h"
#include "model/ernie4_5/device_step_plan.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/runner_options.h"

namespace tern::cuda {

// Every block's clock at each of the decode kernel's marks: the start,
// then kDecodeLayersMarks per layer as decode_kernel.cu places them (mark
// l * kDecodeLayersMarks + k + 1 ends phase k of layer l).
struct DecodeKernelTimeline {
  int blocks = 0, marks = 0;
  std::vector<double> ns;  // [blocks][marks], from block 0's first mark
  double sm_mhz = 0;       // block 0's SM clock over the kernel
  double at(int block, int mark) const { return ns[static_cast<size_t>(block) * marks + mark]; }
};

// Host views of the weights to upload (any dtype the CPU kernels read), in
// PyTorch [out, in] layout. Borrowed for the duration of create() only.
// With options.fp8_weights the layers' matrices are quantized as they are
// uploaded (cpu::quantize_fp8_matrix, float dtypes only); the embedding,
// the LM head and the norms never are. Otherwise a layer matrix whose parts
// are held in int4 blocks (Q4_0, an int4 checkpoint's Q8_0: exactly
// representable, backend/cpu/int4_planar.h) is uploaded as int4 weights
// (W4A16), any other as bf16.
struct HostLayerWeights {
  cpu::WeightVector input_norm;
  cpu::WeightMatrix q, k, v, o;
  cpu::WeightVector post_attention_norm;
  cpu::WeightMatrix gate, up, down;
};
struct HostWeights {
  cpu::WeightMatrix embedding;
  cpu::WeightMatrix lm_head;  // same data as embedding when tied: uploaded once
  cpu::WeightVector final_norm;
  std::vector<HostLayerWeights> layers;
  std::vector<float> rope_inv_freq;  // head_dim / 2, as the CPU reference computes them
};

// How forward_step turns a row with logits into a token (device_step_plan.h):
// kPickOnHost (the logits go to the host), kPickArgmax (folded into the LM
// head), kPickSample (sample_rows on the device).
using ::tern::kPickArgmax;
using ::tern::kPickOnHost;
using ::tern::kPickSample;

// The engine's options (RunnerOptions: block size, KV pool sizing, step
// limits, graphs, the one-token kernel) and the device paths' tuning knobs.
struct DeviceModelOptions : RunnerOptions {
  int64_t max_logit_rows = 256;            // LM-head rows computed per pass (more are done in passes)
  // Steps of up to this many tokens (<= kMaxGemvTokens) use the fused GEMV,
  // not cuBLAS. Measured on an H200 (full-size model, graphs): the GEMV wins
  // at 1 token (0.72 vs 1.10 ms/step), ties at 4, loses at 8 (1.61 vs 1.06).
  int64_t gemv_max_tokens = 4;
  // Programmatic dependent launches between the own kernels of the GEMV path
  // (sm_90+). Off: measured slower (0.76 vs 0.72 ms/step at 1 token, 1.31 vs
  // 1.10 at 4); kept for tuning, bit-identical either way.
  bool pdl = false;
  // Prefill chunks' attention in query tiles that share each K/V load
  // (paged_attention_prefill), where the shape allows; off: every token
  // alone, as decode tokens are.
  bool prefill_tiles = true;
  // Decode steps past the GEMV's sizes rotate q and k and write the token's
  // K/V inside the attention kernel (PagedAttentionParams::rope_kv),
  // where its tensor-core form takes the shape; off: rope_store_kv, one
  // kernel more per layer. Steps with prefill tiles rotate q in the
  // attention kernels (PagedAttentionParams::rope_q: the tiles, and a mixed
  // step's one-token chunks; where prefill_tiles_take_rope), rope_store_kv
  // writing only K/V; off: rope_store_kv rotates q in place. Bit-identical
  // either way.
  bool rope_in_attention = true;
  // The decode attention's K/V chunks (bf16 pool) through shared memory
  // where two such blocks fit per SM (PagedAttentionParams::stage_kv), in
  // steps whose tokens' contexts are split (few tokens: the blocks wait on
  // their loads' latency); off, in steps of one split per token and over an
  // e4m3 pool: straight into registers, as on GPUs with less shared memory.
  bool attention_stage_kv = true;
  // The decode attention's L2 prefetch distance in chunks
  // (PagedAttentionParams::prefetch_chunks); -1: by the pool's dtype, none
  // over bf16 and one chunk over e4m3. Measured on an H100 at 256 tokens
  // (bench/kernels/NOTES.md): bf16 +1.5% without it, -2.2% / -3.4% at 2 / 3
  // chunks; e4m3 -6% without it, -2.9% / -5.8% at 2 / 3.
  int attention_prefetch_chunks = -1;
  // The decode attention's tensor-core form with at most 8 q heads per kv
  // head: O transposed, the heads as the MMA's columns
  // (PagedAttentionParams::heads_as_columns); off: the heads as its rows.
  bool attention_heads_as_columns = true;
  // With attention_heads_as_columns: the scores transposed too, the keys as
  // the MMA's rows (PagedAttentionParams::scores_transposed); measured on an
  // H100, decode at 256 sequences +1.7% over the scores with the heads as rows.
  bool attention_scores_transposed = true;
  // With fp8_weights: past the GEMV's sizes, FP8 tensor-core GEMMs on
  // cuBLASLt (activations quantized per token; the scales applied by
  // cuBLASLt's outer-vector scales or, where it has none, as sm_90's
  // cuBLASLt 13.0, after its unscaled GEMM) where cuBLASLt offers them; off,
  // or where it does not: the layer's weights dequantized to bf16 and the
  // bf16 GEMM (gemm_fp8.h).
  bool fp8_tensor_cores = true;
  // ... for steps of up to this many tokens (the default: every step);
  // larger ones take the dequantized form. With the scales folded in (below)
  // the tensor cores are faster at every step size measured (an H100,
  // 2,048-token prefill steps: 658-674k tok/s against 562-591k for the
  // dequantized form); unfolded, the dequantized form was faster past 256
  // tokens (bench/kernels/NOTES.md).
  int64_t fp8_tensor_core_max_tokens = int64_t{1} << 30;
  // ... and where cuBLASLt's GEMM is the unscaled one (sm_90), the scales and
  // the activations' quantization folded into the kernels around the MLP
  // (gemm_fp8.h: add_rmsnorm_e4m3, silu_mul_e4m3; the same values, 3
  // kernels fewer a layer); off: a quantization before and a scaling pass
  // after each GEMM.
  bool fp8_fold_scales = true;
  // ... with the tensor cores' own accumulation throughout (Fp8Gemm::create's
  // fast_accum, as vLLM's FP8 GEMMs run) instead of cuBLASLt's default, which
  // promotes their partial sums into fp32. Off by default: on an H100 its
  // decode speed was within -1.3%..+1.8% of the default and its KL against
  // bf16 the same (docs/benchmarks.md; tern_gpu_bench fp8-fast, tern_gpu_quality).
  bool fp8_fast_accum = false;
  // With k_split_max_tokens (RunnerOptions; steps of up to that many
  // tokens, as their GEMM rows, gemm_rows): the bf16 o and down projections
  // split over K (linear_k_split: this many slices each, fp32 partials),
  // the partials summed into the residual by the add_rmsnorm after each;
  // the last layer's down stays one GEMM. At a few hundred rows cuBLAS runs
  // these K-long, N-short GEMMs as few tiles, each a long serial K loop.
  // Two slices each: on an H100 at 256 rows o 6.23 -> 4.91 us, down 8.24 ->
  // 5.82 (3 slices 6.19, 4 5.93); decode at 256 +3.3% with 2 down slices,
  // +1.5% with 3.
  int o_k_splits = 2;
  int down_k_splits = 2;
  // Steps of at least this many tokens (as GEMM rows) run the bf16 layers'
  // GEMMs on the sm_90 GEMM of our own (gemm_sm90.h: wgmma on TMA tiles)
  // instead of cuBLAS, with SiLU x up in the gate|up GEMM's epilogue (no
  // silu_mul kernel, no [T, 2I] intermediate); the o and down GEMMs split
  // over K (k_split_max_tokens) stay on cuBLAS. FP8 layers whose steps fold
  // the scales (fp8_fold_scales) run its e4m3 form with the scales in the
  // epilogue instead of cuBLASLt's GEMM and a pass over the sums. 0 (the
  // default): never.
  // Only where the build has sm_90a kernels and the GPU is sm_90.
  int64_t sm90_gemm_min_tokens = 0;
  // With sm90_gemm_min_tokens, only bf16 layers' gate|up (with SiLU x up) runs on
  // the sm_90 GEMM; q|k|v, o and down stay on cuBLAS, FP8 layers on cuBLASLt.
  bool sm90_gemm_gate_up_only = false;
  // With fp8_lm_head (RunnerOptions, --quantize-lm-head): LM-head GEMMs of up
  // to this many rows read the FP8 head on the tensor cores (W8A8, the sums
  // scaled in place in the logits: a pass over them); larger ones read the
  // bf16 head (the tied embedding, or an untied head's bf16 copy, kept on the
  // device then). Steps of up to 4 logit rows read it in the GEMV whatever this is.
  // 128: on an H100 the FP8 head's GEMM (and its scaling pass over the
  // logits) is +3-4% at 64 rows, level at 128, -1% at 256 (docs/benchmarks.md).
  int64_t fp8_lm_head_max_rows = 128;
  // int4 layers: GEMMs of up to this many tokens (past the GEMV's) multiply the codes on the tensor cores
  // (int4_gemm: a quarter of the weight bytes); larger ones write the layer's weights out as bf16 for the
  // bf16 GEMM, whose tiles win once the rows are many. 0 (the default until measured on a GPU): always the
  // latter.
  int64_t int4_gemm_max_tokens = 0;
  int device = 0;
};

// Where the GPU memory went, for start-up logs and the memory target.
struct DeviceMemoryUse {
  int64_t weight_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t kv_pool_bytes = 0;
  int64_t graph_bytes = 0;  // what capturing the decode graphs took (cudaMemGetInfo before and after)
};

class DeviceModel {
 public:
  // Errors: Unsupported (no GPU, a shape the kernels do not handle),
  // ResourceExhausted (the weights, workspace or KV budget do not fit:
  // the message says how much is free), InvalidArgument (bad options).
  static Result<std::unique_ptr<DeviceModel>> create(const ModelConfig& config, const HostWeights& weights,
                                                     const DeviceModelOptions& options);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // One engine step over this model's device pool: chunk i's tokens sit at
  // start_pos.., their K/V go to the pool through its block table (as
  // Ernie45Model::forward_batch, model/ernie4_5/ernie4_5_model.h). Rows with
  // logits: every token of an all_logits chunk, else the last token of a
  // want_logits chunk (logit_rows_of), in batch order. For row r,
  // device_greedy[r] != 0 (an empty span: none) asks for
  // the argmax of its logits: tokens[r] gets it (lowest index on ties, as
  // the host argmax); otherwise tokens[r] = -1 and the row's vocab_size
  // logits fill the next slice of `logits` (rows the host samples, in
  // order). Validated before any GPU work (token ids, block tables against
  // the pool, the token budget, the output sizes). Two chunks writing one
  // slot is the engine's bug and is not checked here.
  Status forward_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> device_greedy,
                      std::span<int32_t> tokens, std::span<float> logits);
  // The same with sampling on the device: row_modes[r] is kPickOnHost,
  // kPickArgmax or kPickSample; the kPickSample rows take samples[] in
  // order (their row and pick fields are set here), with their logit ops
  // in `ops` (kernels.h, sample_rows); tokens[r] gets the sampled token.
  Status forward_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> row_modes,
                      std::span<const SampleRow> samples, std::span<const LogitOp> ops, std::span<int32_t> tokens,
                      std::span<float> logits);

  // forward_step in two halves, for overlap scheduling: launch_step checks
  // and enqueues a step and returns; finish_step waits for the oldest
  // launched step and fills its tokens (one per row with logits) and
  // the logits of its host rows, as forward_step. `feedback`, empty or one
  // entry per chunk: an entry r >= 0 makes the chunk's first token the
  // pick of row r of the step launched just before (taken on
  // the device; the id in chunk.tokens is ignored), which must have been
  // picked there (argmax or sampled). At most two steps are launched and
  // not finished, and a step with host rows must be finished before the
  // next launch (its logits have one staging buffer). forward_step needs
  // none in flight.
  Status launch_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> row_modes,
                     std::span<const SampleRow> samples, std::span<const LogitOp> ops,
                     std::span<const int32_t> feedback);
  Status finish_step(std::span<int32_t> tokens, std::span<float> logits);
  int64_t steps_in_flight() const;

  // forward_step with every row's logits to the host: `logits` holds
  // vocab_size floats per row with logits.
  Status forward_batch(std::span<const SequenceChunk> batch, std::span<float> logits);

  // Copies every layer's K and V of block src into dst (copy on write),
  // ordered before the next forward_batch.
  Status copy_block(int32_t src, int32_t dst);

  int64_t num_kv_blocks() const;
  int64_t block_size() const;
  int64_t vocab_size() const;
  int64_t max_num_batched_tokens() const;
  DeviceMemoryUse memory_use() const;
  // Decode batch sizes with a captured graph (empty when enforce_eager).
  std::vector<int64_t> graph_batch_sizes() const;
  // Whether the last forward_step ran as a padded decode step (graph or
  // eager); tests use it to know which path they exercised.
  bool last_step_was_decode() const;
  // Whether the own kernels go out as programmatic dependent launches, and
  // if they were asked for but refused at creation, the error that turned them off.
  bool programmatic_launches() const;
  const std::string& pdl_off_reason() const;
  // Whether one-token steps run as one persistent kernel (decode_kernel),
  // and if it was asked for but not taken, why.
  bool layers_kernel() const;
  // The most tokens of one sequence's chunk a step runs as that kernel (1,
  // or kMaxDecodeLayersTokens), and why not more where more were tried;
  // whether the last step's layers ran as it.
  int layers_kernel_tokens() const;
  const std::string& layers_kernel_tokens_off_reason() const;
  bool last_step_used_layers_kernel() const;
  // Whether the layers hold FP8 weights, whether large steps use FP8
  // tensor-core GEMMs for them (at the model's shapes, for a 64-token step),
  // and up to how many tokens a step does (0 when none does); whether those
  // steps fold the scales into the kernels around the GEMMs (fp8_fold_scales).
  bool fp8_weights() const;
  bool fp8_tensor_core_gemms() const;
  int64_t fp8_tensor_core_tokens() const;
  bool fp8_folded_scales() const;
  // With fp8_lm_head: whether the LM head's FP8 form is taken (the GEMV's
  // steps, of up to 4 logit rows, and FP8 tensor-core GEMMs of up to
  // fp8_lm_head_gemm_rows() rows; 0: none), and what of it was not (larger
  // head GEMMs on the bf16 head, or the whole head bf16) and why; empty when
  // every step's head is FP8.
  bool fp8_lm_head() const;
  int64_t fp8_lm_head_gemm_rows() const;
  const std::string& fp8_lm_head_note() const;
  // How many layer matrices (fused ones counted once) hold int4 weights, and
  // why the first layer matrix held in Q4_0 / Q8_0 blocks that did not was
  // uploaded as bf16 (empty if none was).
  int64_t int4_matrices() const;
  const std::string& int4_declined() const;
  // Up to how many GEMM rows int4 layers run on the int4 tensor-core GEMM (int4_gemm_max_tokens; 0: none).
  int64_t int4_gemm_rows() const;
  // Up to how many GEMM rows the o and down projections run split over K
  // (k_split_max_tokens; 0: never), and their slices there.
  int64_t k_split_rows() const;
  // From how many GEMM rows the layers' GEMMs run on the sm_90 GEMM
  // (sm90_gemm_min_tokens where it applies; 0: never).
  int64_t sm90_gemm_rows() const;
  int o_k_splits() const;
  int down_k_splits() const;
  const std::string& layers_kernel_off_reason() const;
  // The GEMM row counts shown to cuBLAS at start-up (every bucket up to the
  // step's capacity, device_model_impl.h's gemm_rows) and the time it took.
  int64_t warmed_gemm_rows() const;
  double gemm_warmup_seconds() const;
  // With TERN_DECODE_TIMELINE set at creation: the last one-token step's
  // clocks in the decode kernel, else empty.
  DecodeKernelTimeline decode_kernel_timeline() const;

  // Copies the whole KV pool to the host as fp32 (tests): [layer][k|v]
  // [num_kv_blocks() + 1][block_size][kv_dim], the last block being the one
  // padded decode rows write.
  Status read_kv_pool(std::vector<float>& out) const;

  struct Impl;  // the backend's own (device_model_impl.h); opaque to callers

 private:
  explicit DeviceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::cuda
