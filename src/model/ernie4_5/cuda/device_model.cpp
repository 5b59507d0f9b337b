// DeviceModel's creation: the activation workspace planned once, the KV
// pool, the fixed decode metadata buffers and the decode graphs captured per
// batch-size bucket. The weight upload is in device_weights.cpp, the
// per-step work in device_step.cpp.
#include "model/ernie4_5/cuda/device_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"
#include "model/ernie4_5/cuda/device_model_impl.h"

namespace tern::cuda {
namespace {

std::string mib(int64_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

// int4_gemm's tiles that may split K (int4_gemm_splits splits only where the tiles are fewer than two a
// multiprocessor).
constexpr int kInt4GemmCounters = 1024;

}  // namespace

Status DeviceModel::Impl::plan_workspace() {
  const ModelConfig& c = config;
  // Partials for twice the tokens that fill kSplitBlocksPerSm blocks per SM: splits_for
  // (device_step.cpp) keeps tokens x splits within them, so a split step has at most
  // split_tokens tokens, which the counters cover.
  const int64_t split_tokens =
      (kSplitBlocksPerSm * static_cast<int64_t>(sm_count) + c.num_kv_heads - 1) / c.num_kv_heads;
  max_partial_rows = std::max<int64_t>(2 * split_tokens, kMaxAttentionSplits);
  gemm_capacity = gemm_rows(max_tokens);
  head_capacity = gemm_rows(max_logit_rows);
  const auto T = static_cast<size_t>(gemm_capacity);
  const auto R = static_cast<size_t>(head_capacity);
  const auto H = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.intermediate_size);
  const auto Q = static_cast<size_t>(c.q_dim()), QKV = static_cast<size_t>(qkv_dim());
  const auto V = static_cast<size_t>(c.vocab_size);
  const auto P = static_cast<size_t>(max_partial_rows) * static_cast<size_t>(c.num_heads);
  const auto counters = static_cast<size_t>(split_tokens) * static_cast<size_t>(c.num_kv_heads);
  struct Item {
    DeviceBuffer* buf;
    size_t bytes;
    const char* what;
  };
  const Item items[] = {
      {&x, T * H * sizeof(float), "the residual stream"},
      {&h, T * H * sizeof(bf16), "normalized activations"},
      {&qkv, T * QKV * sizeof(bf16), "q|k|v activations"},
      {&attn, T * Q * sizeof(bf16), "attention outputs"},
      {&gate_up, T * 2 * I * sizeof(bf16), "gate|up activations"},
      {&act, T * I * sizeof(bf16), "MLP activations"},
      {&partial_out, P * static_cast<size_t>(c.head_dim) * sizeof(float), "split attention partials"},
      {&partial_ml, P * 2 * sizeof(float), "split attention statistics"},
      {&split_counters, counters * sizeof(int), "split attention counters"},
      {&hlog, R * H * sizeof(bf16), "LM-head inputs"},
      {&logits, R * V * sizeof(float), "logits"},
      {&picks, T * sizeof(uint64_t), "greedy picks"},
      {&cublas_workspace, kCublasWorkspaceBytes, "the cuBLAS workspace"},
  };
  for (const Item& it : items) {
    TERN_RETURN_IF_ERROR(it.buf->allocate(it.bytes, it.what));
    use.workspace_bytes += static_cast<int64_t>(it.buf->bytes());
  }
  if (fp8 || int4_matrices > 0) {
    // Fp8Scratch (and int4's): the largest matrix as bf16; for the FP8 tensor cores also the widest input's
    // codes and a scale per token, and where cuBLASLt applies no scales the widest output's fp32 sums.
    const size_t widest = std::max({H, Q, I});
    const size_t largest = std::max({QKV * H, H * Q, 2 * I * H, H * I});
    fp8_tc_rows = fp8_tensor_cores
                      ? std::min(gemm_capacity, gemm_rows(std::max<int64_t>(options.fp8_tensor_core_max_tokens, 1)))
                      : 0;
    const auto TC = static_cast<size_t>(fp8_tc_rows);  // 0 without tensor cores
    const size_t sums = fp8_needs_sums ? 1 : 0;
    const Item scratch[] = {
        {&fp8_x_codes, TC * widest, "FP8 activation codes"},
        {&fp8_x_scales, TC * sizeof(float), "FP8 activation scales"},
        {&fp8_x_scales2, fp8_fold ? TC * sizeof(float) : 0, "FP8 activation scales (folded steps)"},
        {&fp8_sums, sums * TC * std::max({QKV, H, 2 * I}) * sizeof(float), "FP8 GEMM sums"},
        {&dequantized_w, largest * sizeof(bf16), "dequantized weights"},
    };
    for (const Item& it : scratch) {
      if (it.bytes == 0) continue;
      TERN_RETURN_IF_ERROR(it.buf->allocate(it.bytes, it.what));
      use.workspace_bytes += static_cast<int64_t>(it.buf->bytes());
    }
    if (int4_matrices > 0 && options.int4_gemm_max_tokens > 0) {
      int4_gemm_rows = std::min(gemm_capacity, gemm_rows(options.int4_gemm_max_tokens));
      TERN_RETURN_IF_ERROR(int4_counters.allocate(size_t{kInt4GemmCounters} * sizeof(int), "int4 GEMM counters"));
      TERN_CUDA_RETURN_IF_ERROR(cudaMemset(int4_counters.as<void>(), 0, int4_counters.bytes()));
      TERN_CUDA_RETURN_IF_ERROR(int4_gemm_prepare());
      use.workspace_bytes += static_cast<int64_t>(int4_counters.bytes());
    }
  }
  if (head8.w.bytes() > 0) TERN_RETURN_IF_ERROR(decide_fp8_head());
  const auto slices = [](int64_t K, int splits) { return splits > 1 && K % (8 * splits) == 0 ? splits : 1; };
  o_splits = slices(c.q_dim(), options.o_k_splits);
  down_splits = slices(c.intermediate_size, options.down_k_splits);
  // bf16 weights only: the FP8 and int4 forms have GEMMs of their own.
  if (options.k_split_max_tokens > gemv_tokens && std::max(o_splits, down_splits) > 1 && !fp8 &&
      int4_matrices == 0) {
    k_split_rows = std::min(gemm_capacity, gemm_rows(options.k_split_max_tokens));
    const auto floats = static_cast<size_t>(std::max(o_splits, down_splits) * k_split_rows) * H;
    TERN_RETURN_IF_ERROR(k_partials.allocate(floats * sizeof(float), "K-split GEMM partials"));
    use.workspace_bytes += static_cast<int64_t>(k_partials.bytes());
  }
  // sm90_linear's shapes: K and N multiples of 8 (K of 16 for e4m3 codes), gate and up multiples of 64 rows each.
  const int64_t k_align = fp8 ? 16 : 8;
  const bool own_shapes = H % k_align == 0 && c.q_dim() % k_align == 0 && c.intermediate_size % k_align == 0 &&
                          qkv_dim() % 8 == 0 && c.intermediate_size % 64 == 0;
  // bf16 layers, or FP8 ones whose steps fold the scales (the e4m3 form then applies them in its epilogue).
  if (options.sm90_gemm_min_tokens > 0 && (!fp8 || fp8_fold) && int4_matrices == 0 && own_shapes) {
    int device = 0;
    TERN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    if (sm90_gemm_available(device)) own_gemm_rows = gemm_rows(options.sm90_gemm_min_tokens);
  }
  // The counters start at zero; the attention kernel leaves them at zero.
  TERN_CUDA_RETURN_IF_ERROR(cudaMemset(split_counters.as<void>(), 0, split_counters.bytes()));
  // Two slots: a step's picks land in one while the host reads the other's.
  TERN_RETURN_IF_ERROR(picks_host.allocate(2 * T * sizeof(uint64_t), "greedy picks (host)"));
  return Status::ok();
}

// The KV pool's bytes: options.kv_cache_bytes, or the rest of
// gpu_memory_utilization x the GPU's memory after what tern has taken so
// far (weights, workspace) and a reserve for the decode graphs; either must
// fit in the free memory less a margin for the graphs and the driver, or,
// for a default size (kv_fit_to_free), shrinks to it.
Status DeviceModel::Impl::allocate_kv() {
  const ModelConfig& c = config;
  const int64_t per_block = c.num_layers * 2 * options.block_size * c.kv_dim() * kv_elem_bytes();
  size_t free_bytes = 0, total_bytes = 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto free_now = static_cast<int64_t>(free_bytes), total = static_cast<int64_t>(total_bytes);
  const int64_t margin = 256 * 1024 * 1024;  // decode graphs, cuBLAS and the driver
  const int64_t taken = free_at_start - free_now;
  const std::string so_far = " after the weights (" + mib(use.weight_bytes) + ") and workspace (" +
                             mib(use.workspace_bytes) + ")";
  int64_t budget = options.kv_cache_bytes;
  if (options.gpu_memory_utilization > 0) {
    const auto share = static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(total));
    budget = share - taken - margin;
    if (budget < per_block + per_block) {
      return resource_exhausted("--gpu-memory-utilization " + std::to_string(options.gpu_memory_utilization) +
                                " gives tern " + mib(share) + " of the GPU's " + mib(total) +
                                ", which leaves no room for a KV cache" + so_far +
                                "; raise --gpu-memory-utilization or use --kv-cache-memory");
    }
  }
  if (budget + per_block > free_now - margin) {
    if (options.kv_fit_to_free && free_now - margin >= 2 * per_block) {
      budget = free_now - margin - per_block;
    } else {
      const std::string flag = options.gpu_memory_utilization > 0 ? "lower --gpu-memory-utilization"
                                                                    : "lower --kv-cache-memory";
      return resource_exhausted("the KV cache needs " + mib(budget + per_block) + " but the GPU has " +
                                mib(free_now) + " free of " + mib(total) + so_far +
                                (total - free_at_start > margin
                                     ? " and what was in use before (" + mib(total - free_at_start) +
                                           ": the CUDA context, other processes)"
                                     : std::string()) +
                                "; " + flag);
    }
  }
  num_blocks = budget / per_block;
  // Block ids are int32 and slots (block * block_size + offset) too; one more block pads decode batches.
  num_blocks = std::min<int64_t>(num_blocks, std::numeric_limits<int32_t>::max() / options.block_size - 1);
  if (num_blocks < 1) {
    return resource_exhausted("the KV cache budget of " + std::to_string(budget) +
                              " bytes holds no block of " + std::to_string(per_block) +
                              " bytes; raise --kv-cache-memory");
  }
  pool_blocks = num_blocks + 1;
  pad_block = static_cast<int32_t>(num_blocks);
  const int64_t want = pool_blocks * per_block;
  TERN_RETURN_IF_ERROR(kv.allocate(static_cast<size_t>(want), "the KV cache"));
  use.kv_pool_bytes = want;
  return Status::ok();
}

// Decode buckets 1, 2, 4, ... up to the largest decode batch (itself a
// bucket), and metadata buffers for the largest: 6 entries per row plus
// block tables of up to max_model_len positions per row and the pad entry.
Status DeviceModel::Impl::plan_decode() {
  const int64_t cap = std::min({kMaxDecodeBucket, options.max_num_seqs, max_tokens});
  for (int64_t b = 1; b < cap; b *= 2) buckets.push_back(b);
  buckets.push_back(cap);
  const int64_t bs = options.block_size;
  const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
  const int64_t per_seq = std::min(std::max<int64_t>((max_len + bs - 1) / bs, 1), num_blocks);
  decode_meta_capacity = 6 * cap + cap * per_seq + 1;
  const auto bytes = static_cast<size_t>(decode_meta_capacity) * sizeof(int32_t);
  TERN_RETURN_IF_ERROR(decode_meta_host.allocate(bytes, "decode metadata (host)"));
  TERN_RETURN_IF_ERROR(decode_meta_dev.allocate(bytes, "decode metadata"));
  use.workspace_bytes += static_cast<int64_t>(decode_meta_dev.bytes());
  return Status::ok();
}

// Per bucket: one eager step of padding rows first (kernels loaded, cuBLAS
// warmed up, nothing left to set up inside a capture), then the capture.
// Should a driver refuse the persistent decode kernel or programmatic
// dependent launches (eager or in a graph), everything is done again
// without the one, then without the other, and the error kept as the reason.
Status DeviceModel::Impl::capture_graphs() {
  size_t free_before = 0, free_after = 0, total = 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
  Status s = capture_buckets();
  const std::pair<bool*, std::string*> fallbacks[] = {{&layers_kernel, &layers_kernel_off_reason},
                                                      {&pdl, &pdl_off_reason}};
  for (const auto& [on, reason] : fallbacks) {
    if (s.is_ok() || !*on) continue;
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    graphs.clear();
    *on = false;
    *reason = s.to_string();
    s = capture_buckets();
  }
  TERN_RETURN_IF_ERROR(s);
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
  use.graph_bytes = static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  return Status::ok();
}

// The persistent decode kernel's fixed parameters, per-layer weight table,
// partials and barrier, when options.decode_kernel and the shapes fit one
// block per multiprocessor holding a layer's weight slices.
Status DeviceModel::Impl::plan_layers_kernel() {
  if (!options.decode_kernel) return Status::ok();
  const ModelConfig& c = config;
  if (int4_matrices > 0 && int4_matrices != 4 * c.num_layers) {
    // Its slots hold one form of weights for every layer.
    layers_kernel_off_reason =
        "the one-token persistent kernel takes int4 weights only when every layer matrix is int4 (" +
        std::to_string(int4_matrices) + " of " + std::to_string(4 * c.num_layers) +
        " are); one-token steps run the per-layer GEMV kernels";
    return Status::ok();
  }
  DecodeLayersParams& p = layers_params;
  const int grid = sm_count;
  p.num_layers = static_cast<int>(c.num_layers);
  p.fp8 = fp8;
  p.int4 = int4_matrices > 0;
  p.hidden = static_cast<int>(c.hidden_size);
  p.q_dim = static_cast<int>(c.q_dim());
  p.qkv_dim = static_cast<int>(qkv_dim());
  p.inter = static_cast<int>(c.intermediate_size);
  p.heads = head_shape();
  p.tables.block_size = static_cast<int>(options.block_size);
  p.eps = static_cast<float>(c.rms_norm_eps);
  p.places.inv_freq = inv_freq.as<float>();
  p.kv = kv.as<void>();
  p.kv_fp8 = kv_fp8();
  p.plane_elems = plane_elems();
  p.x = x.as<float>();
  p.qkv_out = qkv.as<bf16>();
  p.act = act.as<bf16>();
  auto cap = [grid](int64_t units) { return static_cast<int>((units + grid - 1) / grid); };
  p.cap_qkv_pairs = cap(qkv_dim() / 2);
  p.cap_o_rows = cap(c.hidden_size);
  p.cap_gu_units = cap(c.intermediate_size);
  p.cap_down_rows = cap(c.hidden_size);
  if (const char* why = decode_layers_unsupported(p, grid); why != nullptr) {
    layers_kernel_off_reason = why;
    return Status::ok();
  }
  // Chunks of a few tokens of one sequence (a token and its drafts) take the kernel too where their
  // inputs fit beside the weights.
  DecodeLayersParams several = p;
  several.num_tokens = kMaxDecodeLayersTokens;
  const char* several_off = max_tokens < kMaxDecodeLayersTokens ? "the step's buffers hold fewer tokens"
                                                                : decode_layers_unsupported(several, grid);
  layers_kernel_tokens = several_off == nullptr ? kMaxDecodeLayersTokens : 1;
  if (several_off != nullptr) layers_kernel_tokens_off_reason = several_off;
  std::vector<DecodeLayerWeights> table(static_cast<size_t>(c.num_layers));
  for (size_t l = 0; l < table.size(); ++l) {
    const Layer& w = layers[l];
    table[l].input_norm = w.input_norm.as<float>();
    table[l].post_norm = w.post_norm.as<float>();
    if (p.int4) {
      table[l].qkv4 = w.qkv.int4();
      table[l].o4 = w.o.int4();
      table[l].gate_up4 = w.gate_up.int4();
      table[l].down4 = w.down.int4();
    } else if (fp8) {
      table[l].qkv8 = w.qkv.w.as<uint8_t>();
      table[l].o8 = w.o.w.as<uint8_t>();
      table[l].gate_up8 = w.gate_up.w.as<uint8_t>();
      table[l].down8 = w.down.w.as<uint8_t>();
      table[l].qkv_scale = w.qkv.scale.as<float>();
      table[l].o_scale = w.o.scale.as<float>();
      table[l].gate_up_scale = w.gate_up.scale.as<float>();
      table[l].down_scale = w.down.scale.as<float>();
    } else {
      table[l].qkv = w.qkv.w.as<bf16>();
      table[l].o = w.o.w.as<bf16>();
      table[l].gate_up = w.gate_up.w.as<bf16>();
      table[l].down = w.down.w.as<bf16>();
    }
  }
  const size_t table_bytes = table.size() * sizeof(DecodeLayerWeights);
  const size_t partial_rows = static_cast<size_t>(layers_kernel_tokens * c.num_heads) * kMaxDecodeLayersSplits;
  TERN_RETURN_IF_ERROR(layer_table.allocate(table_bytes, "the decode kernel's layer table"));
  TERN_RETURN_IF_ERROR(layers_partials.allocate(partial_rows * static_cast<size_t>(c.head_dim + 2) * sizeof(float),
                                                "the decode kernel's attention partials"));
  TERN_RETURN_IF_ERROR(layers_barrier.allocate(sizeof(unsigned int), "the decode kernel's barrier"));
  use.workspace_bytes += static_cast<int64_t>(layer_table.bytes() + layers_partials.bytes() + layers_barrier.bytes());
  TERN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(layer_table.as<void>(), table.data(), table_bytes, cudaMemcpyHostToDevice));
  p.layers = layer_table.as<DecodeLayerWeights>();
  p.partial_out = layers_partials.as<float>();
  p.partial_ml = p.partial_out + partial_rows * static_cast<size_t>(c.head_dim);
  p.barrier = layers_barrier.as<unsigned int>();
  if (std::getenv("TERN_DECODE_TIMELINE") != nullptr) {
    const auto marks = static_cast<size_t>(1 + c.num_layers * kDecodeLayersMarks);
    TERN_RETURN_IF_ERROR(
        layers_timeline.allocate(2 * static_cast<size_t>(grid) * marks * sizeof(unsigned long long),
                                 "the decode kernel's timeline"));
    p.timeline = layers_timeline.as<unsigned long long>();
  }
  int device = 0, clock_khz = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
    cudaGetLastError();
  }
  const auto cycles_of = [clock_khz](int ns) { return static_cast<int>(static_cast<int64_t>(ns) * clock_khz / 1000000); };
  p.b_o_delay_cycles = cycles_of(kDecodeLayersODelayNs);
  p.b_up_delay_cycles = cycles_of(kDecodeLayersUpDelayNs);
  layers_kernel = true;
  return Status::ok();
}

int64_t DeviceModel::Impl::gemm_rows(int64_t num_tokens) {
  const int64_t step = num_tokens <= 8 ? 8 : num_tokens <= 256 ? 16 : num_tokens <= 1024 ? 32 : 64;
  return (num_tokens + step - 1) / step * step;
}

// Every row count gemm_rows gives up to the buffers' capacity, once, through
// each layer GEMM's form and the head, on zeroed inputs; the outputs are
// scratch that every step rewrites before reading.
Status DeviceModel::Impl::warm_gemms() {
  const ModelConfig& c = config;
  const int64_t H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim();
  for (DeviceBuffer* b : {&h, &attn, &act, &hlog, &fp8_x_codes}) {
    if (b->bytes() > 0) TERN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b->as<void>(), 0, b->bytes(), stream));
  }
  const Layer& w = layers.front();
  const auto start = std::chrono::steady_clock::now();
  warmed_gemm_rows = 0;
  for (int64_t rows = 8; rows <= gemm_capacity; rows = gemm_rows(rows + 1)) {
    ++warmed_gemm_rows;
    TERN_RETURN_IF_ERROR(linear_of(h.as<bf16>(), rows, H, w.qkv, qkv_dim(), qkv.as<void>(), GemmOut::kBf16));
    TERN_RETURN_IF_ERROR(linear_of(attn.as<bf16>(), rows, Q, w.o, H, x.as<void>(), GemmOut::kAddF32));
    TERN_RETURN_IF_ERROR(linear_of(h.as<bf16>(), rows, H, w.gate_up, 2 * I, gate_up.as<void>(), GemmOut::kBf16));
    TERN_RETURN_IF_ERROR(linear_of(act.as<bf16>(), rows, I, w.down, H, x.as<void>(), GemmOut::kAddF32));
    if (rows <= k_split_rows) {  // the K-split forms' cuBLAS plans
      if (o_splits > 1) {
        TERN_RETURN_IF_ERROR(
            linear_k_split(cublas, attn.as<bf16>(), rows, Q, w.o.w.as<bf16>(), H, k_partials.as<float>(), o_splits));
      }
      if (down_splits > 1) {
        TERN_RETURN_IF_ERROR(linear_k_split(cublas, act.as<bf16>(), rows, I, w.down.w.as<bf16>(), H,
                                            k_partials.as<float>(), down_splits));
      }
    }
    if (fold_fp8(rows)) {  // a folded step's GEMMs (their plans asked for here, not in a step)
      TERN_RETURN_IF_ERROR(fp8_sums_of(rows, H, w.qkv, qkv_dim(), GemmOut::kBf16));
      TERN_RETURN_IF_ERROR(fp8_sums_of(rows, Q, w.o, H, GemmOut::kF32));
      TERN_RETURN_IF_ERROR(fp8_sums_of(rows, H, w.gate_up, 2 * I, GemmOut::kBf16));
      TERN_RETURN_IF_ERROR(fp8_sums_of(rows, I, w.down, H, GemmOut::kF32));
    }
    if (rows <= head_capacity) TERN_RETURN_IF_ERROR(head_gemm(rows));
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  gemm_warmup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::ok();
}

Status DeviceModel::Impl::capture_buckets() {
  for (const int64_t bucket : buckets) {
    const int64_t count = pack_decode_meta({}, bucket, options.block_size, pad_block,
                                           {decode_meta_host.as<int32_t>(), static_cast<size_t>(decode_meta_capacity)});
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(decode_meta_dev.as<void>(), decode_meta_host.as<void>(),
                                              static_cast<size_t>(count) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                              stream));
    TERN_RETURN_IF_ERROR(enqueue_decode(bucket));
    TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (options.enforce_eager) continue;
    Graph g;
    TERN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status enqueued = enqueue_decode(bucket);
    const cudaError_t ended = cudaStreamEndCapture(stream, &g.graph);
    TERN_RETURN_IF_ERROR(enqueued);
    TERN_CUDA_RETURN_IF_ERROR(ended);
    TERN_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&g.exec, g.graph, 0));
    TERN_CUDA_RETURN_IF_ERROR(cudaGraphUpload(g.exec, stream));
    graphs.push_back(std::move(g));
  }
  return Status::ok();
}

DeviceModel::DeviceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceModel::~DeviceModel() = default;

Result<std::unique_ptr<DeviceModel>> DeviceModel::create(const ModelConfig& config, const HostWeights& weights,
                                                         const DeviceModelOptions& options) {
  const ModelConfig& c = config;
  if (options.block_size < 1 || options.block_size > 1024) {
    return invalid_argument("block size must be in [1, 1024], got " + std::to_string(options.block_size));
  }
  if (options.max_num_batched_tokens < 1 || options.max_num_batched_tokens > (1 << 20)) {
    return invalid_argument("max_num_batched_tokens must be in [1, 2^20], got " +
                            std::to_string(options.max_num_batched_tokens));
  }
  if (!(options.gpu_memory_utilization >= 0 && options.gpu_memory_utilization <= 1)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1], got " +
                            std::to_string(options.gpu_memory_utilization));
  }
  if (options.max_num_seqs < 1 || options.max_model_len < 0) {
    return invalid_argument("max_num_seqs must be positive and max_model_len not negative");
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    return invalid_argument("model shape: num_heads must be a multiple of num_kv_heads and head_dim even");
  }
  if (c.head_dim > kMaxAttentionHeadDim || c.num_heads / c.num_kv_heads > kMaxAttentionGroup) {
    return unsupported("the CUDA attention kernel handles head_dim <= " + std::to_string(kMaxAttentionHeadDim) +
                       " and up to " + std::to_string(kMaxAttentionGroup) + " q heads per kv head; the model has " +
                       std::to_string(c.head_dim) + " and " + std::to_string(c.num_heads / c.num_kv_heads));
  }
  if (static_cast<int64_t>(weights.layers.size()) != c.num_layers ||
      static_cast<int64_t>(weights.rope_inv_freq.size()) != c.head_dim / 2) {
    return invalid_argument("host weights do not match the model config");
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    cudaGetLastError();
    return unsupported("no CUDA GPU is visible to this process");
  }
  if (options.device < 0 || options.device >= device_count) {
    return invalid_argument("CUDA device " + std::to_string(options.device) + " does not exist (" +
                            std::to_string(device_count) + " visible)");
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->max_tokens = options.max_num_batched_tokens;
  impl->max_logit_rows = std::clamp<int64_t>(options.max_logit_rows, 1, options.max_num_batched_tokens);
  TERN_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  {
    size_t free_bytes = 0, total_bytes = 0;
    TERN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    impl->free_at_start = static_cast<int64_t>(free_bytes);
  }
  TERN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, options.device));
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  TERN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->staged, cudaEventDisableTiming));
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->side_stream, cudaStreamNonBlocking));
  TERN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->fork, cudaEventDisableTiming));
  TERN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->join, cudaEventDisableTiming));
  for (cudaEvent_t& e : impl->done) TERN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasCreate(&impl->cublas));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasSetStream(impl->cublas, impl->stream));
  const bool gemv_fits =
      gemv_supported(c.hidden_size) && gemv_supported(c.q_dim()) && gemv_supported(c.intermediate_size);
  impl->gemv_tokens = gemv_fits ? std::clamp<int64_t>(options.gemv_max_tokens, 0, kMaxGemvTokens) : 0;
  int major = 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device));
  impl->pdl = options.pdl && major >= 9;
  impl->prefill_tile =
      options.prefill_tiles ? prefill_tile_tokens(static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
                                                  static_cast<int>(c.head_dim))
                            : 0;
  int smem_per_sm = 0;
  TERN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, options.device));
  impl->prefill_chunk = prefill_chunk_keys(static_cast<int>(c.head_dim), smem_per_sm);
  impl->rope_in_attention =
      options.rope_in_attention && paged_attention_takes_rope(static_cast<int>(c.num_heads),
                                                              static_cast<int>(c.num_kv_heads),
                                                              static_cast<int>(c.head_dim));
  impl->rope_in_tiles = options.rope_in_attention && impl->prefill_tile > 0 &&
                        prefill_tiles_take_rope(static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
                                                static_cast<int>(c.head_dim));
  impl->fp8 = options.fp8_weights;
  TERN_RETURN_IF_ERROR(impl->upload_weights(weights));
  if (impl->fp8) {
    TERN_ASSIGN_OR_RETURN(impl->fp8_gemm, Fp8Gemm::create(kCublasWorkspaceBytes, options.fp8_fast_accum));
    // Tensor cores when cuBLASLt has the GEMM for every layer's shape (asked at 64 tokens); else dequantized.
    const int64_t H = c.hidden_size, I = c.intermediate_size, T = std::min<int64_t>(64, impl->max_tokens);
    Fp8Gemm& g = *impl->fp8_gemm;
    impl->fp8_tensor_cores = options.fp8_tensor_cores && g.tensor_cores(T, H, impl->qkv_dim(), GemmOut::kBf16) &&
                             g.tensor_cores(T, c.q_dim(), H, GemmOut::kAddF32) &&
                             g.tensor_cores(T, H, 2 * I, GemmOut::kBf16) && g.tensor_cores(T, I, H, GemmOut::kAddF32);
    impl->fp8_needs_sums = impl->fp8_tensor_cores && (g.needs_sums(T, H, impl->qkv_dim(), GemmOut::kBf16) ||
                                                      g.needs_sums(T, c.q_dim(), H, GemmOut::kAddF32) ||
                                                      g.needs_sums(T, H, 2 * I, GemmOut::kBf16) ||
                                                      g.needs_sums(T, I, H, GemmOut::kAddF32));
    impl->fp8_fold = options.fp8_fold_scales && impl->fp8_tensor_cores &&
                     g.needs_sums(T, H, impl->qkv_dim(), GemmOut::kBf16) && g.needs_sums(T, c.q_dim(), H, GemmOut::kF32) &&
                     g.needs_sums(T, H, 2 * I, GemmOut::kBf16) && g.needs_sums(T, I, H, GemmOut::kF32) && I % 4 == 0 &&
                     I <= kMaxSiluE4m3Inter;
  } else if (options.fp8_lm_head && options.fp8_tensor_cores) {
    // Beside bf16 or int4 layers: cuBLASLt's e4m3 GEMM for the FP8 LM head alone (decide_fp8_head).
    TERN_ASSIGN_OR_RETURN(impl->fp8_gemm, Fp8Gemm::create(kCublasWorkspaceBytes, options.fp8_fast_accum));
  }
  TERN_RETURN_IF_ERROR(impl->plan_workspace());
  TERN_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(impl->cublas, impl->cublas_workspace.as<void>(), impl->cublas_workspace.bytes()));
  TERN_RETURN_IF_ERROR(impl->allocate_kv());
  // The step metadata and sampling staging at the size of the largest step
  // up front: growing them in a step frees the old buffers (cudaFree and
  // cudaFreeHost wait for the whole device) and pins new pages while the
  // first requests wait. Table entries past the pool's blocks (prefixes
  // shared by many sequences) or past 2^20 (4 MiB), and logit ops past
  // 4,096, still grow them.
  {
    const int64_t T = impl->max_tokens, R = impl->max_logit_rows;
    const int64_t tables = std::min<int64_t>(impl->num_blocks + T, int64_t{1} << 20);
    const StepMetaLayout most = StepMetaLayout::of(T, R, T, tables, T, T, R);
    TERN_RETURN_IF_ERROR(impl->ensure_meta(static_cast<size_t>(most.end)));
    TERN_RETURN_IF_ERROR(impl->ensure_sampling(static_cast<size_t>(R), 4096));
  }
  TERN_RETURN_IF_ERROR(impl->plan_decode());
  TERN_RETURN_IF_ERROR(impl->plan_layers_kernel());
  TERN_RETURN_IF_ERROR(impl->warm_gemms());
  TERN_RETURN_IF_ERROR(impl->capture_graphs());
  return std::unique_ptr<DeviceModel>(new DeviceModel(std::move(impl)));
}

Status DeviceModel::forward_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> device_greedy,
                                 std::span<int32_t> tokens, std::span<float> logits) {
  return forward_step(batch, device_greedy, {}, {}, tokens, logits);
}

Status DeviceModel::forward_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> row_modes,
                                 std::span<const SampleRow> samples, std::span<const LogitOp> ops,
                                 std::span<int32_t> tokens, std::span<float> logits) {
  if (!impl_->launched.empty()) {
    return invalid_argument("forward_step: " + std::to_string(impl_->launched.size()) +
                            " launched steps are not finished");
  }
  TERN_RETURN_IF_ERROR(launch_step(batch, row_modes, samples, ops, {}));
  return finish_step(tokens, logits);
}

Status DeviceModel::launch_step(std::span<const SequenceChunk> batch, std::span<const uint8_t> row_modes,
                                std::span<const SampleRow> samples, std::span<const LogitOp> ops,
                                std::span<const int32_t> feedback) {
  TERN_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));  // per host thread
  Status s = impl_->launch(batch, row_modes, samples, ops, feedback);
  // A step that failed half-way may still have copies in flight from the
  // pinned metadata the next step overwrites.
  if (!s.is_ok()) cudaStreamSynchronize(impl_->stream);
  return s;
}

Status DeviceModel::finish_step(std::span<int32_t> tokens, std::span<float> logits) {
  TERN_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  return impl_->finish(tokens, logits);
}

int64_t DeviceModel::steps_in_flight() const { return static_cast<int64_t>(impl_->launched.size()); }

Status DeviceModel::forward_batch(std::span<const SequenceChunk> batch, std::span<float> logits) {
  int64_t rows = 0;
  for (const SequenceChunk& c : batch) rows += logit_rows_of(c);
  std::vector<int32_t> tokens(static_cast<size_t>(rows));
  return forward_step(batch, {}, tokens, logits);
}

Status DeviceModel::copy_block(int32_t src, int32_t dst) {
  Impl& m = *impl_;
  if (src < 0 || src >= m.num_blocks || dst < 0 || dst >= m.num_blocks) {
    return invalid_argument("copy_block: block " + std::to_string(src) + " -> " + std::to_string(dst) +
                            " outside the pool of " + std::to_string(m.num_blocks));
  }
  if (src == dst) return Status::ok();
  const int64_t block_bytes = m.options.block_size * m.config.kv_dim() * m.kv_elem_bytes();
  for (int64_t l = 0; l < m.config.num_layers; ++l) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      uint8_t* plane = m.plane_bytes(l, kind);
      TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(plane + dst * block_bytes, plane + src * block_bytes,
                                                static_cast<size_t>(block_bytes), cudaMemcpyDeviceToDevice,
                                                m.stream));
    }
  }
  return Status::ok();
}

int64_t DeviceModel::num_kv_blocks() const { return impl_->num_blocks; }
int64_t DeviceModel::block_size() const { return impl_->options.block_size; }
int64_t DeviceModel::vocab_size() const { return impl_->config.vocab_size; }
int64_t DeviceModel::max_num_batched_tokens() const { return impl_->max_tokens; }
DeviceMemoryUse DeviceModel::memory_use() const { return impl_->use; }
std::vector<int64_t> DeviceModel::graph_batch_sizes() const {
  return impl_->graphs.empty() ? std::vector<int64_t>{} : impl_->buckets;
}
bool DeviceModel::last_step_was_decode() const { return impl_->last_was_decode; }
bool DeviceModel::programmatic_launches() const { return impl_->pdl; }
const std::string& DeviceModel::pdl_off_reason() const { return impl_->pdl_off_reason; }
bool DeviceModel::layers_kernel() const { return impl_->layers_kernel; }
int DeviceModel::layers_kernel_tokens() const { return impl_->layers_kernel ? impl_->layers_kernel_tokens : 0; }
const std::string& DeviceModel::layers_kernel_tokens_off_reason() const {
  return impl_->layers_kernel_tokens_off_reason;
}
bool DeviceModel::last_step_used_layers_kernel() const { return impl_->last_used_kernel; }
bool DeviceModel::fp8_weights() const { return impl_->fp8; }
bool DeviceModel::fp8_tensor_core_gemms() const { return impl_->fp8_tensor_cores; }
bool DeviceModel::fp8_folded_scales() const { return impl_->fp8_fold; }
bool DeviceModel::fp8_lm_head() const { return impl_->fp8_head(); }
int64_t DeviceModel::fp8_lm_head_gemm_rows() const { return impl_->fp8_head_gemm_rows; }
const std::string& DeviceModel::fp8_lm_head_note() const { return impl_->fp8_head_note; }
int64_t DeviceModel::fp8_tensor_core_tokens() const { return impl_->fp8_tc_rows; }
int64_t DeviceModel::int4_matrices() const { return impl_->int4_matrices; }

int64_t DeviceModel::k_split_rows() const { return impl_->k_split_rows; }
int64_t DeviceModel::int4_gemm_rows() const { return impl_->int4_gemm_rows; }

int64_t DeviceModel::sm90_gemm_rows() const { return impl_->own_gemm_rows; }
int DeviceModel::o_k_splits() const { return impl_->k_split_rows > 0 ? impl_->o_splits : 1; }

int DeviceModel::down_k_splits() const { return impl_->k_split_rows > 0 ? impl_->down_splits : 1; }
const std::string& DeviceModel::int4_declined() const { return impl_->int4_declined; }
const std::string& DeviceModel::layers_kernel_off_reason() const { return impl_->layers_kernel_off_reason; }
int64_t DeviceModel::warmed_gemm_rows() const { return impl_->warmed_gemm_rows; }
double DeviceModel::gemm_warmup_seconds() const { return impl_->gemm_warmup_seconds; }
DecodeKernelTimeline DeviceModel::decode_kernel_timeline() const {
  const Impl& m = *impl_;
  DecodeKernelTimeline out;
  if (m.layers_timeline.bytes() == 0 || cudaStreamSynchronize(m.stream) != cudaSuccess) return out;
  std::vector<unsigned long long> t(m.layers_timeline.bytes() / sizeof(unsigned long long));
  if (cudaMemcpy(t.data(), m.layers_timeline.as<void>(), m.layers_timeline.bytes(), cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    return out;
  }
  // [grid][marks] in ns, then [grid][marks] in the SM's cycles at the same marks.
  out.marks = 1 + static_cast<int>(m.config.num_layers) * kDecodeLayersMarks;
  out.blocks = static_cast<int>(t.size() / 2 / static_cast<size_t>(out.marks));
  const size_t half = t.size() / 2, marks = static_cast<size_t>(out.marks);
  out.ns.resize(half);
  for (size_t i = 0; i < half; ++i) out.ns[i] = static_cast<double>(static_cast<long long>(t[i] - t[0]));
  const double ns = static_cast<double>(t[marks - 1] - t[0]);
  out.sm_mhz = ns > 0 ? static_cast<double>(t[half + marks - 1] - t[half]) / ns * 1e3 : 0;
  return out;
}

Status DeviceModel::read_kv_pool(std::vector<float>& out) const {
  const Impl& m = *impl_;
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  if (m.kv_fp8()) {
    std::vector<uint8_t> bytes(m.kv.bytes());
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(bytes.data(), m.kv.as<void>(), bytes.size(), cudaMemcpyDeviceToHost));
    out.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) out[i] = fp8_e4m3_to_f32(bytes[i]);
    return Status::ok();
  }
  const size_t n = m.kv.bytes() / sizeof(bf16);
  std::vector<bf16> raw(n);
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(raw.data(), m.kv.as<void>(), n * sizeof(bf16), cudaMemcpyDeviceToHost));
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(raw[i]);
  return Status::ok();
}

}  // namespace tern::cuda
