// DeviceModel's state, shared by its source files: device_weights.cpp (the
// weights' upload), device_model.cpp (creation: memory planning, the KV
// pool, graph capture) and device_step.cpp (one engine step: metadata,
// kernels, outputs). Private to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/gemm_sm90.h"
#include "backend/cuda/kernels.h"
#include "model/ernie4_5/cuda/device_model.h"
#include "model/ernie4_5/device_step_plan.h"

namespace tern::cuda {

// Attention blocks per multiprocessor below which decode splits keys. More
// splits measured slower on an H200 (12 per SM: batch 256 68 us per layer
// against 39 us unsplit): a split's fixed cost (q, merge, partials) outweighs
// the shorter run of keys.
constexpr int64_t kSplitBlocksPerSm = 2;

// Largest decode batch captured as a graph; bigger decode steps run eagerly.
constexpr int64_t kMaxDecodeBucket = 256;
// cuBLAS's workspace, given to it so graph capture never allocates.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

// Device pointers to one step's metadata, laid out in one int32 buffer as
// StepMetaLayout says (device_step_plan.h): [ids T][positions T][slots T]
// [token_seq T][logit_rows R][table_offsets S][tables][singles][tiles].
// A decode step (T = R = S = bucket) always has the same pointers for one
// bucket, which is what lets a captured graph replay it.
struct StepView {
  int64_t num_tokens = 0, num_rows = 0;
  const int32_t* ids = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* logit_rows = nullptr;
  const int32_t* table_offsets = nullptr;
  const int32_t* tables = nullptr;
  int num_splits = 1;
  bool one_token = false;  // every sequence's chunk is one token (a decode step)
  bool one_sequence = false;  // the step is one sequence's chunk
  // With query tiles (general steps with a chunk of >= 2 tokens, on shapes
  // paged_attention_prefill takes): the one-token chunks' tokens go to the
  // decode kernel (singles), the rest as tiles (StepMetaLayout's records).
  const int32_t* singles = nullptr;
  int64_t num_singles = 0;
  const int32_t* tiles = nullptr;
  int64_t num_tiles = 0;
};

// An instantiated CUDA graph, destroyed with its owner.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  Graph(Graph&& o) noexcept : graph(o.graph), exec(o.exec) { o.graph = nullptr, o.exec = nullptr; }
  Graph& operator=(Graph&&) = delete;
  Graph(const Graph&) = delete;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

struct DeviceModel::Impl {
  ModelConfig config;
  DeviceModelOptions options;
  int sm_count = 1;
  cudaStream_t stream = nullptr;
  // A mixed step's query tiles run here beside its one-token chunks' attention
  // on stream: forked after the K/V writes (fork), joined before the o projection (join).
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer cublas_workspace;
  int64_t gemv_tokens = 0;  // steps of up to this many tokens use the GEMV (0: its K do not fit)
  int prefill_tile = 0;     // tokens per attention query tile (0: no tiles; options.prefill_tiles or the shape)
  int prefill_chunk = 64;   // keys per shared-memory chunk of the tiles' kernel, from the GPU's shared memory
  bool rope_in_attention = false;  // options.rope_in_attention where the attention's shape takes it
  bool rope_in_tiles = false;      // options.rope_in_attention where the prefill tiles take it
  bool pdl = false;         // options.pdl on a GPU that has it
  std::string pdl_off_reason;  // why capture_graphs turned pdl off, if it did
  // One-token steps' layers in one launch (decode_layers): options.decode_kernel
  // where the shapes and the GPU allow, else why not.
  bool layers_kernel = false;
  std::string layers_kernel_off_reason;
  // The most tokens of one sequence's chunk the kernel takes (1, or kMaxDecodeLayersTokens), and why not more.
  int layers_kernel_tokens = 1;
  std::string layers_kernel_tokens_off_reason;
  bool last_used_kernel = false;  // whether the last step's layers ran as the persistent kernel
  // Whether a step's layers run as the persistent kernel: one token, or a chunk of one sequence of at most
  // layers_kernel_tokens tokens.
  bool kernel_takes(const StepView& v) const {
    return layers_kernel && (v.num_tokens == 1 || (v.one_sequence && v.num_tokens <= layers_kernel_tokens));
  }
  DecodeLayersParams layers_params;  // all but the step's metadata (places' positions and slots, tables' pointers)
  DeviceBuffer layer_table, layers_partials, layers_barrier, layers_timeline;

  // A layer's matrix: bf16 in w; with fp8 e4m3 codes in w and a float
  // scale per row in scale (backend/cpu/fp8_quant.h); as int4 codes in w,
  // an fp16 scale per block of 32 in scale and a zero per block in zero
  // (Int4Weights; backend/cpu/int4_planar.h).
  enum class Form { kBf16, kFp8, kInt4 };
  struct Matrix {
    Form form = Form::kBf16;
    DeviceBuffer w, scale, zero;
    Int4Weights int4() const { return {w.as<uint8_t>(), scale.as<uint16_t>(), zero.as<uint8_t>()}; }
  };
  struct Layer {
    DeviceBuffer input_norm, post_norm;
    Matrix qkv, o, gate_up, down;
  };
  bool fp8 = false;               // options.fp8_weights
  bool fp8_tensor_cores = false;  // FP8 GEMMs on cuBLASLt where it has them (else dequantized to bf16)
  bool fp8_needs_sums = false;    // ... unscaled, into fp8_sums (Fp8Gemm::needs_sums)
  int64_t fp8_tc_rows = 0;        // ... for GEMMs of up to this many rows (gemm_rows; 0 without), else dequantized
  bool fp8_fold = false;          // ... unscaled for every layer shape, the scales folded in (fold_fp8)
  std::unique_ptr<Fp8Gemm> fp8_gemm;
  // Layer matrices uploaded as int4, and why the first one held in Q4_0 or
  // Q8_0 blocks that was not (uploaded as bf16), if any.
  int64_t int4_matrices = 0;
  std::string int4_declined;
  DeviceBuffer fp8_x_codes, fp8_x_scales;  // Fp8Scratch
  DeviceBuffer fp8_x_scales2;              // a folded step's second set of row scales (fold_fp8)
  DeviceBuffer fp8_sums;                   // the unscaled FP8 GEMM's fp32 sums (Fp8Gemm::needs_sums)
  DeviceBuffer dequantized_w;              // the largest FP8 or int4 matrix as bf16, for large steps' GEMM
  // int4 GEMMs of up to this many rows (gemm_rows; 0: none) on int4_gemm, K split over int4_counters'
  // tiles with dequantized_w's bytes as the partials; larger ones dequantized for the bf16 GEMM.
  int64_t int4_gemm_rows = 0;
  DeviceBuffer int4_counters;
  Int4GemmScratch int4_scratch() const;
  DeviceBuffer embed, lm_head_own, final_norm, inv_freq;
  const bf16* lm_head = nullptr;  // embed or lm_head_own (the bf16 head; null when an untied head is FP8 throughout)
  // options.fp8_lm_head: the head's FP8 codes and row scales (head8, kept
  // only where taken: fp8_head()), read by the GEMV (steps of up to
  // gemv_tokens logit rows) and by the FP8 tensor-core GEMM for up to
  // fp8_head_gemm_rows rows (gemm_rows; 0: none); larger head GEMMs on the
  // bf16 head. What of it was not taken, and why.
  Matrix head8;
  bool fp8_head() const { return head8.w.bytes() > 0; }
  int64_t fp8_head_gemm_rows = 0;
  std::string fp8_head_note;
  std::vector<Layer> layers;

  // The KV pool: num_blocks blocks for the engine, then one more that padded
  // decode rows write and read (pad_block).
  DeviceBuffer kv;
  int64_t num_blocks = 0, pool_blocks = 0;
  int32_t pad_block = 0;

  // Activations for up to max_tokens tokens.
  int64_t max_tokens = 0, max_logit_rows = 0, max_partial_rows = 0;
  // cuBLAS chooses its kernel for a GEMM shape the first time it meets it,
  // which costs milliseconds; a step's token count can be anything, so every
  // GEMM runs on gemm_rows(T) rows, a few dozen counts that warm_gemms()
  // shows cuBLAS once at start-up. The rows past T are computed and ignored.
  // The GEMMs' buffers hold gemm_rows(max_tokens) rows (gemm_capacity), the
  // head's gemm_rows(max_logit_rows) (head_capacity).
  static int64_t gemm_rows(int64_t num_tokens);
  int64_t gemm_capacity = 0, head_capacity = 0;
  int64_t warmed_gemm_rows = 0;
  double gemm_warmup_seconds = 0;
  int64_t free_at_start = 0;  // GPU memory free before tern allocated anything
  DeviceBuffer x, h, qkv, attn, gate_up, act, partial_out, partial_ml, split_counters, hlog, logits, picks;
  // options.k_split_max_tokens as GEMM rows (0: off, or weights not all bf16; at most gemm_capacity); the o and down
  // projections' K slices there (options.o_k_splits, down_k_splits where they split K into multiples
  // of 8, else 1: one GEMM), and the partials: the larger count x k_split_rows x hidden floats.
  int64_t k_split_rows = 0;
  // options.sm90_gemm_min_tokens as GEMM rows where sm90_gemm_available (0: never).
  int64_t own_gemm_rows = 0;
  bool own_gemm(int64_t rows) const { return own_gemm_rows > 0 && rows >= own_gemm_rows; }
  int o_splits = 1, down_splits = 1;
  DeviceBuffer k_partials;

  // General steps' metadata: a pinned staging area and its device copy, grown on demand.
  PinnedBuffer meta_host;
  DeviceBuffer meta_dev;
  // Decode steps' metadata: fixed buffers sized for the largest bucket.
  std::vector<int64_t> buckets;  // ascending
  int64_t decode_meta_capacity = 0;  // int32 entries
  PinnedBuffer decode_meta_host;
  DeviceBuffer decode_meta_dev;
  std::vector<Graph> graphs;  // per bucket when graphs are on
  bool last_was_decode = false;

  // Outputs: greedy picks and host-sampled logits land here first.
  PinnedBuffer picks_host, logits_host;
  // Device sampling: the rows' parameters and logit ops, staged and on the device.
  PinnedBuffer sample_rows_host, sample_ops_host;
  DeviceBuffer sample_rows_dev, sample_ops_dev;

  DeviceMemoryUse use;

  // Launched steps not yet finished, oldest first (at most two), and what
  // finishing each needs: its row count, which rows the host samples, and
  // its slot of picks_host with the event after its copies out.
  struct Launched {
    int64_t rows = 0, host_rows = 0;
    std::vector<uint8_t> host;  // per row: its logits come to the host
    int slot = 0;
  };
  std::deque<Launched> launched;
  cudaEvent_t done[2] = {nullptr, nullptr};
  int next_slot = 0;
  // After the last launch's uploads: its pinned staging may be rewritten once this fires.
  cudaEvent_t staged = nullptr;
  // The last launch's rows and which were picked on the device (what feedback may name).
  std::vector<uint8_t> last_picked;

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (cudaEvent_t e : done)
      if (e != nullptr) cudaEventDestroy(e);
    if (staged != nullptr) cudaEventDestroy(staged);
    if (side_stream != nullptr) cudaStreamSynchronize(side_stream);
    for (cudaEvent_t e : {fork, join})
      if (e != nullptr) cudaEventDestroy(e);
    if (side_stream != nullptr) cudaStreamDestroy(side_stream);
    graphs.clear();
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  int64_t qkv_dim() const { return config.q_dim() + 2 * config.kv_dim(); }
  HeadShape head_shape() const {
    return {static_cast<int>(config.num_heads), static_cast<int>(config.num_kv_heads),
            static_cast<int>(config.head_dim)};
  }
  int64_t plane_elems() const { return pool_blocks * options.block_size * config.kv_dim(); }
  // The pool's element: bf16, or one byte of FP8 E4M3 (--kv-cache-dtype fp8).
  bool kv_fp8() const { return options.kv_cache_dtype == KvCacheDType::kFp8E4m3; }
  int64_t kv_elem_bytes() const { return kv_element_bytes(options.kv_cache_dtype, sizeof(bf16)); }
  // Layer `layer`'s K or V plane, as bytes (kind 0: K, 1: V).
  uint8_t* plane_bytes(int64_t layer, int64_t kind) const {
    return kv.as<uint8_t>() + (layer * 2 + kind) * plane_elems() * kv_elem_bytes();
  }
  KvPlanes planes(int64_t layer) const {
    if (kv_fp8()) return KvPlanes{nullptr, nullptr, plane_bytes(layer, 0), plane_bytes(layer, 1)};
    return KvPlanes{reinterpret_cast<bf16*>(plane_bytes(layer, 0)), reinterpret_cast<bf16*>(plane_bytes(layer, 1)),
                    nullptr, nullptr};
  }

  // device_weights.cpp
  Status upload_weights(const HostWeights& w);
  // device_model.cpp
  Status plan_workspace();
  Status allocate_kv();
  Status plan_decode();
  Status plan_layers_kernel();
  Status capture_graphs();
  Status capture_buckets();
  Status warm_gemms();

  // device_step.cpp
  // y (+)= x . W^T for a layer's matrix in any form.
  Status linear_of(const bf16* x, int64_t num_tokens, int64_t in_features, const Matrix& w, int64_t out_features,
                   void* y, GemmOut out);
  // Whether a step of num_tokens tokens past the GEMV's sizes runs its FP8
  // layers folded: each GEMM the unscaled one into fp8_sums, the row scales
  // and the quantization in add_rmsnorm_e4m3 and silu_mul_e4m3 (gemm_fp8.h).
  bool fold_fp8(int64_t num_tokens);
  // fp8_sums = the unscaled GEMM of the codes in fp8_x_codes with w's, as
  // fp32 (type kF32) or bf16 (kBf16) sums (fp8_sums_bf16: the same memory).
  Status fp8_sums_of(int64_t num_tokens, int64_t in_features, const Matrix& w, int64_t out_features, GemmOut type);
  bf16* fp8_sums_bf16() { return reinterpret_cast<bf16*>(fp8_sums.as<float>()); }
  // The GEMV's weight pointers for a layer's matrix.
  void gemv_weights(GemvParams& g, const Matrix& w) const;
  Status ensure_meta(size_t count);
  Status launch(std::span<const SequenceChunk> batch, std::span<const uint8_t> modes,
                std::span<const SampleRow> samples, std::span<const LogitOp> ops, std::span<const int32_t> feedback);
  Status finish(std::span<int32_t> tokens, std::span<float> logits);
  // Room for n sample rows and m logit ops, host staging and device.
  Status ensure_sampling(size_t n, size_t m);
  int splits_for(int64_t num_tokens, int64_t max_ctx) const;
  StepView view_of(const int32_t* meta, const StepMetaLayout& layout, int64_t T, int64_t R) const;
  StepView decode_view(int64_t bucket) const;
  // What plan_device_step needs from this model (fixed at creation).
  StepPlanLimits plan_limits() const;
  // launch's phases, in order.
  int32_t* meta_of(const DeviceStepPlan& plan) const;
  Result<StepView> upload_meta(const DeviceStepPlan& plan);
  Status upload_samples(const DeviceStepPlan& plan, std::span<const SampleRow> samples, std::span<const LogitOp> ops);
  Status run_layers(const DeviceStepPlan& plan, const StepView& v);
  Status run_heads(const DeviceStepPlan& plan, const StepView& v);
  Status copy_out(const DeviceStepPlan& plan);
  Status enqueue_layers(const StepView& v);
  Status enqueue_head(const StepView& v, int64_t first, int64_t rows, bool argmax, bool after_layers);
  // logits = hlog's first `rows` rows (gemm_rows of them) . head^T: the FP8
  // GEMM up to fp8_head_gemm_rows (its sums scaled in place), else bf16.
  Status head_gemm(int64_t rows);
  // With head8 uploaded, from plan_workspace: keeps or frees it, fp8_head_gemm_rows (beside bf16 or int4
  // layers with the logit rows' FP8 scratch), the note (device_weights.cpp).
  Status decide_fp8_head();
  // The decode graph's (or eager twin's) kernels: the layers, and the head when it fits one pass.
  Status enqueue_decode(int64_t bucket);
  bool head_in_decode(int64_t bucket) const { return bucket <= max_logit_rows; }
};

}  // namespace tern::cuda
