// The reference quantizers' error and the reference kernels on quantized
// matrices.
//  - Q8_0: every element within 0.57 d of its input (d = max|x| / 127 per
//    block: half a step plus the fp16 rounding of d over 127 steps);
//    Q4_0 within 1.01 |d| (d = max|x| / 8; the side opposite the largest
//    element clamps at +7, a full step).
//  - K-quants (no per-element bound: the fit trades steps for range): RMS
//    error over RMS input of Gaussian rows (with outliers) below 0.085 (Q4_K), 0.043 (Q5_K),
//    0.023 (Q6_K) (measured 0.079, 0.040, 0.021), and below what a plain min/max (Q4_K/Q5_K) or max|x|
//    (Q6_K) rule achieves on the same rows (the least-squares fit pays).
//  - linear / weight_row_to_f32 / embedding_lookup on a quantized matrix give
//    bit for bit what they give on the dequantized fp32 matrix.
#include "backend/cpu/quant_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"
#include "quant_test_util.h"

namespace tern::cpu {
namespace {

using quant_test::gaussian;
using quant_test::make_quant;
using quant_test::name;

std::vector<float> round_trip(DType dtype, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> blocks(static_cast<size_t>(row_bytes(dtype, n)));
  quantize_row(dtype, x.data(), n, blocks.data());
  std::vector<float> y(x.size());
  dequantize_row(dtype, blocks.data(), n, y.data());
  return y;
}

double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(QuantReference, Q8_0AndQ4_0ElementBounds) {
  std::mt19937 rng(7);
  std::vector<float> x = gaussian(rng, 32 * 200);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;  // outliers in some blocks
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    const std::vector<float> y = round_trip(dtype, x);
    const float steps = dtype == DType::kQ8_0 ? 127.0f : 8.0f;
    const float bound = dtype == DType::kQ8_0 ? 0.57f : 1.01f;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0.0f;
      for (size_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), bound * amax / steps) << name(dtype) << " element " << i;
      }
    }
  }
}

// The naive rules the fitted K-quants must beat, on one 256-element block
// expressed as dequantized values with the same 6/8-bit scale storage
// ignored (an upper bound on what min/max alone could reach).
double naive_rms(DType dtype, const std::vector<float>& x) {
  const int sub = dtype == DType::kQ6_K ? 16 : 32;
  const int nmax = dtype == DType::kQ4_K ? 15 : 31;
  double err = 0, ref = 0;
  for (size_t s = 0; s < x.size(); s += static_cast<size_t>(sub)) {
    float lo = 0.0f, hi = x[s], amax = 0.0f;
    for (int i = 0; i < sub; ++i) {
      lo = std::min(lo, x[s + i]);
      hi = std::max(hi, x[s + i]);
      amax = std::max(amax, std::fabs(x[s + i]));
    }
    for (int i = 0; i < sub; ++i) {
      float v = x[s + i], r;
      if (dtype == DType::kQ6_K) {
        const float step = amax / 31.0f;
        r = step * std::round(v / step);
      } else {
        const float step = (hi - lo) / static_cast<float>(nmax);
        r = lo + step * std::round((v - lo) / step);
      }
      err += (v - r) * (v - r);
      ref += static_cast<double>(v) * v;
    }
  }
  return std::sqrt(err / ref);
}

TEST(QuantReference, KQuantRoundTripErrors) {
  std::mt19937 rng(11);
  std::vector<float> x = gaussian(rng, 256 * 64, 0.02f);
  for (size_t i = 0; i < x.size(); i += 331) x[i] *= 8.0f;
  const std::pair<DType, double> bounds[] = {{DType::kQ4_K, 0.085}, {DType::kQ5_K, 0.043}, {DType::kQ6_K, 0.023}};
  for (const auto& [dtype, bound] : bounds) {
    const double err = relative_rms_error(x, round_trip(dtype, x));
    EXPECT_LT(err, bound) << name(dtype);
    EXPECT_LT(err, naive_rms(dtype, x)) << name(dtype);
    std::printf("%s: relative RMS error %.4f (min/max rule %.4f)\n", name(dtype).c_str(), err, naive_rms(dtype, x));
  }
}

TEST(QuantReference, ZerosAndConstantsStayExact) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    std::vector<float> zeros(512, 0.0f);
    for (float v : round_trip(dtype, zeros)) ASSERT_EQ(v, 0.0f) << name(dtype);
  }
  // A sub-block of equal positive values: K-quants hit them to fp16 precision.
  std::vector<float> ones(256, 0.75f);
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (float v : round_trip(dtype, ones)) ASSERT_NEAR(v, 0.75f, 0.75f * 2e-3f) << name(dtype);
  }
}

TEST(QuantReference, Q8KBlockSums) {
  std::mt19937 rng(3);
  const std::vector<float> x = gaussian(rng, 512);
  std::vector<BlockQ8K> q(2);
  quantize_row_q8_k(x.data(), 512, q.data());
  for (const BlockQ8K& b : q) {
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * s + i];
      EXPECT_EQ(b.bsums[s], sum);
    }
  }
  const std::vector<float> y = round_trip(DType::kQ8_K, x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(x[i] - y[i]), 0.5001f * q[i / 256].d);
}

TEST(QuantReference, KernelsOnQuantizedMatrixEqualDequantizedFp32) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    ASSERT_TRUE(is_quantized_weight_dtype(dtype));
    const int64_t cols = dtype_block_size(dtype) * 3, rows = 37, tokens = 35;
    const quant_test::QuantMatrix m = make_quant(rng, dtype, rows, cols);
    const std::vector<float> x = gaussian(rng, static_cast<size_t>(tokens * cols));
    std::vector<float> yq(static_cast<size_t>(tokens * rows)), yf(yq.size()), yp(yq.size());
    linear(pool, x.data(), tokens, m.view(), yq.data());
    linear_portable(pool, x.data(), tokens, m.view(), yp.data());
    linear(pool, x.data(), tokens, m.f32_view(), yf.data());
    EXPECT_EQ(yq, yf) << name(dtype);
    EXPECT_EQ(yp, yf) << name(dtype);
    std::vector<float> row(static_cast<size_t>(cols));
    weight_row_to_f32(m.view(), 36, row.data());
    EXPECT_EQ(row, std::vector<float>(m.values.begin() + 36 * cols, m.values.end())) << name(dtype);
    const int32_t ids[] = {4, 0, 36};
    std::vector<float> emb(static_cast<size_t>(3 * cols));
    embedding_lookup(m.view(), ids, emb.data());
    EXPECT_TRUE(std::equal(emb.begin(), emb.begin() + cols, m.values.begin() + 4 * cols)) << name(dtype);
  }
  EXPECT_FALSE(is_quantized_weight_dtype(DType::kQ8_K));
  EXPECT_FALSE(is_quantized_weight_dtype(DType::kBF16));
}

}  // namespace
}  // namespace tern::cpu
