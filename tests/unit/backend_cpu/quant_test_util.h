// Helpers shared by the quantized-kernel tests (tern_backend_cpu does not
// link tern_formats, so the dtype names are spelled here).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_reference.h"
#include "backend/cpu/reference_kernels.h"

namespace tern::cpu::quant_test {

inline std::string name(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_K:
      return "Q4_K";
    case DType::kQ5_K:
      return "Q5_K";
    case DType::kQ6_K:
      return "Q6_K";
    case DType::kQ8_K:
      return "Q8_K";
    default:
      return "dtype " + std::to_string(static_cast<int>(dtype));
  }
}

inline std::vector<float> gaussian(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A quantized matrix and the fp32 matrix of its dequantized values.
struct QuantMatrix {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
  WeightMatrix view() const { return {dtype, blocks.data(), rows, cols}; }
  WeightMatrix f32_view() const { return {DType::kF32, values.data(), rows, cols}; }
};

inline QuantMatrix make_quant(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  const std::vector<float> w = gaussian(rng, static_cast<size_t>(rows * cols), 0.05f);
  QuantMatrix m{dtype, rows, cols, {}, std::vector<float>(w.size())};
  const int64_t stride = row_bytes(dtype, cols);
  m.blocks.resize(static_cast<size_t>(rows * stride));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(dtype, w.data() + r * cols, cols, m.blocks.data() + r * stride);
    dequantize_row(dtype, m.blocks.data() + r * stride, cols, m.values.data() + r * cols);
  }
  return m;
}

}  // namespace tern::cpu::quant_test
