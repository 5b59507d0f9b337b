// The sampling flags of generate and chat, and the SamplingParams they give:
// a flag that is given wins; the model's generation_config.json fills what
// is left out (as vLLM's --generation-config auto).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "model/model_config.h"

namespace tern::cli {

struct SamplingFlags {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags);

SamplingParams sampling_params(const SamplingFlags& flags, const GenerationDefaults& defaults, int64_t max_tokens);

}  // namespace tern::cli
