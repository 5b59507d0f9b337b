// CUDA runner: StepPlan -> block copies + SequenceChunks + how each row is
// picked (device argmax, device sampling, host) -> DeviceModel::forward_step,
// whose picks and logits are the StepOutput.
#include "runners/cuda_runner.h"

#include <deque>

#include "runners/sequence_chunk.h"

namespace tern {

#ifdef TERN_HAVE_CUDA

namespace {

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
    size_t want = 0, host = 0, sampled = 0;
    bool any_fed = false;
    for (const ScheduledChunk& sc : plan.chunks) {
      // A fed chunk's id is a placeholder: the device puts the pick there.
      chunks_.push_back(sequence_chunk(sc, std::span<const int32_t>(&kFedPlaceholder, 1)));
      feedback_.push_back(sc.feedback_row);
      any_fed = any_fed || sc.feedback_row >= 0;
      if (sc.want_logits) {
        ++want;
        uint8_t mode = cuda::kPickOnHost;
        if (sc.device_greedy) {
          mode = cuda::kPickArgmax;
        } else if (sc.device_sample && sampled < plan.samples.size()) {
          mode = cuda::kPickSample;
          const DeviceSampling& d = plan.samples[sampled++];
          cuda::SampleRow r;
          r.ops_begin = static_cast<int32_t>(d.adjust_begin);
          r.ops_end = static_cast<int32_t>(d.adjust_end);
          r.temperature = d.temperature;
          r.top_k = d.top_k;
          r.top_p = d.top_p;
          r.min_p = d.min_p;
          r.key = d.key;
          r.greedy = d.greedy ? 1 : 0;
          samples_.push_back(r);
        }
        modes_.push_back(mode);
        host += mode == cuda::kPickOnHost ? 1 : 0;
      }
    }
    TERN_RETURN_IF_ERROR(device_->launch_step(chunks_, modes_, samples_, ops_,
                                              any_fed ? std::span<const int32_t>(feedback_)
                                                      : std::span<const int32_t>()));
    shapes_.push_back({want, host});
    return Status::ok();
  }

  Status collect(StepOutput& out) override {
    if (shapes_.empty()) return invalid_argument("collect: no launched step");
    const auto [want, host] = shapes_.front();
    shapes_.pop_front();
    out.tokens.resize(want);
    out.logits.resize(host * static_cast<size_t>(vocab_size()));
    return device_->finish_step(out.tokens, out.logits);
  }

  bool overlaps() const override { return true; }
  bool samples_on_device() const override { return true; }
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
    size_t want, host;  // rows with logits; of them, rows for the host
  };
  std::deque<Shape> shapes_;  // launched steps not yet collected
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
