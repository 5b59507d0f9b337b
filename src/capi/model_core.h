// What the C handles hold. ModelCore: a loaded engine behind an EngineClient,
// with its tokenizer, chat renderer and callback thread; shared by the
// tern_model handle and every live request, so it goes when the last of them
// does. RequestState: one submitted request, its stream and the outputs not
// yet handed out (pull mode) or its callback (push mode).
//
// Threads: ModelCore's members are immutable after load but for the live-id
// set (under live_mu_); EngineClient is thread-safe. A RequestState is pulled
// by one thread at a time; its callback runs on the dispatcher thread only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "base/status.h"
#include "capi/callback_dispatcher.h"
#include "capi/output_record.h"
#include "chat/chat_template.h"
#include "engine/engine_client.h"
#include "setup/engine_setup.h"
#include "tern/tern.h"

namespace tern::capi {

class RequestState;

class ModelCore : public std::enable_shared_from_this<ModelCore> {
 public:
  static Result<std::shared_ptr<ModelCore>> load(const std::string& path, const tern_model_options& options);
  ~ModelCore();

  const Tokenizer& tokenizer() const { return *loaded_.tokenizer; }
  const ChatRenderer& chat_renderer() const { return render_chat_; }
  const GenerationDefaults& generation_defaults() const { return loaded_.generation_defaults; }
  tern_model_info info() const;

  // Builds and queues the request; its outputs go to `callback` or wait for pulls.
  Result<std::shared_ptr<RequestState>> submit(const int32_t* prompt, size_t num_prompt,
                                               const tern_sampling_params& params, tern_output_callback callback,
                                               void* user_data);
  void cancel(const std::string& request_id) { client_->cancel(request_id); }
  // The request's handle is gone: cancel_all need not reach it.
  void forget(const std::string& request_id);
  // Cancels every request whose handle is still live (the model handle is being freed).
  void cancel_all();
  bool on_callback_thread() const { return dispatcher_->on_dispatcher_thread(); }

 private:
  ModelCore() = default;

  LoadedEngine loaded_;  // tokenizer and model; its engine moved into client_
  ChatRenderer render_chat_;
  std::shared_ptr<CallbackDispatcher> dispatcher_;
  std::unique_ptr<EngineClient> client_;
  std::atomic<uint64_t> next_request_id_{0};
  std::mutex live_mu_;
  std::unordered_set<std::string> live_;  // ids submitted and not finished
};

class RequestState {
 public:
  RequestState(std::shared_ptr<ModelCore> model, std::string id, std::shared_ptr<RequestStream> stream,
               int32_t num_top, tern_output_callback callback, void* user_data);

  // Pull mode: the next output, waiting up to timeout_ms (< 0: no limit); *output is nullptr when the time
  // ran out. Sets the thread's last error on failure.
  tern_status next(int64_t timeout_ms, const tern_output** output);
  void cancel();
  // Marks the handle freed: no callback runs after this returns unless it is called from the callback itself.
  void release();
  // Dispatcher thread: hands every waiting event to the callback.
  void deliver_callbacks();

 private:
  void take(const RequestOutput& event);

  std::shared_ptr<ModelCore> model_;
  const std::string id_;
  std::shared_ptr<RequestStream> stream_;
  const int32_t num_top_;
  const tern_output_callback callback_;
  void* const user_data_;

  std::mutex mu_;  // pull state, and the callback's running / released flags
  std::condition_variable callback_done_;
  std::deque<OutputRecord> pending_;
  OutputRecord current_;
  bool finished_ = false;  // the last output has been handed out
  bool callback_running_ = false;
  bool released_ = false;
};

}  // namespace tern::capi
