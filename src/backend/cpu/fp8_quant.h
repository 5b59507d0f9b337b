// FP8 e4m3 weights with one fp32 scale per output row (--quantization fp8):
// the one quantizer every backend uses, so the CPU reference and the GPU
// kernels compute with exactly the same values, e4m3(q) * scale in fp32.
// e4m3 is the OCP / NVIDIA format (__nv_fp8_e4m3): 1 sign, 4 exponent bits
// (bias 7), 3 mantissa bits, subnormals, no infinities, 0x7f / 0xff NaN,
// largest finite value 448.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"

namespace tern::cpu {

// One row of n values: scale = amax / 448 (fp32), q[i] = e4m3(x[i] / scale)
// (f32_to_fp8_e4m3: nearest, ties to even, saturating at +-448).
// A row of zeros gets scale 0 and zero codes. Non-finite input is an error.
Status quantize_fp8_row(const float* x, int64_t n, uint8_t* q, float* scale);
// out[i] = fp8_e4m3_to_f32(q[i]) * scale (fp32): the values the kernels compute with.
void dequantize_fp8_row(const uint8_t* q, float scale, int64_t n, float* out);

// A whole matrix in PyTorch [rows = out, cols = in] layout, row r's codes at
// values[r * cols ...] and its scale at scales[r].
struct Fp8Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> values;
  std::vector<float> scales;
};
// Quantizes any float weight matrix (F32, F16, BF16). Errors: a block-quantized
// dtype (already quantized), a non-finite weight (naming `what` and the row).
Result<Fp8Matrix> quantize_fp8_matrix(const WeightMatrix& w, const std::string& what);

}  // namespace tern::cpu
