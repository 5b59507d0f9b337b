// How the one-token decode kernel (decode_kernel.cu, phase B) splits a
// context's keys over the blocks of one kv head. Plain C++ as well as CUDA,
// so the CPU tests check the rule (tests/unit/kv/key_splits_test.cpp).
#pragma once

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

}  // namespace tern::cuda
