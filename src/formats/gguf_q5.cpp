#include "formats/gguf_q5.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/bf16.h"

namespace tern {
namespace {

// A block: fp16 scale d, (Q5_1) fp16 minimum m, the 32 fifth bits (bit j of
// a little-endian u32 for value j), then 16 bytes of low nibbles: value j in
// byte j's low half, value j + 16 in its high half.
constexpr int kBlock = 32;

int header_bytes(GgmlType t) { return t == GgmlType::kQ5_0 ? 2 : 4; }

}  // namespace

void dequantize_q5_row(GgmlType type, const uint8_t* b, int64_t n, float* out) {
  const int head = header_bytes(type);
  const int64_t block_bytes = head + 4 + kBlock / 2;
  for (int64_t i = 0; i < n / kBlock; ++i, b += block_bytes, out += kBlock) {
    uint16_t hd, hm = 0;
    std::memcpy(&hd, b, 2);
    if (type == GgmlType::kQ5_1) std::memcpy(&hm, b + 2, 2);
    uint32_t qh;
    std::memcpy(&qh, b + head, 4);
    const uint8_t* qs = b + head + 4;
    const float d = f16_to_f32(hd);
    const float m = type == GgmlType::kQ5_1 ? f16_to_f32(hm) : 0.0f;
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      if (type == GgmlType::kQ5_0) {
        out[j] = static_cast<float>(lo - 16) * d;
        out[j + 16] = static_cast<float>(hi - 16) * d;
      } else {
        out[j] = static_cast<float>(lo) * d + m;
        out[j + 16] = static_cast<float>(hi) * d + m;
      }
    }
  }
}

void quantize_q5_row(GgmlType type, const float* x, int64_t n, uint8_t* b) {
  const int head = header_bytes(type);
  const int64_t block_bytes = head + 4 + kBlock / 2;
  for (int64_t i = 0; i < n / kBlock; ++i, b += block_bytes, x += kBlock) {
    int q[kBlock];
    if (type == GgmlType::kQ5_0) {
      // The value of largest magnitude, sign kept, maps to -16.
      float max = 0.0f, amax = 0.0f;
      for (int j = 0; j < kBlock; ++j) {
        if (std::fabs(x[j]) > amax) {
          amax = std::fabs(x[j]);
          max = x[j];
        }
      }
      const float d = max / -16.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int j = 0; j < kBlock; ++j) q[j] = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const uint16_t hd = f32_to_f16(d);
      std::memcpy(b, &hd, 2);
    } else {
      // 31 steps from the block's minimum to its maximum.
      float lo = x[0], hi = x[0];
      for (int j = 1; j < kBlock; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
      }
      const float d = (hi - lo) / 31.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int j = 0; j < kBlock; ++j) q[j] = static_cast<uint8_t>((x[j] - lo) * id + 0.5f);
      const uint16_t hd = f32_to_f16(d), hm = f32_to_f16(lo);
      std::memcpy(b, &hd, 2);
      std::memcpy(b + 2, &hm, 2);
    }
    uint32_t qh = 0;
    uint8_t* qs = b + head + 4;
    for (int j = 0; j < kBlock / 2; ++j) {
      qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    std::memcpy(b + head, &qh, 4);
  }
}

}  // namespace tern
