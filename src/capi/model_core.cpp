// Loading a model for the C API, submitting requests, and each request's
// outputs (pulled, or pushed to its callback).
#include "capi/model_core.h"

#include <chrono>
#include <optional>

#include "base/mapped_file.h"
#include "capi/api_error.h"
#include "capi/request_builder.h"

namespace tern::capi {

namespace {

Status require_switch(const char* name, int32_t value) {
  if (value == 0 || value == 1) return Status::ok();
  return invalid_argument(std::string(name) + " must be 0 or 1, got " + std::to_string(value));
}

Status require_non_negative(const char* name, int64_t value) {
  if (value >= 0) return Status::ok();
  return invalid_argument(std::string(name) + " must not be negative, got " + std::to_string(value));
}

// The C options as the CLI's EngineOptions, every field checked.
Result<EngineOptions> engine_options(const std::string& path, const tern_model_options& c) {
  EngineOptions o;
  o.model = path;
  if (c.device != nullptr && *c.device != '\0') {
    o.device = c.device;
    if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
      return invalid_argument("device must be auto, cpu or cuda, not '" + o.device + "'");
    }
  }
  TERN_RETURN_IF_ERROR(require_non_negative("threads", c.threads));
  o.threads = c.threads;
  TERN_RETURN_IF_ERROR(require_non_negative("kv_cache_bytes", c.kv_cache_bytes));
  if (c.kv_cache_bytes > 0) o.kv_cache_memory = std::to_string(c.kv_cache_bytes);
  if (!(c.gpu_memory_utilization >= 0.0 && c.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("gpu_memory_utilization must be in [0, 1], got " + python_float(c.gpu_memory_utilization));
  }
  o.run.gpu_memory_utilization = c.gpu_memory_utilization;
  TERN_RETURN_IF_ERROR(require_non_negative("max_num_seqs", c.max_num_seqs));
  if (c.max_num_seqs > 0) o.run.max_num_seqs = c.max_num_seqs;
  TERN_RETURN_IF_ERROR(require_non_negative("max_num_batched_tokens", c.max_num_batched_tokens));
  o.run.max_num_batched_tokens = c.max_num_batched_tokens;  // 0: by device (load_engine)
  TERN_RETURN_IF_ERROR(require_non_negative("max_model_len", c.max_model_len));
  o.run.max_model_len = c.max_model_len;
  if (c.block_size < 0 || c.block_size > 1024) {
    return invalid_argument("block_size must be in [1, 1024] (or 0 for the default), got " +
                            std::to_string(c.block_size));
  }
  if (c.block_size > 0) o.run.block_size = c.block_size;
  TERN_RETURN_IF_ERROR(require_switch("enable_prefix_caching", c.enable_prefix_caching));
  o.enable_prefix_caching = c.enable_prefix_caching == 1;
  TERN_RETURN_IF_ERROR(require_switch("async_scheduling", c.async_scheduling));
  o.async_scheduling = c.async_scheduling == 1;
  TERN_RETURN_IF_ERROR(require_switch("enforce_eager", c.enforce_eager));
  o.run.enforce_eager = c.enforce_eager == 1;
  TERN_RETURN_IF_ERROR(require_switch("decode_kernel", c.decode_kernel));
  o.run.decode_kernel = c.decode_kernel == 1;
  if (c.cpu_kernels != nullptr && *c.cpu_kernels != '\0') o.cpu_kernels = c.cpu_kernels;
  if (c.quantization != nullptr) o.quantization = c.quantization;
  TERN_RETURN_IF_ERROR(require_non_negative("max_queued_requests", c.max_queued_requests));
  if (c.speculative_config != nullptr) o.speculative_config = c.speculative_config;
  return o;
}

}  // namespace

Result<std::shared_ptr<ModelCore>> ModelCore::load(const std::string& path, const tern_model_options& options) {
  if (path.empty()) return invalid_argument("the model path is empty");
  TERN_ASSIGN_OR_RETURN(EngineOptions eo, engine_options(path, options));
  std::shared_ptr<ModelCore> core(new ModelCore());
  TERN_ASSIGN_OR_RETURN(core->loaded_, load_engine(eo));
  std::string template_source = core->loaded_.tokenizer->chat_template();
  if (options.chat_template != nullptr) template_source = options.chat_template;
  TERN_ASSIGN_OR_RETURN(core->render_chat_, make_chat_renderer(template_source, *core->loaded_.tokenizer));
  core->dispatcher_ = CallbackDispatcher::start();
  core->client_ = std::make_unique<EngineClient>(std::move(core->loaded_.engine), options.max_queued_requests);
  return core;
}

ModelCore::~ModelCore() {
  // The engine refers to the model and tokenizer: it stops first.
  if (client_) client_->shutdown();
  client_.reset();
  if (dispatcher_) dispatcher_->stop();
}

tern_model_info ModelCore::info() const {
  tern_model_info info{};
  info.device = loaded_.device.c_str();
  info.max_model_len = loaded_.max_model_len;
  info.vocab_size = static_cast<int32_t>(loaded_.model->config().vocab_size);
  info.kv_cache_tokens = loaded_.kv_cache_tokens;
  return info;
}

Result<std::shared_ptr<RequestState>> ModelCore::submit(const int32_t* prompt, size_t num_prompt,
                                                        const tern_sampling_params& params,
                                                        tern_output_callback callback, void* user_data) {
  RequestLimits limits{loaded_.model->config().vocab_size, loaded_.max_model_len};
  TERN_ASSIGN_OR_RETURN(Request request, build_request(prompt, num_prompt, params, limits));
  request.id = "capi-" + std::to_string(next_request_id_.fetch_add(1));
  const std::string id = request.id;
  const int32_t num_top = request.params.logprobs.value_or(0);
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.insert(id);
  }
  auto stream = client_->submit(std::move(request));
  if (!stream.is_ok()) {
    forget(id);
    return stream.status();
  }
  auto state = std::make_shared<RequestState>(shared_from_this(), id, *stream, num_top, callback, user_data);
  if (callback != nullptr) {
    std::weak_ptr<RequestState> weak = state;
    std::shared_ptr<CallbackDispatcher> dispatcher = dispatcher_;
    (*stream)->set_notify([weak, dispatcher] { dispatcher->post(weak); });
    // Events pushed before the notify was set.
    dispatcher_->post(weak);
  }
  return state;
}

void ModelCore::forget(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(live_mu_);
  live_.erase(request_id);
}

void ModelCore::cancel_all() {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    ids.assign(live_.begin(), live_.end());
  }
  for (const std::string& id : ids) client_->cancel(id);
}

RequestState::RequestState(std::shared_ptr<ModelCore> model, std::string id, std::shared_ptr<RequestStream> stream,
                           int32_t num_top, tern_output_callback callback, void* user_data)
    : model_(std::move(model)), id_(std::move(id)), stream_(std::move(stream)), num_top_(num_top),
      callback_(callback), user_data_(user_data) {}

void RequestState::take(const RequestOutput& event) {
  for (OutputRecord& record : split_output(event, num_top_)) pending_.push_back(std::move(record));
}

tern_status RequestState::next(int64_t timeout_ms, const tern_output** output) {
  std::lock_guard<std::mutex> lock(mu_);
  if (callback_ != nullptr) {
    return fail(TERN_ERR_INVALID_ARGUMENT, "this request delivers its outputs to its callback; tern_request_next "
                                           "is for requests submitted without one");
  }
  if (finished_) {
    return fail(TERN_ERR_FINISHED, "the request has finished: its last output was already returned");
  }
  using Clock = std::chrono::steady_clock;
  const std::optional<Clock::time_point> deadline =
      timeout_ms < 0 ? std::nullopt : std::optional(Clock::now() + std::chrono::milliseconds(timeout_ms));
  while (pending_.empty()) {
    auto wait = std::chrono::milliseconds(1000);
    if (deadline) {
      wait = std::max(std::chrono::milliseconds(0),
                      std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()));
    }
    std::optional<RequestOutput> event = stream_->next(wait);
    if (event) {
      take(*event);
    } else if (deadline) {
      *output = nullptr;
      return succeed();
    }
  }
  current_ = std::move(pending_.front());
  pending_.pop_front();
  finished_ = current_.request_finished;
  *output = current_.view();
  return succeed();
}

void RequestState::cancel() { model_->cancel(id_); }

void RequestState::release() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    released_ = true;
    if (!model_->on_callback_thread()) callback_done_.wait(lock, [&] { return !callback_running_; });
  }
  model_->cancel(id_);
  model_->forget(id_);
}

void RequestState::deliver_callbacks() {
  for (;;) {
    std::deque<RequestOutput> events = stream_->drain();
    if (events.empty()) return;
    for (const RequestOutput& event : events) {
      for (OutputRecord& record : split_output(event, num_top_)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (released_) return;
          callback_running_ = true;
        }
        callback_(record.view(), user_data_);
        {
          std::lock_guard<std::mutex> lock(mu_);
          callback_running_ = false;
        }
        callback_done_.notify_all();
      }
    }
  }
}

}  // namespace tern::capi
