// A scheduled chunk as the model reads it: the engine's ScheduledChunk (a
// sequence and how many of its tokens to run) turned into the model's
// SequenceChunk (token, position and block-table views). Shared by the runners.
#pragma once

#include <cstdint>
#include <span>

#include "engine/scheduler.h"
#include "model/forward_batch.h"

namespace tern {

// The sequence's next num_tokens tokens from num_computed on, or, for a fed
// chunk (feedback_row >= 0, whose token is still on the device), `fed`: one
// id standing in for it. Views into the sequence, valid while it is unchanged.
SequenceChunk sequence_chunk(const ScheduledChunk& sc, std::span<const int32_t> fed = {});

}  // namespace tern
