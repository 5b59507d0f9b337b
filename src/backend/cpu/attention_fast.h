// attention_batch for the optimized kernel set: the reference's contract and
// split of work by K/V rows read (reference_kernels.h), with AVX2+FMA dot
// products, a vectorized exp, and per-thread scratch reused across calls (no
// allocation per step). Results differ from the reference by fp32 summation
// order and the exp approximation (a few ulp); attention_fast_test.cpp states
// the tolerance. Each output is computed by one thread in an order that depends
// only on its own causal length and the shape: tokens of a prefill are attended
// in tiles that share each pass over K/V, but a token has the same bits in a
// tile as alone, so results do not depend on the thread count, on how a
// sequence's tokens are split into calls or on which other sequences share the
// call.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"

namespace tern::cpu {

// As attention_batch. Falls back to it where the CPU lacks AVX2/FMA or
// head_dim is not a multiple of 8. A bf16 cache (KvRowTable::bf16_blocks) is
// widened to fp32 a block of rows at a time into an L1-sized per-thread
// buffer; an fp8 cache (KvRowTable::fp8_blocks) is dequantized per unit (a
// tile of tokens, one kv head) into per-thread scratch, past 64 MiB of which
// (very long contexts) the reference reads it instead. Either way the outputs
// have the bits of this kernel over an fp32 cache holding the same values.
void attention_batch_fast(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                          std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out);

// As attention_batch_fast with its P V form capped at `max_isa` (kAvx2 or
// kAvx512; the scores are AVX2 either way): both forms give the same bits,
// which tests check on CPUs that have both.
void attention_batch_fast_isa(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                              std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out,
                              CpuIsa max_isa);

}  // namespace tern::cpu
