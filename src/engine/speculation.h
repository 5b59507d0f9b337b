// Speculative decoding by prompt lookup (n-gram drafts, as vLLM's
// `--speculative-config '{"method": "ngram", ...}'` and TGI's `--speculate`):
// a decoding sequence whose last tokens occurred earlier in its prompt or
// output takes the tokens that followed them as drafts, the next step
// computes its last token and the drafts together, and each row's token is
// sampled as without drafts. A draft is accepted while it equals the token
// sampled at its row, so the output is drawn from the same distributions,
// in the same order, with one step doing the work of several where the
// text repeats what came before (quotes, code edits, summaries). Pure
// functions; the engine does the bookkeeping.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace tern {

// disable_by_batch_size's default: 4 on the CPU; 1 on a GPU, whose runner
// verifies one sequence's drafts at little more than a plain step's cost but
// several sequences' at about twice it (docs/api.md).
inline constexpr int kSpeculativeMaxSeqs = 4, kSpeculativeMaxSeqsGpu = 1;

struct SpeculativeConfig {
  int num_tokens = 0;   // most drafts a step verifies per sequence; 0: no speculation
  int lookup_min = 2;   // shortest n-gram matched
  int lookup_max = 4;   // longest n-gram matched (tried first)
  // Drafts are proposed only while at most this many sequences decode: past a
  // few, a step is no longer bound by reading the weights, and rejected drafts
  // cost their compute (vLLM's disable_by_batch_size).
  int max_seqs = kSpeculativeMaxSeqs;
  bool max_seqs_given = false;  // disable_by_batch_size named; otherwise the device's default applies
  bool enabled() const { return num_tokens > 0; }
};

// vLLM's JSON: {"method": "ngram", "num_speculative_tokens": N, "prompt_lookup_max": M,
// "prompt_lookup_min": m, "disable_by_batch_size": B}; other methods and unknown keys are refused.
Result<SpeculativeConfig> parse_speculative_config(const std::string& json);
// Checks the ranges (1-16 tokens, 1 <= lookup_min <= lookup_max <= 16, max_seqs >= 1) on an enabled config.
Status validate_speculative_config(const SpeculativeConfig& c);
// c with max_seqs at the device's default where disable_by_batch_size was not given.
SpeculativeConfig with_device_default(SpeculativeConfig c, bool gpu);

// `max_drafts` tokens that followed the most recent earlier occurrence of
// the longest suffix of `tokens` (from lookup_max down to lookup_min tokens)
// found earlier in `tokens`, running on past the end as a loop would (after
// a b c a b: c a b c ...); empty when no suffix occurred before.
std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& c,
                                          int64_t max_drafts);

}  // namespace tern
