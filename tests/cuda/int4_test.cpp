// int4 weights on the GPU (W4A16, Int4Weights) against the CPU reference
// over the same values: the host's int4 form (backend/cpu/int4_planar.h) of
// random Q4_0 and int4-checkpoint Q8_0 matrices, which holds their values
// exactly. The dequantizer bit for bit (bf16 of the exact value); the int4
// GEMV in every form the model uses at 1-4 and 8 tokens, odd row counts,
// K below one warp-wide load, past one unrolled step, and not a multiple
// of either. The tensor-core GEMM (int4_gemm) at decode and prefill row
// counts, each output form, K whole, split automatically and split as far as
// it goes, against the products over the dequantizer's bf16 values.
//
// Tolerances, as the FP8 GEMV's (fp8_test.cpp): the weights are exact and
// the activations bf16 on both sides, so the sums differ only in order
// (and in int4's scale applied once per 8 products): fp32 outputs within
// 2e-3 relative L2, bf16 outputs as gpu_test_util.h. A wrong nibble, scale
// or zero gives errors of O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/int4_planar.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_reference.h"
#include "backend/cpu/reference_kernels.h"
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

// A random int4 matrix [n, k] on the device, and its values on the host.
struct Int4Case {
  cpu::Int4Matrix q;
  std::vector<float> values;  // [n, k]
  std::unique_ptr<DeviceArray<uint8_t>> codes, zeros;
  std::unique_ptr<DeviceArray<uint16_t>> scales;
  cuda::Int4Weights device() const { return {codes->get(), scales->get(), zeros->get()}; }
};

// Q4_0 of random rows (asymmetric = false), or an asymmetric checkpoint's
// Q8_0 blocks: a zero in [0, 15] and codes q4 - zero per block.
Int4Case random_int4(std::mt19937& rng, int64_t n, int64_t k, bool asymmetric) {
  const int64_t blocks = k / cpu::kQK8_0;
  std::vector<uint8_t> raw;
  DType dtype = DType::kQ4_0;
  if (asymmetric) {
    dtype = DType::kQ8_0;
    std::vector<cpu::BlockQ8_0> q8(static_cast<size_t>(n * blocks));
    std::uniform_int_distribution<int> nibble(0, 15);
    const float a = 0.25f / std::sqrt(static_cast<float>(k));
    std::uniform_real_distribution<float> scale(0.2f * a, a);
    for (cpu::BlockQ8_0& b : q8) {
      const int zero = nibble(rng);
      b.d = f32_to_f16(scale(rng));
      for (int8_t& c : b.qs) c = static_cast<int8_t>(nibble(rng) - zero);
    }
    raw.resize(q8.size() * sizeof(cpu::BlockQ8_0));
    std::memcpy(raw.data(), q8.data(), raw.size());
  } else {
    const float a = 1.7f / std::sqrt(static_cast<float>(k));
    const std::vector<float> w = test::random_f32(rng, static_cast<size_t>(n * k), -a, a);
    const int64_t stride = cpu::row_bytes(DType::kQ4_0, k);
    raw.resize(static_cast<size_t>(n * stride));
    for (int64_t r = 0; r < n; ++r) {
      // Rows of different magnitudes.
      std::vector<float> row(w.begin() + r * k, w.begin() + (r + 1) * k);
      for (float& x : row) x *= 1.0f + static_cast<float>(r % 5);
      cpu::quantize_row(DType::kQ4_0, row.data(), k, raw.data() + r * stride);
    }
  }
  const cpu::WeightMatrix w{dtype, raw.data(), n, k};
  auto q = cpu::to_int4_matrix(w, "w");
  EXPECT_TRUE(q.is_ok()) << q.status().to_string();
  Int4Case c;
  c.q = std::move(q).value();
  c.values.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) cpu::weight_row_to_f32(w, r, c.values.data() + r * k);
  c.codes = std::make_unique<DeviceArray<uint8_t>>(c.q.nibbles);
  c.scales = std::make_unique<DeviceArray<uint16_t>>(c.q.scales);
  c.zeros = std::make_unique<DeviceArray<uint8_t>>(c.q.zeros);
  return c;
}

TEST(CudaInt4, DequantizerMatchesHostBitForBit) {
  std::mt19937 rng(41);
  for (bool asymmetric : {false, true}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 32}, {37, 96}, {255, 1024}, {64, 3072}}) {
      Int4Case c = random_int4(rng, n, k, asymmetric);
      DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(n * k), kNanBf16));
      TERN_ASSERT_CUDA(cuda::dequantize_int4_rows(c.device(), n, k, d_out.get(), nullptr));
      const std::vector<bf16> got = d_out.download();
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], f32_to_bf16(c.values[i])) << (asymmetric ? "Q8_0 " : "Q4_0 ") << n << "x" << k << " at " << i;
      }
    }
  }
}

// One int4 GEMV form at T tokens against cpu::linear over the matrix's
// values and the same bf16 inputs (made on the host as the kernel makes them).
void check_int4_gemv(cuda::GemvInput in, cuda::GemvOutput out, int64_t T, int64_t K, int64_t N, bool asymmetric,
                     int sm_count, std::mt19937& rng) {
  const std::string what = "int4 gemv in " + std::to_string(static_cast<int>(in)) + " out " +
                           std::to_string(static_cast<int>(out)) + " T " + std::to_string(T) + " K " +
                           std::to_string(K) + " N " + std::to_string(N) + (asymmetric ? " Q8_0" : " Q4_0") + " sms " +
                           std::to_string(sm_count);
  Int4Case w = random_int4(rng, N, K, asymmetric);
  cuda::GemvParams p;
  p.input = in;
  p.output = out;
  p.num_tokens = T;
  p.in_features = K;
  p.out_features = N;
  p.w_int4 = w.device();
  test::check_quantized_gemv(p, w.values, sm_count, what, rng);
}

TEST(CudaInt4, GemvMatchesReference) {
  std::mt19937 rng(43);
  using In = cuda::GemvInput;
  using Out = cuda::GemvOutput;
  const std::pair<In, Out> forms[] = {
      {In::kRmsNorm, Out::kBf16}, {In::kBf16, Out::kAddF32}, {In::kSiluMul, Out::kAddF32}, {In::kBf16, Out::kBf16}};
  for (const auto& [in, out] : forms) {
    for (int64_t T : {1, 2, 3, 4, 8}) {
      // K under one warp-wide load (256), past one unrolled step (16 loads x
      // 256 = 4096) and not a multiple of either; odd N.
      for (auto [K, N] : {std::pair<int64_t, int64_t>{96, 37}, {1024, 2560}, {3072, 1024}, {4128, 129}, {1056, 301}}) {
        for (int sms : {4, 132}) check_int4_gemv(in, out, T, K, N, (K / 32 + N + T) % 2 == 1, sms, rng);
      }
    }
  }
  // K must be whole blocks of 32, and the LM head's form stays bf16: refused,
  // not misread.
  Int4Case w = random_int4(rng, 8, 64, false);
  cuda::GemvParams p;
  p.input = In::kRmsNorm;
  p.output = Out::kF32;
  p.num_tokens = 1;
  p.in_features = 64;
  p.out_features = 8;
  p.w_int4 = w.device();
  EXPECT_EQ(cuda::gemv(p, 4, nullptr), cudaErrorInvalidValue);
  p.output = Out::kBf16;
  p.in_features = 40;
  p.out_features = 4;
  EXPECT_EQ(cuda::gemv(p, 4, nullptr), cudaErrorInvalidValue);
}

// The q|k|v form with int4 weights (the fused matrix's three parts'
// rows appended, as the upload makes it): RoPE and the KV write on the sums.
TEST(CudaInt4, GemvQkvRopeMatchesLinearThenRope) {
  std::mt19937 rng(44);
  const int heads = 16, kv_heads = 2, head_dim = 128;
  const int64_t K = 1024, N = (heads + 2 * kv_heads) * head_dim;
  for (int64_t T : {1, 2, 3, 4}) {
    Int4Case w = random_int4(rng, N, K, T % 2 == 0);
    cuda::GemvParams p;
    p.in_features = K;
    p.w_int4 = w.device();
    test::check_quantized_gemv_qkv_rope(p, w.values, T, heads, kv_heads, head_dim,
                                        "int4 gemv qkv+rope T " + std::to_string(T), rng);
  }
}

// int4_gemm against cpu::linear over the weights as bf16 (what the kernel multiplies: the dequantizer's
// values, bit for bit above) and bf16 inputs: fp32 sums that differ only in order, so within 1e-5 relative
// L2; bf16 outputs as gpu_test_util.h. Each split count gives the same bits on a second run, and the tiles'
// counters are left at zero.
TEST(CudaInt4, TensorCoreGemmMatchesReference) {
  std::mt19937 rng(45);
  ThreadPool pool(2);
  int sms = 0;
  TERN_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  using Out = cuda::GemvOutput;
  const Out outs[] = {Out::kBf16, Out::kAddF32, Out::kF32};
  int form = 0;
  for (auto [K, N] : {std::pair<int64_t, int64_t>{128, 37}, {1024, 2560}, {3072, 1024}, {2048, 1024}, {384, 129}}) {
    for (int64_t T : {5, 8, 33, 64, 100, 256}) {
      Int4Case w = random_int4(rng, N, K, (K / 128 + T) % 2 == 1);
      const std::vector<float> wb = round_bf16(w.values);
      const Bf16Data x = test::random_bf16(rng, static_cast<size_t>(T * K));
      std::vector<float> ref(static_cast<size_t>(T * N));
      cpu::linear(pool, x.values.data(), T, f32_matrix(wb, N, K), ref.data());
      DeviceArray<bf16> d_x(x.words);
      const int most = static_cast<int>(std::min<int64_t>(cuda::kInt4MaxSplits, K / 128));
      DeviceArray<float> d_partials(std::vector<float>(static_cast<size_t>(most * T * N), NAN));
      DeviceArray<int> d_counters(std::vector<int>(1024, 0));
      const cuda::Int4GemmScratch scratch{d_partials.get(), static_cast<size_t>(most * T * N), d_counters.get(), 1024};
      const int automatic = cuda::int4_gemm_splits(T, K, N, sms, scratch);
      ASSERT_GE(automatic, 1);
      ASSERT_LE(automatic, most);
      for (int splits : {1, automatic, most}) {
        const Out out = outs[form++ % 3];
        const std::string what = "int4 gemm T " + std::to_string(T) + " K " + std::to_string(K) + " N " +
                                 std::to_string(N) + " splits " + std::to_string(splits) + " out " +
                                 std::to_string(static_cast<int>(out));
        const auto run = [&](void* y) {
          TERN_ASSERT_CUDA(cuda::int4_gemm(d_x.get(), T, K, w.device(), N, y, out, splits, scratch, nullptr));
          TERN_ASSERT_CUDA(cudaDeviceSynchronize());
        };
        if (out == Out::kBf16) {
          DeviceArray<bf16> d_y(std::vector<bf16>(ref.size(), kNanBf16));
          run(d_y.get());
          const std::vector<bf16> first = d_y.download();
          test::expect_bf16_close(test::to_f32(first), ref, what);
          run(d_y.get());
          EXPECT_EQ(d_y.download(), first) << what << ": a second run";
        } else {
          const std::vector<float> y0 =
              out == Out::kAddF32 ? test::random_f32(rng, ref.size(), -1, 1) : std::vector<float>(ref.size(), NAN);
          DeviceArray<float> d_y(y0);
          run(d_y.get());
          std::vector<float> got = d_y.download();
          if (out == Out::kAddF32) {
            for (size_t i = 0; i < got.size(); ++i) got[i] -= y0[i];
          }
          EXPECT_LT(test::relative_l2(got, ref), 1e-5) << what;
          if (out == Out::kF32) {
            run(d_y.get());
            EXPECT_EQ(d_y.download(), got) << what << ": a second run";
          }
        }
        EXPECT_EQ(d_counters.download(), std::vector<int>(1024, 0)) << what << ": the counters left at zero";
      }
    }
  }
}

TEST(CudaInt4, TensorCoreGemmRefusesWhatItCannotRead) {
  std::mt19937 rng(46);
  Int4Case w = random_int4(rng, 16, 256, false);
  DeviceArray<bf16> d_x(test::random_bf16(rng, 8 * 256).words);
  DeviceArray<float> d_y(std::vector<float>(8 * 16, 0.0f));
  const cuda::Int4GemmScratch none;
  using Out = cuda::GemvOutput;
  EXPECT_TRUE(cuda::int4_gemm_takes(256, w.device()));
  EXPECT_FALSE(cuda::int4_gemm_takes(96, w.device())) << "K not whole stages of 128";
  EXPECT_EQ(cuda::int4_gemm(d_x.get(), 8, 96, w.device(), 16, d_y.get(), Out::kF32, 1, none, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::int4_gemm(d_x.get(), 8, 256, w.device(), 16, d_y.get(), Out::kQkvRope, 1, none, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::int4_gemm(d_x.get(), 8, 256, w.device(), 16, d_y.get(), Out::kF32, 3, none, nullptr),
            cudaErrorInvalidValue)
      << "more slices than stages of K";
  EXPECT_EQ(cuda::int4_gemm(d_x.get(), 8, 256, w.device(), 16, d_y.get(), Out::kF32, 2, none, nullptr),
            cudaErrorInvalidValue)
      << "slices without scratch";
  EXPECT_EQ(cuda::int4_gemm_splits(8, 256, 16, 132, none), 1) << "no scratch, no slices";
}

}  // namespace
}  // namespace tern
