// DeviceModel: upload, memory planning and the per-step forward pass on the
// GPU. One stream; a step's metadata goes up in one copy, then every kernel
// and GEMM of every layer is enqueued, then the wanted logits come back and
// the call waits for the stream.
#include "backend/cuda/device_model.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "base/bf16.h"

namespace tern::cuda {
namespace {

// Token-splits the flash-decoding workspace holds (tokens x splits).
constexpr int64_t kMaxPartialRows = 4096;
constexpr int64_t kMaxSplits = 32;

std::string mib(int64_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

// Appends the rows of `w` as bf16 to `out`.
void append_bf16(const cpu::WeightMatrix& w, std::vector<bf16>& out) {
  const size_t n = static_cast<size_t>(w.rows * w.cols);
  const size_t at = out.size();
  out.resize(at + n);
  if (w.dtype == DType::kBF16) {
    std::memcpy(out.data() + at, w.data, n * sizeof(bf16));
    return;
  }
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    cpu::weight_row_to_f32(w, r, row.data());
    bf16* dst = out.data() + at + static_cast<size_t>(r * w.cols);
    for (int64_t c = 0; c < w.cols; ++c) dst[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
  }
}

}  // namespace

struct DeviceModel::Impl {
  ModelConfig config;
  DeviceModelOptions options;
  int sm_count = 1;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;

  struct Layer {
    DeviceBuffer input_norm, qkv, o, post_norm, gate_up, down;
  };
  DeviceBuffer embed, lm_head_own, final_norm, inv_freq;
  const bf16* lm_head = nullptr;  // embed or lm_head_own
  std::vector<Layer> layers;

  DeviceBuffer kv;
  int64_t num_blocks = 0;

  // Activations for up to max_tokens tokens.
  int64_t max_tokens = 0, max_logit_rows = 0;
  DeviceBuffer x, delta, h, qkv, attn, gate_up, act, partial_out, partial_ml, hlog, logits;

  // Step metadata: one pinned staging area and its device copy, grown on demand.
  PinnedBuffer meta_host;
  DeviceBuffer meta_dev;

  DeviceMemoryUse use;

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  int64_t qkv_dim() const { return config.q_dim() + 2 * config.kv_dim(); }
  int64_t plane_elems() const { return num_blocks * options.block_size * config.kv_dim(); }
  bf16* k_plane(int64_t layer) const { return kv.as<bf16>() + (layer * 2) * plane_elems(); }
  bf16* v_plane(int64_t layer) const { return kv.as<bf16>() + (layer * 2 + 1) * plane_elems(); }

  Status upload_matrices(std::initializer_list<const cpu::WeightMatrix*> parts, DeviceBuffer& out, const char* what,
                         std::vector<bf16>& staging) {
    staging.clear();
    for (const cpu::WeightMatrix* m : parts) append_bf16(*m, staging);
    TERN_RETURN_IF_ERROR(out.allocate(staging.size() * sizeof(bf16), what));
    TERN_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out.as<void>(), staging.data(), staging.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    use.weight_bytes += static_cast<int64_t>(out.bytes());
    return Status::ok();
  }

  Status upload_vector(const cpu::WeightVector& v, DeviceBuffer& out, const char* what) {
    const std::vector<float> f = cpu::weight_vector_to_f32(v);
    return upload_floats(f, out, what);
  }

  Status upload_floats(const std::vector<float>& f, DeviceBuffer& out, const char* what) {
    TERN_RETURN_IF_ERROR(out.allocate(f.size() * sizeof(float), what));
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<void>(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
    use.weight_bytes += static_cast<int64_t>(out.bytes());
    return Status::ok();
  }

  Status upload_weights(const HostWeights& w) {
    const ModelConfig& c = config;
    std::vector<bf16> staging;
    TERN_RETURN_IF_ERROR(upload_matrices({&w.embedding}, embed, "the embedding", staging));
    if (w.lm_head.data == w.embedding.data) {
      lm_head = embed.as<bf16>();
    } else {
      TERN_RETURN_IF_ERROR(upload_matrices({&w.lm_head}, lm_head_own, "the LM head", staging));
      lm_head = lm_head_own.as<bf16>();
    }
    TERN_RETURN_IF_ERROR(upload_vector(w.final_norm, final_norm, "the final norm"));
    TERN_RETURN_IF_ERROR(upload_floats(w.rope_inv_freq, inv_freq, "the rotary frequencies"));
    layers.resize(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const HostLayerWeights& hw = w.layers[static_cast<size_t>(l)];
      Layer& d = layers[static_cast<size_t>(l)];
      TERN_RETURN_IF_ERROR(upload_vector(hw.input_norm, d.input_norm, "an input norm"));
      TERN_RETURN_IF_ERROR(upload_matrices({&hw.q, &hw.k, &hw.v}, d.qkv, "a fused q|k|v projection", staging));
      TERN_RETURN_IF_ERROR(upload_matrices({&hw.o}, d.o, "an output projection", staging));
      TERN_RETURN_IF_ERROR(upload_vector(hw.post_attention_norm, d.post_norm, "a post-attention norm"));
      TERN_RETURN_IF_ERROR(upload_matrices({&hw.gate, &hw.up}, d.gate_up, "a fused gate|up projection", staging));
      TERN_RETURN_IF_ERROR(upload_matrices({&hw.down}, d.down, "a down projection", staging));
    }
    return Status::ok();
  }

  Status plan_workspace() {
    const ModelConfig& c = config;
    const auto T = static_cast<size_t>(max_tokens);
    const auto R = static_cast<size_t>(max_logit_rows);
    const auto H = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.intermediate_size);
    const auto Q = static_cast<size_t>(c.q_dim()), QKV = static_cast<size_t>(qkv_dim());
    const auto V = static_cast<size_t>(c.vocab_size);
    const auto P = static_cast<size_t>(kMaxPartialRows) * static_cast<size_t>(c.num_heads);
    struct Item {
      DeviceBuffer* buf;
      size_t bytes;
      const char* what;
    };
    const Item items[] = {
        {&x, T * H * sizeof(float), "the residual stream"},
        {&delta, T * H * sizeof(float), "the layer outputs"},
        {&h, T * H * sizeof(bf16), "normalized activations"},
        {&qkv, T * QKV * sizeof(bf16), "q|k|v activations"},
        {&attn, T * Q * sizeof(bf16), "attention outputs"},
        {&gate_up, T * 2 * I * sizeof(bf16), "gate|up activations"},
        {&act, T * I * sizeof(bf16), "MLP activations"},
        {&partial_out, P * static_cast<size_t>(c.head_dim) * sizeof(float), "split attention partials"},
        {&partial_ml, P * 2 * sizeof(float), "split attention statistics"},
        {&hlog, R * H * sizeof(bf16), "LM-head inputs"},
        {&logits, R * V * sizeof(float), "logits"},
    };
    for (const Item& it : items) {
      TERN_RETURN_IF_ERROR(it.buf->allocate(it.bytes, it.what));
      use.workspace_bytes += static_cast<int64_t>(it.buf->bytes());
    }
    return Status::ok();
  }

  Status allocate_kv() {
    const ModelConfig& c = config;
    const int64_t per_block = c.num_layers * 2 * options.block_size * c.kv_dim() * static_cast<int64_t>(sizeof(bf16));
    num_blocks = options.kv_cache_bytes / per_block;
    // Block ids are int32 and slots (block * block_size + offset) too.
    num_blocks = std::min<int64_t>(num_blocks, std::numeric_limits<int32_t>::max() / options.block_size);
    if (num_blocks < 1) {
      return resource_exhausted("the KV cache budget of " + std::to_string(options.kv_cache_bytes) +
                                " bytes holds no block of " + std::to_string(per_block) +
                                " bytes; raise --kv-cache-memory");
    }
    size_t free_bytes = 0, total_bytes = 0;
    TERN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t want = num_blocks * per_block;
    // Leave room for cuBLAS's own workspace and the driver.
    const int64_t margin = 256 * 1024 * 1024;
    if (want > static_cast<int64_t>(free_bytes) - margin) {
      return resource_exhausted("the KV cache needs " + mib(want) + " but the GPU has " +
                                mib(static_cast<int64_t>(free_bytes)) + " free of " +
                                mib(static_cast<int64_t>(total_bytes)) + " after the weights (" +
                                mib(use.weight_bytes) + ") and workspace (" + mib(use.workspace_bytes) +
                                "); lower --kv-cache-memory");
    }
    TERN_RETURN_IF_ERROR(kv.allocate(static_cast<size_t>(want), "the KV cache"));
    use.kv_pool_bytes = want;
    return Status::ok();
  }

  Status validate(std::span<const SequenceChunk> batch, std::span<float> out, int64_t* num_tokens,
                  int64_t* num_want, int64_t* num_table_entries) const {
    if (batch.empty()) return invalid_argument("forward_batch: empty batch");
    const int64_t bs = options.block_size;
    int64_t tokens = 0, want = 0, entries = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const SequenceChunk& chunk = batch[i];
      auto bad = [i](const std::string& what) {
        return invalid_argument("forward_batch: chunk " + std::to_string(i) + ": " + what);
      };
      const auto n = static_cast<int64_t>(chunk.tokens.size());
      if (n == 0) return bad("no tokens");
      for (int64_t t = 0; t < n; ++t) {
        const int32_t id = chunk.tokens[static_cast<size_t>(t)];
        if (id < 0 || id >= config.vocab_size) {
          return bad("token id " + std::to_string(id) + " at index " + std::to_string(t) +
                     " outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")");
        }
      }
      if (chunk.start_pos < 0 || chunk.start_pos > std::numeric_limits<int32_t>::max() - n) {
        return bad("start_pos " + std::to_string(chunk.start_pos) + " out of range");
      }
      const int64_t used = (chunk.start_pos + n + bs - 1) / bs;
      if (static_cast<int64_t>(chunk.block_table.size()) < used) {
        return bad("block table has " + std::to_string(chunk.block_table.size()) + " entries; positions up to " +
                   std::to_string(chunk.start_pos + n) + " need " + std::to_string(used));
      }
      for (int64_t b = 0; b < used; ++b) {
        const int32_t block = chunk.block_table[static_cast<size_t>(b)];
        if (block < 0 || block >= num_blocks) {
          return bad("block table entry " + std::to_string(b) + " names block " + std::to_string(block) +
                     " outside the pool of " + std::to_string(num_blocks));
        }
      }
      tokens += n;
      entries += used;
      want += chunk.want_logits ? 1 : 0;
    }
    if (tokens > max_tokens) {
      return invalid_argument("forward_batch: " + std::to_string(tokens) + " tokens in one step; the GPU workspace " +
                              "was planned for max_num_batched_tokens = " + std::to_string(max_tokens));
    }
    if (static_cast<int64_t>(out.size()) != want * config.vocab_size) {
      return invalid_argument("forward_batch: logits buffer holds " + std::to_string(out.size()) +
                              " floats; expected " + std::to_string(want) + " x " +
                              std::to_string(config.vocab_size));
    }
    *num_tokens = tokens;
    *num_want = want;
    *num_table_entries = entries;
    return Status::ok();
  }

  Status ensure_meta(size_t count) {
    const size_t bytes = count * sizeof(int32_t);
    if (meta_host.bytes() >= bytes) return Status::ok();
    const size_t grown = std::max(bytes, 2 * meta_host.bytes());
    TERN_RETURN_IF_ERROR(meta_host.allocate(grown, "step metadata (host)"));
    TERN_RETURN_IF_ERROR(meta_dev.allocate(grown, "step metadata"));
    return Status::ok();
  }

  Status forward(std::span<const SequenceChunk> batch, std::span<float> out);
};

Status DeviceModel::Impl::forward(std::span<const SequenceChunk> batch, std::span<float> out) {
  const ModelConfig& c = config;
  int64_t T = 0, R = 0, NB = 0;
  TERN_RETURN_IF_ERROR(validate(batch, out, &T, &R, &NB));
  const auto S = static_cast<int64_t>(batch.size());
  const int64_t bs = options.block_size;

  // Pack the step's metadata: ids, positions, slots, token -> sequence,
  // logit rows, block-table offsets, block tables. One upload.
  const int64_t count = 4 * T + R + S + NB;
  TERN_RETURN_IF_ERROR(ensure_meta(static_cast<size_t>(count)));
  int32_t* hm = meta_host.as<int32_t>();
  int32_t* ids = hm;
  int32_t* positions = ids + T;
  int32_t* slots = positions + T;
  int32_t* token_seq = slots + T;
  int32_t* logit_rows = token_seq + T;
  int32_t* table_offsets = logit_rows + R;
  int32_t* tables = table_offsets + S;
  int64_t row = 0, want = 0, entry = 0, max_ctx = 0;
  for (int64_t s = 0; s < S; ++s) {
    const SequenceChunk& chunk = batch[static_cast<size_t>(s)];
    const auto n = static_cast<int64_t>(chunk.tokens.size());
    const int64_t used = (chunk.start_pos + n + bs - 1) / bs;
    table_offsets[s] = static_cast<int32_t>(entry);
    std::memcpy(tables + entry, chunk.block_table.data(), static_cast<size_t>(used) * sizeof(int32_t));
    for (int64_t i = 0; i < n; ++i, ++row) {
      const int64_t pos = chunk.start_pos + i;
      ids[row] = chunk.tokens[static_cast<size_t>(i)];
      positions[row] = static_cast<int32_t>(pos);
      slots[row] = static_cast<int32_t>(chunk.block_table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
      token_seq[row] = static_cast<int32_t>(s);
    }
    if (chunk.want_logits) logit_rows[want++] = static_cast<int32_t>(row - 1);
    entry += used;
    max_ctx = std::max(max_ctx, chunk.start_pos + n);
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_dev.as<void>(), hm, static_cast<size_t>(count) * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream));
  const int32_t* dm = meta_dev.as<int32_t>();
  const int32_t* d_ids = dm;
  const int32_t* d_positions = d_ids + T;
  const int32_t* d_slots = d_positions + T;
  const int32_t* d_token_seq = d_slots + T;
  const int32_t* d_logit_rows = d_token_seq + T;
  const int32_t* d_table_offsets = d_logit_rows + R;
  const int32_t* d_tables = d_table_offsets + S;

  // Flash-decoding splits when (tokens x kv heads) blocks cannot fill the GPU.
  int num_splits = 1, split_len = 0;
  {
    const int64_t blocks = T * c.num_kv_heads;
    const int64_t target = 2 * static_cast<int64_t>(sm_count);
    if (blocks < target && max_ctx > 2 * kAttentionTile) {
      int64_t splits = (target + blocks - 1) / blocks;
      splits = std::min({splits, (max_ctx + kAttentionTile - 1) / kAttentionTile, kMaxSplits, kMaxPartialRows / T});
      if (splits > 1) {
        const int64_t len = ((max_ctx + splits - 1) / splits + kAttentionTile - 1) / kAttentionTile * kAttentionTile;
        split_len = static_cast<int>(len);
        num_splits = static_cast<int>((max_ctx + len - 1) / len);
      }
    }
  }

  const int64_t H = c.hidden_size, I = c.intermediate_size, QKV = qkv_dim();
  const auto eps = static_cast<float>(c.rms_norm_eps);
  TERN_CUDA_RETURN_IF_ERROR(embedding_gather(embed.as<bf16>(), d_ids, T, H, x.as<float>(), stream));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& w = layers[static_cast<size_t>(l)];
    // The previous layer's MLP output joins the residual here.
    TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm(x.as<float>(), l == 0 ? nullptr : delta.as<float>(),
                                          w.input_norm.as<float>(), nullptr, T, H, eps, h.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(linear(cublas, h.as<bf16>(), T, H, w.qkv.as<bf16>(), QKV, qkv.as<void>(), GemmOut::kBf16));

    RopeKvParams rp;
    rp.qkv = qkv.as<bf16>();
    rp.row_stride = QKV;
    rp.positions = d_positions;
    rp.slots = d_slots;
    rp.inv_freq = inv_freq.as<float>();
    rp.num_tokens = T;
    rp.num_heads = static_cast<int>(c.num_heads);
    rp.num_kv_heads = static_cast<int>(c.num_kv_heads);
    rp.head_dim = static_cast<int>(c.head_dim);
    rp.k_cache = k_plane(l);
    rp.v_cache = v_plane(l);
    TERN_CUDA_RETURN_IF_ERROR(rope_store_kv(rp, stream));

    PagedAttentionParams ap;
    ap.q = qkv.as<bf16>();
    ap.q_row_stride = QKV;
    ap.k_cache = k_plane(l);
    ap.v_cache = v_plane(l);
    ap.positions = d_positions;
    ap.token_seq = d_token_seq;
    ap.table_offsets = d_table_offsets;
    ap.block_tables = d_tables;
    ap.num_tokens = T;
    ap.num_heads = rp.num_heads;
    ap.num_kv_heads = rp.num_kv_heads;
    ap.head_dim = rp.head_dim;
    ap.block_size = static_cast<int>(bs);
    ap.num_splits = num_splits;
    ap.split_len = split_len;
    ap.partial_out = partial_out.as<float>();
    ap.partial_ml = partial_ml.as<float>();
    ap.out = attn.as<bf16>();
    ap.out_row_stride = c.q_dim();
    TERN_CUDA_RETURN_IF_ERROR(paged_attention(ap, stream));

    TERN_RETURN_IF_ERROR(
        linear(cublas, attn.as<bf16>(), T, c.q_dim(), w.o.as<bf16>(), H, delta.as<void>(), GemmOut::kF32));
    TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm(x.as<float>(), delta.as<float>(), w.post_norm.as<float>(), nullptr, T, H,
                                          eps, h.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(
        linear(cublas, h.as<bf16>(), T, H, w.gate_up.as<bf16>(), 2 * I, gate_up.as<void>(), GemmOut::kBf16));
    TERN_CUDA_RETURN_IF_ERROR(silu_mul(gate_up.as<bf16>(), T, I, act.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(linear(cublas, act.as<bf16>(), T, I, w.down.as<bf16>(), H, delta.as<void>(), GemmOut::kF32));
  }

  // The last MLP output joins only the rows whose logits are wanted; they go
  // through the final norm and the head in passes of max_logit_rows.
  const int64_t V = c.vocab_size;
  for (int64_t first = 0; first < R; first += max_logit_rows) {
    const int64_t rows = std::min(max_logit_rows, R - first);
    TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm(x.as<float>(), delta.as<float>(), final_norm.as<float>(),
                                          d_logit_rows + first, rows, H, eps, hlog.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(linear(cublas, hlog.as<bf16>(), rows, H, lm_head, V, logits.as<void>(), GemmOut::kF32));
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data() + first * V, logits.as<void>(),
                                              static_cast<size_t>(rows * V) * sizeof(float), cudaMemcpyDeviceToHost,
                                              stream));
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  TERN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
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
  TERN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, options.device));
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasCreate(&impl->cublas));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasSetStream(impl->cublas, impl->stream));
  TERN_RETURN_IF_ERROR(impl->upload_weights(weights));
  TERN_RETURN_IF_ERROR(impl->plan_workspace());
  TERN_RETURN_IF_ERROR(impl->allocate_kv());
  TERN_RETURN_IF_ERROR(impl->ensure_meta(4096));
  return std::unique_ptr<DeviceModel>(new DeviceModel(std::move(impl)));
}

Status DeviceModel::forward_batch(std::span<const SequenceChunk> batch, std::span<float> logits) {
  TERN_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));  // per host thread
  Status s = impl_->forward(batch, logits);
  // A step that failed half-way may still have copies in flight from the
  // pinned metadata the next step overwrites.
  if (!s.is_ok()) cudaStreamSynchronize(impl_->stream);
  return s;
}

Status DeviceModel::copy_block(int32_t src, int32_t dst) {
  Impl& m = *impl_;
  if (src < 0 || src >= m.num_blocks || dst < 0 || dst >= m.num_blocks) {
    return invalid_argument("copy_block: block " + std::to_string(src) + " -> " + std::to_string(dst) +
                            " outside the pool of " + std::to_string(m.num_blocks));
  }
  if (src == dst) return Status::ok();
  const int64_t block_elems = m.options.block_size * m.config.kv_dim();
  for (int64_t l = 0; l < m.config.num_layers; ++l) {
    for (bf16* plane : {m.k_plane(l), m.v_plane(l)}) {
      TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(plane + dst * block_elems, plane + src * block_elems,
                                                static_cast<size_t>(block_elems) * sizeof(bf16),
                                                cudaMemcpyDeviceToDevice, m.stream));
    }
  }
  return Status::ok();
}

int64_t DeviceModel::num_kv_blocks() const { return impl_->num_blocks; }
int64_t DeviceModel::block_size() const { return impl_->options.block_size; }
int64_t DeviceModel::vocab_size() const { return impl_->config.vocab_size; }
int64_t DeviceModel::max_num_batched_tokens() const { return impl_->max_tokens; }
DeviceMemoryUse DeviceModel::memory_use() const { return impl_->use; }

Status DeviceModel::read_kv_pool(std::vector<float>& out) const {
  const Impl& m = *impl_;
  const size_t n = m.kv.bytes() / sizeof(bf16);
  std::vector<bf16> raw(n);
  TERN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(raw.data(), m.kv.as<void>(), n * sizeof(bf16), cudaMemcpyDeviceToHost));
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(raw[i]);
  return Status::ok();
}

}  // namespace tern::cuda
