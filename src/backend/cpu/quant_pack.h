// Quantized weight matrices repacked at load for the AVX2 GEMM kernels
// (quant_packed_avx2.cpp): rows go in groups of 8, and within a group every
// byte array of a block (qs, qh, ql) is interleaved in 4-byte units, row 0's
// bytes 4u..4u+3 then row 1's ... row 7's, so one 32-byte load holds the same
// 4 (or 8 nibble) positions of 8 rows. One 4-byte activation value broadcast
// to all lanes then feeds 8 output rows at once, and each 32-bit lane of a
// product is one row's dot product: no horizontal sums. Scales stay as
// stored (fp16 d, 6-bit K-quant scales unpacked to bytes), so the packed form
// is the original's size plus at most a few percent, and decode reads no more
// bytes than the file holds. The reference kernels never see this form.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/reference_kernels.h"

namespace tern::cpu {

// Rows per interleaved group.
constexpr int kPackRows = 8;

// Bytes of one packed block of kPackRows rows, per type (the layouts; u16 d
// values are fp16 bits, one per row, in row order):
//  Q8_0: d[8], qs: 8 units of 8 rows x 4 bytes.
//  Q4_0: d[8], qs: 4 units (low nibbles: elements 4u..4u+3, high: 16+4u..).
//  Q4_K: d[8], dmin[8], sc[8 sub-blocks][8 rows], m[8][8] (6-bit values as
//        bytes), qs: 32 units (unit 8c+g: elements 64c+4g.. low, 64c+32+4g.. high).
//  Q5_K: Q4_K's fields, then qh: 8 units (bit j of a byte: sub-block j's fifth bit).
//  Q6_K: d[8], sc[16 sub-blocks][8 rows] (int8), ql: 32 units, qh: 16 units.
constexpr int64_t kPackedQ8_0Bytes = 16 + 8 * 32;
constexpr int64_t kPackedQ4_0Bytes = 16 + 8 * 16;
constexpr int64_t kPackedQ4KBytes = 32 + 64 + 64 + 8 * 128;
constexpr int64_t kPackedQ5KBytes = kPackedQ4KBytes + 8 * 32;
constexpr int64_t kPackedQ6KBytes = 16 + 128 + 8 * 128 + 8 * 64;

// A quantized WeightMatrix in the packed layout: groups = ceil(rows / 8)
// row groups, each `blocks` packed blocks of `block_bytes`, rows past `rows`
// zero. Owns its bytes; immutable once built.
struct PackedWeight {
  DType dtype = DType::kQ8_0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;  // blocks per row
  int64_t groups = 0;
  int64_t block_bytes = 0;
  std::vector<uint8_t> data;

  const uint8_t* group(int64_t g) const { return data.data() + g * blocks * block_bytes; }
};

// Bytes of one packed block of `dtype`, or 0 when it has no packed form.
int64_t packed_block_bytes(DType dtype);

// The packed copy of a quantized matrix (w.data is only read), or nullptr
// when w's dtype has no packed form.
std::unique_ptr<PackedWeight> pack_weight(const WeightMatrix& w);

// Rows per panel of pack_bf16_panels.
constexpr int kBf16PanelRows = 16;

// A bf16 matrix in panels of 16 rows for the AVX512_BF16 outer-product
// kernel (linear_avx512.cpp): dtype kBF16, groups = ceil(rows / 16) panels,
// blocks = ceil(cols / 2) column pairs, block_bytes = 64: for each pair
// (k, k + 1) the 16 rows' (w[r][k], w[r][k + 1]) bf16 pairs, rows past
// `rows` and the column past an odd `cols` zero. nullptr unless w is bf16.
std::unique_ptr<PackedWeight> pack_bf16_panels(const WeightMatrix& w);

// Whether `p` is a pack_bf16_panels copy.
inline bool is_bf16_panels(const PackedWeight* p) { return p != nullptr && p->dtype == DType::kBF16; }

// Row `row` of a pack_bf16_panels copy as fp32 (the bf16 values widened,
// as weight_row_to_f32 widens the source row): `cols` floats into out.
void bf16_panel_row_to_f32(const PackedWeight& p, int64_t row, float* out);

}  // namespace tern::cpu
