// One engine step's work for the model: a chunk of new tokens for each of
// several sequences (prompt chunks and single decode tokens mixed), whose
// keys and values live in a PagedKvPool under each sequence's block table.
// Plain views: the engine owns the token and block-table storage and keeps
// it alive for the duration of the forward call.
#pragma once

#include <cstdint>
#include <span>

namespace tern {

struct SequenceChunk {
  std::span<const int32_t> tokens;       // new tokens to run this step (>= 1)
  int64_t start_pos = 0;                 // absolute position of tokens[0]; K/V of 0..start_pos-1 are in the pool
  std::span<const int32_t> block_table;  // block ids covering positions [0, start_pos + tokens.size())
  bool want_logits = false;              // produce the logits of this chunk's last token
  bool all_logits = false;               // produce the logits of every token (the last is want_logits's row)
};

// The rows of logits a chunk produces: every token's with all_logits, else
// the last token's with want_logits, else none.
inline int64_t logit_rows_of(const SequenceChunk& chunk) {
  return chunk.all_logits ? static_cast<int64_t>(chunk.tokens.size()) : chunk.want_logits ? 1 : 0;
}

}  // namespace tern
