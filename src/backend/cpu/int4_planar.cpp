// Q4_0 / Q8_0 blocks to the planar int4 form (int4_planar.h).
#include "backend/cpu/int4_planar.h"

#include <algorithm>

#include "backend/cpu/quant_blocks.h"
#include "base/bf16.h"

namespace tern::cpu {
namespace {

// The zero that puts a Q8_0 block's codes into [0, 15], or -1 when none does.
int q8_0_zero(const BlockQ8_0& b) {
  const auto [lo, hi] = std::minmax_element(b.qs, b.qs + kQK8_0);
  const int z = std::max(0, -static_cast<int>(*lo));
  return *hi + z <= 15 ? z : -1;
}

const BlockQ8_0* q8_0_row(const WeightMatrix& w, int64_t r) {
  return static_cast<const BlockQ8_0*>(w.data) + r * (w.cols / kQK8_0);
}

}  // namespace

float Int4Matrix::value(int64_t r, int64_t c) const {
  const uint8_t byte = nibbles[static_cast<size_t>((r * cols + c) / 2)];
  const int q = c % 2 == 0 ? byte & 15 : byte >> 4;
  const auto b = static_cast<size_t>(r * (cols / kInt4Block) + c / kInt4Block);
  return static_cast<float>(q - zeros[b]) * f16_to_f32(scales[b]);
}

bool int4_representable(const WeightMatrix& w) {
  if (w.cols % kInt4Block != 0) return false;
  if (w.dtype == DType::kQ4_0) return true;
  if (w.dtype != DType::kQ8_0) return false;
  for (int64_t r = 0; r < w.rows; ++r) {
    const BlockQ8_0* row = q8_0_row(w, r);
    for (int64_t b = 0; b < w.cols / kQK8_0; ++b) {
      if (q8_0_zero(row[b]) < 0) return false;
    }
  }
  return true;
}

Result<Int4Matrix> to_int4_matrix(const WeightMatrix& w, const std::string& what) {
  if ((w.dtype != DType::kQ4_0 && w.dtype != DType::kQ8_0) || w.cols % kInt4Block != 0 || w.rows < 0) {
    return unsupported(what + ": the int4 form is made from Q4_0 or Q8_0 blocks only");
  }
  static_assert(kInt4Block == kQK8_0);
  Int4Matrix m;
  m.rows = w.rows;
  m.cols = w.cols;
  const int64_t blocks = w.cols / kInt4Block;
  m.nibbles.resize(static_cast<size_t>(w.rows * w.cols / 2));
  m.scales.resize(static_cast<size_t>(w.rows * blocks));
  m.zeros.resize(m.scales.size());
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const auto at = static_cast<size_t>(r * blocks + b);
      uint8_t* out = m.nibbles.data() + at * (kInt4Block / 2);
      int q[kInt4Block];
      if (w.dtype == DType::kQ4_0) {
        // Q4_0 packs element i in the low nibble of qs[i] and i + 16 in its
        // high one.
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(w.data)[r * blocks + b];
        for (int i = 0; i < kInt4Block / 2; ++i) {
          q[i] = blk.qs[i] & 15;
          q[i + kInt4Block / 2] = blk.qs[i] >> 4;
        }
        m.scales[at] = blk.d;
        m.zeros[at] = 8;
      } else {
        const BlockQ8_0& blk = q8_0_row(w, r)[b];
        const int z = q8_0_zero(blk);
        if (z < 0) {
          const auto [lo, hi] = std::minmax_element(blk.qs, blk.qs + kQK8_0);
          return unsupported(what + ": row " + std::to_string(r) + " block " + std::to_string(b) + " holds codes " +
                             std::to_string(*lo) + " .. " + std::to_string(*hi) +
                             ", more than 4 bits with a zero point can hold");
        }
        for (int i = 0; i < kInt4Block; ++i) q[i] = blk.qs[i] + z;
        m.scales[at] = blk.d;
        m.zeros[at] = static_cast<uint8_t>(z);
      }
      for (int i = 0; i < kInt4Block / 2; ++i) out[i] = static_cast<uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
    }
  }
  return m;
}

}  // namespace tern::cpu
