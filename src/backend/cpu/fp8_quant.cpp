// The e4m3 conversions by arithmetic on exact fp32 values (frexp, ldexp,
// nearbyint in the default round-to-nearest-even mode), and the per-row
// quantizer built on them.
#include "backend/cpu/fp8_quant.h"

#include <cmath>
#include <string>


namespace tern::cpu {

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormals, steps of 2^-9 (8 steps reach 2^-6 = code 0x08)
    const auto m = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(m);
  }
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1
  int exponent = e - 1;
  auto m = static_cast<int>(std::nearbyint((std::ldexp(a, -exponent) - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exponent;
  }
  // a < 448 rounds to at most 448 (exponent 8, mantissa 6): never the NaN code.
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | m);
}

float e4m3_to_f32(uint8_t bits) {
  const int e = (bits >> 3) & 0xf, m = bits & 0x7;
  if (e == 0xf && m == 0x7) return std::nanf("");
  const float a = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (bits & 0x80) != 0 ? -a : a;
}

Status quantize_fp8_row(const float* x, int64_t n, uint8_t* q, float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return invalid_argument("value " + std::to_string(i) + " is not finite");
    amax = std::fmax(amax, std::fabs(x[i]));
  }
  if (amax == 0.0f) {
    *scale = 0.0f;
    for (int64_t i = 0; i < n; ++i) q[i] = 0;
    return Status::ok();
  }
  const float s = amax / kFp8E4m3Max;
  *scale = s;
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_e4m3(x[i] / s);
  return Status::ok();
}

void dequantize_fp8_row(const uint8_t* q, float scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(q[i]) * scale;
}

Result<Fp8Matrix> quantize_fp8_matrix(const WeightMatrix& w, const std::string& what) {
  if (!is_weight_dtype(w.dtype)) {
    return unsupported("--quantization fp8 quantizes float weights (bf16, f16, f32); " + what +
                       " is stored quantized already");
  }
  if (w.rows < 0 || w.cols < 0) return invalid_argument(what + ": negative shape");
  Fp8Matrix out;
  out.rows = w.rows;
  out.cols = w.cols;
  out.values.resize(static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols));
  out.scales.resize(static_cast<size_t>(w.rows));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    weight_row_to_f32(w, r, row.data());
    Status s = quantize_fp8_row(row.data(), w.cols, out.values.data() + r * w.cols, &out.scales[static_cast<size_t>(r)]);
    if (!s.is_ok()) return invalid_argument(what + " row " + std::to_string(r) + ": " + s.message());
  }
  return out;
}

}  // namespace tern::cpu
