// Reference kernels against naive double-precision implementations on random
// inputs of varied shapes and weight dtypes. Tolerances are error bounds of
// fp32 arithmetic, stated per test. Also checks the properties later kernels
// and the KV cache rely on: results do not depend on thread count, token
// tiling or KV layout.
#include "backend/cpu/reference_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "support/random_values.h"

namespace tern::cpu {
namespace {

using testing::random_floats;

// A weight matrix in one dtype plus its exact values as doubles.
struct TestWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<double> exact;

  WeightMatrix view() const {
    return {dtype, dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data(), rows, cols};
  }
};

TestWeights make_weights(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols, float scale = 1.0f) {
  TestWeights w{dtype, rows, cols, {}, {}, {}};
  std::vector<float> v = random_floats(rng, static_cast<size_t>(rows * cols), -scale, scale);
  w.exact.resize(v.size());
  if (dtype == DType::kF32) {
    w.f32 = v;
    for (size_t i = 0; i < v.size(); ++i) w.exact[i] = v[i];
  } else {
    w.half.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      w.half[i] = dtype == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      w.exact[i] = dtype == DType::kBF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
    }
  }
  return w;
}

constexpr DType kWeightDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr double kF32Eps = 1.0 / (1 << 24);  // unit roundoff

TEST(ReferenceKernels, F16ConversionMatchesScalarForAllValues) {
  std::vector<uint16_t> all(65536);
  std::iota(all.begin(), all.end(), 0);
  WeightMatrix w{DType::kF16, all.data(), 1, 65536};
  std::vector<float> out(65536);
  weight_row_to_f32(w, 0, out.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    float expected = f16_to_f32(static_cast<uint16_t>(h));
    uint32_t a, b;
    std::memcpy(&a, &out[h], 4);
    std::memcpy(&b, &expected, 4);
    ASSERT_EQ(a, b) << "f16 bits 0x" << std::hex << h;
  }
}

TEST(ReferenceKernels, EmbeddingLookupCopiesRows) {
  std::mt19937 rng(1);
  for (DType dt : kWeightDtypes) {
    TestWeights table = make_weights(rng, dt, 50, 37);
    std::vector<int32_t> ids = {0, 49, 7, 7, 23};
    std::vector<float> out(ids.size() * 37);
    embedding_lookup(table.view(), ids, out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t j = 0; j < 37; ++j) {
        ASSERT_EQ(out[i * 37 + static_cast<size_t>(j)], table.exact[static_cast<size_t>(ids[i] * 37 + j)]);
      }
    }
  }
}

TEST(ReferenceKernels, LinearMatchesDoubleReference) {
  std::mt19937 rng(2);
  ThreadPool pool(3);
  struct Shape {
    int64_t tokens, rows, cols;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 5, 7}, {3, 37, 17}, {33, 20, 100}, {70, 9, 256}, {2, 130, 1024}};
  for (DType dt : kWeightDtypes) {
    for (const Shape& s : shapes) {
      TestWeights w = make_weights(rng, dt, s.rows, s.cols);
      std::vector<float> x = random_floats(rng, static_cast<size_t>(s.tokens * s.cols), -2.0f, 2.0f);
      std::vector<float> y(static_cast<size_t>(s.tokens * s.rows), NAN);
      linear(pool, x.data(), s.tokens, w.view(), y.data());
      // Each lane sums cols/16 products, then a 4-level tree: error <= (cols/16 + 5) u sum|x w|.
      const double bound_factor = (static_cast<double>(s.cols) / 16 + 6) * kF32Eps;
      for (int64_t t = 0; t < s.tokens; ++t) {
        for (int64_t r = 0; r < s.rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t j = 0; j < s.cols; ++j) {
            double p = x[static_cast<size_t>(t * s.cols + j)] * w.exact[static_cast<size_t>(r * s.cols + j)];
            ref += p;
            mag += std::fabs(p);
          }
          double got = y[static_cast<size_t>(t * s.rows + r)];
          ASSERT_LE(std::fabs(got - ref), bound_factor * mag)
              << "dtype " << int(dt) << " shape " << s.tokens << "x" << s.rows << "x" << s.cols << " t=" << t
              << " r=" << r;
        }
      }
    }
  }
}

TEST(ReferenceKernels, LinearIsIndependentOfTilingThreadsAndIsa) {
  // Prefill (many tokens at once) and decode (one at a time) must give the
  // same bits, or KV-cached decoding would drift from a full recompute; and
  // the AVX2 path must give the portable path's bits, so the oracle does not
  // depend on the machine. 77 rows and 300 cols leave remainders everywhere.
  std::mt19937 rng(3);
  ThreadPool one(1), three(3);
  for (DType dt : kWeightDtypes) {
    TestWeights w = make_weights(rng, dt, 77, 300);
    const int64_t tokens = 45;
    std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * 300));
    std::vector<float> all(static_cast<size_t>(tokens * 77)), single(all.size()), threaded(all.size()),
        portable(all.size());
    linear(one, x.data(), tokens, w.view(), all.data());
    linear(three, x.data(), tokens, w.view(), threaded.data());
    linear_portable(three, x.data(), tokens, w.view(), portable.data());
    for (int64_t t = 0; t < tokens; ++t) linear(three, x.data() + t * 300, 1, w.view(), single.data() + t * 77);
    ASSERT_EQ(0, std::memcmp(all.data(), single.data(), all.size() * 4));
    ASSERT_EQ(0, std::memcmp(all.data(), threaded.data(), all.size() * 4));
    ASSERT_EQ(0, std::memcmp(all.data(), portable.data(), all.size() * 4));
  }
}

TEST(ReferenceKernels, RmsnormMatchesDoubleReference) {
  std::mt19937 rng(4);
  for (DType dt : kWeightDtypes) {
    for (int64_t n : {1, 15, 64, 1000}) {
      const int64_t tokens = 3;
      TestWeights w = make_weights(rng, dt, 1, n, 2.0f);
      WeightVector wv{dt, w.view().data, n};
      std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * n), -10.0f, 10.0f);
      std::vector<float> y(x.size());
      const float eps = 1e-5f;
      rmsnorm(x.data(), tokens, wv, eps, y.data());
      for (int64_t t = 0; t < tokens; ++t) {
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += double(x[size_t(t * n + j)]) * x[size_t(t * n + j)];
        double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
        for (int64_t j = 0; j < n; ++j) {
          double ref = x[size_t(t * n + j)] * inv * w.exact[size_t(j)];
          ASSERT_NEAR(y[size_t(t * n + j)], ref, 1e-5 * std::fabs(ref) + 1e-30) << "n=" << n << " j=" << j;
        }
      }
      // In place gives the same result.
      std::vector<float> z = x;
      rmsnorm(z.data(), tokens, wv, eps, z.data());
      ASSERT_EQ(0, std::memcmp(z.data(), y.data(), y.size() * 4));
    }
  }
}

TEST(ReferenceKernels, RopeInvFreqMatchesFormula) {
  for (int64_t head_dim : {2, 16, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      std::vector<float> inv = rope_inv_freq(head_dim, theta);
      ASSERT_EQ(inv.size(), size_t(head_dim / 2));
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        double ref = std::pow(theta, -2.0 * double(i) / double(head_dim));
        EXPECT_NEAR(inv[size_t(i)], ref, 2 * kF32Eps * ref) << head_dim << " " << i;
      }
    }
  }
}

TEST(ReferenceKernels, RopeMatchesClosedFormInterleaved) {
  std::mt19937 rng(5);
  const int64_t heads = 3, head_dim = 128;
  const double theta = 500000.0;
  std::vector<float> inv = rope_inv_freq(head_dim, theta);
  std::vector<int64_t> positions = {0, 1, 2, 17, 1000, 65535, 131071};
  const int64_t tokens = static_cast<int64_t>(positions.size());
  std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * heads * head_dim), -3.0f, 3.0f);
  std::vector<float> y = x;
  rope_interleaved(y.data(), tokens, heads, head_dim, positions, inv);
  for (int64_t t = 0; t < tokens; ++t) {
    const double p = double(positions[size_t(t)]);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        size_t base = size_t((t * heads + h) * head_dim + 2 * i);
        double a = x[base], b = x[base + 1];
        double w = std::pow(theta, -2.0 * double(i) / double(head_dim));
        // Exact closed form. The kernel, like HF, rounds w and the angle p*w
        // to fp32, an angle error of up to ~2 u p w: allow that plus rounding.
        double exact_angle = p * w;
        double tol = (std::fabs(a) + std::fabs(b)) * (4 * kF32Eps + 3 * kF32Eps * exact_angle);
        EXPECT_NEAR(y[base], a * std::cos(exact_angle) - b * std::sin(exact_angle), tol) << t << " " << i;
        EXPECT_NEAR(y[base + 1], b * std::cos(exact_angle) + a * std::sin(exact_angle), tol) << t << " " << i;
        // HF's fp32 angle, evaluated in double: only output rounding remains.
        double f32_angle = double(inv[size_t(i)] * float(p));
        double tight = (std::fabs(a) + std::fabs(b)) * 4 * kF32Eps;
        EXPECT_NEAR(y[base], a * std::cos(f32_angle) - b * std::sin(f32_angle), tight);
        EXPECT_NEAR(y[base + 1], b * std::cos(f32_angle) + a * std::sin(f32_angle), tight);
      }
    }
  }
  // Position 0 is the identity.
  for (int64_t j = 0; j < heads * head_dim; ++j) ASSERT_EQ(y[size_t(j)], x[size_t(j)]);
}

TEST(ReferenceKernels, SiluMulMatchesDoubleReference) {
  std::mt19937 rng(6);
  std::vector<float> gate = random_floats(rng, 1001, -20.0f, 20.0f);
  std::vector<float> up = random_floats(rng, 1001, -3.0f, 3.0f);
  gate[0] = -100.0f;  // exp(100) overflows fp32: must give -0 * up, not NaN
  std::vector<float> out(1001);
  silu_mul(gate.data(), up.data(), 1001, out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    double g = gate[i];
    double ref = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << gate[i];
  }
}

// Naive causal GQA attention in double over contiguous K/V [len, kv_dim].
std::vector<double> attention_reference(const std::vector<float>& q, const std::vector<int64_t>& positions,
                                        const std::vector<float>& k, const std::vector<float>& v,
                                        const AttentionShape& s) {
  const int64_t q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
  std::vector<double> out(q.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const int64_t kvh = h / (s.num_heads / s.num_kv_heads);
      const int64_t len = positions[t] + 1;
      std::vector<double> scores(static_cast<size_t>(len));
      double mx = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        double d = 0;
        for (int64_t e = 0; e < s.head_dim; ++e) {
          d += double(q[size_t(int64_t(t) * q_dim + h * s.head_dim + e)]) *
               k[size_t(j * kv_dim + kvh * s.head_dim + e)];
        }
        scores[size_t(j)] = d / std::sqrt(double(s.head_dim));
        mx = std::max(mx, scores[size_t(j)]);
      }
      double sum = 0;
      for (auto& sc : scores) sum += (sc = std::exp(sc - mx));
      for (int64_t e = 0; e < s.head_dim; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < len; ++j) acc += scores[size_t(j)] / sum * v[size_t(j * kv_dim + kvh * s.head_dim + e)];
        out[size_t(int64_t(t) * q_dim + h * s.head_dim + e)] = acc;
      }
    }
  }
  return out;
}

TEST(ReferenceKernels, AttentionMatchesDoubleReferenceForGqaRatios) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  struct Case {
    int64_t heads, kv_heads, head_dim, cache_len;
    std::vector<int64_t> positions;
  };
  const Case cases[] = {
      {4, 4, 16, 9, {0, 1, 2, 3, 4, 5, 6, 7, 8}},  // ratio 1, a whole prefill
      {4, 2, 32, 20, {17, 18, 19}},                // ratio 2, a chunk after a prefix
      {16, 2, 128, 40, {39}},                      // ratio 8, ERNIE's shape, one decode step
      {8, 1, 24, 13, {3, 12}},                     // ratio 8, head_dim not a multiple of 16
  };
  for (const Case& c : cases) {
    AttentionShape s{c.heads, c.kv_heads, c.head_dim};
    const int64_t kv_dim = c.kv_heads * c.head_dim, q_dim = c.heads * c.head_dim;
    const int64_t tokens = int64_t(c.positions.size());
    std::vector<float> q = random_floats(rng, size_t(tokens * q_dim), -2.0f, 2.0f);
    std::vector<float> k = random_floats(rng, size_t(c.cache_len * kv_dim), -2.0f, 2.0f);
    std::vector<float> v = random_floats(rng, size_t(c.cache_len * kv_dim));
    const float* kb[] = {k.data()};
    const float* vb[] = {v.data()};
    KvRowTable kt{kb, c.cache_len, kv_dim, {}, 1.0f, {}}, vt{vb, c.cache_len, kv_dim, {}, 1.0f, {}};
    std::vector<float> out(size_t(tokens * q_dim), NAN);
    attention(pool, q.data(), c.positions, kt, vt, s, out.data());
    std::vector<double> ref = attention_reference(q, c.positions, k, v, s);
    // Scores are O(4) with fp32 dot error ~1e-6; outputs are averages of |v| <= 1.
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-6) << "heads " << c.heads << " i " << i;

    // The same rows in a paged layout (blocks of 3 positions, scattered, with
    // padding between rows) give the same bits.
    const int64_t block = 3, stride = kv_dim + 5;
    const int64_t num_blocks = (c.cache_len + block - 1) / block;
    std::vector<float> kpool(size_t(num_blocks * block * stride), NAN), vpool(kpool.size(), NAN);
    std::vector<const float*> kblocks(static_cast<size_t>(num_blocks)), vblocks(static_cast<size_t>(num_blocks));
    for (int64_t b = 0; b < num_blocks; ++b) {
      int64_t slot = num_blocks - 1 - b;  // reversed order in the pool
      kblocks[size_t(b)] = kpool.data() + slot * block * stride;
      vblocks[size_t(b)] = vpool.data() + slot * block * stride;
    }
    KvRowTable kp{kblocks, block, stride, {}, 1.0f, {}}, vp{vblocks, block, stride, {}, 1.0f, {}};
    for (int64_t p = 0; p < c.cache_len; ++p) {
      std::copy_n(k.data() + p * kv_dim, kv_dim, const_cast<float*>(kp.row(p)));
      std::copy_n(v.data() + p * kv_dim, kv_dim, const_cast<float*>(vp.row(p)));
    }
    std::vector<float> paged(out.size(), NAN);
    attention(pool, q.data(), c.positions, kp, vp, s, paged.data());
    ASSERT_EQ(0, std::memcmp(paged.data(), out.data(), out.size() * 4));
  }
}

TEST(ReferenceKernels, AttentionSoftmaxIsStableForLargeScores) {
  // Integer-valued q and k make the scores exact in fp32 and huge (~1e4):
  // without max subtraction exp() overflows to inf and the output is NaN.
  std::mt19937 rng(8);
  ThreadPool pool(2);
  AttentionShape s{2, 1, 64};
  const int64_t len = 6, kv_dim = 64, q_dim = 128;
  std::uniform_int_distribution<int> di(-30, 30);
  std::vector<float> q(static_cast<size_t>(q_dim)), k(static_cast<size_t>(len * kv_dim));
  for (auto& x : q) x = float(di(rng) | 1);
  for (auto& x : k) x = float(di(rng) | 1);
  std::vector<float> v = random_floats(rng, size_t(len * kv_dim));
  const float* kb[] = {k.data()};
  const float* vb[] = {v.data()};
  KvRowTable kt{kb, len, kv_dim, {}, 1.0f, {}}, vt{vb, len, kv_dim, {}, 1.0f, {}};
  std::vector<int64_t> positions = {len - 1};
  std::vector<float> out(static_cast<size_t>(q_dim));
  attention(pool, q.data(), positions, kt, vt, s, out.data());
  std::vector<double> ref = attention_reference(q, positions, k, v, s);
  double max_score = 0;
  for (int64_t j = 0; j < len; ++j) {
    double d = 0;
    for (int64_t e = 0; e < 64; ++e) d += double(q[size_t(e)]) * k[size_t(j * kv_dim + e)];
    max_score = std::max(max_score, std::fabs(d) / 8);
  }
  ASSERT_GT(max_score, 100.0);  // exp(100) and beyond would overflow fp32
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i]));
    ASSERT_NEAR(out[i], ref[i], 1e-5);
  }
}

}  // namespace
}  // namespace tern::cpu
