// ScheduledChunk -> SequenceChunk.
#include "runners/sequence_chunk.h"

namespace tern {

SequenceChunk sequence_chunk(const ScheduledChunk& sc, std::span<const int32_t> fed) {
  const Sequence& seq = *sc.seq;
  SequenceChunk chunk;
  chunk.tokens = sc.feedback_row >= 0 ? fed
                                      : std::span<const int32_t>(seq.tokens()).subspan(
                                            static_cast<size_t>(seq.num_computed()),
                                            static_cast<size_t>(sc.num_tokens));
  chunk.start_pos = seq.num_computed();
  chunk.block_table = seq.blocks_view();
  chunk.want_logits = sc.want_logits;
  chunk.all_logits = sc.all_logits;
  return chunk;
}

}  // namespace tern
