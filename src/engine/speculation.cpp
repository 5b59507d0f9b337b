// Prompt-lookup drafts and the speculative config's parsing.
#include "engine/speculation.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tern {

Status validate_speculative_config(const SpeculativeConfig& c) {
  if (!c.enabled()) return Status::ok();
  if (c.num_tokens > 16) {
    return invalid_argument("num_speculative_tokens must be from 1 to 16, got " + std::to_string(c.num_tokens));
  }
  if (c.lookup_min < 1 || c.lookup_max > 16 || c.lookup_min > c.lookup_max) {
    return invalid_argument("prompt_lookup_min and prompt_lookup_max must satisfy 1 <= min <= max <= 16, got " +
                            std::to_string(c.lookup_min) + " and " + std::to_string(c.lookup_max));
  }
  if (c.max_seqs < 1) return invalid_argument("disable_by_batch_size must be at least 1");
  return Status::ok();
}

SpeculativeConfig with_device_default(SpeculativeConfig c, bool gpu) {
  if (!c.max_seqs_given) c.max_seqs = gpu ? kSpeculativeMaxSeqsGpu : kSpeculativeMaxSeqs;
  return c;
}

Result<SpeculativeConfig> parse_speculative_config(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("--speculative-config must be a JSON object, e.g. "
                            "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'");
  }
  SpeculativeConfig c;
  bool has_tokens = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& value = it.value();
    const auto whole = [&](int& field) -> Status {
      if (!value.is_number_integer()) return invalid_argument("--speculative-config: " + key + " must be an integer");
      const auto v = value.get<int64_t>();
      if (v < 0 || v > 1'000'000) return invalid_argument("--speculative-config: " + key + " is out of range");
      field = static_cast<int>(v);
      return Status::ok();
    };
    if (key == "method") {
      if (!value.is_string() || value.get<std::string>() != "ngram") {
        return invalid_argument("--speculative-config: method must be \"ngram\" (prompt lookup); draft models, "
                                "EAGLE and MTP heads are not supported");
      }
    } else if (key == "num_speculative_tokens") {
      TERN_RETURN_IF_ERROR(whole(c.num_tokens));
      has_tokens = true;
    } else if (key == "prompt_lookup_max") {
      TERN_RETURN_IF_ERROR(whole(c.lookup_max));
    } else if (key == "prompt_lookup_min") {
      TERN_RETURN_IF_ERROR(whole(c.lookup_min));
    } else if (key == "disable_by_batch_size") {
      TERN_RETURN_IF_ERROR(whole(c.max_seqs));
      c.max_seqs_given = true;
    } else {
      return invalid_argument("--speculative-config: unknown key '" + key +
                              "' (known: method, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, "
                              "disable_by_batch_size)");
    }
  }
  if (!j.contains("method")) return invalid_argument("--speculative-config: method is required (\"ngram\")");
  if (!has_tokens || c.num_tokens < 1) {
    return invalid_argument("--speculative-config: num_speculative_tokens (at least 1) is required");
  }
  // An unnamed minimum stays 2, or the maximum where that is smaller.
  if (!j.contains("prompt_lookup_min")) c.lookup_min = std::min(c.lookup_min, c.lookup_max);
  TERN_RETURN_IF_ERROR(validate_speculative_config(c));
  return c;
}

std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& c,
                                          int64_t max_drafts) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(c.lookup_max, len - 1); n >= c.lookup_min && max_drafts > 0; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Most recent first: an occurrence starting at i is followed by tokens[i + n], which exists.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != suffix[0] ||
          !std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) {
        continue;
      }
      // What followed the match, and past the end of the tokens what followed that in the drafts themselves:
      // a loop (a repeated line, a list's pattern) goes on for all max_drafts tokens.
      std::vector<int32_t> drafts;
      drafts.reserve(static_cast<size_t>(max_drafts));
      for (int64_t k = 0; k < max_drafts; ++k) {
        const int64_t src = i + n + k;
        drafts.push_back(src < len ? tokens[static_cast<size_t>(src)] : drafts[static_cast<size_t>(src - len)]);
      }
      return drafts;
    }
  }
  return {};
}

}  // namespace tern
