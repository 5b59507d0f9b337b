// linear_fast on quantized weights (AVX2 and portable kernels) against the
// reference cpu::linear on the dequantized fp32 weights, with random shapes
// (odd T and N; K multiples of the block size, 256 and up for K-quants) and
// 1 and 2 threads. Per output y[t, n], with S = sum_k |x[t,k]| |w[n,k]| over
// the dequantized weights and the activations as given:
//  - against the reference on the activations rounded as the kernels round
//    them (x^ = d_x q, d_x = max|x| / 127 per 32 (Q8_0, Q4_0) or 256
//    (K-quants) elements, q to nearest even): only fp32 summation order
//    differs, so |y - y_ref(x^)| <= (K/8 + 64) 2^-24 S;
//  - against the reference on x itself (what a caller gets): additionally the
//    activation rounding, at most sum_blocks d_x/2 sum_block |w|;
//  - AVX2 (on the matrix as given and on its packed copy, quant_pack.h) and
//    portable kernels agree within the first bound, and each gives the same
//    bits on 1 and 2 threads and for a token alone or in a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"
#include "quant_test_util.h"

namespace tern::cpu {
namespace {

using quant_test::gaussian;
using quant_test::make_quant;
using quant_test::name;
using quant_test::QuantMatrix;

struct Shape {
  int64_t tokens, blocks, rows;  // T, K / block size, N
};

// T: decode, the 4-token tile and its tails, both sides of the 512-bit
// pairs' threshold (8 and 9 tokens on AVX512-VNNI), many tiles; N odd and even.
const Shape kShapes[] = {
    {1, 1, 1},  {1, 4, 97},  {1, 12, 33}, {2, 3, 13},  {3, 5, 50},   {5, 1, 7},    {5, 4, 129},
    {8, 4, 33}, {9, 3, 50},  {17, 2, 31}, {33, 12, 9}, {130, 3, 21}, {341, 16, 19},
};

// x rounded as the kernels round it, per `block` elements.
std::vector<float> round_activations(const std::vector<float>& x, int64_t block) {
  std::vector<float> r(x.size());
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    float amax = 0.0f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    for (int64_t i = 0; i < block; ++i) r[b + i] = d * std::nearbyint(x[b + i] * id);
  }
  return r;
}

struct Bounds {
  std::vector<double> summation;  // (K/8 + 64) 2^-24 S
  std::vector<double> rounding;   // sum_blocks d_x/2 sum|w|
};

Bounds bounds(const std::vector<float>& x, const QuantMatrix& w, int64_t tokens, int64_t act_block) {
  Bounds b{std::vector<double>(static_cast<size_t>(tokens * w.rows)),
           std::vector<double>(static_cast<size_t>(tokens * w.rows))};
  const int64_t k_len = w.cols;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double s = 0, r = 0;
      for (int64_t k0 = 0; k0 < k_len; k0 += act_block) {
        double amax = 0, wsum = 0;
        for (int64_t k = k0; k < k0 + act_block; ++k) {
          const double xa = std::fabs(x[t * k_len + k]), wa = std::fabs(w.values[n * k_len + k]);
          s += xa * wa;
          amax = std::max(amax, xa);
          wsum += wa;
        }
        r += amax / 127.0 * 0.5001 * wsum;
      }
      b.summation[t * w.rows + n] = (k_len / 8.0 + 64) * std::ldexp(1.0, -24) * (s + r);
      b.rounding[t * w.rows + n] = r;
    }
  }
  return b;
}

void expect_within(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& tol,
                   const std::vector<double>* extra, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double allowed = tol[i] + (extra != nullptr ? (*extra)[i] : 0.0);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= allowed)) {
      ++failures;
      ADD_FAILURE() << what << " output " << i << ": " << got[i] << " vs " << want[i] << " (allowed " << allowed << ")";
    }
  }
}

class QuantLinear : public ::testing::TestWithParam<DType> {};

TEST_P(QuantLinear, FastMatchesReferenceOnDequantizedWeights) {
  const DType dtype = GetParam();
  const int64_t block = dtype_block_size(dtype);
  if (best_cpu_isa() < CpuIsa::kAvx2) std::printf("no AVX2 on this CPU: portable kernels only\n");
  std::mt19937 rng(static_cast<unsigned>(block) * 31 + static_cast<unsigned>(dtype));
  ThreadPool pool1(1), pool2(2);
  for (const Shape& s : kShapes) {
    const int64_t cols = s.blocks * block;
    const QuantMatrix w = make_quant(rng, dtype, s.rows, cols);
    std::vector<float> x = gaussian(rng, static_cast<size_t>(s.tokens * cols));
    for (size_t i = 0; i < x.size(); i += 101) x[i] *= 10.0f;  // outliers stretch some blocks
    const std::vector<float> x_hat = round_activations(x, block);
    const Bounds b = bounds(x, w, s.tokens, block);
    const std::string where =
        name(dtype) + " T=" + std::to_string(s.tokens) + " K=" + std::to_string(cols) + " N=" + std::to_string(s.rows);

    const size_t out = static_cast<size_t>(s.tokens * s.rows);
    std::vector<float> ref_x(out), ref_x_hat(out);
    linear(pool1, x.data(), s.tokens, w.f32_view(), ref_x.data());
    linear(pool1, x_hat.data(), s.tokens, w.f32_view(), ref_x_hat.data());

    // The AVX2 GEMM reads the packed copy (rows in groups of 8, the last one padded).
    const std::unique_ptr<PackedWeight> packed = pack_weight(w.view());
    ASSERT_NE(packed, nullptr);
    WeightMatrix packed_view = w.view();
    packed_view.packed = packed.get();

    // Paths: portable, AVX2, AVX2 on the packed copy, and the packed copy
    // with AVX-512 allowed (vpdpbusd where the CPU has AVX512-VNNI).
    std::vector<std::vector<float>> results;
    std::vector<float> packed_avx2;
    for (int path_index = 0; path_index < 4; ++path_index) {
      const CpuIsa isa = path_index == 0 ? CpuIsa::kPortable : path_index == 3 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
      if (isa != CpuIsa::kPortable && best_cpu_isa() < isa) continue;
      const WeightMatrix view = path_index >= 2 ? packed_view : w.view();
      const char* names[] = {" portable", " avx2", " avx2 packed", " avx512 packed"};
      const std::string path = where + names[path_index];
      std::vector<float> y1(out), y2(out, -7.0f);
      linear_fast(pool1, x.data(), s.tokens, view, y1.data(), {.max_isa = isa});
      linear_fast(pool2, x.data(), s.tokens, view, y2.data(), {.max_isa = isa});
      EXPECT_EQ(y1, y2) << path << ": 1 vs 2 threads";
      expect_within(y1, ref_x_hat, b.summation, nullptr, path + " vs reference(x^)");
      expect_within(y1, ref_x, b.summation, &b.rounding, path + " vs reference(x)");
      // Every token alone gives the bits it got in the batch (each tile
      // position and tail), and so does the last token of any shorter batch.
      for (int64_t t = 0; t < std::min<int64_t>(s.tokens, 9); ++t) {
        std::vector<float> alone(static_cast<size_t>(s.rows));
        linear_fast(pool2, x.data() + t * cols, 1, view, alone.data(), {.max_isa = isa});
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y1.begin() + t * s.rows)) << path << " token " << t;
      }
      std::vector<float> alone(static_cast<size_t>(s.rows));
      linear_fast(pool2, x.data() + (s.tokens - 1) * cols, 1, view, alone.data(), {.max_isa = isa});
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y1.begin() + (s.tokens - 1) * s.rows)) << path;
      // The VNNI kernels' integer sums are the vpmaddubsw ones exactly.
      if (path_index == 2) packed_avx2 = y1;
      if (path_index == 3) {
        EXPECT_EQ(y1, packed_avx2) << path << " vs avx2 packed";
      }
      results.push_back(std::move(y1));
    }
    for (size_t i = 1; i < results.size(); ++i) {
      expect_within(results[i], results[0], b.summation, nullptr, where + " avx2 vs portable");
    }
    // With the ISA capped at portable, a packed matrix is read as it was given.
    std::vector<float> capped(out);
    linear_fast(pool2, x.data(), s.tokens, packed_view, capped.data(), {.max_isa = CpuIsa::kPortable});
    EXPECT_EQ(capped, results[0]) << where;
  }
}

// The model's shapes at decode and a short prefill, through the optimized
// kernel set (what the CPU forward calls).
TEST_P(QuantLinear, OptimizedKernelSetRunsModelShapes) {
  const DType dtype = GetParam();
  std::mt19937 rng(99);
  ThreadPool pool(2);
  for (const auto& [cols, rows] : {std::pair<int64_t, int64_t>{1024, 1280}, {3072, 1024}}) {
    const QuantMatrix w = make_quant(rng, dtype, rows, cols);
    for (int64_t tokens : {1, 7}) {
      const std::vector<float> x = gaussian(rng, static_cast<size_t>(tokens * cols));
      const Bounds b = bounds(x, w, tokens, dtype_block_size(dtype));
      std::vector<float> y(static_cast<size_t>(tokens * rows)), ref(y.size()), y_packed(y.size());
      optimized_kernel_set().linear(pool, x.data(), tokens, w.view(), y.data());
      // What the model does at load: the set's packed copy, read by the same linear.
      const std::unique_ptr<PackedWeight> packed = optimized_kernel_set().pack(w.view());
      EXPECT_EQ(packed != nullptr, best_cpu_isa() >= CpuIsa::kAvx2);
      WeightMatrix packed_view = w.view();
      packed_view.packed = packed.get();
      optimized_kernel_set().linear(pool, x.data(), tokens, packed_view, y_packed.data());
      reference_kernel_set().linear(pool, x.data(), tokens, w.f32_view(), ref.data());
      expect_within(y_packed, ref, b.summation, &b.rounding, name(dtype) + " packed K=" + std::to_string(cols));
      expect_within(y, ref, b.summation, &b.rounding, name(dtype) + " K=" + std::to_string(cols));
      // The reference set on the quantized matrix is the dequantized result.
      std::vector<float> ref_q(y.size());
      reference_kernel_set().linear(pool, x.data(), tokens, w.view(), ref_q.data());
      EXPECT_EQ(ref_q, ref) << name(dtype);
    }
  }
}

// linear_many (q|k|v, gate|up in one call) gives the bits of one linear call
// per matrix: packed matrices of one activation family share a call (Q4_K
// with Q6_K, as Q4_K_M mixes them; Q4_0 with Q8_0), others (a mixed family,
// an unpacked matrix) run one by one. The reference set has no linear_many.
TEST(QuantLinearMany, SameBitsAsOneCallPerMatrix) {
  EXPECT_EQ(reference_kernel_set().linear_many, nullptr);
  const KernelSet& set = optimized_kernel_set();
  ASSERT_NE(set.linear_many, nullptr);
  std::mt19937 rng(5);
  ThreadPool pool(2);
  const int64_t cols = 512;
  for (const std::vector<DType>& types :
       {std::vector<DType>{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, {DType::kQ4_0, DType::kQ8_0},
        {DType::kQ4_0, DType::kQ4_K}, {DType::kQ5_K, DType::kQ6_K, DType::kQ4_K, DType::kQ5_K}}) {
    std::vector<QuantMatrix> ms;
    std::vector<std::unique_ptr<PackedWeight>> packed;
    std::vector<WeightMatrix> views;
    const int64_t rows[] = {40, 24, 13, 8};
    for (size_t i = 0; i < types.size(); ++i) ms.push_back(make_quant(rng, types[i], rows[i], cols));
    for (size_t i = 0; i < types.size(); ++i) {
      packed.push_back(set.pack(ms[i].view()));
      views.push_back(ms[i].view());
      views.back().packed = packed.back().get();
    }
    for (int64_t tokens : {1, 6}) {
      const std::vector<float> x = gaussian(rng, static_cast<size_t>(tokens * cols));
      std::vector<std::vector<float>> one(types.size()), many(types.size());
      std::vector<const WeightMatrix*> ws;
      std::vector<float*> ys;
      for (size_t i = 0; i < types.size(); ++i) {
        one[i].resize(static_cast<size_t>(tokens * rows[i]));
        many[i].assign(one[i].size(), -1.0f);
        set.linear(pool, x.data(), tokens, views[i], one[i].data());
        ws.push_back(&views[i]);
        ys.push_back(many[i].data());
      }
      set.linear_many(pool, x.data(), tokens, ws, ys);
      for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(one[i], many[i]) << name(types[i]) << " T=" << tokens;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantLinear,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return name(info.param); });

}  // namespace
}  // namespace tern::cpu
