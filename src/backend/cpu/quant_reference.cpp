// Reference quantizers and dequantizers (the rules are in quant_reference.h).
// Byte-exactness with gguf-py matters only for Q8_0/Q4_0; there every
// multiply and add is written as ggml writes it, in fp32, and this file is
// built for baseline x86-64 without FMA, so nothing is fused.
#include "backend/cpu/quant_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/bf16.h"

namespace tern::cpu {
namespace {

inline float fp16(uint16_t h) { return f16_to_f32(h); }

// The element of x[0..n) with the largest magnitude, with its sign (the
// first one on ties, as ggml).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

int round_clamp(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }

// x ~ s q - m over one sub-block, q in [0, nmax], s >= 0, m >= 0.
struct AffineFit {
  float scale = 0.0f;
  float min = 0.0f;  // subtracted: x = scale q - min
};

float affine_error(const float* x, int n, int nmax, float scale, float min, uint8_t* q) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int qi = scale > 0.0f ? round_clamp((x[i] + min) / scale, 0, nmax) : 0;
    q[i] = static_cast<uint8_t>(qi);
    const float e = x[i] - (scale * static_cast<float>(qi) - min);
    err += e * e;
  }
  return err;
}

// Least-squares (scale, min) for fixed q; min is held at >= 0 (the format
// can only subtract).
AffineFit refit_affine(const float* x, int n, const uint8_t* q) {
  double sq = 0, sqq = 0, sx = 0, sxq = 0;
  for (int i = 0; i < n; ++i) {
    sq += q[i];
    sqq += static_cast<double>(q[i]) * q[i];
    sx += x[i];
    sxq += static_cast<double>(x[i]) * q[i];
  }
  const double det = n * sqq - sq * sq;
  if (det <= 0) return {};
  double s = (n * sxq - sq * sx) / det;
  double b = (sx - s * sq) / n;  // x ~ s q + b
  if (b > 0) {
    b = 0;
    s = sqq > 0 ? sxq / sqq : 0;
  }
  if (s < 0) return {};
  return {static_cast<float>(s), static_cast<float>(-b)};
}

AffineFit fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = x[0];  // lo starts at 0: the offset can only be <= 0
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  AffineFit best{0.0f, -lo};
  uint8_t q[kQKK];
  if (hi <= lo) return best;
  float best_err = affine_error(x, n, nmax, best.scale, best.min, q);
  for (float delta : {0.0f, -1.0f, -0.5f, 0.5f, 1.0f}) {
    AffineFit fit{(hi - lo) / (static_cast<float>(nmax) + delta), -lo};
    for (int iter = 0; iter < 3; ++iter) {
      const float err = affine_error(x, n, nmax, fit.scale, fit.min, q);
      if (err < best_err) {
        best_err = err;
        best = fit;
      }
      if (iter < 2) fit = refit_affine(x, n, q);
    }
  }
  return best;
}

// x ~ s (q - 32) over one Q6_K sub-block, q - 32 in [-32, 31].
float symmetric_error(const float* x, int n, float scale, int* q) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = scale != 0.0f ? round_clamp(x[i] / scale, -32, 31) : 0;
    const float e = x[i] - scale * static_cast<float>(q[i]);
    err += e * e;
  }
  return err;
}

float fit_symmetric(const float* x, int n) {
  const float max = signed_absmax(x, n);
  if (max == 0.0f) return 0.0f;
  int q[16];
  float best = max / -32.0f, best_err = symmetric_error(x, n, best, q);
  for (float delta : {-1.0f, -0.5f, 0.5f, 1.0f}) {
    float scale = max / (-32.0f + delta);
    for (int iter = 0; iter < 3; ++iter) {
      const float err = symmetric_error(x, n, scale, q);
      if (err < best_err) {
        best_err = err;
        best = scale;
      }
      double sxq = 0, sqq = 0;
      for (int i = 0; i < n; ++i) {
        sxq += static_cast<double>(x[i]) * q[i];
        sqq += static_cast<double>(q[i]) * q[i];
      }
      if (sqq == 0) break;
      scale = static_cast<float>(sxq / sqq);
    }
  }
  return best;
}

// Packs 8 six-bit scales and mins the way decode_k4_scale reads them.
void pack_k4_scales(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// The Q4_K/Q5_K super-block: fits the 8 sub-blocks, stores d, dmin and the
// 6-bit scales, and writes each element's q in [0, nmax] to `q`.
void quantize_k4_super_block(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales,
                             uint8_t* q) {
  AffineFit fits[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fits[j] = fit_affine(x + 32 * j, 32, nmax);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, fits[j].min);
  }
  const uint16_t d_bits = f32_to_f16(max_scale / 63.0f);
  const uint16_t dmin_bits = f32_to_f16(max_min / 63.0f);
  const float d = fp16(d_bits), dmin = fp16(dmin_bits);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0.0f ? round_clamp(fits[j].scale / d, 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0.0f ? round_clamp(fits[j].min / dmin, 0, 63) : 0);
  }
  *d_out = d_bits;
  *dmin_out = dmin_bits;
  pack_k4_scales(sc, m, scales);
  for (int j = 0; j < 8; ++j) {
    const float s = d * sc[j], mn = dmin * m[j];
    for (int i = 0; i < 32; ++i) {
      q[32 * j + i] = static_cast<uint8_t>(s > 0.0f ? round_clamp((x[32 * j + i] + mn) / s, 0, nmax) : 0);
    }
  }
}

}  // namespace

void quantize_row_q8_0(const float* x, int64_t n, BlockQ8_0* y) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int i = 0; i < kQK8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::round(x[i] * id));
  }
}

void quantize_row_q4_0(const float* x, int64_t n, BlockQ4_0* y) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    const float d = signed_absmax(x, kQK8_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK8_0 / 2; ++i) {
      const float x0 = x[i] * id;
      const float x1 = x[i + 16] * id;
      const auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(std::trunc(x0 + 8.5f))));
      const auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(std::trunc(x1 + 8.5f))));
      y[b].qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_k(const float* x, int64_t n, BlockQ4K* y) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    quantize_k4_super_block(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l)
        y[b].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
  }
}

void quantize_row_q5_k(const float* x, int64_t n, BlockQ5K* y) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    quantize_k4_super_block(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] = static_cast<uint8_t>(y[b].qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_row_q6_k(const float* x, int64_t n, BlockQ6K* y) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float scales[16];
    float max_scale = 0.0f, amax = 0.0f;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_symmetric(x + 16 * s, 16);
      if (std::fabs(scales[s]) > amax) {
        amax = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    BlockQ6K& out = y[b];
    std::memset(&out, 0, sizeof(out));
    const float iscale = max_scale != 0.0f ? -128.0f / max_scale : 0.0f;
    out.d = f32_to_f16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
    const float d = fp16(out.d);
    uint8_t q[kQKK];
    for (int s = 0; s < 16; ++s) {
      out.scales[s] = static_cast<int8_t>(round_clamp(iscale * scales[s], -128, 127));
      const float step = d * out.scales[s];
      for (int i = 0; i < 16; ++i) {
        const int qi = step != 0.0f ? round_clamp(x[16 * s + i] / step, -32, 31) : 0;
        q[16 * s + i] = static_cast<uint8_t>(qi + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qh_src = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = qh_src[l], q1 = qh_src[l + 32], q2 = qh_src[l + 64], q3 = qh_src[l + 96];
        out.ql[64 * h + l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
        out.ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        out.qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_k(const float* x, int64_t n, BlockQ8K* y) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = amax != 0.0f ? 1.0f / id : 0.0f;
    for (int i = 0; i < kQKK; ++i) y[b].qs[i] = static_cast<int8_t>(round_clamp(x[i] * id, -127, 127));
    for (int s = 0; s < kQKK / 16; ++s) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * s + i];
      y[b].bsums[s] = static_cast<int16_t>(sum);
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, y += kQK8_0) {
    const float d = fp16(x[b].d);
    for (int i = 0; i < kQK8_0; ++i) y[i] = static_cast<float>(x[b].qs[i]) * d;
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, y += kQK8_0) {
    const float d = fp16(x[b].d);
    for (int i = 0; i < kQK8_0 / 2; ++i) {
      y[i] = d * static_cast<float>((x[b].qs[i] & 0xF) - 8);
      y[i + 16] = d * static_cast<float>((x[b].qs[i] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_k(const BlockQ4K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = fp16(x[b].d), dmin = fp16(x[b].dmin);
    for (int c = 0; c < 4; ++c, y += 64) {
      uint8_t sc0, m0, sc1, m1;
      decode_k4_scale(2 * c, x[b].scales, &sc0, &m0);
      decode_k4_scale(2 * c + 1, x[b].scales, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      const uint8_t* q = x[b].qs + 32 * c;
      for (int l = 0; l < 32; ++l) y[l] = d0 * static_cast<float>(q[l] & 0xF) - min0;
      for (int l = 0; l < 32; ++l) y[l + 32] = d1 * static_cast<float>(q[l] >> 4) - min1;
    }
  }
}

void dequantize_row_q5_k(const BlockQ5K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = fp16(x[b].d), dmin = fp16(x[b].dmin);
    for (int c = 0; c < 4; ++c, y += 64) {
      uint8_t sc0, m0, sc1, m1;
      decode_k4_scale(2 * c, x[b].scales, &sc0, &m0);
      decode_k4_scale(2 * c + 1, x[b].scales, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      const uint8_t* q = x[b].qs + 32 * c;
      const uint8_t* qh = x[b].qh;
      for (int l = 0; l < 32; ++l) {
        const int hi0 = (qh[l] >> (2 * c)) & 1, hi1 = (qh[l] >> (2 * c + 1)) & 1;
        y[l] = d0 * static_cast<float>((q[l] & 0xF) | (hi0 << 4)) - min0;
        y[l + 32] = d1 * static_cast<float>((q[l] >> 4) | (hi1 << 4)) - min1;
      }
    }
  }
}

void dequantize_row_q6_k(const BlockQ6K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = fp16(x[b].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void dequantize_row_q8_k(const BlockQ8K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    for (int i = 0; i < kQKK; ++i) y[i] = x[b].d * static_cast<float>(x[b].qs[i]);
  }
}

void quantize_row(DType dtype, const float* x, int64_t n, void* y) {
  switch (dtype) {
    case DType::kQ8_0:
      return quantize_row_q8_0(x, n, static_cast<BlockQ8_0*>(y));
    case DType::kQ4_0:
      return quantize_row_q4_0(x, n, static_cast<BlockQ4_0*>(y));
    case DType::kQ4_K:
      return quantize_row_q4_k(x, n, static_cast<BlockQ4K*>(y));
    case DType::kQ5_K:
      return quantize_row_q5_k(x, n, static_cast<BlockQ5K*>(y));
    case DType::kQ6_K:
      return quantize_row_q6_k(x, n, static_cast<BlockQ6K*>(y));
    case DType::kQ8_K:
      return quantize_row_q8_k(x, n, static_cast<BlockQ8K*>(y));
    default:
      return;
  }
}

void dequantize_row(DType dtype, const void* x, int64_t n, float* y) {
  switch (dtype) {
    case DType::kQ8_0:
      return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(x), n, y);
    case DType::kQ4_0:
      return dequantize_row_q4_0(static_cast<const BlockQ4_0*>(x), n, y);
    case DType::kQ4_K:
      return dequantize_row_q4_k(static_cast<const BlockQ4K*>(x), n, y);
    case DType::kQ5_K:
      return dequantize_row_q5_k(static_cast<const BlockQ5K*>(x), n, y);
    case DType::kQ6_K:
      return dequantize_row_q6_k(static_cast<const BlockQ6K*>(x), n, y);
    case DType::kQ8_K:
      return dequantize_row_q8_k(static_cast<const BlockQ8K*>(x), n, y);
    default:
      return;
  }
}

int64_t row_bytes(DType dtype, int64_t cols) {
  const int64_t block = dtype_block_size(dtype);
  if (cols < 0 || cols % block != 0) return -1;
  return cols / block * dtype_block_bytes(dtype);
}

}  // namespace tern::cpu
