// The loop nest shared by every quantized linear kernel, over a policy K that
// supplies `template <int MR> static void dot(const uint8_t* w_row, const
// uint8_t* x, int64_t x_row_bytes, int64_t blocks, float* out)`: one weight
// row against MR consecutive tokens' activation rows, each weight block read
// and unpacked once for all MR tokens (out[m] for token m). Include it only
// from an ISA file, after its target pragma: everything here is a template
// of K, so two ISA files never share a compiled function.
#pragma once

#include <cstdint>

#include "backend/cpu/quant_isa.h"

namespace tern::cpu::quant_isa {

// Bytes of weight rows kept in L2 while every group of tokens passes over them.
constexpr int64_t kQuantWBlockBytes = 256 * 1024;

template <class K, int MR>
void token_group(const QuantTask& t, int64_t t0, int64_t r0, int64_t r1) {
  float out[MR];
  const uint8_t* x = t.x + t0 * t.x_row_bytes;
  for (int64_t r = r0; r < r1; ++r) {
    K::template dot<MR>(t.w + r * t.w_row_bytes, x, t.x_row_bytes, t.blocks, out);
    for (int m = 0; m < MR; ++m) t.y[(t0 + m) * t.rows + r] = out[m];
  }
}

template <class K>
void quant_rows(const QuantTask& t, int64_t r_begin, int64_t r_end) {
  int64_t block = kQuantWBlockBytes / (t.w_row_bytes > 0 ? t.w_row_bytes : 1);
  if (block < 4) block = 4;
  for (int64_t r0 = r_begin; r0 < r_end; r0 += block) {
    const int64_t r1 = r0 + block < r_end ? r0 + block : r_end;
    int64_t t0 = 0;
    for (; t0 + 4 <= t.num_tokens; t0 += 4) token_group<K, 4>(t, t0, r0, r1);
    switch (t.num_tokens - t0) {
      case 3:
        token_group<K, 3>(t, t0, r0, r1);
        break;
      case 2:
        token_group<K, 2>(t, t0, r0, r1);
        break;
      case 1:
        token_group<K, 1>(t, t0, r0, r1);
        break;
      default:
        break;
    }
  }
}

}  // namespace tern::cpu::quant_isa
