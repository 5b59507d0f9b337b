// Sequence bookkeeping: appending tokens, stop rules, text with stop-string
// holdback, preemption.
#include "engine/sequence.h"

#include <algorithm>

namespace tern {
namespace {

SamplingParams params_for_index(SamplingParams p, int index) {
  if (p.seed) *p.seed += static_cast<uint64_t>(index);  // n > 1: distinct but reproducible draws
  return p;
}

// Length of the longest suffix of `text` that is a proper prefix of `stop`.
size_t partial_match(std::string_view text, std::string_view stop) {
  size_t most = std::min(text.size(), stop.size() - 1);
  for (size_t len = most; len > 0; --len)
    if (text.substr(text.size() - len) == stop.substr(0, len)) return len;
  return 0;
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

bool RequestState::finished() const {
  return std::all_of(sequences.begin(), sequences.end(),
                     [](const auto& s) { return s->status == SequenceStatus::kFinished; });
}

Sequence::Sequence(RequestState& request, int index, BlockTable blocks, const Tokenizer& tokenizer)
    : request_(&request),
      index_(index),
      tokens_(request.request.prompt),
      num_prompt_(static_cast<int64_t>(request.request.prompt.size())),
      blocks_(std::move(blocks)),
      sampler_(params_for_index(request.request.params, index)),
      detok_(tokenizer, request.request.params.skip_special_tokens) {}

bool Sequence::is_eos(int32_t token) const {
  const auto& eos = request_->eos_ids;
  return std::find(eos.begin(), eos.end(), token) != eos.end();
}

std::optional<FinishReason> Sequence::append(const SampleResult& sample, int64_t max_model_len) {
  const SamplingParams& p = request_->request.params;
  tokens_.push_back(sample.token);
  if (p.logprobs) pending_logprobs_.push_back(sample);

  const auto& stops = request_->stop_ids;
  bool stop_token = std::find(stops.begin(), stops.end(), sample.token) != stops.end();
  if (stop_token && !(p.ignore_eos && is_eos(sample.token)) && num_output_tokens() >= p.min_tokens) {
    stop_reason_ = is_eos(sample.token) ? "" : std::to_string(sample.token);
    finish(FinishReason::kStop);
    text_ += detok_.flush();
    return finish_;
  }
  update_text(sample.token);
  if (finish_) return finish_;
  if (num_output_tokens() >= p.max_tokens || num_tokens() >= max_model_len) {
    text_ += detok_.flush();
    finish(FinishReason::kLength);
  }
  return finish_;
}

void Sequence::update_text(int32_t token) {
  const auto& stops = request_->request.params.stop;
  size_t before = text_.size();
  text_ += detok_.push(token);
  if (stops.empty()) return;
  for (const std::string& s : stops) {
    // Only a match that includes new text can be new.
    size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    size_t at = text_.find(s, from);
    if (at == std::string::npos || at + s.size() <= before) continue;
    bool keep = request_->request.params.include_stop_str_in_output;
    text_.resize(keep ? at + s.size() : at);
    stop_reason_ = s;
    finish(FinishReason::kStop);
    return;
  }
}

void Sequence::add_drafts(std::span<const int32_t> drafts) {
  tokens_.insert(tokens_.end(), drafts.begin(), drafts.end());
  num_drafts_ += static_cast<int64_t>(drafts.size());
}

void Sequence::drop_drafts(int64_t count) {
  count = std::min(count, num_drafts_);
  tokens_.resize(tokens_.size() - static_cast<size_t>(count));
  num_drafts_ -= count;
}

std::vector<int32_t> Sequence::take_drafts() {
  std::vector<int32_t> drafts(tokens_.end() - num_drafts_, tokens_.end());
  drop_drafts(num_drafts_);
  return drafts;
}

void Sequence::take_output(SequenceOutput& out) {
  out.index = index_;
  auto output_tokens = output().first(output().size() - static_cast<size_t>(num_drafts_));
  out.token_ids.assign(output_tokens.begin() + static_cast<int64_t>(tokens_emitted_), output_tokens.end());
  tokens_emitted_ = output_tokens.size();
  out.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();

  // Hold back a tail that may still grow into a stop string.
  size_t hold = 0;
  if (!finish_) {
    for (const std::string& s : request_->request.params.stop)
      hold = std::max(hold, partial_match(std::string_view(text_).substr(text_emitted_), s));
  }
  size_t end = text_.size() - hold;
  if (end > text_emitted_) {
    out.text = text_.substr(text_emitted_, end - text_emitted_);
    text_emitted_ = end;
  }
  if (finish_ && !finish_sent_) {  // reported once
    out.finish = finish_;
    out.stop_reason = stop_reason_;
    finish_sent_ = true;
  }
}

void Sequence::preempt() {
  drop_drafts(num_drafts_);
  blocks_.release();
  num_computed_ = 0;
  status = SequenceStatus::kWaiting;
}

void Sequence::copy_prefill_from(Sequence& other) {
  blocks_ = other.blocks_.fork();
  num_computed_ = other.num_computed_;
  status = other.status;
}

}  // namespace tern
