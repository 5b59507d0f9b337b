// The per-row FP8 quantizer, on base/fp8_e4m3.h's conversions (the KV
// cache's too).
#include "backend/cpu/fp8_quant.h"

#include <cmath>
#include <string>

#include "base/fp8_e4m3.h"


namespace tern::cpu {

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
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_fp8_e4m3(x[i] / s);
  return Status::ok();
}

void dequantize_fp8_row(const uint8_t* q, float scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_f32(q[i]) * scale;
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
