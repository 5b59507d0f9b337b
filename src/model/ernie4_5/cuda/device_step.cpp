// One engine step on the GPU. The step is planned on the host first
// (model/ernie4_5/device_step_plan.h: checks, the decode bucket, the packed
// metadata); its metadata (ids, positions, KV slots, block tables) goes up
// in one copy; then the layers' kernels are enqueued, or, for a decode
// step, one CUDA graph replays them over fixed metadata buffers padded to a
// batch-size bucket; then the LM head with the argmax of the greedy rows
// folded in (or after it, past GEMV sizes), and the copies of the picks and
// of the host-sampled logits into pinned memory.
//
// With options.decode_kernel, one-token steps, and steps of one sequence's
// chunk of up to kMaxDecodeLayersTokens tokens (a token and its drafts),
// run all layers as one persistent kernel (decode_layers) where the shapes
// fit. Otherwise steps
// of at most gemv_tokens tokens run their linear layers on the own GEMV
// kernel with the norms, RoPE + KV write and SiLU*up fused in (5 launches
// per layer); larger ones on cuBLAS with separate norm, RoPE and
// SiLU kernels (9). Both add the attention and MLP outputs straight into
// the fp32 residual stream. With options.pdl the GEMV path's kernels go
// out as programmatic dependent launches (sm_90), so each starts (and
// streams its weights) while the one before it finishes.
#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/key_splits.h"
#include "model/ernie4_5/cuda/device_model_impl.h"

namespace tern::cuda {

Status DeviceModel::Impl::linear_of(const bf16* in, int64_t num_tokens, int64_t K, const Matrix& w, int64_t N,
                                    void* y, GemmOut out) {
  const int64_t T = gemm_rows(num_tokens);
  switch (w.form) {
    case Form::kBf16:
      if (own_gemm(T) && !options.sm90_gemm_gate_up_only) {
        return sm90_linear(in, T, K, w.w.as<bf16>(), N, y, sm90_epilogue(out), stream);
      }
      return linear(cublas, in, T, K, w.w.as<bf16>(), N, y, out);
    case Form::kInt4:
      // W4A16 past the GEMV's sizes: on the tensor cores from the codes, or, for the largest steps, the layer's
      // weights written out as bf16, then the bf16 GEMM.
      if (T <= int4_gemm_rows && int4_gemm_takes(K, w.int4())) {
        const Int4GemmScratch scratch = int4_scratch();
        const int splits = int4_gemm_splits(T, K, N, sm_count, scratch);
        TERN_CUDA_RETURN_IF_ERROR(int4_gemm(in, T, K, w.int4(), N, y, gemv_output_of(out), splits, scratch, stream));
        return Status::ok();
      }
      TERN_CUDA_RETURN_IF_ERROR(dequantize_int4_rows(w.int4(), N, K, dequantized_w.as<bf16>(), stream));
      return linear(cublas, in, T, K, dequantized_w.as<bf16>(), N, y, out);
    case Form::kFp8:
      break;
  }
  const Fp8Scratch scratch{fp8_x_codes.as<uint8_t>(), fp8_x_scales.as<float>(), dequantized_w.as<bf16>(),
                           cublas_workspace.as<void>(), fp8_sums.as<float>()};
  return fp8_gemm->linear(cublas, in, T, K, Fp8Weights{w.w.as<uint8_t>(), w.scale.as<float>()}, N, y, out, scratch,
                          stream, T <= fp8_tc_rows);
}

Int4GemmScratch DeviceModel::Impl::int4_scratch() const {
  return {dequantized_w.as<float>(), dequantized_w.bytes() / sizeof(float), int4_counters.as<int>(),
          static_cast<int>(int4_counters.bytes() / sizeof(int))};
}

bool DeviceModel::Impl::fold_fp8(int64_t num_tokens) {
  const int64_t T = gemm_rows(num_tokens), H = config.hidden_size, I = config.intermediate_size;
  if (!fp8_fold || num_tokens <= gemv_tokens || T > fp8_tc_rows) return false;
  // Plans are per row count; each is asked for once and remembered.
  Fp8Gemm& g = *fp8_gemm;
  return g.needs_sums(T, H, qkv_dim(), GemmOut::kBf16) && g.needs_sums(T, config.q_dim(), H, GemmOut::kF32) &&
         g.needs_sums(T, H, 2 * I, GemmOut::kBf16) && g.needs_sums(T, I, H, GemmOut::kF32);
}

Status DeviceModel::Impl::fp8_sums_of(int64_t num_tokens, int64_t K, const Matrix& w, int64_t N, GemmOut type) {
  const uint8_t* in = fp8_x_codes.as<uint8_t>();
  const int64_t T = gemm_rows(num_tokens);
  return type == GemmOut::kBf16
             ? fp8_gemm->sums(in, T, K, w.w.as<uint8_t>(), N, fp8_sums_bf16(), cublas_workspace.as<void>(), stream)
             : fp8_gemm->sums(in, T, K, w.w.as<uint8_t>(), N, fp8_sums.as<float>(), cublas_workspace.as<void>(), stream);
}

void DeviceModel::Impl::gemv_weights(GemvParams& g, const Matrix& w) const {
  switch (w.form) {
    case Form::kBf16:
      g.w = w.w.as<bf16>();
      break;
    case Form::kFp8:
      g.w_fp8 = w.w.as<uint8_t>();
      g.w_scale = w.scale.as<float>();
      break;
    case Form::kInt4:
      g.w_int4 = w.int4();
      break;
  }
}

Status DeviceModel::Impl::ensure_meta(size_t count) {
  const size_t bytes = count * sizeof(int32_t);
  if (meta_host.bytes() >= bytes) return Status::ok();
  const size_t grown = std::max(bytes, 2 * meta_host.bytes());
  TERN_RETURN_IF_ERROR(meta_host.allocate(grown, "step metadata (host)"));
  TERN_RETURN_IF_ERROR(meta_dev.allocate(grown, "step metadata"));
  return Status::ok();
}

// Flash-decoding splits (attention_splits: the count with the fewest waves
// of kSplitBlocksPerSm blocks per multiprocessor per split), within the
// partials' rows. max_ctx < 0: the contexts are not known at launch (a
// decode graph), so the split count depends on the batch alone.
int DeviceModel::Impl::splits_for(int64_t num_tokens, int64_t max_ctx) const {
  if (num_tokens <= 0) return 1;
  int64_t cap = std::min<int64_t>(kMaxAttentionSplits, max_partial_rows / num_tokens);
  if (max_ctx >= 0) {
    if (max_ctx <= 2 * kAttentionTile) return 1;
    cap = std::min<int64_t>(cap, (max_ctx + kAttentionTile - 1) / kAttentionTile);
  }
  return attention_splits(num_tokens * config.num_kv_heads, kSplitBlocksPerSm * static_cast<int64_t>(sm_count),
                          static_cast<int>(std::max<int64_t>(cap, 1)));
}

StepView DeviceModel::Impl::view_of(const int32_t* meta, const StepMetaLayout& l, int64_t T, int64_t R) const {
  StepView v;
  v.num_tokens = T;
  v.num_rows = R;
  v.ids = meta + l.ids;
  v.positions = meta + l.positions;
  v.slots = meta + l.slots;
  v.token_seq = meta + l.token_seq;
  v.logit_rows = meta + l.logit_rows;
  v.table_offsets = meta + l.table_offsets;
  v.tables = meta + l.tables;
  return v;
}

StepView DeviceModel::Impl::decode_view(int64_t bucket) const {
  const StepMetaLayout l = StepMetaLayout::of(bucket, bucket, bucket, 0, 0, 0, 0);
  StepView v = view_of(decode_meta_dev.as<int32_t>(), l, bucket, bucket);
  v.num_splits = splits_for(bucket, -1);
  v.one_token = true;
  return v;
}

StepPlanLimits DeviceModel::Impl::plan_limits() const {
  StepPlanLimits l;
  l.vocab_size = config.vocab_size;
  l.block_size = options.block_size;
  l.num_blocks = num_blocks;
  l.pad_block = pad_block;
  l.max_tokens = max_tokens;
  l.decode_buckets = buckets;
  l.decode_capacity = decode_meta_capacity;
  l.prefill_tile = prefill_tile;
  return l;
}

Status DeviceModel::Impl::enqueue_layers(const StepView& v) {
  const ModelConfig& c = config;
  const int64_t T = v.num_tokens, H = c.hidden_size, I = c.intermediate_size, QKV = qkv_dim();
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const bool small = T <= gemv_tokens;
  // FP8 layers with the scales folded in (fold_fp8): a layer's four GEMMs write sums (q|k|v's and gate|up's bf16,
  // as the unfused form's for its bf16 outputs; o's and down's fp32, the residual's deltas); the row scales of
  // each GEMM's input alternate between fp8_x_scales (the norms' outputs) and fp8_x_scales2 (the attention's
  // and the SiLU products'), and the down GEMM's sums wait for the next layer's norm (after the last layer,
  // for a scaling pass into x).
  const bool fold = fold_fp8(T);
  const int64_t rows = gemm_rows(T);  // the GEMMs' row count
  // Folded FP8 steps on the sm_90 GEMM (own_gemm): the row scales applied as the sums leave the accumulators.
  const bool own_fp8 = fold && own_gemm(rows) && !options.sm90_gemm_gate_up_only;
  const auto own_e4m3 = [&](const uint8_t* in, const float* in_scales, int64_t rows_in, int64_t K, const Matrix& m,
                            int64_t N, void* y, Sm90Epilogue e) {
    return sm90_linear_e4m3(in, in_scales, rows_in, K, m.w.as<uint8_t>(), m.scale.as<float>(), N, y, e, stream);
  };
  uint8_t* const codes = fp8_x_codes.as<uint8_t>();
  float* const norm_scales = fp8_x_scales.as<float>();
  float* const act_scales = fp8_x_scales2.as<float>();
  Fp8Sums pending;  // the last down GEMM's, not yet added into x
  // bf16 o and down split over K (k_split_rows): each writes its slices' partials into k_partials, which the
  // add_rmsnorm after it sums into x (down's: the next layer's input norm; the last layer's down is one GEMM).
  const bool k_split = !small && !fold && rows <= k_split_rows;
  const int64_t partial_stride = rows * H;
  int pending_slices = 0;  // down's partials waiting in k_partials for the next input norm
  // RoPE and the KV write inside the attention (past the GEMV's sizes, which do them in the q|k|v GEMV): only
  // when each token is its sequence's only new one, so no token reads a key another block of the launch writes.
  const bool rope_fused = rope_in_attention && !small && v.one_token && v.num_tiles == 0;
  // q's RoPE inside the prefill tiles (and, in a mixed step, inside the one-token chunks' attention), K/V
  // written by rope_store_kv: q makes no round trip through memory.
  const bool rope_q = rope_in_tiles && !small && v.num_tiles > 0;
  // What every layer's kernels share (kernels.h): the heads, where the step's tokens sit, their block tables.
  const HeadShape heads = head_shape();
  const TokenPlaces places{v.positions, v.slots, inv_freq.as<float>()};
  const KvTables tables{v.token_seq, v.table_offsets, v.tables, static_cast<int>(options.block_size)};
  auto gemv_of = [&](GemvInput in, GemvOutput out, int64_t K, int64_t N, const Matrix& w, void* y) {
    GemvParams g;
    g.input = in;
    g.output = out;
    g.x_f32 = x.as<float>();
    g.eps = eps;
    g.num_tokens = T;
    g.in_features = K;
    g.out_features = N;
    gemv_weights(g, w);
    g.y = y;
    return g;
  };
  // Programmatic launches only from one own kernel to the next (the GEMV
  // path), never after a cuBLAS kernel or a copy; the embedding starts the chain.
  const bool chain = pdl && small;
  TERN_CUDA_RETURN_IF_ERROR(
      embedding_gather(embed.as<bf16>(), v.ids, T, H, x.as<float>(), stream, false, picks.as<uint64_t>(), v.num_rows));
  if (kernel_takes(v)) {
    DecodeLayersParams p = layers_params;
    p.places = places;
    p.tables = tables;
    p.num_tokens = static_cast<int>(T);
    TERN_CUDA_RETURN_IF_ERROR(decode_layers(p, sm_count, stream));
    return Status::ok();
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& w = layers[static_cast<size_t>(l)];
    const KvPlanes planes = this->planes(l);  // written by the RoPE + KV write, read by the attention
    if (small) {
      GemvParams g = gemv_of(GemvInput::kRmsNorm, GemvOutput::kQkvRope, H, QKV, w.qkv, qkv.as<void>());
      g.norm_weight = w.input_norm.as<float>();
      g.heads = heads;
      g.places = places;
      g.planes = planes;
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
    } else if (fold) {
      TERN_CUDA_RETURN_IF_ERROR(
          add_rmsnorm_e4m3(x.as<float>(), pending, w.input_norm.as<float>(), T, H, eps, codes, norm_scales, stream));
      if (own_fp8) {  // the scales applied in the GEMM's epilogue
        TERN_RETURN_IF_ERROR(own_e4m3(codes, norm_scales, T, H, w.qkv, QKV, qkv.as<void>(), Sm90Epilogue::kBf16));
      } else {
        TERN_RETURN_IF_ERROR(fp8_sums_of(T, H, w.qkv, QKV, GemmOut::kBf16));
        TERN_CUDA_RETURN_IF_ERROR(scale_e4m3_sums(fp8_sums_bf16(), T, QKV, norm_scales, w.qkv.scale.as<float>(),
                                                  qkv.as<void>(), GemmOut::kBf16, stream));
      }
      pending = Fp8Sums{};
    } else {
      TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm(x.as<float>(), pending_slices > 0 ? k_partials.as<float>() : nullptr,
                                            w.input_norm.as<float>(), nullptr, T, H, eps, h.as<bf16>(), stream,
                                            std::max(pending_slices, 1), partial_stride));
      pending_slices = 0;
      TERN_RETURN_IF_ERROR(linear_of(h.as<bf16>(), T, H, w.qkv, QKV, qkv.as<void>(), GemmOut::kBf16));
    }
    if (!small) {
      const RopeKvParams rp{.qkv = qkv.as<bf16>(), .row_stride = QKV, .num_tokens = T, .heads = heads,
                            .places = places, .planes = planes, .kv_only = rope_q};
      if (!rope_fused) TERN_CUDA_RETURN_IF_ERROR(rope_store_kv(rp, stream));
    }

    PagedAttentionParams ap;
    ap.q = qkv.as<bf16>();
    ap.q_row_stride = QKV;
    ap.heads = heads;
    ap.places = places;  // slots and inv_freq read only with rope_kv
    ap.planes = planes;
    ap.tables = tables;
    ap.num_tokens = T;
    ap.num_splits = v.num_splits;
    ap.partial_out = partial_out.as<float>();
    ap.partial_ml = partial_ml.as<float>();
    ap.split_counters = split_counters.as<int>();
    ap.out = attn.as<bf16>();
    ap.out_row_stride = c.q_dim();
    ap.rope_kv = rope_fused;
    ap.rope_q = rope_q;
    // Staged chunks (bf16 pools; kernels.h) measured +8% at 64 tokens (2 splits) and -1.4% at 256 (one
    // split per token) against the register form on an H100.
    ap.stage_kv = options.attention_stage_kv && v.num_splits > 1;
    ap.prefetch_chunks = options.attention_prefetch_chunks >= 0 ? options.attention_prefetch_chunks : kv_fp8() ? 1 : 0;
    ap.heads_as_columns = options.attention_heads_as_columns;
    ap.scores_transposed = options.attention_scores_transposed;
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
      GemvParams g = gemv_of(GemvInput::kBf16, GemvOutput::kAddF32, c.q_dim(), H, w.o, x.as<void>());
      g.x_bf16 = attn.as<bf16>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
      g = gemv_of(GemvInput::kRmsNorm, GemvOutput::kBf16, H, 2 * I, w.gate_up, gate_up.as<void>());
      g.norm_weight = w.post_norm.as<float>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
      g = gemv_of(GemvInput::kSiluMul, GemvOutput::kAddF32, I, H, w.down, x.as<void>());
      g.x_bf16 = gate_up.as<bf16>();
      TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain));
    } else if (fold && own_fp8) {  // every scale in the GEMMs' epilogues; no sums pass, nothing pending
      TERN_CUDA_RETURN_IF_ERROR(quantize_rows_e4m3(attn.as<bf16>(), T, c.q_dim(), codes, act_scales, stream));
      TERN_RETURN_IF_ERROR(own_e4m3(codes, act_scales, T, c.q_dim(), w.o, H, x.as<void>(), Sm90Epilogue::kAddF32));
      TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm_e4m3(x.as<float>(), Fp8Sums{}, w.post_norm.as<float>(), T, H, eps, codes,
                                                 norm_scales, stream));
      TERN_RETURN_IF_ERROR(
          own_e4m3(codes, norm_scales, T, H, w.gate_up, 2 * I, act.as<void>(), Sm90Epilogue::kSiluMul));
      TERN_CUDA_RETURN_IF_ERROR(quantize_rows_e4m3(act.as<bf16>(), T, I, codes, act_scales, stream));
      TERN_RETURN_IF_ERROR(own_e4m3(codes, act_scales, T, I, w.down, H, x.as<void>(), Sm90Epilogue::kAddF32));
    } else if (fold) {
      TERN_CUDA_RETURN_IF_ERROR(
          quantize_rows_e4m3(attn.as<bf16>(), T, c.q_dim(), codes, act_scales, stream));
      TERN_RETURN_IF_ERROR(fp8_sums_of(T, c.q_dim(), w.o, H, GemmOut::kF32));
      TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm_e4m3(x.as<float>(), Fp8Sums{fp8_sums.as<float>(), act_scales, w.o.scale.as<float>()},
                                                 w.post_norm.as<float>(), T, H, eps, codes, norm_scales, stream));
      TERN_RETURN_IF_ERROR(fp8_sums_of(T, H, w.gate_up, 2 * I, GemmOut::kBf16));
      TERN_CUDA_RETURN_IF_ERROR(silu_mul_e4m3(
          Fp8Sums{nullptr, norm_scales, w.gate_up.scale.as<float>(), fp8_sums_bf16()}, T, I, codes, act_scales, stream));
      TERN_RETURN_IF_ERROR(fp8_sums_of(T, I, w.down, H, GemmOut::kF32));
      pending = Fp8Sums{fp8_sums.as<float>(), act_scales, w.down.scale.as<float>()};
    } else {
      const bool o_split = k_split && o_splits > 1;
      if (o_split) {
        TERN_RETURN_IF_ERROR(linear_k_split(cublas, attn.as<bf16>(), rows, c.q_dim(), w.o.w.as<bf16>(), H,
                                            k_partials.as<float>(), o_splits));
      } else {
        TERN_RETURN_IF_ERROR(linear_of(attn.as<bf16>(), T, c.q_dim(), w.o, H, x.as<void>(), GemmOut::kAddF32));
      }
      TERN_CUDA_RETURN_IF_ERROR(add_rmsnorm(x.as<float>(), o_split ? k_partials.as<float>() : nullptr,
                                            w.post_norm.as<float>(), nullptr, T, H, eps, h.as<bf16>(), stream,
                                            o_split ? o_splits : 1, partial_stride));
      if (w.gate_up.form == Form::kBf16 && own_gemm(rows)) {  // SiLU x up in the GEMM's epilogue
        TERN_RETURN_IF_ERROR(sm90_linear(h.as<bf16>(), rows, H, w.gate_up.w.as<bf16>(), 2 * I, act.as<void>(),
                                         Sm90Epilogue::kSiluMul, stream));
      } else {
        TERN_RETURN_IF_ERROR(linear_of(h.as<bf16>(), T, H, w.gate_up, 2 * I, gate_up.as<void>(), GemmOut::kBf16));
        TERN_CUDA_RETURN_IF_ERROR(silu_mul(gate_up.as<bf16>(), T, I, act.as<bf16>(), stream));
      }
      if (k_split && down_splits > 1 && l + 1 < c.num_layers) {
        TERN_RETURN_IF_ERROR(linear_k_split(cublas, act.as<bf16>(), rows, I, w.down.w.as<bf16>(), H,
                                            k_partials.as<float>(), down_splits));
        pending_slices = down_splits;
      } else {
        TERN_RETURN_IF_ERROR(linear_of(act.as<bf16>(), T, I, w.down, H, x.as<void>(), GemmOut::kAddF32));
      }
    }
  }
  if (pending.sums != nullptr) {
    TERN_CUDA_RETURN_IF_ERROR(
        scale_e4m3_sums(pending.sums, T, H, pending.x_scales, pending.w_scales, x.as<void>(), GemmOut::kAddF32, stream));
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
  const bool chain_head = pdl && small_head && after_layers && v.num_tokens <= gemv_tokens && !kernel_takes(v);
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
    if (fp8_head()) {
      gemv_weights(g, head8);
    } else {
      g.w = lm_head;
    }
    g.y = logits.as<void>();
    if (argmax) g.argmax_keys = picks.as<uint64_t>() + first;  // the head folds its own argmax
    TERN_CUDA_RETURN_IF_ERROR(gemv(g, sm_count, stream, chain_head));
  } else {
    TERN_CUDA_RETURN_IF_ERROR(
        add_rmsnorm(x.as<float>(), nullptr, final_norm.as<float>(), selected, rows, H, eps, hlog.as<bf16>(), stream));
    TERN_RETURN_IF_ERROR(head_gemm(rows));
    if (argmax) {
      TERN_CUDA_RETURN_IF_ERROR(argmax_rows(logits.as<float>(), rows, V, picks.as<uint64_t>() + first, stream));
    }
  }
  return Status::ok();
}

Status DeviceModel::Impl::head_gemm(int64_t rows) {
  const int64_t T = gemm_rows(rows), H = config.hidden_size, V = config.vocab_size;
  if (T > fp8_head_gemm_rows) {
    return linear(cublas, hlog.as<bf16>(), T, H, lm_head, V, logits.as<void>(), GemmOut::kF32);
  }
  // The sums land in the logits and are scaled there; no room for a bf16 copy of the head (a dequantized
  // GEMM), which decide_fp8_head rules out: T <= fp8_tc_rows and cuBLASLt has the shape.
  const Fp8Scratch scratch{fp8_x_codes.as<uint8_t>(), fp8_x_scales.as<float>(), nullptr, cublas_workspace.as<void>(),
                           logits.as<float>()};
  return fp8_gemm->linear(cublas, hlog.as<bf16>(), T, H, Fp8Weights{head8.w.as<uint8_t>(), head8.scale.as<float>()},
                          V, logits.as<void>(), GemmOut::kF32, scratch, stream, true);
}

Status DeviceModel::Impl::enqueue_decode(int64_t bucket) {
  const StepView v = decode_view(bucket);
  TERN_RETURN_IF_ERROR(enqueue_layers(v));
  if (head_in_decode(bucket)) TERN_RETURN_IF_ERROR(enqueue_head(v, 0, bucket, true, true));
  return Status::ok();
}

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

namespace {

// The device-sampled rows' parameters (SampleRow is a kernel type, so these
// checks stay here rather than in the plan).
Status check_samples(const StepCounts& n, std::span<const SampleRow> samples, std::span<const LogitOp> ops) {
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
  return Status::ok();
}

}  // namespace

// Enqueues one step: the plan (checks, bucket, packed metadata), the
// uploads (metadata, sampling rows), the fed tokens taken from the last
// step's picks, the layers (a decode graph or kernel by kernel), the head
// passes with sampling, and the copies of picks and host logits out; the
// event done[slot] follows them.
Status DeviceModel::Impl::launch(std::span<const SequenceChunk> batch, std::span<const uint8_t> modes,
                                 std::span<const SampleRow> samples, std::span<const LogitOp> ops,
                                 std::span<const int32_t> feedback) {
  if (launched.size() >= 2) return invalid_argument("forward_step: two launched steps are not finished");
  if (!launched.empty() && launched.back().host_rows > 0) {
    return invalid_argument("forward_step: the step in flight has rows for the host; finish it first");
  }
  TERN_ASSIGN_OR_RETURN(const DeviceStepPlan plan,
                        plan_device_step(plan_limits(), {batch, modes, feedback, last_picked}));
  TERN_RETURN_IF_ERROR(check_samples(plan.counts, samples, ops));
  // The staging buffers below are rewritten: the last launch's uploads must be done.
  TERN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged));
  last_was_decode = plan.decode();
  TERN_ASSIGN_OR_RETURN(const StepView v, upload_meta(plan));
  TERN_RETURN_IF_ERROR(upload_samples(plan, samples, ops));
  TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged, stream));
  // The fed tokens, from the last step's picks, before this step's embedding clears them.
  if (plan.counts.fed > 0) {
    int32_t* meta = meta_of(plan);
    TERN_CUDA_RETURN_IF_ERROR(
        feed_picks(meta + plan.layout.ids, meta + plan.layout.fed, plan.counts.fed, picks.as<uint64_t>(), stream));
  }
  TERN_RETURN_IF_ERROR(run_layers(plan, v));
  TERN_RETURN_IF_ERROR(run_heads(plan, v));
  return copy_out(plan);
}

// The device copy of the step's metadata: the decode buffers (fixed, for the graphs) or the general ones.
int32_t* DeviceModel::Impl::meta_of(const DeviceStepPlan& plan) const {
  return plan.decode() ? decode_meta_dev.as<int32_t>() : meta_dev.as<int32_t>();
}

// Packs the plan's metadata into pinned staging and uploads it in one copy;
// the view points into the device copy at the plan's offsets.
Result<StepView> DeviceModel::Impl::upload_meta(const DeviceStepPlan& plan) {
  const auto entries = static_cast<size_t>(plan.layout.end);
  if (!plan.decode()) TERN_RETURN_IF_ERROR(ensure_meta(entries));
  int32_t* staging = plan.decode() ? decode_meta_host.as<int32_t>() : meta_host.as<int32_t>();
  plan.pack({staging, entries});
  int32_t* meta = meta_of(plan);
  TERN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta, staging, entries * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  StepView v = view_of(meta, plan.layout, plan.meta_tokens, plan.meta_rows);
  v.num_splits = splits_for(plan.split_tokens, plan.split_ctx);
  v.one_token = plan.one_token;
  v.one_sequence = plan.in.batch.size() == 1;
  if (plan.num_tiles > 0) {
    v.singles = meta + plan.layout.singles;
    v.num_singles = plan.num_singles;
    v.tiles = meta + plan.layout.tiles;
    v.num_tiles = plan.num_tiles;
  }
  return v;
}

// The sampled rows' parameters go up in one copy, each row told where its
// logits sit in its head pass and where its pick goes.
Status DeviceModel::Impl::upload_samples(const DeviceStepPlan& plan, std::span<const SampleRow> samples,
                                         std::span<const LogitOp> ops) {
  if (plan.counts.sample_rows == 0) return Status::ok();
  TERN_RETURN_IF_ERROR(ensure_sampling(samples.size(), ops.size()));
  SampleRow* staged_rows = sample_rows_host.as<SampleRow>();
  for (int64_t r = 0, i = 0; r < plan.counts.rows; ++r) {
    if (plan.mode(r) != kPickSample) continue;
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
  return Status::ok();
}

// A decode step replays its bucket's graph (or enqueues the same kernels
// eagerly); any other step enqueues its layers kernel by kernel.
Status DeviceModel::Impl::run_layers(const DeviceStepPlan& plan, const StepView& v) {
  last_used_kernel = plan.decode() ? layers_kernel && plan.bucket == 1 : kernel_takes(v);
  if (!plan.decode()) return enqueue_layers(v);
  if (graphs.empty()) return enqueue_decode(plan.bucket);
  TERN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs[plan.bucket_index].exec, stream));
  return Status::ok();
}

// The head in passes of max_logit_rows (unless the decode graph ran it),
// each pass's device-sampled rows sampled and its host-sampled rows copied
// out in contiguous runs.
Status DeviceModel::Impl::run_heads(const DeviceStepPlan& plan, const StepView& v) {
  const StepCounts& n = plan.counts;
  const int64_t R = n.rows, V = config.vocab_size;
  const bool head_done = plan.decode() && head_in_decode(plan.bucket);
  auto is_host = [&](int64_t r) { return plan.mode(r) == kPickOnHost; };
  if (n.host_rows > 0 && logits_host.bytes() < static_cast<size_t>(n.host_rows * V) * sizeof(float)) {
    TERN_RETURN_IF_ERROR(logits_host.allocate(static_cast<size_t>(n.host_rows * V) * sizeof(float),
                                              "host-sampled logits (host)"));
  }
  int64_t host_index = 0, sample_index = 0;
  for (int64_t first = 0; first < R; first += max_logit_rows) {
    const int64_t rows = std::min(max_logit_rows, R - first);
    if (!head_done) {
      TERN_RETURN_IF_ERROR(enqueue_head(v, first, rows, n.any_argmax, !plan.decode() && first == 0));
    }
    int64_t pass_samples = 0;
    for (int64_t r = first; r < first + rows; ++r) pass_samples += plan.mode(r) == kPickSample ? 1 : 0;
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
  return Status::ok();
}

// The picks' copy into this step's slot of pinned memory and the event
// after it; the step joins `launched` for finish(), and last_picked names
// the rows the next step's feedback may take.
Status DeviceModel::Impl::copy_out(const DeviceStepPlan& plan) {
  const int64_t R = plan.counts.rows;
  Launched l;
  l.rows = R;
  l.host_rows = plan.counts.host_rows;
  l.slot = next_slot;
  l.host.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) l.host[static_cast<size_t>(r)] = plan.mode(r) == kPickOnHost ? 1 : 0;
  if (l.host_rows < R) {
    TERN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(picks_host.as<uint64_t>() + l.slot * max_tokens, picks.as<void>(),
                                              static_cast<size_t>(R) * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                              stream));
  }
  TERN_CUDA_RETURN_IF_ERROR(cudaEventRecord(done[l.slot], stream));
  // plan.in.last_picked views this vector: the plan is not read past here.
  last_picked.assign(static_cast<size_t>(R), 0);
  for (int64_t r = 0; r < R; ++r) last_picked[static_cast<size_t>(r)] = l.host[static_cast<size_t>(r)] ? 0 : 1;
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
