// Sampling over logits. Filtering happens on a candidate list sorted by
// logit so top-k / top-p / min-p compose in the order vLLM applies them.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace tern {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0) || temperature > 1e6)
    return invalid_argument("temperature must be >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0 && top_p <= 1.0)) return invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < -1) return invalid_argument("top_k must be -1 (disabled) or at least 1, got " + std::to_string(top_k));
  if (!(min_p >= 0.0 && min_p <= 1.0)) return invalid_argument("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  return Status::ok();
}

int32_t argmax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

int32_t Sampler::sample(std::span<float> logits) {
  if (params_.greedy() || logits.size() <= 1) return argmax(logits);

  const auto n = static_cast<int32_t>(logits.size());
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  int32_t k = (params_.top_k > 0 && params_.top_k < n) ? static_cast<int32_t>(params_.top_k) : n;
  auto by_logit = [&](int32_t a, int32_t b) {
    float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  if (k < n) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
    order_.resize(static_cast<size_t>(k));
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }

  // Softmax over the candidates at the requested temperature (double for the sum).
  const double inv_t = 1.0 / params_.temperature;
  const double top = logits[static_cast<size_t>(order_[0])];
  std::vector<double> probs(order_.size());
  double total = 0.0;
  for (size_t i = 0; i < order_.size(); ++i) {
    probs[i] = std::exp((logits[static_cast<size_t>(order_[i])] - top) * inv_t);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // top-p: smallest prefix whose mass reaches top_p (at least one token).
  size_t keep = probs.size();
  if (params_.top_p < 1.0) {
    double mass = 0.0;
    for (size_t i = 0; i < probs.size(); ++i) {
      mass += probs[i];
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // min-p: relative to the most likely token.
  if (params_.min_p > 0.0) {
    double floor = params_.min_p * probs[0];
    size_t m = 1;
    while (m < keep && probs[m] >= floor) ++m;
    keep = m;
  }

  double kept_mass = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
  std::uniform_real_distribution<double> uniform(0.0, kept_mass);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace tern
