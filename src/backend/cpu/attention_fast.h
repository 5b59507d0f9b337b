// attention_batch for the optimized kernel set: the reference's contract and
// work split (reference_kernels.h), with AVX2+FMA dot products, a vectorized
// exp, and per-thread scratch reused across calls (no allocation per step).
// Results differ from the reference by fp32 summation order and the exp
// approximation (a few ulp); attention_fast_test.cpp states the tolerance.
// Each output is computed by one thread in a fixed order, so results do not
// depend on the thread count or on which other sequences share the call.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"

namespace tern::cpu {

// As attention_batch. Falls back to it where the CPU lacks AVX2/FMA, where
// head_dim is not a multiple of 8, and for an fp8 cache (KvRowTable::fp8_blocks).
void attention_batch_fast(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                          std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out);

}  // namespace tern::cpu
