// FP8 weights on the GPU (--quantization fp8) against the CPU reference
// built from the same quantizer (backend/cpu/fp8_quant.h): the activation
// quantizer and the weight dequantizer bit for bit; the FP8 GEMV in every
// form the model uses, at every token count it serves; the FP8 linear layer
// both ways (cuBLASLt's e4m3 tensor-core GEMM with per-token activation
// scales where cuBLASLt offers it: on an H200 with CUDA 13.0 it does not,
// and the test then checks the fallback; and the bf16 GEMM of dequantized
// weights) at odd and model shapes.
//
// Tolerances. The GEMV and the dequantized GEMM take bf16 activations, as
// the reference does: fp32 outputs within 2e-3 relative L2 for the GEMV
// (its sums in another order) and 5e-3 for the dequantized GEMM (its weights
// rounded to bf16, 2^-9 each: about 1.1e-3 expected); bf16 outputs as
// gpu_test_util.h. The tensor-core GEMM quantizes its activations too
// (W8A8): against a reference over the same quantized activations 3e-3
// (fp32 sums of exact products, in another order, in the tensor cores'
// accumulation); against the bf16-activation reference it is reported, and
// bounded at 0.1. A wrong scale or layout gives errors of O(1).
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/fp8_quant.h"
#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/kernels.h"
#include "base/bf16.h"
#include "base/thread_pool.h"
#include "gemv_check.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::bf16;
using test::Bf16Data;
using test::DeviceArray;

using test::f32_matrix;
using test::kNanBf16;
using test::round_bf16;

// A random bf16 matrix [n, k], its FP8 form and that form's fp32 values.
struct Fp8Case {
  Bf16Data source;
  cpu::Fp8Matrix q;
  std::vector<float> dequantized;  // [n, k]
};

Fp8Case random_fp8(std::mt19937& rng, int64_t n, int64_t k) {
  Fp8Case c;
  const float a = 1.7f / std::sqrt(static_cast<float>(k));
  c.source = test::random_bf16(rng, static_cast<size_t>(n * k), -a, a);
  // Rows of different magnitudes, and a zero row when there are several.
  for (int64_t r = 0; r < n; ++r) {
    const float m = r == 1 && n > 2 ? 0.0f : 1.0f + static_cast<float>(r % 5);
    for (int64_t j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(r * k + j);
      c.source.words[i] = f32_to_bf16(c.source.values[i] * m);
      c.source.values[i] = bf16_to_f32(c.source.words[i]);
    }
  }
  auto q = cpu::quantize_fp8_matrix(cpu::WeightMatrix{DType::kBF16, c.source.words.data(), n, k}, "w");
  EXPECT_TRUE(q.is_ok());
  c.q = std::move(q).value();
  c.dequantized.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    cpu::dequantize_fp8_row(c.q.values.data() + r * k, c.q.scales[static_cast<size_t>(r)], k,
                            c.dequantized.data() + r * k);
  }
  return c;
}

TEST(CudaFp8, ActivationQuantizerMatchesHostBitForBit) {
  std::mt19937 rng(21);
  for (int64_t cols : {8, 64, 100, 1000, 1024, 2048, 3072, 5000, 10000}) {  // 16-byte form to 8,192 (cols % 8 == 0)
    const int64_t rows = 37;
    Bf16Data x = test::random_bf16(rng, static_cast<size_t>(rows * cols), -4, 4);
    for (int64_t j = 0; j < cols; ++j) {  // row 3 zero, row 4 tiny (subnormal codes), row 5 large
      x.words[static_cast<size_t>(3 * cols + j)] = 0;
      x.words[static_cast<size_t>(4 * cols + j)] = f32_to_bf16(x.values[static_cast<size_t>(4 * cols + j)] * 1e-30f);
      x.words[static_cast<size_t>(5 * cols + j)] = f32_to_bf16(x.values[static_cast<size_t>(5 * cols + j)] * 1e30f);
    }
    x.values = test::to_f32(x.words);
    DeviceArray<bf16> d_x(x.words);
    DeviceArray<uint8_t> d_q(std::vector<uint8_t>(x.words.size(), 0xaa));
    DeviceArray<float> d_s(std::vector<float>(static_cast<size_t>(rows), NAN));
    TERN_ASSERT_CUDA(cuda::quantize_rows_e4m3(d_x.get(), rows, cols, d_q.get(), d_s.get(), nullptr));
    const std::vector<uint8_t> q = d_q.download();
    const std::vector<float> s = d_s.download();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint8_t> want(static_cast<size_t>(cols));
      float scale = 0;
      ASSERT_TRUE(cpu::quantize_fp8_row(x.values.data() + r * cols, cols, want.data(), &scale).is_ok());
      ASSERT_EQ(s[static_cast<size_t>(r)], scale) << "cols " << cols << " row " << r;
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(q[static_cast<size_t>(r * cols + j)], want[static_cast<size_t>(j)])
            << "cols " << cols << " row " << r << " col " << j << " value "
            << x.values[static_cast<size_t>(r * cols + j)];
      }
    }
  }
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// The folded kernels (a folded FP8 step's norms and SiLU) against the
// unfused kernels they replace, bit for bit: add_rmsnorm_e4m3 against
// scale_e4m3_sums(kAddF32) into x, add_rmsnorm, quantize_rows_e4m3;
// silu_mul_e4m3 against scale_e4m3_sums(kBf16), silu_mul,
// quantize_rows_e4m3. Widths of add_rmsnorm's row form and of its block
// form, odd ones, and a zero row.
TEST(CudaFp8, FoldedKernelsMatchTheUnfusedOnesBitForBit) {
  std::mt19937 rng(29);
  const int64_t rows = 37;
  for (int64_t hidden : {64, 96, 256, 1000, 1024, 2048}) {
    for (bool with_delta : {true, false}) {
      std::vector<float> x = random_floats(rng, static_cast<size_t>(rows * hidden), -3, 3);
      std::vector<float> sums = random_floats(rng, static_cast<size_t>(rows * hidden), -300, 300);
      std::vector<float> xs = random_floats(rng, static_cast<size_t>(rows), 0.001f, 0.02f);
      std::vector<float> ws = random_floats(rng, static_cast<size_t>(hidden), 0.0005f, 0.01f);
      std::vector<float> weight = random_floats(rng, static_cast<size_t>(hidden), 0.5f, 1.5f);
      for (int64_t j = 0; j < hidden; ++j) {  // row 2 ends up zero; row 3 has a zero scale
        x[static_cast<size_t>(2 * hidden + j)] = 0;
        sums[static_cast<size_t>(2 * hidden + j)] = 0;
      }
      xs[3] = 0;
      DeviceArray<float> d_sums(sums), d_xs(xs), d_ws(ws), d_weight(weight);
      // Unfused.
      DeviceArray<float> x_a(x);
      DeviceArray<bf16> h(static_cast<size_t>(rows * hidden));
      DeviceArray<uint8_t> codes_a(std::vector<uint8_t>(static_cast<size_t>(rows * hidden), 0xaa));
      DeviceArray<float> scales_a(std::vector<float>(static_cast<size_t>(rows), NAN));
      if (with_delta) {
        TERN_ASSERT_CUDA(cuda::scale_e4m3_sums(d_sums.get(), rows, hidden, d_xs.get(), d_ws.get(), x_a.get(),
                                               cuda::GemmOut::kAddF32, nullptr));
      }
      TERN_ASSERT_CUDA(cuda::add_rmsnorm(x_a.get(), nullptr, d_weight.get(), nullptr, rows, hidden, 1e-5f, h.get(),
                                         nullptr));
      TERN_ASSERT_CUDA(cuda::quantize_rows_e4m3(h.get(), rows, hidden, codes_a.get(), scales_a.get(), nullptr));
      // Folded.
      DeviceArray<float> x_b(x);
      DeviceArray<uint8_t> codes_b(std::vector<uint8_t>(static_cast<size_t>(rows * hidden), 0x55));
      DeviceArray<float> scales_b(std::vector<float>(static_cast<size_t>(rows), NAN));
      const cuda::Fp8Sums delta =
          with_delta ? cuda::Fp8Sums{d_sums.get(), d_xs.get(), d_ws.get()} : cuda::Fp8Sums{};
      TERN_ASSERT_CUDA(cuda::add_rmsnorm_e4m3(x_b.get(), delta, d_weight.get(), rows, hidden, 1e-5f, codes_b.get(),
                                              scales_b.get(), nullptr));
      const std::string what = "hidden " + std::to_string(hidden) + (with_delta ? " with delta" : "");
      const std::vector<float> xa = x_a.download(), xb = x_b.download();
      ASSERT_EQ(std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float)), 0) << what << ": the residual";
      const std::vector<float> sa = scales_a.download(), sb = scales_b.download();
      ASSERT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << what << ": the row scales";
      EXPECT_EQ(sb[2], 0.0f) << what;
      ASSERT_EQ(codes_a.download(), codes_b.download()) << what << ": the codes";
    }
  }
  // The gate|up sums as fp32, and as bf16 (what the unscaled GEMM writes for a bf16 output).
  for (bool bf16_sums : {false, true}) {
    for (int64_t inter : {100, 192, 256, 384, 2048, 3072}) {  // multiples of 256: the row in registers
      std::vector<float> sums = random_floats(rng, static_cast<size_t>(rows * 2 * inter), -400, 400);
      std::vector<float> xs = random_floats(rng, static_cast<size_t>(rows), 0.001f, 0.02f);
      std::vector<float> ws = random_floats(rng, static_cast<size_t>(2 * inter), 0.0005f, 0.01f);
      for (int64_t j = 0; j < 2 * inter; ++j) sums[static_cast<size_t>(4 * 2 * inter + j)] = 0;  // row 4: zero
      std::vector<bf16> sums16(sums.size());
      for (size_t i = 0; i < sums.size(); ++i) sums16[i] = f32_to_bf16(sums[i]);
      DeviceArray<float> d_sums(sums), d_xs(xs), d_ws(ws);
      DeviceArray<bf16> d_sums16(sums16);
      DeviceArray<bf16> gate_up(static_cast<size_t>(rows * 2 * inter)), act(static_cast<size_t>(rows * inter));
      DeviceArray<uint8_t> codes_a(std::vector<uint8_t>(static_cast<size_t>(rows * inter), 0xaa));
      DeviceArray<float> scales_a(std::vector<float>(static_cast<size_t>(rows), NAN));
      if (bf16_sums) {
        TERN_ASSERT_CUDA(cuda::scale_e4m3_sums(d_sums16.get(), rows, 2 * inter, d_xs.get(), d_ws.get(),
                                               gate_up.get(), cuda::GemmOut::kBf16, nullptr));
      } else {
        TERN_ASSERT_CUDA(cuda::scale_e4m3_sums(d_sums.get(), rows, 2 * inter, d_xs.get(), d_ws.get(), gate_up.get(),
                                               cuda::GemmOut::kBf16, nullptr));
      }
      TERN_ASSERT_CUDA(cuda::silu_mul(gate_up.get(), rows, inter, act.get(), nullptr));
      TERN_ASSERT_CUDA(cuda::quantize_rows_e4m3(act.get(), rows, inter, codes_a.get(), scales_a.get(), nullptr));
      DeviceArray<uint8_t> codes_b(std::vector<uint8_t>(static_cast<size_t>(rows * inter), 0x55));
      DeviceArray<float> scales_b(std::vector<float>(static_cast<size_t>(rows), NAN));
      const cuda::Fp8Sums gu = bf16_sums ? cuda::Fp8Sums{nullptr, d_xs.get(), d_ws.get(), d_sums16.get()}
                                         : cuda::Fp8Sums{d_sums.get(), d_xs.get(), d_ws.get()};
      TERN_ASSERT_CUDA(cuda::silu_mul_e4m3(gu, rows, inter, codes_b.get(), scales_b.get(), nullptr));
      const std::string what = "inter " + std::to_string(inter) + (bf16_sums ? " bf16 sums" : " fp32 sums");
      const std::vector<float> sa = scales_a.download(), sb = scales_b.download();
      ASSERT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << what << ": the row scales";
      EXPECT_EQ(sb[4], 0.0f) << what;
      ASSERT_EQ(codes_a.download(), codes_b.download()) << what << ": the codes";
    }
  }
  // What the folded SiLU cannot take is refused, not run.
  DeviceArray<float> f(64);
  DeviceArray<uint8_t> c(64);
  EXPECT_EQ(cuda::silu_mul_e4m3(cuda::Fp8Sums{f.get(), f.get(), f.get()}, 1, 6, c.get(), f.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::silu_mul_e4m3(cuda::Fp8Sums{f.get(), f.get(), f.get()}, 1, cuda::kMaxSiluE4m3Inter + 4, c.get(),
                                f.get(), nullptr),
            cudaErrorInvalidValue);
  DeviceArray<bf16> h(64);
  EXPECT_EQ(cuda::silu_mul_e4m3(cuda::Fp8Sums{f.get(), f.get(), f.get(), h.get()}, 1, 8, c.get(), f.get(), nullptr),
            cudaErrorInvalidValue)
      << "both sums";
  EXPECT_EQ(cuda::silu_mul_e4m3(cuda::Fp8Sums{nullptr, f.get(), f.get()}, 1, 8, c.get(), f.get(), nullptr),
            cudaErrorInvalidValue)
      << "no sums";
  EXPECT_EQ(cuda::add_rmsnorm_e4m3(f.get(), cuda::Fp8Sums{nullptr, f.get(), f.get(), h.get()}, f.get(), 1, 64, 1e-5f,
                                   c.get(), f.get(), nullptr),
            cudaErrorInvalidValue)
      << "a bf16 residual delta";
}

TEST(CudaFp8, WeightDequantizerMatchesHost) {
  std::mt19937 rng(22);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3, 8}, {37, 1000}, {256, 1024}, {7, 48}, {5, 3072}}) {
    Fp8Case c = random_fp8(rng, n, k);
    DeviceArray<uint8_t> d_q(c.q.values);
    DeviceArray<float> d_s(c.q.scales);
    DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(n * k), kNanBf16));
    TERN_ASSERT_CUDA(cuda::dequantize_e4m3_rows(d_q.get(), d_s.get(), n, k, d_out.get(), nullptr));
    const std::vector<bf16> got = d_out.download();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16(c.dequantized[i])) << i;
  }
}

// One FP8 GEMV form at T tokens against cpu::linear over the dequantized
// matrix and the same bf16 inputs (made on the host as the kernel makes them).
void check_fp8_gemv(cuda::GemvInput in, cuda::GemvOutput out, int64_t T, int64_t K, int64_t N, int sm_count,
                    std::mt19937& rng) {
  const std::string what = "fp8 gemv in " + std::to_string(static_cast<int>(in)) + " out " +
                           std::to_string(static_cast<int>(out)) + " T " + std::to_string(T) + " K " +
                           std::to_string(K) + " N " + std::to_string(N) + " sms " + std::to_string(sm_count);
  Fp8Case w = random_fp8(rng, N, K);
  DeviceArray<uint8_t> d_w(w.q.values);
  DeviceArray<float> d_scale(w.q.scales);
  cuda::GemvParams p;
  p.input = in;
  p.output = out;
  p.num_tokens = T;
  p.in_features = K;
  p.out_features = N;
  p.w_fp8 = d_w.get();
  p.w_scale = d_scale.get();
  test::check_quantized_gemv(p, w.dequantized, sm_count, what, rng);
}

TEST(CudaFp8, GemvMatchesDequantizedReference) {
  std::mt19937 rng(23);
  using In = cuda::GemvInput;
  using Out = cuda::GemvOutput;
  const std::pair<In, Out> forms[] = {{In::kRmsNorm, Out::kBf16},   {In::kRmsNorm, Out::kF32},
                                      {In::kBf16, Out::kAddF32},     {In::kSiluMul, Out::kAddF32},
                                      {In::kBf16, Out::kBf16}};
  for (const auto& [in, out] : forms) {
    for (int64_t T : {1, 2, 3, 4, 8}) {
      // K past one unrolled step (16 loads x 256 = 4096) and not a multiple of it; odd N.
      for (auto [K, N] : {std::pair<int64_t, int64_t>{64, 37}, {1000, 300}, {1024, 2560}, {3072, 1024},
                          {4104, 129}}) {
        for (int sms : {4, 132}) check_fp8_gemv(in, out, T, K, N, sms, rng);
      }
    }
  }
}

// The q|k|v form with FP8 weights: RoPE and the KV write on the scaled sums.
TEST(CudaFp8, GemvQkvRopeMatchesLinearThenRope) {
  std::mt19937 rng(24);
  const int heads = 16, kv_heads = 2, head_dim = 128;
  const int64_t K = 1024, N = (heads + 2 * kv_heads) * head_dim;
  for (int64_t T : {1, 3, 4}) {
    Fp8Case w = random_fp8(rng, N, K);
    DeviceArray<uint8_t> d_w(w.q.values);
    DeviceArray<float> d_scale(w.q.scales);
    cuda::GemvParams p;
    p.in_features = K;
    p.w_fp8 = d_w.get();
    p.w_scale = d_scale.get();
    test::check_quantized_gemv_qkv_rope(p, w.dequantized, T, heads, kv_heads, head_dim,
                                        "fp8 gemv qkv+rope T " + std::to_string(T), rng);
  }
}

// A linear layer's size: T tokens, K in, N out.
struct Shape {
  int64_t T, K, N;
};

// The FP8 linear layer at T tokens, one output form, both ways. fast_vs_w8a8:
// for a GEMM made with fast_accum, whose tensor-core sums are not the exact
// W8A8 product; its distance from that product goes there (within 2e-2:
// wrong layouts or scales give O(1)), and it is held to the bf16-activation
// reference as every W8A8 form is.
void check_fp8_linear(cuda::Fp8Gemm& gemm, cublasHandle_t cublas, int64_t T, int64_t K, int64_t N,
                      cuda::GemmOut out, bool tensor_cores, std::mt19937& rng, double* w8a8_vs_w8a16,
                      double* fast_vs_w8a8 = nullptr) {
  ThreadPool pool(2);
  const std::string what = std::string(tensor_cores ? "tensor cores" : "dequantized") + " T " + std::to_string(T) +
                           " K " + std::to_string(K) + " N " + std::to_string(N) + " out " +
                           std::to_string(static_cast<int>(out));
  Fp8Case w = random_fp8(rng, N, K);
  Bf16Data x = test::random_bf16(rng, static_cast<size_t>(T * K), -2, 2);
  if (T > 2) {
    for (int64_t j = 0; j < K; ++j) x.words[static_cast<size_t>(K + j)] = 0;  // a zero token row
    x.values = test::to_f32(x.words);
  }
  // References: bf16 activations (W8A16), and the activations' own FP8 values (W8A8).
  std::vector<float> xq(x.values.size());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<uint8_t> codes(static_cast<size_t>(K));
    float s = 0;
    ASSERT_TRUE(cpu::quantize_fp8_row(x.values.data() + t * K, K, codes.data(), &s).is_ok());
    cpu::dequantize_fp8_row(codes.data(), s, K, xq.data() + t * K);
  }
  std::vector<float> ref16(static_cast<size_t>(T * N)), ref8(ref16.size());
  cpu::linear(pool, x.values.data(), T, f32_matrix(w.dequantized, N, K), ref16.data());
  cpu::linear(pool, xq.data(), T, f32_matrix(w.dequantized, N, K), ref8.data());
  const bool tc = tensor_cores && gemm.tensor_cores(T, K, N, out);
  const std::vector<float>& ref = tc ? ref8 : ref16;
  const bool exact = !tc || fast_vs_w8a8 == nullptr;  // the tensor cores' sums promoted into fp32, or no tensor cores

  DeviceArray<uint8_t> d_w(w.q.values), d_codes(static_cast<size_t>(T * K));
  DeviceArray<float> d_scale(w.q.scales), d_xs(static_cast<size_t>(T));
  DeviceArray<bf16> d_x(x.words), d_wb(static_cast<size_t>(N * K));
  DeviceArray<uint8_t> d_ws(32u << 20);
  DeviceArray<float> d_sums(static_cast<size_t>(T * N));
  const cuda::Fp8Scratch scratch{d_codes.get(), d_xs.get(), d_wb.get(), d_ws.get(), d_sums.get()};
  std::vector<float> got;
  if (out == cuda::GemmOut::kBf16) {
    DeviceArray<bf16> d_y(std::vector<bf16>(ref.size(), kNanBf16));
    Status s = gemm.linear(cublas, d_x.get(), T, K, {d_w.get(), d_scale.get()}, N, d_y.get(), out, scratch, nullptr,
                           tensor_cores);
    ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
    got = test::to_f32(d_y.download());
    if (exact) {
      test::expect_bf16_close(got, ref, what);
    }
  } else {
    const std::vector<float> y0 = out == cuda::GemmOut::kAddF32 ? test::random_f32(rng, ref.size(), -1, 1)
                                                                : std::vector<float>(ref.size(), NAN);
    DeviceArray<float> d_y(y0);
    Status s = gemm.linear(cublas, d_x.get(), T, K, {d_w.get(), d_scale.get()}, N, d_y.get(), out, scratch, nullptr,
                           tensor_cores);
    ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
    got = d_y.download();
    if (out == cuda::GemmOut::kAddF32) {
      for (size_t i = 0; i < got.size(); ++i) got[i] -= y0[i];
    }
    if (exact) {
      EXPECT_LT(test::relative_l2(got, ref), tc ? 3e-3 : 5e-3) << what;
    }
  }
  if (!exact) {
    const double e = test::relative_l2(got, ref8);
    *fast_vs_w8a8 = std::max(*fast_vs_w8a8, e);
    EXPECT_LT(e, 2e-2) << what << ": fast accumulation against the exact W8A8 product";
  }
  if (T > 2) {  // the zero token row gives zeros
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(got[static_cast<size_t>(N + n)], 0.0f) << what;
  }
  if (tc) {
    const double e = test::relative_l2(got, ref16);
    *w8a8_vs_w8a16 = std::max(*w8a8_vs_w8a16, e);
    EXPECT_LT(e, 0.1) << what << ": W8A8 against bf16 activations";
  }
}

TEST(CudaFp8, LinearMatchesReferenceBothWays) {
  std::mt19937 rng(25);
  auto gemm = cuda::Fp8Gemm::create(32u << 20);
  ASSERT_TRUE(gemm.is_ok()) << gemm.status().to_string();
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  const bool has_tc = (*gemm)->tensor_cores(64, 1024, 2560, cuda::GemmOut::kBf16) &&
                      (*gemm)->tensor_cores(64, 2048, 1024, cuda::GemmOut::kAddF32);
  const bool sums = (*gemm)->needs_sums(64, 1024, 2560, cuda::GemmOut::kBf16);
  std::printf("[fp8 gemm] sm_%d%d: cuBLASLt e4m3 GEMM %s\n", major, minor,
              !has_tc ? "not available" : sums ? "unscaled, the scales applied to its fp32 sums" : "with outer-vector scales");

  double worst = 0;
  // Model shapes (ERNIE-0.3B: 1024, 2048, 3072, q|k|v 2560, gate|up 6144), odd token counts, and shapes
  // the tensor cores refuse (K not a multiple of 16, N not of 8) which take the dequantized way.
  for (const Shape s : {Shape{1, 64, 40}, Shape{5, 1024, 2560}, Shape{64, 2048, 1024}, Shape{200, 1024, 6144},
                        Shape{67, 3072, 1024}, Shape{300, 64, 192}, Shape{33, 1000, 300}, Shape{9, 1024, 131}}) {
    for (auto out : {cuda::GemmOut::kBf16, cuda::GemmOut::kF32, cuda::GemmOut::kAddF32}) {
      for (bool tc : {true, false}) check_fp8_linear(**gemm, cublas, s.T, s.K, s.N, out, tc, rng, &worst);
    }
  }
  std::printf("[fp8 gemm] tensor cores (W8A8) against the bf16-activation reference: worst rel L2 %.2e\n", worst);
  cublasDestroy(cublas);
}

// Fp8Gemm::create's fast_accum (DeviceModelOptions::fp8_fast_accum): the
// tensor cores' own accumulation over the model's shapes, against the exact
// W8A8 product and the bf16-activation reference (check_fp8_linear).
TEST(CudaFp8, FastAccumulationStaysNearTheReference) {
  std::mt19937 rng(26);
  auto gemm = cuda::Fp8Gemm::create(32u << 20, /*fast_accum=*/true);
  ASSERT_TRUE(gemm.is_ok()) << gemm.status().to_string();
  if (!(*gemm)->tensor_cores(64, 1024, 2560, cuda::GemmOut::kBf16)) {
    std::printf("[fp8 fast accumulation] no FP8 tensor-core GEMM on this device: nothing to run\n");
    return;
  }
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  double worst16 = 0, worst8 = 0;
  for (const Shape s : {Shape{5, 1024, 2560}, Shape{64, 2048, 1024}, Shape{200, 1024, 6144}, Shape{67, 3072, 1024},
                        Shape{512, 3072, 1024}}) {
    for (auto out : {cuda::GemmOut::kBf16, cuda::GemmOut::kF32, cuda::GemmOut::kAddF32}) {
      check_fp8_linear(**gemm, cublas, s.T, s.K, s.N, out, true, rng, &worst16, &worst8);
    }
  }
  std::printf("[fp8 fast accumulation] worst rel L2 %.2e against the exact W8A8 product, %.2e against bf16 "
              "activations\n",
              worst8, worst16);
  cublasDestroy(cublas);
}

}  // namespace
}  // namespace tern
