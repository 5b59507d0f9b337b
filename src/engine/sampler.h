// Picks the next token from a row of logits: greedy, or temperature with
// top-k, top-p and min-p filtering. One Sampler per sequence owns that
// sequence's random generator, so a seeded request draws the same tokens
// whatever else runs beside it. Not thread-safe; engine thread only.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace tern {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` holds one score per vocabulary id; it is used as scratch space.
  int32_t sample(std::span<float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch: candidate ids sorted by logit
};

// Index of the largest value; the lowest index wins ties (as torch.argmax).
int32_t argmax(std::span<const float> values);

}  // namespace tern
