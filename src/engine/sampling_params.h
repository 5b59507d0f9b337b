// What a request asks of the sampler. Plain data filled by the CLI or the
// server (after applying generation_config.json defaults) and read by the
// Sampler; no JSON here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"

namespace tern {

struct SamplingParams {
  double temperature = 1.0;  // 0 means greedy
  double top_p = 1.0;        // nucleus mass in (0, 1]
  int64_t top_k = 0;         // 0 or -1: no limit
  double min_p = 0.0;        // drop tokens below min_p * p(max)
  std::optional<uint64_t> seed;
  int64_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // besides the model's default stop ids

  bool greedy() const { return temperature <= 0.0 || top_k == 1; }
  // Range checks with messages a client can act on.
  Status validate() const;
};

}  // namespace tern
