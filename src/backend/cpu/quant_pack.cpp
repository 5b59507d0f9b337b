// pack_weight: plain byte moves from ggml's blocks into quant_pack.h's
// interleaved groups (portable code; only the kernels that read the result
// need AVX2).
#include "backend/cpu/quant_pack.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/quant_blocks.h"
#include "base/bf16.h"

namespace tern::cpu {
namespace {

// The 8 rows' copies of one byte array (`len` bytes at `offset` in each
// row's block, nullptr rows read as zeros), in 4-byte units.
void interleave(const uint8_t* const* rows, int64_t offset, int len, uint8_t* out) {
  for (int u = 0; u < len / 4; ++u) {
    for (int r = 0; r < kPackRows; ++r, out += 4) {
      if (rows[r] != nullptr) {
        std::memcpy(out, rows[r] + offset + 4 * u, 4);
      } else {
        std::memset(out, 0, 4);
      }
    }
  }
}

// The fp16 field at `offset` of each row's block, in row order.
void gather_u16(const uint8_t* const* rows, int64_t offset, uint8_t* out) {
  for (int r = 0; r < kPackRows; ++r, out += 2) {
    if (rows[r] != nullptr) {
      std::memcpy(out, rows[r] + offset, 2);
    } else {
      std::memset(out, 0, 2);
    }
  }
}

void pack_q8_0(const uint8_t* const* rows, uint8_t* out) {
  gather_u16(rows, offsetof(BlockQ8_0, d), out);
  interleave(rows, offsetof(BlockQ8_0, qs), kQK8_0, out + 16);
}

void pack_q4_0(const uint8_t* const* rows, uint8_t* out) {
  gather_u16(rows, offsetof(BlockQ4_0, d), out);
  interleave(rows, offsetof(BlockQ4_0, qs), kQK8_0 / 2, out + 16);
}

// Q4_K and Q5_K share the head: d, dmin, then scales and mins unpacked to
// bytes, sub-block major.
template <class Block>
void pack_k4_head(const uint8_t* const* rows, uint8_t* out) {
  gather_u16(rows, offsetof(Block, d), out);
  gather_u16(rows, offsetof(Block, dmin), out + 16);
  for (int r = 0; r < kPackRows; ++r) {
    for (int j = 0; j < 8; ++j) {
      uint8_t sc = 0, m = 0;
      if (rows[r] != nullptr) decode_k4_scale(j, reinterpret_cast<const Block*>(rows[r])->scales, &sc, &m);
      out[32 + 8 * j + r] = sc;
      out[96 + 8 * j + r] = m;
    }
  }
}

void pack_q4_k(const uint8_t* const* rows, uint8_t* out) {
  pack_k4_head<BlockQ4K>(rows, out);
  interleave(rows, offsetof(BlockQ4K, qs), kQKK / 2, out + 160);
}

void pack_q5_k(const uint8_t* const* rows, uint8_t* out) {
  pack_k4_head<BlockQ5K>(rows, out);
  interleave(rows, offsetof(BlockQ5K, qs), kQKK / 2, out + 160);
  interleave(rows, offsetof(BlockQ5K, qh), kQKK / 8, out + kPackedQ4KBytes);
}

void pack_q6_k(const uint8_t* const* rows, uint8_t* out) {
  gather_u16(rows, offsetof(BlockQ6K, d), out);
  for (int r = 0; r < kPackRows; ++r) {
    for (int s = 0; s < kQKK / 16; ++s) {
      const int8_t sc = rows[r] != nullptr ? reinterpret_cast<const BlockQ6K*>(rows[r])->scales[s] : 0;
      out[16 + 8 * s + r] = static_cast<uint8_t>(sc);
    }
  }
  interleave(rows, offsetof(BlockQ6K, ql), kQKK / 2, out + 144);
  interleave(rows, offsetof(BlockQ6K, qh), kQKK / 4, out + 144 + 8 * 128);
}

}  // namespace

int64_t packed_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return kPackedQ8_0Bytes;
    case DType::kQ4_0:
      return kPackedQ4_0Bytes;
    case DType::kQ4_K:
      return kPackedQ4KBytes;
    case DType::kQ5_K:
      return kPackedQ5KBytes;
    case DType::kQ6_K:
      return kPackedQ6KBytes;
    default:
      return 0;
  }
}

std::unique_ptr<PackedWeight> pack_weight(const WeightMatrix& w) {
  const int64_t block_bytes = packed_block_bytes(w.dtype);
  if (block_bytes == 0 || w.rows <= 0 || w.cols <= 0) return nullptr;
  void (*pack_block)(const uint8_t* const*, uint8_t*) = nullptr;
  switch (w.dtype) {
    case DType::kQ8_0:
      pack_block = pack_q8_0;
      break;
    case DType::kQ4_0:
      pack_block = pack_q4_0;
      break;
    case DType::kQ4_K:
      pack_block = pack_q4_k;
      break;
    case DType::kQ5_K:
      pack_block = pack_q5_k;
      break;
    default:
      pack_block = pack_q6_k;
      break;
  }
  auto p = std::make_unique<PackedWeight>();
  p->dtype = w.dtype;
  p->rows = w.rows;
  p->cols = w.cols;
  p->blocks = w.cols / dtype_block_size(w.dtype);
  p->groups = (w.rows + kPackRows - 1) / kPackRows;
  p->block_bytes = block_bytes;
  p->data.resize(static_cast<size_t>(p->groups * p->blocks * block_bytes));
  const int64_t in_block = dtype_block_bytes(w.dtype);
  const int64_t in_row = p->blocks * in_block;
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p->groups; ++g) {
    for (int64_t b = 0; b < p->blocks; ++b) {
      const uint8_t* rows[kPackRows];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        rows[r] = row < w.rows ? src + row * in_row + b * in_block : nullptr;
      }
      pack_block(rows, p->data.data() + (g * p->blocks + b) * block_bytes);
    }
  }
  return p;
}

void bf16_panel_row_to_f32(const PackedWeight& p, int64_t row, float* out) {
  const auto* panel = reinterpret_cast<const uint16_t*>(p.data.data()) +
                      (row / kBf16PanelRows) * p.blocks * 2 * kBf16PanelRows + (row % kBf16PanelRows) * 2;
  for (int64_t k = 0; k < p.cols; ++k) out[k] = bf16_to_f32(panel[(k / 2) * 2 * kBf16PanelRows + k % 2]);
}

std::unique_ptr<PackedWeight> pack_bf16_panels(const WeightMatrix& w) {
  if (w.dtype != DType::kBF16 || w.rows <= 0 || w.cols <= 0) return nullptr;
  auto p = std::make_unique<PackedWeight>();
  p->dtype = DType::kBF16;
  p->rows = w.rows;
  p->cols = w.cols;
  p->blocks = (w.cols + 1) / 2;
  p->groups = (w.rows + kBf16PanelRows - 1) / kBf16PanelRows;
  p->block_bytes = 2 * kBf16PanelRows * static_cast<int64_t>(sizeof(uint16_t));
  p->data.assign(static_cast<size_t>(p->groups * p->blocks * p->block_bytes), 0);
  const auto* src = static_cast<const uint16_t*>(w.data);
  auto* dst = reinterpret_cast<uint16_t*>(p->data.data());
  // Panel by panel, its lines written in order from its 16 source rows.
  for (int64_t g = 0; g < p->groups; ++g) {
    const int64_t r0 = g * kBf16PanelRows;
    const int n = static_cast<int>(std::min<int64_t>(kBf16PanelRows, w.rows - r0));
    uint16_t* line = dst + g * p->blocks * 2 * kBf16PanelRows;
    const int64_t whole = w.cols / 2;
    for (int64_t kp = 0; kp < whole; ++kp, line += 2 * kBf16PanelRows) {
      for (int r = 0; r < n; ++r) {
        const uint16_t* pair = src + (r0 + r) * w.cols + 2 * kp;
        line[2 * r] = pair[0];
        line[2 * r + 1] = pair[1];
      }
    }
    if (w.cols % 2 != 0) {
      for (int r = 0; r < n; ++r) line[2 * r] = src[(r0 + r) * w.cols + w.cols - 1];
    }
  }
  return p;
}

}  // namespace tern::cpu
