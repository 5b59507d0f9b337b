// The C functions of include/tern/tern.h: argument checks, then the engine
// through ModelCore. No exception leaves this file: each entry point catches
// everything and answers TERN_ERR_INTERNAL (or TERN_ERR_RESOURCE_EXHAUSTED
// for std::bad_alloc) with the exception's message.
#include "tern/tern.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "base/logging.h"
#include "capi/api_error.h"
#include "capi/model_core.h"
#include "capi/request_builder.h"

struct tern_model {
  std::shared_ptr<tern::capi::ModelCore> core;
};

struct tern_request {
  std::shared_ptr<tern::capi::RequestState> state;
};

namespace tern::capi {
namespace {

std::atomic<bool> g_log_level_set{false};

// Runs `body` (which returns a tern_status), turning any exception into an error code and message.
template <typename Body>
tern_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TERN_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(TERN_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(TERN_ERR_INTERNAL, "internal error: an unknown exception");
  }
}

tern_status null_argument(const char* name) {
  return fail(TERN_ERR_INVALID_ARGUMENT, std::string(name) + " is NULL");
}

// A malloc'd copy the caller frees with tern_free.
template <typename T>
T* copy_out(const T* data, size_t count, size_t extra = 0) {
  void* memory = std::malloc((count + extra) * sizeof(T) + 1);
  if (memory == nullptr) throw std::bad_alloc();
  if (count > 0) std::memcpy(memory, data, count * sizeof(T));
  return static_cast<T*>(memory);
}

char* copy_string(const std::string& text) {
  char* out = copy_out(text.data(), text.size(), 1);
  out[text.size()] = '\0';
  return out;
}

}  // namespace
}  // namespace tern::capi

using namespace tern::capi;  // NOLINT: this file is the C API's implementation

extern "C" {

const char* tern_version(void) { return TERN_VERSION_STRING; }

int tern_abi_version(void) { return TERN_ABI_VERSION; }

const char* tern_last_error(void) { return last_error(); }

const char* tern_status_name(tern_status status) {
  switch (status) {
    case TERN_OK: return "ok";
    case TERN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case TERN_ERR_NOT_FOUND: return "not found";
    case TERN_ERR_IO: return "io error";
    case TERN_ERR_PARSE: return "parse error";
    case TERN_ERR_OUT_OF_RANGE: return "out of range";
    case TERN_ERR_UNSUPPORTED: return "unsupported";
    case TERN_ERR_RESOURCE_EXHAUSTED: return "resource exhausted";
    case TERN_ERR_CANCELLED: return "cancelled";
    case TERN_ERR_INTERNAL: return "internal error";
    case TERN_ERR_FINISHED: return "finished";
  }
  return "unknown status";
}

void tern_free(void* memory) { std::free(memory); }

tern_status tern_set_log_level(const char* level) {
  return guarded([&] {
    if (level == nullptr) return null_argument("level");
    static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    for (const char* known : kLevels) {
      if (std::strcmp(level, known) == 0) {
        tern::configure_logging(tern::LogFormat::kText, level);
        g_log_level_set = true;
        return succeed();
      }
    }
    return fail(TERN_ERR_INVALID_ARGUMENT, std::string("level must be trace, debug, info, warn, error or off, not '") +
                                               level + "'");
  });
}

tern_model_options tern_model_options_default(void) {
  tern_model_options o{};
  o.device = "auto";
  o.max_num_seqs = 256;
  o.max_num_batched_tokens = 0;  // by device: load_engine
  o.block_size = 16;
  o.enable_prefix_caching = 1;
  o.async_scheduling = 1;
  o.decode_kernel = 1;
  o.cpu_kernels = "auto";
  return o;
}

tern_status tern_model_load(const char* path, const tern_model_options* options, tern_model** model) {
  return guarded([&] {
    if (model == nullptr) return null_argument("model");
    *model = nullptr;
    if (path == nullptr) return null_argument("path");
    if (!g_log_level_set.exchange(true)) tern::configure_logging(tern::LogFormat::kText, "warn");
    const tern_model_options o = options != nullptr ? *options : tern_model_options_default();
    auto core = ModelCore::load(path, o);
    if (!core.is_ok()) return fail(core.status());
    *model = new tern_model{std::move(*core)};
    return succeed();
  });
}

void tern_model_free(tern_model* model) {
  if (model == nullptr) return;
  guarded([&] {
    model->core->cancel_all();
    delete model;
    return TERN_OK;
  });
}

tern_status tern_model_get_info(const tern_model* model, tern_model_info* info) {
  return guarded([&] {
    if (model == nullptr) return null_argument("model");
    if (info == nullptr) return null_argument("info");
    *info = model->core->info();
    return succeed();
  });
}

tern_status tern_tokenize(const tern_model* model, const char* text, size_t text_length, int add_special_tokens,
                          int32_t** ids, size_t* num_ids) {
  return guarded([&] {
    if (ids != nullptr) *ids = nullptr;
    if (num_ids != nullptr) *num_ids = 0;
    if (model == nullptr) return null_argument("model");
    if (text == nullptr && text_length > 0) return null_argument("text");
    if (ids == nullptr) return null_argument("ids");
    if (num_ids == nullptr) return null_argument("num_ids");
    std::vector<int32_t> out =
        model->core->tokenizer().encode(std::string_view(text == nullptr ? "" : text, text_length),
                                        add_special_tokens != 0);
    *ids = copy_out(out.data(), out.size());
    *num_ids = out.size();
    return succeed();
  });
}

tern_status tern_detokenize(const tern_model* model, const int32_t* ids, size_t num_ids, int skip_special_tokens,
                            char** text, size_t* text_length) {
  return guarded([&] {
    if (text != nullptr) *text = nullptr;
    if (text_length != nullptr) *text_length = 0;
    if (model == nullptr) return null_argument("model");
    if (ids == nullptr && num_ids > 0) return null_argument("ids");
    if (text == nullptr) return null_argument("text");
    const int32_t vocab_size = model->core->info().vocab_size;
    for (size_t i = 0; i < num_ids; ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size) {
        return fail(TERN_ERR_INVALID_ARGUMENT, "ids[" + std::to_string(i) + "] is " + std::to_string(ids[i]) +
                                                   "; token ids must be in [0, " + std::to_string(vocab_size) + ")");
      }
    }
    const std::string decoded =
        model->core->tokenizer().decode(std::span<const int32_t>(ids, num_ids), skip_special_tokens != 0);
    *text = copy_string(decoded);
    if (text_length != nullptr) *text_length = decoded.size();
    return succeed();
  });
}

tern_status tern_apply_chat_template(const tern_model* model, const tern_chat_message* messages,
                                     size_t num_messages, int add_generation_prompt,
                                     const char* template_kwargs_json, char** text) {
  return guarded([&] {
    if (text != nullptr) *text = nullptr;
    if (model == nullptr) return null_argument("model");
    if (messages == nullptr && num_messages > 0) return null_argument("messages");
    if (text == nullptr) return null_argument("text");
    if (num_messages == 0) return fail(TERN_ERR_INVALID_ARGUMENT, "messages must hold at least one message");
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < num_messages; ++i) {
      const tern_chat_message& m = messages[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (m.role == nullptr) return fail(TERN_ERR_INVALID_ARGUMENT, where + ".role is NULL");
      const std::string role = m.role;
      if (m.content == nullptr && role != "assistant" && role != "tool") {
        return fail(TERN_ERR_INVALID_ARGUMENT, where + ": a " + role + " message needs content");
      }
      list.push_back({{"role", role}, {"content", m.content == nullptr ? "" : m.content}});
    }
    nlohmann::json kwargs = nlohmann::json::object();
    if (template_kwargs_json != nullptr) {
      kwargs = nlohmann::json::parse(template_kwargs_json, nullptr, false);
      if (kwargs.is_discarded() || !kwargs.is_object()) {
        return fail(TERN_ERR_INVALID_ARGUMENT, "template_kwargs_json must be a JSON object");
      }
    }
    auto rendered = model->core->chat_renderer()(list, add_generation_prompt != 0, kwargs);
    if (!rendered.is_ok()) return fail(rendered.status().with_context("the chat template failed"));
    *text = copy_string(*rendered);
    return succeed();
  });
}

tern_sampling_params tern_sampling_params_default(const tern_model* model) {
  try {
    return default_sampling_params(model != nullptr ? &model->core->generation_defaults() : nullptr);
  } catch (...) {
    return default_sampling_params(nullptr);
  }
}

tern_status tern_submit(tern_model* model, const int32_t* prompt_ids, size_t num_prompt_ids,
                        const tern_sampling_params* params, tern_output_callback callback, void* user_data,
                        tern_request** request) {
  return guarded([&] {
    if (request == nullptr) return null_argument("request");
    *request = nullptr;
    if (model == nullptr) return null_argument("model");
    const tern_sampling_params p =
        params != nullptr ? *params : default_sampling_params(&model->core->generation_defaults());
    auto state = model->core->submit(prompt_ids, num_prompt_ids, p, callback, user_data);
    if (!state.is_ok()) return fail(state.status());
    *request = new tern_request{std::move(*state)};
    return succeed();
  });
}

tern_status tern_request_next(tern_request* request, int64_t timeout_ms, const tern_output** output) {
  return guarded([&] {
    if (output == nullptr) return null_argument("output");
    *output = nullptr;
    if (request == nullptr) return null_argument("request");
    return request->state->next(timeout_ms, output);
  });
}

tern_status tern_request_cancel(tern_request* request) {
  return guarded([&] {
    if (request == nullptr) return null_argument("request");
    request->state->cancel();
    return succeed();
  });
}

void tern_request_free(tern_request* request) {
  if (request == nullptr) return;
  guarded([&] {
    request->state->release();
    delete request;
    return TERN_OK;
  });
}

}  // extern "C"
