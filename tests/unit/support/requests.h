// Requests the engine tests build again and again: greedy, a fixed number of
// tokens (EOS ignored), so two runs of one prompt must give the same tokens.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace tern::testing {

inline Request greedy_request(std::string id, std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace tern::testing
