// The loop nest shared by every SIMD linear kernel, written once over a
// "format" policy F that each ISA file supplies (vector type, how to load
// and widen weights and activations, the multiply-add, the horizontal sum).
// Include it only from an ISA file, after its `#pragma GCC target`, so each
// instantiation is compiled for that ISA; everything here is a template of F,
// so two ISA files never share a compiled function.
//
// The kernel is the dot-product form: both x rows and W rows are read along
// K, an MR x NR tile of outputs keeps one vector accumulator each, and the
// lanes are summed at the end. It needs no weight repacking (W stays in its
// PyTorch [N, K] layout) and bf16 pairs along K feed vdpbf16ps directly.
//
// F provides: Vec, XElem, WElem, kStep (K elements per step), kParts
// (vectors per step), kMR (tokens per tile), nr_for(mr) (rows per tile),
// zero(), load_x(const XElem*, Vec(&)[kParts]), load_w(const WElem*,
// Vec(&)[kParts]), madd(acc, x, w), hsum(Vec), and tail(x, w, k0, K): the
// scalar sum over the K % kStep elements the vector loop leaves.
#pragma once

#include <cstdint>

#include "backend/cpu/linear_isa.h"

namespace tern::cpu::linear_isa {

// y[t0 .. t0+MR, r0 .. r0+NR) over all of K.
template <class F, int MR, int NR>
[[gnu::always_inline]] inline void tile(const LinearTask& task, int64_t t0, int64_t r0) {
  using Vec = typename F::Vec;
  const int64_t k_len = task.cols;
  const auto* x = static_cast<const typename F::XElem*>(task.x) + t0 * task.x_stride;
  const auto* w = static_cast<const typename F::WElem*>(task.w) + r0 * k_len;
  Vec acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) acc[m][n] = F::zero();
  }
  int64_t k = 0;
  for (; k + F::kStep <= k_len; k += F::kStep) {
    Vec wv[NR][F::kParts];
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) F::load_w(w + n * k_len + k, wv[n]);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      Vec xv[F::kParts];
      F::load_x(x + m * task.x_stride + k, xv);
      // Pin x in registers: left alone, g++ folds the load into each of the
      // NR multiply-adds and the loop becomes load-port bound.
#pragma GCC unroll 2
      for (int p = 0; p < F::kParts; ++p) asm("" : "+v"(xv[p]));
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) {
#pragma GCC unroll 2
        for (int p = 0; p < F::kParts; ++p) acc[m][n] = F::madd(acc[m][n], xv[p], wv[n][p]);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) {
      float sum = F::hsum(acc[m][n]) + F::tail(x + m * task.x_stride, w + n * k_len, k, k_len);
      task.y[(t0 + m) * task.rows + r0 + n] = sum;
    }
  }
}

// Tiles of MR tokens x NR rows over tokens [t_begin, t_end) (a multiple of MR
// long) and rows [r_begin, r_end); the last rows go in a narrower tile.
template <class F, int MR, int NR>
void tile_rows(const LinearTask& task, int64_t t_begin, int64_t t_end, int64_t r_begin, int64_t r_end) {
  int64_t r = r_begin;
  for (; r + NR <= r_end; r += NR) {
    for (int64_t t = t_begin; t < t_end; t += MR) tile<F, MR, NR>(task, t, r);
  }
  if constexpr (NR > 1) {
    if (r < r_end) tile_rows<F, MR, NR - 1>(task, t_begin, t_end, r, r_end);
  }
}

// The last `mr` (< F::kMR) tokens, in one tile row of the width that suits mr.
template <class F, int MR>
void tile_token_tail(const LinearTask& task, int64_t t_begin, int mr, int64_t r_begin, int64_t r_end) {
  if constexpr (MR >= 1) {
    if (mr == MR) {
      tile_rows<F, MR, F::nr_for(MR)>(task, t_begin, t_begin + MR, r_begin, r_end);
      return;
    }
    tile_token_tail<F, MR - 1>(task, t_begin, mr, r_begin, r_end);
  }
}

// Bytes of W per row block: the block stays in L2 while every group of MR
// tokens passes over it, and a group's x rows (MR * K elements) stay in L1
// while the block's rows stream past them. Each W element loaded from L2 then
// feeds MR multiply-adds, which L2 bandwidth sustains; the other way round
// (x streaming past an L1-resident W panel) each x load feeds only NR.
constexpr int64_t kWBlockBytes = 384 * 1024;

// y[:, r_begin:r_end) of the task: the RowsFn every ISA file exports.
template <class F>
void linear_rows(const LinearTask& task, int64_t r_begin, int64_t r_end) {
  const int64_t row_bytes = task.cols * static_cast<int64_t>(sizeof(typename F::WElem));
  int64_t block = kWBlockBytes / (row_bytes > 0 ? row_bytes : 1);
  if (block < 8) block = 8;
  const int64_t full = task.num_tokens / F::kMR * F::kMR;
  const int rest = static_cast<int>(task.num_tokens - full);
  for (int64_t r0 = r_begin; r0 < r_end; r0 += block) {
    const int64_t r1 = r0 + block < r_end ? r0 + block : r_end;
    for (int64_t t0 = 0; t0 < full; t0 += F::kMR) {
      tile_rows<F, F::kMR, F::nr_for(F::kMR)>(task, t0, t0 + F::kMR, r0, r1);
    }
    if (rest > 0) tile_token_tail<F, F::kMR - 1>(task, full, rest, r0, r1);
  }
}

}  // namespace tern::cpu::linear_isa
