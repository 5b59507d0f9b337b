// CUDA runner: StepPlan -> block copies + SequenceChunks + how each row is
// picked (device argmax, device sampling, host) -> DeviceModel::forward_step,
// whose picks and logits are the StepOutput.
#include "runners/cuda_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>

#include "runners/sequence_chunk.h"

namespace tern {

#ifdef TERN_HAVE_CUDA

namespace {

cuda::SampleRow sample_row(const DeviceSampling& d) {
  cuda::SampleRow r;
  r.ops_begin = static_cast<int32_t>(d.adjust_begin);
  r.ops_end = static_cast<int32_t>(d.adjust_end);
  r.temperature = d.temperature;
  r.top_k = d.top_k;
  r.top_p = d.top_p;
  r.min_p = d.min_p;
  r.key = d.key;
  r.greedy = d.greedy ? 1 : 0;
  return r;
}

class CudaRunner final : public Runner {
 public:
  explicit CudaRunner(std::unique_ptr<cuda::DeviceModel> device) : device_(std::move(device)) {}

  Status execute(const StepPlan& plan, StepOutput& out) override {
    TERN_RETURN_IF_ERROR(launch(plan));
    return collect(out);
  }

  Status launch(const StepPlan& plan) override {
    for (const BlockCopy& c : plan.copies) TERN_RETURN_IF_ERROR(device_->copy_block(c.src, c.dst));
    chunks_.clear();
    modes_.clear();
    samples_.clear();
    ops_.clear();
    feedback_.clear();
    for (const LogitAdjust& a : plan.adjustments) ops_.push_back(cuda::LogitOp{a.id, a.phase, a.a, a.b});
    Shape shape;
    size_t sampled = 0;
    bool any_fed = false;
    for (const ScheduledChunk& sc : plan.chunks) {
      // A fed chunk's id is a placeholder: the device puts the pick there.
      chunks_.push_back(sequence_chunk(sc, std::span<const int32_t>(&kFedPlaceholder, 1)));
      feedback_.push_back(sc.feedback_row);
      any_fed = any_fed || sc.feedback_row >= 0;
      if (sc.all_logits) {
        // Every row to the host, the last one also the chunk's pick there; or,
        // for a greedy sequence's drafts (device_greedy), every row's argmax.
        const uint8_t mode = sc.device_greedy ? cuda::kPickArgmax : cuda::kPickOnHost;
        modes_.insert(modes_.end(), static_cast<size_t>(sc.num_tokens), mode);
        shape.scored.resize(plan.chunks.size());
        shape.picked.resize(plan.chunks.size());
        shape.scored[chunks_.size() - 1] = sc.num_tokens;
        shape.picked[chunks_.size() - 1] = sc.device_greedy;
        shape.rows += static_cast<size_t>(sc.num_tokens);
        shape.host += sc.device_greedy ? 0 : static_cast<size_t>(sc.num_tokens);
        shape.want += sc.want_logits ? 1 : 0;
      } else if (sc.want_logits) {
        uint8_t mode = cuda::kPickOnHost;
        if (sc.device_greedy) {
          mode = cuda::kPickArgmax;
        } else if (sc.device_sample && sampled < plan.samples.size()) {
          mode = cuda::kPickSample;
          samples_.push_back(sample_row(plan.samples[sampled++]));
        }
        modes_.push_back(mode);
        ++shape.rows;
        ++shape.want;
        shape.host += mode == cuda::kPickOnHost ? 1 : 0;
      }
    }
    if (!shape.scored.empty()) {
      for (const ScheduledChunk& sc : plan.chunks) shape.wants.push_back(sc.want_logits);
    }
    TERN_RETURN_IF_ERROR(device_->launch_step(chunks_, modes_, samples_, ops_,
                                              any_fed ? std::span<const int32_t>(feedback_)
                                                      : std::span<const int32_t>()));
    shapes_.push_back(std::move(shape));
    return Status::ok();
  }

  Status collect(StepOutput& out) override {
    if (shapes_.empty()) return invalid_argument("collect: no launched step");
    const Shape shape = std::move(shapes_.front());
    shapes_.pop_front();
    const auto vocab = static_cast<size_t>(vocab_size());
    out.prompt_logits.clear();
    out.scored_picks.clear();
    if (shape.scored.empty()) {
      out.tokens.resize(shape.want);
      out.logits.resize(shape.host * vocab);
      return device_->finish_step(out.tokens, out.logits);
    }
    row_tokens_.resize(shape.rows);
    row_logits_.resize(shape.host * vocab);
    TERN_RETURN_IF_ERROR(device_->finish_step(row_tokens_, row_logits_));
    split_scored_rows(shape, out);
    return Status::ok();
  }

  bool overlaps() const override { return true; }
  bool samples_on_device() const override { return true; }
  bool scores_prompts() const override { return true; }
  bool picks_scored_rows() const override { return true; }
  int64_t vocab_size() const override { return device_->vocab_size(); }
  int64_t num_kv_blocks() const override { return device_->num_kv_blocks(); }
  int64_t block_size() const override { return device_->block_size(); }

 private:
  std::unique_ptr<cuda::DeviceModel> device_;
  std::vector<SequenceChunk> chunks_;  // reused across steps
  std::vector<uint8_t> modes_;         // per want_logits chunk: cuda::kPick*
  std::vector<cuda::SampleRow> samples_;
  std::vector<cuda::LogitOp> ops_;
  std::vector<int32_t> feedback_;  // per chunk: ScheduledChunk::feedback_row
  struct Shape {
    size_t rows = 0;  // rows with logits on the device (every token of an all_logits chunk)
    size_t want = 0;  // want_logits chunks: the engine's rows
    size_t host = 0;  // rows whose logits come to the host
    // With an all_logits chunk in the step, per chunk: its rows when all_logits, else 0; and its want_logits.
    std::vector<int64_t> scored;
    std::vector<bool> picked;  // per chunk: its scored rows picked on the device
    std::vector<bool> wants;
  };
  std::deque<Shape> shapes_;         // launched steps not yet collected
  std::vector<int32_t> row_tokens_;  // a step with all_logits chunks: the device's rows, before splitting
  std::vector<float> row_logits_;

  // The device's rows into the engine's: each all_logits chunk's rows to
  // prompt_logits (its last one, when the chunk wants logits, to logits as
  // well, sampled on the host), or their picks to scored_picks (the last
  // one the chunk's pick as well); other chunks' picks and host rows as
  // they are.
  void split_scored_rows(const Shape& shape, StepOutput& out) const {
    const auto vocab = static_cast<size_t>(vocab_size());
    size_t scored_rows = 0, row = 0;
    for (size_t i = 0; i < shape.scored.size(); ++i) scored_rows += shape.picked[i] ? 0 : static_cast<size_t>(shape.scored[i]);
    out.tokens.clear();
    out.logits.clear();
    out.prompt_logits.resize(scored_rows * vocab);
    const float* from = row_logits_.data();
    float* prompt_row = out.prompt_logits.data();
    for (size_t i = 0; i < shape.scored.size(); ++i) {
      if (shape.scored[i] > 0 && shape.picked[i]) {
        const auto n = static_cast<size_t>(shape.scored[i]);
        out.scored_picks.insert(out.scored_picks.end(), row_tokens_.begin() + static_cast<int64_t>(row),
                                row_tokens_.begin() + static_cast<int64_t>(row + n));
        row += n;
        if (shape.wants[i]) out.tokens.push_back(out.scored_picks.back());
      } else if (shape.scored[i] > 0) {
        const size_t n = static_cast<size_t>(shape.scored[i]) * vocab;
        prompt_row = std::copy_n(from, n, prompt_row);
        from += n;
        row += static_cast<size_t>(shape.scored[i]);
        if (!shape.wants[i]) continue;
        out.tokens.push_back(-1);
        out.logits.insert(out.logits.end(), from - vocab, from);
      } else if (shape.wants[i]) {
        const int32_t picked = row_tokens_[row++];
        out.tokens.push_back(picked);
        if (picked >= 0) continue;
        out.logits.insert(out.logits.end(), from, from + vocab);
        from += vocab;
      }
    }
  }
  static constexpr int32_t kFedPlaceholder = 0;
};

}  // namespace

bool cuda_backend_built() { return true; }

cuda::HostWeights cuda_host_weights(const Ernie45Model& model) {
  cuda::HostWeights w;
  w.embedding = model.embedding();
  w.lm_head = model.lm_head();
  w.final_norm = model.final_norm();
  for (const Ernie45Model::LayerWeights& l : model.layer_weights()) {
    w.layers.push_back(cuda::HostLayerWeights{l.input_norm, l.q, l.k, l.v, l.o, l.post_attention_norm, l.gate, l.up,
                                              l.down});
  }
  w.rope_inv_freq.assign(model.rope_inv_freq().begin(), model.rope_inv_freq().end());
  return w;
}

Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, const RunnerOptions& o) {
  cuda::DeviceModelOptions options;
  static_cast<RunnerOptions&>(options) = o;
  TERN_ASSIGN_OR_RETURN(auto device, cuda::DeviceModel::create(model.config(), cuda_host_weights(model), options));
  if (device->fp8_weights() && device->fp8_tensor_core_tokens() > 0) {
    spdlog::info("GPU: FP8 weights (e4m3, a scale per row); steps of 5 to {} tokens on FP8 tensor-core GEMMs (W8A8){}",
                 device->fp8_tensor_core_tokens(),
                 device->fp8_folded_scales() ? ", the scales folded into the norm and SiLU kernels" : "");
  } else if (device->fp8_weights()) {
    spdlog::info("GPU: FP8 weights (e4m3, a scale per row); steps past 4 tokens on bf16 GEMMs of dequantized weights "
                 "(no FP8 tensor-core GEMM on this GPU)");
  }
  if (device->fp8_lm_head()) {
    spdlog::info("GPU: the LM head as FP8 too (--quantize-lm-head): steps of up to 4 logit rows in the GEMV{}",
                 device->fp8_lm_head_gemm_rows() > 0
                     ? fmt::format(", GEMMs of up to {} rows on FP8 tensor cores", device->fp8_lm_head_gemm_rows())
                     : std::string());
  }
  if (!device->fp8_lm_head_note().empty()) {  // what of the head stays bf16: a warning only when all of it does
    if (device->fp8_lm_head()) {
      spdlog::info("GPU: {}", device->fp8_lm_head_note());
    } else {
      spdlog::warn("GPU: {}", device->fp8_lm_head_note());
    }
  }
  if (device->int4_matrices() > 0) {
    spdlog::info("GPU: {} layer matrices as int4 weights (W4A16)", device->int4_matrices());
  }
  if (!device->int4_declined().empty()) spdlog::info("GPU: {}", device->int4_declined());
  if (!device->layers_kernel_off_reason().empty()) spdlog::info("GPU: {}", device->layers_kernel_off_reason());
  if (device->k_split_rows() > 0) {
    spdlog::info("GPU: attention output and MLP down projections split over K ({} and {} slices) in steps of up to "
                 "{} GEMM rows",
                 device->o_k_splits(), device->down_k_splits(), device->k_split_rows());
  } else if (o.k_split_max_tokens > 0 && o.k_split_max_tokens != RunnerOptions{}.k_split_max_tokens) {
    spdlog::info("GPU: --gemm-k-split-tokens {} not taken: it splits bf16 weights' GEMMs in steps past the "
                 "single-token GEMV's sizes, where K splits into multiples of 8",
                 o.k_split_max_tokens);
  }
  spdlog::info("GPU: GEMMs at {} row counts shown to cuBLAS in {:.0f} ms (steps of any token count then run on one "
               "of them)",
               device->warmed_gemm_rows(), 1000.0 * device->gemm_warmup_seconds());
  return std::unique_ptr<Runner>(new CudaRunner(std::move(device)));
}

#else  // !TERN_HAVE_CUDA

bool cuda_backend_built() { return false; }

Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model&, const RunnerOptions&) {
  return unsupported("this tern was built without CUDA support");
}

#endif

Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, int64_t block_size, int64_t kv_cache_bytes,
                                                 int64_t max_num_batched_tokens) {
  RunnerOptions o;
  o.block_size = block_size;
  o.kv_cache_bytes = kv_cache_bytes;
  o.max_num_batched_tokens = max_num_batched_tokens;
  return make_cuda_runner(model, o);
}

}  // namespace tern
