// Sampling over one row of logits, in the order documented in sampler.h.
// Nothing sorts the vocabulary: top-k selects its k, top-p without top-k
// finds its threshold through histograms of the logits; probabilities are
// summed in double.
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
  float max = kNegInf, min = std::numeric_limits<float>::infinity();
  size_t live = 0;
  for (float x : logits) {
    if (x > kNegInf) {  // drops masked ids and NaNs
      max = std::max(max, x);
      min = std::min(min, x);
      ++live;
    }
  }
  if (live == 0) return argmax(logits);
  if (params_.top_k > 0 && static_cast<uint64_t>(params_.top_k) < live) return draw_top_k(logits, max);
  return draw_nucleus(logits, max, min);
}

namespace {

// Splits [lo, hi] of logits into kBuckets equal ranges, the most likely
// first; bucket() is monotone in the logit, so a threshold on buckets is a
// threshold on logits.
struct LogitBuckets {
  static constexpr int kBuckets = 2048;
  float hi = 0.0f, scale = 0.0f;
  // A range too wide or too narrow for a finite scale puts everything in bucket 0.
  LogitBuckets(float lo, float top) : hi(top), scale(top > lo ? kBuckets / (top - lo) : 0.0f) {
    if (!std::isfinite(scale)) scale = 0.0f;
  }
  int bucket(float x) const {
    const float v = (hi - x) * scale;  // NaN (infinite logits) goes last
    return v < static_cast<float>(kBuckets) ? static_cast<int>(v) : kBuckets - 1;
  }
};

// The first bucket at which the running mass reaches `target`, and the mass
// of the buckets before it; kBuckets when rounding never reaches it.
std::pair<int, double> crossing(const std::vector<double>& mass, double target) {
  double before = 0.0;
  for (int b = 0; b < static_cast<int>(mass.size()); ++b) {
    if (before + mass[static_cast<size_t>(b)] >= target) return {b, before};
    before += mass[static_cast<size_t>(b)];
  }
  return {static_cast<int>(mass.size()), before};
}

}  // namespace

// Without top-k: the top-p nucleus is found by thresholds rather than a sort
// (a flat distribution's nucleus is most of the vocabulary). A histogram of
// the weights by logit finds the bucket where the mass crosses top_p; only
// that bucket's tokens are sorted (histogrammed again while it is large) to
// find the last token kept, in the same order as a full sort (more likely,
// then lower id). The draw walks the kept tokens in id order.
int32_t Sampler::draw_nucleus(std::span<const float> logits, float max, float min) {
  const float inv_t = static_cast<float>(1.0 / params_.temperature);
  const bool top_p = params_.top_p < 1.0;
  const LogitBuckets buckets(min, max);
  weights_.resize(logits.size());
  mass_.assign(top_p ? LogitBuckets::kBuckets : 0, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    // The most likely token has weight exactly 1; masked ids and NaNs 0.
    const float x = logits[i];
    if (!(x > kNegInf)) {
      weights_[i] = 0.0f;
      continue;
    }
    const float w = std::exp((x - max) * inv_t);
    weights_[i] = w;
    total += w;
    if (top_p) mass_[static_cast<size_t>(buckets.bucket(x))] += w;
  }

  // The last kept token in likelihood order; everything at least as likely is kept.
  float last_logit = kNegInf;
  int32_t last_id = std::numeric_limits<int32_t>::max();
  if (top_p) {
    const double target = params_.top_p * total;
    auto [b, before] = crossing(mass_, target);
    auto& c = candidates_;
    c.clear();
    if (b < LogitBuckets::kBuckets) {
      for (size_t i = 0; i < logits.size(); ++i)
        if (logits[i] > kNegInf && buckets.bucket(logits[i]) == b)
          c.push_back({logits[i], static_cast<int32_t>(i), weights_[i]});
    }
    // Narrow a large crossing bucket down with histograms of its own range.
    constexpr size_t kSortBelow = 512;
    while (c.size() > kSortBelow) {
      float lo = c.front().logit, top = c.front().logit;
      for (const Candidate& x : c) lo = std::min(lo, x.logit), top = std::max(top, x.logit);
      if (lo == top) break;  // all tied: the sort orders them by id
      LogitBuckets sub(lo, top);
      mass_.assign(LogitBuckets::kBuckets, 0.0);
      for (const Candidate& x : c) mass_[static_cast<size_t>(sub.bucket(x.logit))] += x.weight;
      auto [sb, sub_before] = crossing(mass_, target - before);
      if (sb == LogitBuckets::kBuckets) break;
      before += sub_before;
      const size_t was = c.size();
      const auto keep = sb;  // a structured binding cannot be captured before C++20's P1091 (clang 14)
      std::erase_if(c, [&](const Candidate& x) { return sub.bucket(x.logit) != keep; });
      if (c.size() == was) break;  // no narrower: sort what is left
    }
    auto by_likelihood = [](const Candidate& a, const Candidate& x) {
      return more_likely(a.logit, a.id, x.logit, x.id);
    };
    std::sort(c.begin(), c.end(), by_likelihood);
    // Rounding may leave the mass just short of the target: then the whole bucket stays.
    double mass = before;
    for (const Candidate& x : c) {
      mass += x.weight;
      last_logit = x.logit;
      last_id = x.id;
      if (mass >= target) break;
    }
  }

  // min-p is relative to the most likely token, whose weight is 1. Tokens
  // left out get weight 0 (no branch on a coin-flip condition per id).
  const auto min_p = static_cast<float>(params_.min_p);
  double kept_mass = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i], w = weights_[i];
    const bool kept = (x > last_logit) | ((x == last_logit) & (static_cast<int32_t>(i) <= last_id));
    weights_[i] = w * static_cast<float>(kept & (w >= min_p));
    kept_mass += weights_[i];
  }
  double r = std::uniform_real_distribution<double>(0.0, kept_mass)(rng_);
  int32_t last_weighted = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    r -= weights_[i];
    if (weights_[i] > 0.0f) last_weighted = static_cast<int32_t>(i);
    if (r < 0.0) return static_cast<int32_t>(i);
  }
  // Rounding left r at or above zero: take the last token that had weight.
  return last_weighted >= 0 ? last_weighted : argmax(logits);
}

// With top-k: the k most likely, sorted, then top-p over that prefix.
int32_t Sampler::draw_top_k(std::span<const float> logits, float max) {
  auto& c = candidates_;
  c.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > kNegInf) c.push_back({logits[i], static_cast<int32_t>(i), 0.0});

  auto by_likelihood = [](const Candidate& a, const Candidate& b) { return more_likely(a.logit, a.id, b.logit, b.id); };
  const auto k = static_cast<size_t>(params_.top_k);
  std::nth_element(c.begin(), c.begin() + static_cast<ptrdiff_t>(k - 1), c.end(), by_likelihood);
  c.resize(k);
  std::sort(c.begin(), c.end(), by_likelihood);
  // Temperature: the most likely token has weight exactly 1.
  const double inv_t = 1.0 / params_.temperature;
  for (Candidate& x : c) x.weight = std::exp((static_cast<double>(x.logit) - max) * inv_t);

  if (params_.top_p < 1.0) {
    double total = 0.0;
    for (const Candidate& x : c) total += x.weight;
    const double target = params_.top_p * total;
    double mass = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      mass += c[i].weight;
      if (mass >= target) {
        c.resize(i + 1);
        break;
      }
    }
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
