// The per-row FP8 quantizer, on base/fp8_e4m3.h's conversions (the KV
// cache's too).
#include "backend/cpu/fp8_quant.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  // Rows in contiguous ranges on a few threads (a model's matrices hold
  // hundreds of millions of weights); each range stops at its first bad
  // row, and the lowest bad row is the one reported.
  constexpr int64_t kRowsPerThread = 512;
  const auto hardware = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t parts = std::clamp<int64_t>(w.rows / kRowsPerThread, 1, std::min<int64_t>(hardware, 16));
  std::vector<int64_t> bad_row(static_cast<size_t>(parts), -1);
  std::vector<Status> bad_status(static_cast<size_t>(parts), Status::ok());
  const auto run = [&](int64_t part) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    const int64_t begin = w.rows * part / parts, end = w.rows * (part + 1) / parts;
    for (int64_t r = begin; r < end; ++r) {
      weight_row_to_f32(w, r, row.data());
      Status s = quantize_fp8_row(row.data(), w.cols, out.values.data() + r * w.cols, &out.scales[static_cast<size_t>(r)]);
      if (!s.is_ok()) {
        bad_row[static_cast<size_t>(part)] = r;
        bad_status[static_cast<size_t>(part)] = std::move(s);
        return;
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int64_t part = 1; part < parts; ++part) threads.emplace_back(run, part);
    run(0);
  }
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t r = bad_row[static_cast<size_t>(part)];
    if (r >= 0) return invalid_argument(what + " row " + std::to_string(r) + ": " + bad_status[static_cast<size_t>(part)].message());
  }
  return out;
}

}  // namespace tern::cpu
