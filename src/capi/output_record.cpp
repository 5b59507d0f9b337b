// RequestOutput -> per-sample records that tern_output views point into.
#include "capi/output_record.h"

#include <limits>

#include "capi/api_error.h"

namespace tern::capi {

namespace {

tern_finish_reason finish_code(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return TERN_FINISH_STOP;
    case FinishReason::kLength: return TERN_FINISH_LENGTH;
    case FinishReason::kAbort: return TERN_FINISH_ABORT;
    case FinishReason::kError: return TERN_FINISH_ERROR;
  }
  return TERN_FINISH_ERROR;
}

}  // namespace

const tern_output* OutputRecord::view() {
  view_ = tern_output{};
  view_.index = index;
  view_.text = text.c_str();
  view_.text_length = text.size();
  view_.token_ids = token_ids.empty() ? nullptr : token_ids.data();
  view_.num_tokens = token_ids.size();
  view_.logprobs = has_logprobs && !logprobs.empty() ? logprobs.data() : nullptr;
  view_.num_top_logprobs = num_top;
  view_.top_token_ids = num_top > 0 && !top_ids.empty() ? top_ids.data() : nullptr;
  view_.top_logprobs = num_top > 0 && !top_logprobs.empty() ? top_logprobs.data() : nullptr;
  view_.finish_reason = finish;
  view_.stop_reason = stop_reason.c_str();
  view_.usage = usage;
  view_.request_finished = request_finished ? 1 : 0;
  view_.status = status;
  view_.error = error.c_str();
  return &view_;
}

std::vector<OutputRecord> split_output(const RequestOutput& event, int32_t num_top) {
  tern_usage usage{event.num_prompt_tokens, event.num_cached_tokens, event.num_output_tokens};
  std::vector<OutputRecord> records;
  for (const SequenceOutput& s : event.sequences) {
    if (s.token_ids.empty() && s.text.empty() && !s.finish) continue;
    OutputRecord& r = records.emplace_back();
    r.index = s.index;
    r.text = s.text;
    r.token_ids = s.token_ids;
    r.has_logprobs = !s.logprobs.empty();
    r.num_top = r.has_logprobs ? num_top : 0;
    for (const SampleResult& sample : s.logprobs) {
      r.logprobs.push_back(sample.logprob);
      for (int32_t k = 0; k < r.num_top; ++k) {
        const bool known = k < static_cast<int32_t>(sample.top.size());
        r.top_ids.push_back(known ? sample.top[k].id : -1);
        r.top_logprobs.push_back(known ? sample.top[k].logprob : -std::numeric_limits<float>::infinity());
      }
    }
    if (s.finish) r.finish = finish_code(*s.finish);
    r.stop_reason = s.stop_reason;
    r.usage = usage;
  }
  if (event.finished) {
    // A request that failed before any sample had news still ends with one record.
    if (records.empty()) {
      records.emplace_back().usage = usage;
      records.back().finish = event.error.is_ok() ? TERN_FINISH_ABORT : TERN_FINISH_ERROR;
    }
    OutputRecord& last = records.back();
    last.request_finished = true;
    if (!event.error.is_ok()) {
      last.status = status_code(event.error.code());
      last.error = event.error.message();
    }
  }
  return records;
}

}  // namespace tern::capi
