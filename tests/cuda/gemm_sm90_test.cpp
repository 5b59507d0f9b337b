// The sm_90 GEMM of our own (gemm_sm90.h) against cpu::linear over the same
// bf16 values, each epilogue, at decode and prefill sizes and at sizes that
// leave partial tiles (rows, columns and K). Skipped where the build or the
// GPU has no sm_90a kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/gemm_sm90.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"
#include "base/thread_pool.h"
#include "gemv_check.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::bf16;
using cuda::Sm90Epilogue;
using test::Bf16Data;
using test::DeviceArray;
using test::kNanBf16;

float bf16_rounded(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct Case {
  int64_t T, K, N;
  Sm90Epilogue epilogue;
};

// Each tile shape, alone and in clusters of two, with as many CTAs as fit and with 3 or 4 (each CTA takes
// many tiles in turn).
const cuda::Sm90Tiles kTileForms[] = {
    {128, 128, 0, 1}, {64, 128, 0, 1}, {128, 256, 0, 1}, {64, 256, 0, 1}, {128, 128, 0, 2}, {128, 256, 0, 2},
    {128, 128, 3, 1}, {64, 128, 3, 1}, {128, 256, 3, 1}, {64, 256, 3, 1}, {128, 128, 4, 2}, {128, 256, 4, 2}};

std::string describe(const cuda::Sm90Tiles& t) {
  return std::to_string(t.rows) + "x" + std::to_string(t.cols) + " tiles, " +
         (t.max_ctas == 0 ? std::string("every CTA resident") : std::to_string(t.max_ctas) + " CTAs") +
         (t.cluster == 2 ? ", in pairs" : "");
}

std::string describe(const Case& c) {
  static const char* const kNames[] = {"bf16", "f32", "add-f32", "silu-mul"};
  return "sm90 gemm " + std::to_string(c.T) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) + " " +
         kNames[static_cast<int>(c.epilogue)];
}

// launch(y) writes the case's output into y; it is checked against `sums` (the product's fp32 sums, scaled)
// through the case's epilogue, the fp32 outputs within f32_bound (relative L2).
void check_output(const Case& c, const std::vector<float>& sums, const std::string& what,
                  const std::function<Status(void*)>& launch, std::mt19937& rng, double f32_bound = 1e-4) {
  const size_t out_elems = c.epilogue == Sm90Epilogue::kSiluMul ? sums.size() / 2 : sums.size();
  const bool f32 = c.epilogue == Sm90Epilogue::kF32 || c.epilogue == Sm90Epilogue::kAddF32;
  std::vector<float> base;
  if (c.epilogue == Sm90Epilogue::kAddF32) base = test::random_f32(rng, out_elems);
  DeviceArray<float> d_y32(f32 ? (base.empty() ? std::vector<float>(out_elems, NAN) : base) : std::vector<float>(1));
  DeviceArray<bf16> d_y16(f32 ? std::vector<bf16>(1) : std::vector<bf16>(out_elems, kNanBf16));
  void* y = f32 ? static_cast<void*>(d_y32.get()) : static_cast<void*>(d_y16.get());
  const Status s = launch(y);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  TERN_ASSERT_CUDA(cudaDeviceSynchronize());
  switch (c.epilogue) {
    case Sm90Epilogue::kBf16:
      test::expect_bf16_close(test::to_f32(d_y16.download()), sums, what);
      break;
    case Sm90Epilogue::kF32:
      EXPECT_LT(test::relative_l2(d_y32.download(), sums), f32_bound) << what;
      break;
    case Sm90Epilogue::kAddF32: {
      std::vector<float> ref = base;
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += sums[i];
      EXPECT_LT(test::relative_l2(d_y32.download(), ref), f32_bound) << what;
      break;
    }
    case Sm90Epilogue::kSiluMul: {
      // silu_mul's arithmetic on the bf16 gate and up values.
      const int64_t I = c.N / 2;
      std::vector<float> ref(out_elems);
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t i = 0; i < I; ++i) {
          const float g = bf16_rounded(sums[static_cast<size_t>(t * c.N + i)]);
          const float u = bf16_rounded(sums[static_cast<size_t>(t * c.N + I + i)]);
          ref[static_cast<size_t>(t * I + i)] = g / (1.0f + std::exp(-g)) * u;
        }
      }
      test::expect_bf16_close(test::to_f32(d_y16.download()), ref, what);
      break;
    }
  }
}

void check_case(const Case& c, std::mt19937& rng, ThreadPool& pool) {
  const Bf16Data x = test::random_bf16(rng, static_cast<size_t>(c.T * c.K));
  const float a = 1.7f / std::sqrt(static_cast<float>(c.K));
  const Bf16Data w = test::random_bf16(rng, static_cast<size_t>(c.N * c.K), -a, a);
  std::vector<float> sums(static_cast<size_t>(c.T * c.N));
  cpu::linear(pool, x.values.data(), c.T, cpu::WeightMatrix{DType::kBF16, w.words.data(), c.N, c.K}, sums.data());
  DeviceArray<bf16> d_x(x.words), d_w(w.words);
  for (const cuda::Sm90Tiles tiles : kTileForms) {
    if (tiles.cols == 256 && c.epilogue == Sm90Epilogue::kSiluMul && c.N % 256 != 0) continue;
    check_output(c, sums, describe(c) + " in " + describe(tiles), [&](void* y) {
      return cuda::sm90_linear(d_x.get(), c.T, c.K, d_w.get(), c.N, y, c.epilogue, nullptr, tiles);
    }, rng);
  }
}

TEST(CudaSm90Gemm, MatchesReference) {
  int device = 0;
  TERN_ASSERT_CUDA(cudaGetDevice(&device));
  if (!cuda::sm90_gemm_available(device)) GTEST_SKIP() << "no sm_90a kernels in this build or not an sm_90 GPU";
  std::mt19937 rng(90);
  ThreadPool pool(8);
  const Case cases[] = {
      {2048, 1024, 2560, Sm90Epilogue::kBf16},     // q|k|v at a prefill step
      {256, 1024, 6144, Sm90Epilogue::kSiluMul},   // gate|up with SiLU x up, decode at 256
      {2048, 1024, 6144, Sm90Epilogue::kSiluMul},  // ... a prefill step
      {2048, 2048, 1024, Sm90Epilogue::kAddF32},   // o into the residual
      {300, 3072, 1024, Sm90Epilogue::kAddF32},    // down, rows past the last full tile
      {129, 3072, 1024, Sm90Epilogue::kF32},
      {37, 64, 1280, Sm90Epilogue::kBf16},         // one K slice, one partial row tile
      {5, 200, 136, Sm90Epilogue::kBf16},          // K and N past a tile's edge
      {77, 520, 256, Sm90Epilogue::kSiluMul},
      {1, 1024, 2560, Sm90Epilogue::kF32},
  };
  for (const Case& c : cases) check_case(c, rng, pool);
}

// sm90_linear_e4m3: random codes (no NaN) with row scales, each epilogue in both tile heights, against the
// fp32 sums of the decoded codes scaled as scale_e4m3_sums scales them.
// The FP8 tensor cores' own sums keep about 14 bits: each 128 codes' sum leaves them with a relative error
// near 2^-13 of its largest products, which the kernel adds into fp32 (measured on an H100: 2.2e-4 at
// K 1,024; 6.0e-4 with the sums left in the tensor cores over all of K, which this bound refuses).
constexpr double kE4m3Bound = 5e-4;
TEST(CudaSm90Gemm, E4m3MatchesReference) {
  int device = 0;
  TERN_ASSERT_CUDA(cudaGetDevice(&device));
  if (!cuda::sm90_gemm_available(device)) GTEST_SKIP() << "no sm_90a kernels in this build or not an sm_90 GPU";
  std::mt19937 rng(91);
  const auto codes = [&](size_t n) {
    std::uniform_int_distribution<int> d(0, 255);
    std::vector<uint8_t> v(n);
    for (auto& b : v) {
      do {
        b = static_cast<uint8_t>(d(rng));
      } while ((b & 0x7f) == 0x7f);
    }
    return v;
  };
  const Case cases[] = {
      {256, 1024, 6144, Sm90Epilogue::kSiluMul}, {512, 1024, 2560, Sm90Epilogue::kBf16},
      {300, 3072, 1024, Sm90Epilogue::kAddF32},  {256, 1024, 1280, Sm90Epilogue::kF32},
      {37, 144, 136, Sm90Epilogue::kBf16},       {77, 528, 256, Sm90Epilogue::kSiluMul},
  };
  for (const Case& c : cases) {
    const std::vector<uint8_t> x = codes(static_cast<size_t>(c.T * c.K)), w = codes(static_cast<size_t>(c.N * c.K));
    std::uniform_real_distribution<float> sd(0.5f / 448, 2.0f / 448);
    std::vector<float> xs(static_cast<size_t>(c.T)), ws(static_cast<size_t>(c.N));
    for (float& v : xs) v = sd(rng);
    for (float& v : ws) v = sd(rng) / std::sqrt(static_cast<float>(c.K));
    std::vector<float> xf(x.size()), wf(w.size()), sums(static_cast<size_t>(c.T * c.N));
    for (size_t i = 0; i < x.size(); ++i) xf[i] = fp8_e4m3_to_f32(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wf[i] = fp8_e4m3_to_f32(w[i]);
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t n = 0; n < c.N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          acc += static_cast<double>(xf[static_cast<size_t>(t * c.K + k)]) * wf[static_cast<size_t>(n * c.K + k)];
        }
        sums[static_cast<size_t>(t * c.N + n)] = static_cast<float>(acc) * xs[static_cast<size_t>(t)] *
                                                 ws[static_cast<size_t>(n)];
      }
    }
    DeviceArray<uint8_t> d_x(x), d_w(w);
    DeviceArray<float> d_xs(xs), d_ws(ws);
    for (const cuda::Sm90Tiles tiles : kTileForms) {
      if (tiles.cols == 256) continue;  // bf16 only
      check_output(c, sums, describe(c) + " e4m3 in " + describe(tiles), [&](void* y) {
        return cuda::sm90_linear_e4m3(d_x.get(), d_xs.get(), c.T, c.K, d_w.get(), d_ws.get(), c.N, y, c.epilogue,
                                      nullptr, tiles);
      }, rng, kE4m3Bound);
    }
  }
}

TEST(CudaSm90Gemm, RefusesShapesItCannotTake) {
  DeviceArray<bf16> d_x(std::vector<bf16>(8 * 128)), d_w(std::vector<bf16>(256 * 128));
  DeviceArray<float> d_y(std::vector<float>(8 * 256));
  const Status odd_k = cuda::sm90_linear(d_x.get(), 8, 100, d_w.get(), 64, d_y.get(), Sm90Epilogue::kF32, nullptr);
  EXPECT_EQ(odd_k.code(), ErrorCode::kInvalidArgument) << odd_k.to_string();
  const Status silu = cuda::sm90_linear(d_x.get(), 8, 128, d_w.get(), 192, d_y.get(), Sm90Epilogue::kSiluMul, nullptr);
  EXPECT_EQ(silu.code(), ErrorCode::kInvalidArgument) << silu.to_string();
  EXPECT_NE(silu.message().find("multiple of 64"), std::string::npos) << silu.to_string();
  DeviceArray<uint8_t> d_c(std::vector<uint8_t>(256 * 128));
  DeviceArray<float> d_s(std::vector<float>(256, 1.0f));
  const Status k8 = cuda::sm90_linear_e4m3(d_c.get(), d_s.get(), 8, 120, d_c.get(), d_s.get(), 64, d_y.get(),
                                           Sm90Epilogue::kF32, nullptr);
  EXPECT_EQ(k8.code(), ErrorCode::kInvalidArgument) << k8.to_string();
  EXPECT_NE(k8.message().find("multiple of 16"), std::string::npos) << k8.to_string();
  const Status no_scales = cuda::sm90_linear_e4m3(d_c.get(), nullptr, 8, 128, d_c.get(), d_s.get(), 64, d_y.get(),
                                                  Sm90Epilogue::kF32, nullptr);
  EXPECT_EQ(no_scales.code(), ErrorCode::kInvalidArgument) << no_scales.to_string();
  int device = 0;
  TERN_ASSERT_CUDA(cudaGetDevice(&device));
  if (cuda::sm90_gemm_available(device)) {
    const cuda::Sm90Tiles bad_forms[] = {{32, 0, 0, 0}, {0, 64, 0, 0}, {0, 0, -1, 0}, {0, 0, 0, 3}, {64, 0, 0, 2}};
    for (const cuda::Sm90Tiles bad : bad_forms) {
      const Status tiles =
          cuda::sm90_linear(d_x.get(), 8, 128, d_w.get(), 256, d_y.get(), Sm90Epilogue::kF32, nullptr, bad);
      EXPECT_EQ(tiles.code(), ErrorCode::kInvalidArgument) << describe(bad) << ": " << tiles.to_string();
    }
    const Status e4m3_256 = cuda::sm90_linear_e4m3(d_c.get(), d_s.get(), 8, 128, d_c.get(), d_s.get(), 64, d_y.get(),
                                                   Sm90Epilogue::kF32, nullptr, {0, 256, 0});
    EXPECT_EQ(e4m3_256.code(), ErrorCode::kInvalidArgument) << e4m3_256.to_string();
    const Status silu_256 =
        cuda::sm90_linear(d_x.get(), 8, 128, d_w.get(), 128, d_y.get(), Sm90Epilogue::kSiluMul, nullptr, {0, 256, 0});
    EXPECT_EQ(silu_256.code(), ErrorCode::kInvalidArgument) << silu_256.to_string();
  }
}

}  // namespace
}  // namespace tern
