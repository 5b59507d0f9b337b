// Engine events -> per-choice updates, with cancellation, metrics and logs.
#include "server/api/generation_session.h"

#include <spdlog/spdlog.h>

#include "base/utf8.h"
#include "server/api/metrics.h"
#include "server/http/json_escape.h"

namespace tern::server {

GenerationSession::GenerationSession(ServingContext& ctx, Responder& res, std::vector<Request> requests,
                                     std::string id, std::string api)
    : ctx_(ctx), res_(res), requests_(std::move(requests)), id_(std::move(id)), api_(std::move(api)) {
  n_ = requests_.empty() ? 1 : requests_[0].n;
}

GenerationSession::~GenerationSession() { cancel_all(); }

void GenerationSession::cancel_all() {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!request_done_[i]) ctx_.engine->cancel(requests_[i].id);
}

void GenerationSession::log_prompt(const Request& r) const {
  std::string text = ctx_.tokenizer->decode(r.prompt, false);
  const bool cut = ctx_.max_log_len > 0 && text.size() > static_cast<size_t>(ctx_.max_log_len);
  if (cut) text = utf8_sanitize(std::string_view(text).substr(0, static_cast<size_t>(ctx_.max_log_len)));
  // Quoted and escaped: a prompt's newlines cannot start a log line of their own.
  spdlog::info("request {} api={} prompt={}{} n={} max_tokens={} temperature={} top_p={} seed={}", r.id, api_,
               json_quote(text), cut ? " (cut at --max-log-len)" : "", r.n, r.params.max_tokens, r.params.temperature,
               r.params.top_p, r.params.seed ? std::to_string(*r.params.seed) : "none");
}

std::optional<ApiError> GenerationSession::start() {
  auto notify = res_.event_notifier();
  for (size_t i = 0; i < requests_.size(); ++i) {
    requests_[i].id = requests_.size() == 1 ? id_ : id_ + "-" + std::to_string(i);
    requests_[i].arrival = start_;
    if (ctx_.log_requests && ctx_.log_requests_text) log_prompt(requests_[i]);
    auto stream = ctx_.engine->submit(requests_[i]);
    if (!stream.is_ok()) {
      cancel_all();
      return api_error_from_status(stream.status());
    }
    (*stream)->set_notify(notify);
    streams_.push_back(*stream);
    request_done_.push_back(false);
    last_.emplace_back();
    prompt_logprobs_.emplace_back();
    last_token_at_.push_back(start_);
    first_token_out_.push_back(start_);
    itl_s_.emplace_back();
  }
  return std::nullopt;
}

void GenerationSession::finish_request(size_t i, const RequestOutput& e) {
  request_done_[i] = true;
  ++finished_;
  std::string reason = "error";
  for (const auto& s : e.sequences)
    if (s.finish) reason = std::string(finish_reason_name(*s.finish));
  if (!e.error.is_ok()) reason = "error";
  if (ctx_.metrics) {
    RequestRecord rec;
    rec.finish_reason = reason;
    rec.prompt_tokens = e.num_prompt_tokens;
    rec.generation_tokens = e.num_output_tokens;
    rec.queue_s = e.queue_ms / 1000;
    rec.ttft_s = e.ttft_ms / 1000;
    rec.e2e_s = e.elapsed_ms / 1000;
    rec.inter_token_s = std::move(itl_s_[i]);
    ctx_.metrics->record(rec);
  }
  if (ctx_.log_requests) {
    spdlog::info("request {} api={} prompt_tokens={} cached_tokens={} output_tokens={} queue_ms={:.1f} ttft_ms={:.1f} "
                 "total_ms={:.1f} finish={}{}",
                 requests_[i].id, api_, e.num_prompt_tokens, e.num_cached_tokens, e.num_output_tokens, e.queue_ms,
                 e.ttft_ms, e.elapsed_ms, reason, e.error.is_ok() ? "" : " error=" + e.error.message());
  }
  if (e.ttft_ms > 0 && spdlog::should_log(spdlog::level::debug)) {
    // On the steady clock (CLOCK_MONOTONIC), so that a client on the same
    // machine can split its own TTFT into before arrival, the server's part,
    // and after the token left the engine (bench/serving/serve_bench.py).
    auto seconds = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(t.time_since_epoch()).count();
    };
    const double arrival = seconds(start_);
    spdlog::debug("request {} clock: arrival {:.6f} s, first token {:.6f} s, first token out {:.6f} s (steady clock)",
                  requests_[i].id, arrival, arrival + e.ttft_ms / 1000,
                  first_token_out_[i] == start_ ? 0.0 : seconds(first_token_out_[i]));
  }
}

void GenerationSession::drain(std::vector<ChoiceUpdate>& out) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (request_done_[i]) continue;
    for (RequestOutput& e : streams_[i]->drain()) {
      auto now = std::chrono::steady_clock::now();
      for (SequenceOutput& s : e.sequences) {
        if (!s.token_ids.empty()) {
          if (i < itl_s_.size() && e.ttft_ms > 0 && last_token_at_[i] != start_)
            itl_s_[i].push_back(std::chrono::duration<double>(now - last_token_at_[i]).count() /
                                static_cast<double>(s.token_ids.size()));
          last_token_at_[i] = now;
          if (first_token_out_[i] == start_) first_token_out_[i] = now;
        }
        ChoiceUpdate u;
        u.choice = static_cast<int>(i) * n_ + s.index;
        u.text = std::move(s.text);
        u.token_ids = std::move(s.token_ids);
        u.logprobs = std::move(s.logprobs);
        u.finish = s.finish;
        u.stop_reason = std::move(s.stop_reason);
        out.push_back(std::move(u));
      }
      if (!e.error.is_ok() && !error_) error_ = api_error_from_status(e.error);
      bool fin = e.finished;
      if (!e.prompt_logprobs.empty()) prompt_logprobs_[i] = std::move(e.prompt_logprobs);
      last_[i].num_prompt_tokens = e.num_prompt_tokens;
      last_[i].num_cached_tokens = e.num_cached_tokens;
      last_[i].num_output_tokens = e.num_output_tokens;
      last_[i].ttft_ms = e.ttft_ms;
      last_[i].elapsed_ms = e.elapsed_ms;
      last_[i].error = e.error;
      if (fin) {
        finish_request(i, e);
        break;
      }
    }
  }
}

Task<std::optional<std::vector<ChoiceUpdate>>> GenerationSession::next() {
  std::vector<ChoiceUpdate> out;
  for (;;) {
    drain(out);
    if (error_) {
      cancel_all();
      co_return std::nullopt;
    }
    if (!out.empty() || done()) co_return out;
    Wake w = co_await res_.wait_event(std::chrono::milliseconds(500));
    if (w == Wake::kClientGone) {
      cancel_all();
      co_return std::nullopt;
    }
  }
}

SessionUsage GenerationSession::usage() const {
  SessionUsage u;
  for (const RequestOutput& e : last_) {
    u.prompt_tokens += e.num_prompt_tokens;
    u.completion_tokens += e.num_output_tokens;
    u.cached_tokens += e.num_cached_tokens;
    u.elapsed_ms = std::max(u.elapsed_ms, e.elapsed_ms);
  }
  if (!last_.empty()) u.ttft_ms = last_[0].ttft_ms;
  double decode_ms = u.elapsed_ms - u.ttft_ms;
  int64_t after_first = u.completion_tokens - static_cast<int64_t>(last_.size()) * n_;
  if (decode_ms > 0 && after_first > 0) u.tokens_per_second = static_cast<double>(after_first) * 1000.0 / decode_ms;
  return u;
}

}  // namespace tern::server
