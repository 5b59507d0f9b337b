// Sampling over one row of logits, in the order documented in sampler.h.
// Filtering works on a candidate list so top-k / top-p only sort as much of
// the vocabulary as they need; probabilities are summed in double.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tern {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

bool in_vocab(int64_t id, size_t vocab) { return id >= 0 && static_cast<uint64_t>(id) < vocab; }

// Most likely first; the lower id wins ties so results never depend on the
// sort's internals.
bool more_likely(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

// log(sum(exp(raw))), summed in double.
double log_sum_exp(std::span<const float> raw) {
  double max = -std::numeric_limits<double>::infinity();
  for (float x : raw) max = std::max(max, static_cast<double>(x));
  double sum = 0.0;
  for (float x : raw) sum += std::exp(static_cast<double>(x) - max);
  return max + std::log(sum);
}

// The n most likely tokens of `raw` with their log-probabilities; `order`
// is scratch space.
void top_tokens(std::span<const float> raw, size_t n, double lse, std::vector<int32_t>& order,
                std::vector<TokenLogprob>& top) {
  top.clear();
  n = std::min(n, raw.size());
  if (n == 0) return;
  order.resize(raw.size());
  std::iota(order.begin(), order.end(), 0);
  auto cmp = [&](int32_t a, int32_t b) {
    return more_likely(raw[static_cast<size_t>(a)], a, raw[static_cast<size_t>(b)], b);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(), cmp);
  top.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    int32_t id = order[i];
    top.push_back({id, static_cast<float>(raw[static_cast<size_t>(id)] - lse)});
  }
}

}  // namespace

SampleResult score_token(std::span<const float> raw, int32_t token, int top) {
  SampleResult out;
  out.token = token;
  const double lse = log_sum_exp(raw);
  const float x = raw[static_cast<size_t>(token)];
  out.logprob = static_cast<float>(x - lse);
  int32_t rank = 1;
  for (size_t i = 0; i < raw.size(); ++i) rank += more_likely(raw[i], static_cast<int32_t>(i), x, token) ? 1 : 0;
  out.rank = rank;
  std::vector<int32_t> order;
  top_tokens(raw, static_cast<size_t>(std::max(top, 0)), lse, order, out.top);
  return out;
}

int32_t argmax(std::span<const float> values) {
  size_t best = 0;
  while (best < values.size() && std::isnan(values[best])) ++best;
  if (best == values.size()) return 0;
  for (size_t i = best + 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : random_seed()) {}

int32_t Sampler::sample(std::span<float> logits) { return sample(logits, SamplingContext{}).token; }

SampleResult Sampler::sample(std::span<float> logits, const SamplingContext& ctx) {
  SampleResult out{0, std::numeric_limits<float>::quiet_NaN(), {}};
  if (logits.empty()) return out;
  if (params_.logprobs) raw_.assign(logits.begin(), logits.end());

  adjust_.clear();
  list_adjustments(ctx, logits.size(), adjust_);
  apply_adjustments(logits, adjust_);
  out.token = params_.greedy() ? argmax(logits) : draw(logits);

  if (params_.logprobs) fill_logprobs(raw_, out);
  return out;
}

void Sampler::fill_logprobs(std::span<const float> raw, SampleResult& out) {
  const double lse = log_sum_exp(raw);
  out.logprob = static_cast<float>(raw[static_cast<size_t>(out.token)] - lse);
  top_tokens(raw, static_cast<size_t>(*params_.logprobs), lse, order_, out.top);
}

void Sampler::update_history(const SamplingContext& ctx, size_t vocab) {
  const bool repetition = params_.repetition_penalty != 1.0;
  const bool prompt_changed = !prompt_read_ || ctx.prompt_tokens.size() != prompt_len_;
  if (ctx.output_tokens.size() < outputs_counted_ || (repetition && prompt_changed)) {
    outputs_counted_ = 0;
    output_counts_.clear();
    output_only_ids_.clear();
  }
  if (repetition && prompt_changed) {
    prompt_ids_.clear();
    for (int32_t id : ctx.prompt_tokens)
      if (in_vocab(id, vocab)) prompt_ids_.push_back(id);
    std::sort(prompt_ids_.begin(), prompt_ids_.end());
    prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
    prompt_read_ = true;
    prompt_len_ = ctx.prompt_tokens.size();
  }
  for (size_t i = outputs_counted_; i < ctx.output_tokens.size(); ++i) {
    int32_t id = ctx.output_tokens[i];
    if (!in_vocab(id, vocab)) continue;
    if (output_counts_[id]++ == 0 && repetition && !std::binary_search(prompt_ids_.begin(), prompt_ids_.end(), id))
      output_only_ids_.push_back(id);
  }
  outputs_counted_ = ctx.output_tokens.size();
}

void apply_adjustments(std::span<float> logits, std::span<const LogitAdjust> adjust) {
  for (int phase = 0; phase < 4; ++phase) {
    for (const LogitAdjust& a : adjust) {
      if (a.phase != phase || !in_vocab(a.id, logits.size())) continue;
      float& v = logits[static_cast<size_t>(a.id)];
      if (phase == 0) {
        v += a.a;
      } else if (phase == 1) {
        v = kNegInf;
      } else if (phase == 2) {
        v = v > 0.0f ? v / a.a : v * a.a;
      } else {
        v -= a.a;
        v -= a.b;
      }
    }
  }
}

// Steps 1-3 in the order they apply: bias, the min_tokens mask, then the
// penalties over the (updated) history.
void Sampler::list_adjustments(const SamplingContext& ctx, size_t vocab, std::vector<LogitAdjust>& adjust) {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (!in_vocab(id, vocab)) continue;  // validate() reports these
    adjust.push_back(
        {static_cast<int32_t>(id), 0, static_cast<float>(std::clamp(bias, -kMaxLogitBias, kMaxLogitBias)), 0.0f});
  }
  if (static_cast<int64_t>(ctx.output_tokens.size()) < params_.min_tokens) {
    for (auto ids : {ctx.stop_ids, std::span<const int32_t>(params_.stop_token_ids)})
      for (int32_t id : ids)
        if (in_vocab(id, vocab)) adjust.push_back({id, 1, 0.0f, 0.0f});
  }
  if (!params_.has_penalties()) return;
  update_history(ctx, vocab);
  if (params_.repetition_penalty != 1.0) {
    const auto r = static_cast<float>(params_.repetition_penalty);
    for (int32_t id : prompt_ids_) adjust.push_back({id, 2, r, 0.0f});
    for (int32_t id : output_only_ids_) adjust.push_back({id, 2, r, 0.0f});
  }
  if (params_.frequency_penalty != 0.0 || params_.presence_penalty != 0.0) {
    const auto f = static_cast<float>(params_.frequency_penalty);
    const auto p = static_cast<float>(params_.presence_penalty);
    for (const auto& [id, count] : output_counts_) adjust.push_back({id, 3, f * static_cast<float>(count), p});
  }
}

DeviceSampling Sampler::plan_device(const SamplingContext& ctx, size_t vocab, std::vector<LogitAdjust>& adjust) {
  DeviceSampling d;
  d.adjust_begin = static_cast<uint32_t>(adjust.size());
  list_adjustments(ctx, vocab, adjust);
  d.adjust_end = static_cast<uint32_t>(adjust.size());
  d.greedy = params_.greedy();
  d.temperature = static_cast<float>(params_.temperature);
  d.top_k = static_cast<int32_t>(params_.top_k);
  d.top_p = static_cast<float>(params_.top_p);
  d.min_p = static_cast<float>(params_.min_p);
  d.key = rng_();
  return d;
}

int32_t Sampler::draw(std::span<const float> logits) {
  auto& c = candidates_;
  c.clear();
  float max = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > kNegInf) {  // drops masked ids and NaNs
      c.push_back({logits[i], static_cast<int32_t>(i), 0.0});
      max = std::max(max, logits[i]);
    }
  }
  if (c.empty()) return argmax(logits);

  // Temperature: the most likely token has weight exactly 1.
  const double inv_t = 1.0 / params_.temperature;
  for (Candidate& x : c) x.weight = std::exp((static_cast<double>(x.logit) - max) * inv_t);
  auto by_likelihood = [](const Candidate& a, const Candidate& b) { return more_likely(a.logit, a.id, b.logit, b.id); };

  // top-k: the k most likely, sorted.
  size_t sorted = 0;  // c[0, sorted) holds the most likely candidates, in order
  if (params_.top_k > 0 && static_cast<uint64_t>(params_.top_k) < c.size()) {
    auto k = static_cast<size_t>(params_.top_k);
    std::nth_element(c.begin(), c.begin() + static_cast<ptrdiff_t>(k - 1), c.end(), by_likelihood);
    c.resize(k);
    std::sort(c.begin(), c.end(), by_likelihood);
    sorted = k;
  }

  // top-p: sort a growing prefix until its mass reaches top_p of the total;
  // the nucleus is usually small, so this rarely sorts the whole vocabulary.
  if (params_.top_p < 1.0) {
    double total = 0.0;
    for (const Candidate& x : c) total += x.weight;
    const double target = params_.top_p * total;
    double mass = 0.0;
    size_t keep = c.size();
    size_t i = 0;
    for (size_t want = 64;; want *= 4) {
      size_t m = std::min(want, c.size());
      if (m > sorted) {
        if (m < c.size())
          std::nth_element(c.begin() + static_cast<ptrdiff_t>(sorted), c.begin() + static_cast<ptrdiff_t>(m), c.end(),
                           by_likelihood);
        std::sort(c.begin() + static_cast<ptrdiff_t>(sorted), c.begin() + static_cast<ptrdiff_t>(m), by_likelihood);
        sorted = m;
      }
      for (; i < m && keep == c.size(); ++i) {
        mass += c[i].weight;
        if (mass >= target) keep = i + 1;
      }
      if (keep < c.size() || m == c.size()) break;
    }
    c.resize(keep);
  }

  // min-p: relative to the most likely token, whose weight is 1.
  if (params_.min_p > 0.0) {
    std::erase_if(c, [&](const Candidate& x) { return x.weight < params_.min_p; });
  }

  double kept = 0.0;
  for (const Candidate& x : c) kept += x.weight;
  double r = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (const Candidate& x : c) {
    r -= x.weight;
    if (r < 0.0) return x.id;
  }
  // Rounding left r at or above zero: take the last token that had weight.
  for (auto it = c.rbegin(); it != c.rend(); ++it)
    if (it->weight > 0.0) return it->id;
  return c.front().id;
}

}  // namespace tern
