// How the one-token decode kernel (decode_kernel.cu, phase B) splits a
// context's keys over the blocks of one kv head, and how many splits the
// decode attention (attention.cu) takes for a batch. Plain C++ as well as
// CUDA, so the CPU tests check the rules
// (tests/unit/backend_cuda/key_splits_test.cpp).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TERN_HOST_DEVICE __host__ __device__
#else
#define TERN_HOST_DEVICE
#endif

namespace tern::cuda {

struct KeySplits {
  int splits = 1;  // blocks per kv head, each with keys [split * per, min(ctx, (split + 1) * per))
  int per = 0;     // keys per split, a multiple of `unit`
};

// ctx >= 1 keys over at most max_splits >= 1 splits: about one pass of
// `pass` keys per split (more passes when max_splits runs out), the keys
// per split rounded up to a multiple of `unit` (pass is one too). The
// rounding can leave the last splits without keys; they are dropped, so
// every split has keys and together they cover the context.
TERN_HOST_DEVICE constexpr KeySplits key_splits(int ctx, int pass, int unit, int max_splits) {
  int splits = (ctx + pass - 1) / pass;
  if (splits > max_splits) splits = max_splits;
  if (splits < 1) splits = 1;
  const int per = ((ctx + splits - 1) / splits + unit - 1) / unit * unit;
  return KeySplits{(ctx + per - 1) / per, per};
}

// The decode attention's split count (flash-decoding) when `blocks` blocks
// (tokens x kv heads) share `slots` resident ones (blocks per SM x SMs):
// the most splits whose blocks fit in one wave, at most max_splits, at
// least 1. With s splits the launch is ceil(blocks * s / slots) waves of
// blocks that each take 1 / s of a context; among the counts up to the one
// that first reaches the slots, this one has the fewest waves per split
// (the smallest on a tie: fewer partials to merge). Past that count more,
// smaller blocks only add each block's fixed cost (its q, its merge), and
// rounding up to reach the slots leaves a second wave nearly empty: 128
// blocks on 264 slots make 384 in 1.45 waves at 3 splits, 256 in 0.97 at 2.
TERN_HOST_DEVICE constexpr int attention_splits(int64_t blocks, int64_t slots, int max_splits) {
  if (blocks <= 0 || slots <= 0 || max_splits <= 1) return 1;
  const int64_t fit = slots / blocks;
  return fit <= 1 ? 1 : fit < max_splits ? static_cast<int>(fit) : max_splits;
}

}  // namespace tern::cuda
