// One engine step on the GPU. The step's metadata (ids, positions, KV slots,
// block tables) goes up in one copy; then the layers' kernels are enqueued,
// or, for a decode step, one CUDA graph replays them over fixed metadata
// buffers padded to a batch-size bucket; then the LM head with the argmax
// of the greedy rows folded in (or after it, past GEMV sizes), and the copies of the picks and of the host-sampled logits
// into pinned memory; then the call waits for the stream.
//
// With options.decode_kernel, one-token steps run all layers as one
// persistent kernel (decode_layers) where the shapes fit. Otherwise steps
// of at most gemv_tokens tokens run their linear layers on the own GEMV
// kernel with the norms, RoPE + KV write and SiLU*up fused in (5 launches
// per layer); larger ones on cuBLAS with separate norm, RoPE and
// SiLU kernels (9). Both add the attention and MLP outputs straight into
// the fp32 residual stream. With options.pdl the GEMV path's kernels go
// out as programmatic dependent launches (sm_90), so each starts (and
// streams its weights) while the one before it finishes.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "model/ernie4_5/cuda/device_model_impl.h"

namespace tern::cuda {
namespace {

struct StepCounts {
  int64_t tokens = 0, rows = 0, table_entries = 0, host_rows = 0, sample_rows = 0, max_ctx = 0, fed = 0;
  bool any_argmax = false;
};

}  // namespace

Status DeviceModel::Impl::ensure_meta(size_t count) {
  const size_t bytes = count * sizeof(int32_t);
  if (meta_host.bytes() >= bytes) return Status::ok();
  const size_t grown = std::max(bytes, 2 * meta_host.bytes());
  TERN_RETURN_IF_ERROR(meta_host.allocate(grown, "step metadata (host)"));
  TERN_RETURN_IF_ERROR(meta_dev.allocate(grown, "step metadata"));
  return Status::ok();
}

// Flash-decoding splits when (tokens x kv heads) blocks are fewer than
// kSplitBlocksPerSm per multiprocessor. max_ctx < 0:
// the contexts are not known at launch (a decode graph), so the split count
// depends on the batch alone.
int DeviceModel::Impl::splits_for(int64_t num_tokens, int64_t max_ctx) const {
  const int64_t blocks = num_tokens * config.num_kv_heads;
  const int64_t target = kSplitBlocksPerSm * static_cast<int64_t>(sm_count);
  if (blocks >= target) return 1;
  int64_t splits = (target + blocks - 1) / blocks;
  if (max_ctx >= 0) {
    if (max_ctx <= 2 * kAttentionTile) return 1;
    splits = std::min<int64_t>(splits, (max_ctx + kAttentionTile - 1) / kAttentionTile);
  }
  splits = std::min({splits, static_cast<int64_t>(kMaxAttentionSplits), max_partial_rows / num_tokens});
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

StepView DeviceModel::Impl::view_of(const int32_t* meta, int64_t T, int64_t R, int64_t S) const {
  StepView v;
  v.num_tokens = T;
  v.num_rows = R;
  v.ids = meta;
  v.positions = meta + T;
  v.slots = meta + 2 * T;
  v.token_seq = meta + 3 * T;
  v.logit_rows = meta + 4 * T;
  v.table_offsets = meta + 4 * T + R;
  v.tables = meta + 4 * T + R + S;
  return v;
}

StepView DeviceModel::Impl::decode_view(int64_t bucket) const {
  StepView v = view_of(decode_meta_dev.as<int32_t>(), bucket, bucket, bucket);
  v.num_splits = splits_for(bucket, -1);
  v.one_token = true;
  return v;
}

// Rows past the batch are padding: token 0 at position 0, writing and
// reading slot 0 of the pad block, their logits and picks ignored.
int64_t DeviceModel::Impl::pack_decode(std::span<const SequenceChunk> batch, int64_t bucket) {
  const int64_t bs = options.block_size, B = bucket;
  int32_t* hm = decode_meta_host.as<int32_t>();
  int32_t* ids = hm;
  int32_t* positions = hm + B;
  int32_t* slots = hm + 2 * B;
  int32_t* token_seq = hm + 3 * B;
  int32_t* logit_rows = hm + 4 * B;
  int32_t* table_offsets = hm + 5 * B;
  int32_t* tables = hm + 6 * B;
  int64_t entry = 0;
  const auto S = static_cast<int64_t>(batch.size());
  for (int64_t s = 0; s < S; ++s) {
    const SequenceChunk& chunk = batch[static_cast<size_t>(s)];
    const int64_t pos = chunk.start_pos, used = pos / bs + 1;
    table_offsets[s] = static_cast<int32_t>(entry);
    std::memcpy(tables + entry, chunk.block_table.data(), static_cast<size_t>(used) * sizeof(int32_t));
    entry += used;
    ids[s] = chunk.tokens[0];
    positions[s] = static_cast<int32_t>(pos);
    slots[s] = static_cast<int32_t>(chunk.block_table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
    token_seq[s] = static_cast<int32_t>(s);
    logit_rows[s] = static_cast<int32_t>(s);
  }
  tables[entry] = pad_block;
  for (int64_t s = S; s < B; ++s) {
    ids[s] = 0;
    positions[s] = 0;
    slots[s] = static_cast<int32_t>(pad_block * bs);
    token_seq[s] = static_cast<int32_t>(s);
    logit_rows[s] = static_cast<int32_t>(s);
    table_offsets[s] = static_cast<int32_t>(entry);
  }
  return 6 * B + entry + 1;
}

Status DeviceModel::Impl::enqueue_layers(const StepView& v) {
  const ModelConfig& c = config;
  const int64_t T = v.num_tokens, H = c.hidden_size, I = c.intermediate_size, QKV = qkv_dim();
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const bool small = T <= gemv_tokens;
  // RoPE and the KV write inside the attention (past the GEMV's sizes, which do them in the q|k|v GEMV): only
  // when each token is its sequence's only new one, so no token reads a key another block of the launch writes.
  const bool rope_fused = rope_in_attention && !small && v.one_token && v.num_tiles == 0;
  auto gemv_of = [&](GemvInput in, GemvOutput out, int64_t K, int64_t N, const bf16* w, void* y) {
    GemvParams g;
    g.input = in;
    g.output = out;
    g.x_f32 = x.as<float>();
    g.eps = eps;
    g.num_tokens = T;
    g.in_features = K;
    g.out_features = N;
    g.w = w;
    g.y = y;
    return g;
  };
  // Programmatic launches only from one own kernel to the next (the GEMV
  // path), never after a cuBLAS kernel or a copy; the embedding starts the chain.
  const bool chain = pdl && small;
  TERN_CUDA_RETURN_IF_ERROR(
      embedding_gather(embed.as<bf16>(), v.ids, T, H, x.as<float>(), stream, false, picks.as<uint64_t>(), v.num_rows));
  if (T == 1 && layers_kernel) {
    DecodeLayersParams p = layers_params;
    p.positions = v.positions;
    p.slots = v.slots;
    p.token_seq = v.token_seq;
    p.table_offsets = v.table_offsets;
    p.block_tables = v.tables;
    TERN_CUDA_RETURN_IF_ERROR(decode_layers(p, sm_count, stream));
    return Status::ok();
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& w = layers[static_cast<size_t>(l)];
    RopeKvParams rp;
    rp.qkv = qkv.as<bf16>();
    rp.row_stride = QKV;
    rp.positions = v.positions;
    rp.slots = v.slots;
    rp.inv_freq = inv_freq.as<float>();
    rp.num_tokens = T;
    rp.num_heads = static_cast<int>(c.num_heads);
    rp.num_kv_heads = static_cast<int>(c.num_kv_heads);
    rp.head_dim = static_cast<int>(c.head_dim);
    rp.k_cache = k_plane(l);
    rp.v_cache = v_plane(l);
    if (small) {
      GemvParams g = gemv_of(GemvInput::kRmsNorm, GemvOutput::kQkvRope, H, QKV, w.qkv.as<bf16>(), qkv.as<void>());
      g.norm_weight = w.input_norm.as<float>();
      g.positions = rp.positions;
      g.slots = rp.slots;
      g.inv_freq = rp.inv_freq;
      g.num_heads = rp.num_heads;
      g.num_kv_heads = rp.num_kv_heads;
      g.head_dim = rp.head_dim;
      g.k_cache = rp.k_cache;
      g.v_cache = rp.v_cache;
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
    } else {
      TERN_CUDA_RETURN_IF_ERROR(
          add_rmsnorm(x.as<float>(), nullptr, w.input_norm.as<float>(), nullptr, T, H, eps, h.as<bf16>(), stream));
      TERN_RETURN_IF_ERROR(linear(cublas, h.as<bf16>(), T, H, w.qkv.as<bf16>(), QKV, qkv.as<void>(), GemmOut::kBf16));
      if (!rope_fused) TERN_CUDA_RETURN_IF_ERROR(rope_store_kv(rp, stream));
    }

    PagedAttentionParams ap;
    ap.q = qkv.as<bf16>();
    ap.q_row_stride = QKV;
    ap.k_cache = k_plane(l);
    ap.v_cache = v_plane(l);
    ap.positions = v.positions;
    ap.token_seq = v.token_seq;
    ap.table_offsets = v.table_offsets;
    ap.block_tables = v.tables;
    ap.num_tokens = T;
    ap.num_heads = rp.num_heads;
    ap.num_kv_heads = rp.num_kv_heads;
    ap.head_dim = rp.head_dim;
    ap.block_size = static_cast<int>(options.block_size);
    ap.num_splits = v.num_splits;
    ap.partial_out = partial_out.as<float>();
    ap.partial_ml = partial_ml.as<float>();
    ap.split_counters = split_counters.as<int>();
    ap.out = attn.as<bf16>();
    ap.out_row_stride = c.q_dim();
    if (rope_fused) {
      ap.rope_inv_freq = rp.inv_freq;
      ap.slots = rp.slots;
      ap.k_out = rp.k_cache;
      ap.v_out = rp.v_cache;
    }
    if (v.num_tiles > 0 && v.num_singles > 0) {
      // The tiles on the side stream while the one-token chunks' attention runs here: the two kernels
      // are each too small to fill the GPU in a step that mixes decodes with a new prompt or two.
      TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork, stream));
      TERN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side_stream, fork, 0));
      TERN_CUDA_RETURN_IF_ERROR(paged_attention_prefill(ap, v.tiles, v.num_tiles, side_stream, prefill_chunk));
      TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(join, side_stream));
      PagedAttentionParams single = ap;
      single.token_list = v.singles;
      single.num_tokens = v.num_singles;
      TERN_CUDA_RETURN_IF_ERROR(paged_attention(single, stream, false));
      TERN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, join, 0));
    } else if (v.num_tiles > 0) {
      TERN_CUDA_RETURN_IF_ERROR(paged_attention_prefill(ap, v.tiles, v.num_tiles, stream, prefill_chunk));
    } else {
      TERN_CUDA_RETURN_IF_ERROR(paged_attention(ap, stream, chain));
    }

    if (small) {
      GemvParams g = gemv_of(GemvInput::kBf16, GemvOutput::kAddF32, c.q_dim(), H, w.o.as<bf16>(), x.as<void>());
      g.x_bf16 = attn.as<bf16>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
      g = gemv_of(GemvInput::kRmsNorm, GemvOutput::kBf16, H, 2 * I, w.gate_up.as<bf16>(), gate_up.as<void>());
      g.norm_weight = w.post_norm.as<float>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
      g = gemv_of(GemvInput::kSiluMul, GemvOutput::kAddF32, I, H, w.down.as<bf16>(), x.as<void>());
      g.x_bf16 = gate_up.as<bf16>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
    } else {
      TERN_RETURN_IF_ERROR(
          linear(cublas, attn.as<bf16>(), T, c.q_dim(), w.o.as<bf16>(), H, x.as<void>(), GemmOut::kAddF32));
      TERN_CUDA_RETURN_IF_ERROR(
          add_rmsnorm(x.as<float>(), nullptr, w.post_norm.as<float>(), nullptr, T, H, eps, h.as<bf16>(), stream));
      TERN_RETURN_IF_ERROR(
          linear(cublas, h.as<bf16>(), T, H, w.gate_up.as<bf16>(), 2 * I, gate_up.as<void>(), GemmOut::kBf16));
      TERN_CUDA_RETURN_IF_ERROR(silu_mul(gate_up.as<bf16>(), T, I, act.as<bf16>(), stream));
      TERN_RETURN_IF_ERROR(
          linear(cublas, act.as<bf16>(), T, I, w.down.as<bf16>(), H, x.as<void>(), GemmOut::kAddF32));
    }
  }
  return Status::ok();
}

// Final norm of the logit rows [first, first + rows) (gathered through
// logit_rows), the LM head into `logits`, and their argmax into picks.
// after_layers: enqueued right after enqueue_layers(v), nothing between.
Status DeviceModel::Impl::enqueue_head(const StepView& v, int64_t first, int64_t rows, bool argmax,
                                       bool after_layers) {
  const ModelConfig& c = config;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int32_t* selected = v.logit_rows + first;
  // Chained only to a GEMV before it: the layers' last (right after GEMV
  // layers), or this pass's own head GEMV for the argmax.
  const bool small_head = rows <= gemv_tokens;
  const bool chain_head = pdl && small_head && after_layers && v.num_tokens <= gemv_tokens &&
                          !(v.num_tokens == 1 && layers_kernel);
  if (small_head) {
    GemvParams g;
    g.input = GemvInput::kRmsNorm;
    g.output = GemvOutput::kF32;
    g.x_f32 = x.as<float>();
    g.rows = selected;
    g.norm_weight = final_norm.as<float>();
    g.eps = eps;
    g.num_tokens = rows;
    g.in_features = H;
    g.out_features = V;
    g.w = lm_head;
    g.y = logits.as<void>();
    if (argmax) g.argmax_keys = picks.as<uint64_t>() + first;  // the head folds its own argmax
    TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain_head));
  } else {
    TERN_CUDA_RETURN_IF_ERROR(
        add_rmsnorm(x.as<float>(), nullptr, final_norm.as<float>(), selected, rows, H, eps, hlog.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(linear(cublas, hlog.as<bf16>(), rows, H, lm_head, V, logits.as<void>(), GemmOut::kF32));
    if (argmax) {
      TERN_CUDA_RETURN_IF_ERROR(argmax_rows(logits.as<float>(), rows, V, picks.as<uint64_t>() + first, stream));
    }
  }
  return Status::ok();
}

Status DeviceModel::Impl::enqueue_decode(int64_t bucket) {
  const StepView v = decode_view(bucket);
  TERN_RETURN_IF_ERROR(enqueue_layers(v));
  if (head_in_decode(bucket)) TERN_RETURN_IF_ERROR(enqueue_head(v, 0, bucket, true, true));
  return Status::ok();
}

namespace {

Status validate(const DeviceModel::Impl& m, std::span<const SequenceChunk> batch, std::span<const uint8_t> modes,
                std::span<const SampleRow> samples, std::span<const LogitOp> ops, std::span<const int32_t> feedback,
                StepCounts* counts) {
  if (batch.empty()) return invalid_argument("forward_step: empty batch");
  const int64_t bs = m.options.block_size;
  StepCounts n;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& chunk = batch[i];
    auto bad = [i](const std::string& what) {
      return invalid_argument("forward_step: chunk " + std::to_string(i) + ": " + what);
    };
    const auto len = static_cast<int64_t>(chunk.tokens.size());
    if (len == 0) return bad("no tokens");
    for (int64_t t = 0; t < len; ++t) {
      const int32_t id = chunk.tokens[static_cast<size_t>(t)];
      if (id < 0 || id >= m.config.vocab_size) {
        return bad("token id " + std::to_string(id) + " at index " + std::to_string(t) +
                   " outside the vocabulary [0, " + std::to_string(m.config.vocab_size) + ")");
      }
    }
    if (chunk.start_pos < 0 || chunk.start_pos > std::numeric_limits<int32_t>::max() - len) {
      return bad("start_pos " + std::to_string(chunk.start_pos) + " out of range");
    }
    const int64_t used = (chunk.start_pos + len + bs - 1) / bs;
    if (static_cast<int64_t>(chunk.block_table.size()) < used) {
      return bad("block table has " + std::to_string(chunk.block_table.size()) + " entries; positions up to " +
                 std::to_string(chunk.start_pos + len) + " need " + std::to_string(used));
    }
    for (int64_t b = 0; b < used; ++b) {
      const int32_t block = chunk.block_table[static_cast<size_t>(b)];
      if (block < 0 || block >= m.num_blocks) {
        return bad("block table entry " + std::to_string(b) + " names block " + std::to_string(block) +
                   " outside the pool of " + std::to_string(m.num_blocks));
      }
    }
    n.tokens += len;
    n.table_entries += used;
    n.max_ctx = std::max(n.max_ctx, chunk.start_pos + len);
    if (chunk.want_logits) {
      const uint8_t mode = static_cast<size_t>(n.rows) < modes.size() ? modes[static_cast<size_t>(n.rows)] : kPickOnHost;
      if (mode > kPickSample) return bad("row mode " + std::to_string(mode) + " is not one of 0, 1, 2");
      n.any_argmax = n.any_argmax || mode == kPickArgmax;
      n.host_rows += mode == kPickOnHost ? 1 : 0;
      n.sample_rows += mode == kPickSample ? 1 : 0;
      ++n.rows;
    }
  }
  if (n.tokens > m.max_tokens) {
    return invalid_argument("forward_step: " + std::to_string(n.tokens) + " tokens in one step; the GPU workspace " +
                            "was planned for max_num_batched_tokens = " + std::to_string(m.max_tokens));
  }
  if (!modes.empty() && static_cast<int64_t>(modes.size()) != n.rows) {
    return invalid_argument("forward_step: " + std::to_string(modes.size()) + " row modes for " +
                            std::to_string(n.rows) + " rows with logits");
  }
  if (static_cast<int64_t>(samples.size()) != n.sample_rows) {
    return invalid_argument("forward_step: " + std::to_string(samples.size()) + " sample rows for " +
                            std::to_string(n.sample_rows) + " rows sampled on the device");
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleRow& r = samples[i];
    if (r.ops_begin < 0 || r.ops_begin > r.ops_end || static_cast<size_t>(r.ops_end) > ops.size()) {
      return invalid_argument("forward_step: sample row " + std::to_string(i) + " names logit ops [" +
                              std::to_string(r.ops_begin) + ", " + std::to_string(r.ops_end) + ") of " +
                              std::to_string(ops.size()));
    }
    if (!r.greedy && !(r.temperature > 0.0f && r.top_p > 0.0f && r.top_p <= 1.0f && r.min_p >= 0.0f)) {
      return invalid_argument("forward_step: sample row " + std::to_string(i) + " has bad parameters");
    }
  }
  if (!feedback.empty() && feedback.size() != batch.size()) {
    return invalid_argument("forward_step: " + std::to_string(feedback.size()) + " feedback entries for " +
                            std::to_string(batch.size()) + " chunks");
  }
  for (size_t i = 0; i < feedback.size(); ++i) {
    const int32_t r = feedback[i];
    if (r < 0) continue;
    if (static_cast<size_t>(r) >= m.last_picked.size() || m.last_picked[static_cast<size_t>(r)] == 0) {
      return invalid_argument("forward_step: chunk " + std::to_string(i) + " takes the pick of row " +
                              std::to_string(r) + ", which the step before did not pick on the device");
    }
    ++n.fed;
  }
  *counts = n;
  return Status::ok();
}

}  // namespace

Status DeviceModel::Impl::ensure_sampling(size_t n, size_t m) {
  const size_t row_bytes = std::max<size_t>(n, 1) * sizeof(SampleRow), op_bytes = std::max<size_t>(m, 1) * sizeof(LogitOp);
  if (sample_rows_host.bytes() < row_bytes) {
    TERN_RETURN_IF_ERROR(sample_rows_host.allocate(2 * row_bytes, "sample rows (host)"));
    TERN_RETURN_IF_ERROR(sample_rows_dev.allocate(2 * row_bytes, "sample rows"));
  }
  if (sample_ops_host.bytes() < op_bytes) {
    TERN_RETURN_IF_ERROR(sample_ops_host.allocate(2 * op_bytes, "logit ops (host)"));
    TERN_RETURN_IF_ERROR(sample_ops_dev.allocate(2 * op_bytes, "logit ops"));
  }
  return Status::ok();
}

// Enqueues one step: uploads (metadata, the fed tokens' places, sampling
// rows), the fed tokens taken from the last step's picks, the layers (a
// decode graph or kernel by kernel), the head, sampling, and the copies of
// picks and host logits out; the event done[slot] follows them.
Status DeviceModel::Impl::launch(std::span<const SequenceChunk> batch, std::span<const uint8_t> modes,
                                 std::span<const SampleRow> samples, std::span<const LogitOp> ops,
                                 std::span<const int32_t> feedback) {
  if (launched.size() >= 2) return invalid_argument("forward_step: two launched steps are not finished");
  if (!launched.empty() && launched.back().host_rows > 0) {
    return invalid_argument("forward_step: the step in flight has rows for the host; finish it first");
  }
  StepCounts n;
  TERN_RETURN_IF_ERROR(validate(*this, batch, modes, samples, ops, feedback, &n));
  const auto S = static_cast<int64_t>(batch.size());
  const int64_t T = n.tokens, R = n.rows, V = config.vocab_size;
  // The staging buffers below are rewritten: the last launch's uploads must be done.
  TERN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged));

  // A decode step: one token and one logits row per sequence, a bucket that
  // takes the batch, and block tables (and fed-token places) that fit the fixed buffer.
  int64_t bucket = 0;
  size_t bucket_index = 0;
  if (T == S && R == S) {
    while (bucket_index < buckets.size() && buckets[bucket_index] < S) ++bucket_index;
    if (bucket_index < buckets.size()) bucket = buckets[bucket_index];
    if (bucket > 0 && 6 * bucket + n.table_entries + 1 + 2 * n.fed > decode_meta_capacity) bucket = 0;
  }
  last_was_decode = bucket > 0;

  // Pairs (token row, pick row) for the fed tokens, after the metadata.
  auto pack_fed = [&](int32_t* at) {
    int64_t row = 0, k = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int32_t r = feedback.empty() ? -1 : feedback[static_cast<size_t>(s)];
      if (r >= 0) {
        at[2 * k] = static_cast<int32_t>(row);
        at[2 * k + 1] = r;
        ++k;
      }
      row += static_cast<int64_t>(batch[static_cast<size_t>(s)].tokens.size());
    }
  };
  StepView v;
  bool head_done = false;
  int32_t* meta_ids = nullptr;
  const int32_t* fed_pairs = nullptr;
  if (bucket > 0) {
    const int64_t count = pack_decode(batch, bucket);
    pack_fed(decode_meta_host.as<int32_t>() + count);
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(decode_meta_dev.as<void>(), decode_meta_host.as<void>(),
                                              static_cast<size_t>(count + 2 * n.fed) * sizeof(int32_t),
                                              cudaMemcpyHostToDevice, stream));
    v = decode_view(bucket);
    meta_ids = decode_meta_dev.as<int32_t>();
    fed_pairs = meta_ids + count;
  } else {
    // Pack the step's metadata (StepView's layout) and upload it in one copy.
    const int64_t bs = options.block_size;
    // Attention query tiles when some chunk has several tokens: its tokens
    // in tiles, the one-token chunks' tokens listed for the decode kernel.
    int64_t num_tiles = 0, num_singles = 0;
    if (prefill_tile > 0 && T > S) {
      for (const SequenceChunk& chunk : batch) {
        const auto len = static_cast<int64_t>(chunk.tokens.size());
        if (len == 1) {
          ++num_singles;
        } else {
          num_tiles += (len + prefill_tile - 1) / prefill_tile;
        }
      }
    }
    const int64_t layout = 4 * T + R + S + n.table_entries;
    const int64_t count = layout + num_singles + 2 * num_tiles;
    TERN_RETURN_IF_ERROR(ensure_meta(static_cast<size_t>(count + 2 * n.fed)));
    int32_t* hm = meta_host.as<int32_t>();
    int32_t* ids = hm;
    int32_t* positions = ids + T;
    int32_t* slots = positions + T;
    int32_t* token_seq = slots + T;
    int32_t* logit_rows = token_seq + T;
    int32_t* table_offsets = logit_rows + R;
    int32_t* tables = table_offsets + S;
    int64_t row = 0, want = 0, entry = 0;
    for (int64_t s = 0; s < S; ++s) {
      const SequenceChunk& chunk = batch[static_cast<size_t>(s)];
      const auto len = static_cast<int64_t>(chunk.tokens.size());
      const int64_t used = (chunk.start_pos + len + bs - 1) / bs;
      table_offsets[s] = static_cast<int32_t>(entry);
      std::memcpy(tables + entry, chunk.block_table.data(), static_cast<size_t>(used) * sizeof(int32_t));
      for (int64_t i = 0; i < len; ++i, ++row) {
        const int64_t pos = chunk.start_pos + i;
        ids[row] = chunk.tokens[static_cast<size_t>(i)];
        positions[row] = static_cast<int32_t>(pos);
        slots[row] = static_cast<int32_t>(chunk.block_table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
        token_seq[row] = static_cast<int32_t>(s);
      }
      if (chunk.want_logits) logit_rows[want++] = static_cast<int32_t>(row - 1);
      entry += used;
    }
    if (num_tiles > 0) {
      int32_t* singles = hm + layout;
      int32_t* tiles = singles + num_singles;
      int64_t first_row = 0, si = 0, ti = 0;
      for (const SequenceChunk& chunk : batch) {
        const auto len = static_cast<int64_t>(chunk.tokens.size());
        if (len == 1) singles[si++] = static_cast<int32_t>(first_row);
        for (int64_t at = 0; len > 1 && at < len; at += prefill_tile, ++ti) {
          tiles[2 * ti] = static_cast<int32_t>(first_row + at);
          tiles[2 * ti + 1] = static_cast<int32_t>(std::min<int64_t>(prefill_tile, len - at));
        }
        first_row += len;
      }
    }
    pack_fed(hm + count);
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_dev.as<void>(), hm,
                                              static_cast<size_t>(count + 2 * n.fed) * sizeof(int32_t),
                                              cudaMemcpyHostToDevice, stream));
    v = view_of(meta_dev.as<int32_t>(), T, R, S);
    v.num_splits = splits_for(num_tiles > 0 ? std::max<int64_t>(num_singles, 1) : T, n.max_ctx);
    v.one_token = T == S;
    if (num_tiles > 0) {
      v.singles = meta_dev.as<int32_t>() + layout;
      v.num_singles = num_singles;
      v.tiles = v.singles + num_singles;
      v.num_tiles = num_tiles;
    }
    meta_ids = meta_dev.as<int32_t>();
    fed_pairs = meta_ids + count;
  }

  auto mode_of = [&](int64_t r) { return modes.empty() ? kPickOnHost : modes[static_cast<size_t>(r)]; };
  auto is_host = [&](int64_t r) { return mode_of(r) == kPickOnHost; };
  // The sampled rows' parameters go up in one copy, each row told where its
  // logits sit in its head pass and where its pick goes.
  if (n.sample_rows > 0) {
    TERN_RETURN_IF_ERROR(ensure_sampling(samples.size(), ops.size()));
    SampleRow* staged_rows = sample_rows_host.as<SampleRow>();
    for (int64_t r = 0, i = 0; r < R; ++r) {
      if (mode_of(r) != kPickSample) continue;
      staged_rows[i] = samples[static_cast<size_t>(i)];
      staged_rows[i].row = static_cast<int32_t>(r % max_logit_rows);
      staged_rows[i].pick = static_cast<int32_t>(r);
      ++i;
    }
    if (!ops.empty()) std::memcpy(sample_ops_host.as<void>(), ops.data(), ops.size() * sizeof(LogitOp));
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_rows_dev.as<void>(), staged_rows,
                                              samples.size() * sizeof(SampleRow), cudaMemcpyHostToDevice, stream));
    if (!ops.empty()) {
      TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_ops_dev.as<void>(), sample_ops_host.as<void>(),
                                                ops.size() * sizeof(LogitOp), cudaMemcpyHostToDevice, stream));
    }
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged, stream));
  // The fed tokens, from the last step's picks, before this step's embedding clears them.
  if (n.fed > 0) TERN_CUDA_RETURN_IF_ERROR(feed_picks(meta_ids, fed_pairs, n.fed, picks.as<uint64_t>(), stream));

  if (bucket > 0) {
    if (!graphs.empty()) {
      TERN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs[bucket_index].exec, stream));
    } else {
      TERN_RETURN_IF_ERROR(enqueue_decode(bucket));
    }
    head_done = head_in_decode(bucket);
  } else {
    TERN_RETURN_IF_ERROR(enqueue_layers(v));
  }

  // The head in passes of max_logit_rows (unless the decode graph ran it),
  // each pass's host-sampled rows copied out in contiguous runs.
  if (n.host_rows > 0 && logits_host.bytes() < static_cast<size_t>(n.host_rows * V) * sizeof(float)) {
    TERN_RETURN_IF_ERROR(logits_host.allocate(static_cast<size_t>(n.host_rows * V) * sizeof(float),
                                              "host-sampled logits (host)"));
  }
  int64_t host_index = 0, sample_index = 0;
  for (int64_t first = 0; first < R; first += max_logit_rows) {
    const int64_t rows = std::min(max_logit_rows, R - first);
    if (!head_done) {
      TERN_RETURN_IF_ERROR(enqueue_head(v, first, rows, n.any_argmax, bucket == 0 && first == 0));
    }
    int64_t pass_samples = 0;
    for (int64_t r = first; r < first + rows; ++r) pass_samples += mode_of(r) == kPickSample ? 1 : 0;
    if (pass_samples > 0) {
      TERN_CUDA_RETURN_IF_ERROR(sample_rows(logits.as<float>(), V, sample_rows_dev.as<SampleRow>() + sample_index,
                                            pass_samples, sample_ops_dev.as<LogitOp>(), picks.as<uint64_t>(),
                                            stream));
      sample_index += pass_samples;
    }
    for (int64_t r = first; r < first + rows;) {
      if (!is_host(r)) {
        ++r;
        continue;
      }
      int64_t end = r + 1;
      while (end < first + rows && is_host(end)) ++end;
      TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_host.as<float>() + host_index * V,
                                                logits.as<float>() + (r - first) * V,
                                                static_cast<size_t>((end - r) * V) * sizeof(float),
                                                cudaMemcpyDeviceToHost, stream));
      host_index += end - r;
      r = end;
    }
  }
  Launched l;
  l.rows = R;
  l.host_rows = n.host_rows;
  l.slot = next_slot;
  l.host.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) l.host[static_cast<size_t>(r)] = is_host(r) ? 1 : 0;
  if (n.host_rows < R) {
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(picks_host.as<uint64_t>() + l.slot * max_tokens, picks.as<void>(),
                                              static_cast<size_t>(R) * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                              stream));
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(done[l.slot], stream));
  last_picked.assign(static_cast<size_t>(R), 0);
  for (int64_t r = 0; r < R; ++r) last_picked[static_cast<size_t>(r)] = is_host(r) ? 0 : 1;
  next_slot ^= 1;
  launched.push_back(std::move(l));
  return Status::ok();
}

// Waits for the oldest launched step and hands out its picks and host logits.
Status DeviceModel::Impl::finish(std::span<int32_t> tokens, std::span<float> out) {
  if (launched.empty()) return invalid_argument("forward_step: no launched step to finish");
  const Launched l = std::move(launched.front());
  launched.pop_front();
  if (static_cast<int64_t>(tokens.size()) != l.rows) {
    cudaEventSynchronize(done[l.slot]);
    return invalid_argument("forward_step: tokens holds " + std::to_string(tokens.size()) + " entries for " +
                            std::to_string(l.rows) + " rows with logits");
  }
  if (static_cast<int64_t>(out.size()) != l.host_rows * config.vocab_size) {
    cudaEventSynchronize(done[l.slot]);
    return invalid_argument("forward_step: logits buffer holds " + std::to_string(out.size()) +
                            " floats; expected " + std::to_string(l.host_rows) + " x " +
                            std::to_string(config.vocab_size));
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done[l.slot]));
  TERN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const uint64_t* keys = picks_host.as<uint64_t>() + l.slot * max_tokens;
  for (int64_t r = 0; r < l.rows; ++r) {
    tokens[static_cast<size_t>(r)] = l.host[static_cast<size_t>(r)] ? -1 : pick_of(keys[r]);
  }
  if (l.host_rows > 0) std::memcpy(out.data(), logits_host.as<float>(), out.size() * sizeof(float));
  return Status::ok();
}

}  // namespace tern::cuda
