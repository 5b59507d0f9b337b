// EngineStats: a snapshot of the engine's counters and gauges, taken on the
// engine thread after each step and read by other threads through
// EngineClient::stats (metrics, health, benchmarks). A plain value.
#pragma once

#include <cstdint>

namespace tern {

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_total_blocks = 0;
  int64_t num_free_blocks = 0;  // free or evictable
  double kv_cache_usage = 0;    // fraction of blocks in use
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  // Speculative decoding: sequences' steps with drafts, the drafts, and those accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  int64_t num_steps = 0;
  int64_t num_overlapped_steps = 0;  // launched before the step before them was collected
  double last_step_ms = 0;
  int64_t last_step_tokens = 0;
  int64_t last_step_seqs = 0;
};

}  // namespace tern
