// linear_fast against the reference cpu::linear on random values, for every
// instruction-set path this CPU runs (paths it lacks are skipped, and say so),
// each weight dtype, odd shapes with K and N tails, and 1 and 2 threads.
//
// Tolerances, per output y[t, n], with S = sum_k |x[t,k]| |w[n,k]|:
//  - exact activations (every dtype): both kernels sum the same exact fp32
//    products in different orders, in chains of at most K/8 + 32 additions,
//    so they differ by at most 2 (K/8 + 32) 2^-24 S; we allow (K/4 + 64) 2^-24 S.
//  - bf16 activations: rounding x to bf16 changes each product by at most
//    2^-9 of its size, so 2^-9 S more. Its arithmetic is checked tighter by
//    comparing with the reference on the rounded x.
#include "backend/cpu/linear_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/linear_isa.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/reference_kernels.h"
#include "backend/cpu/row_split.h"
#include "base/bf16.h"
#include "support/random_values.h"

namespace tern::cpu {
namespace {

// The AVX-512 rounding of activations to bf16 gives f32_to_bf16's bits for
// every class of value: ties to even both ways, NaNs (quiet bit set, sign and
// payload kept), infinities, zeros, subnormals, the largest finite values
// (rounding up to infinity), across a tail of fewer than 16 and with the
// pair padding written as zero.
TEST(LinearKernels, VectorRoundingToBf16IsTheScalarRounding) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (best_cpu_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto round = linear_isa::avx512_kernels().round_bf16;
  ASSERT_NE(round, nullptr);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u,
                               0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7fffffu,
                               0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fff8000u};
  std::mt19937 rng(11);
  const int64_t tokens = 3, cols = 37, stride = 38;
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t bits = i < std::size(specials) ? specials[i] : static_cast<uint32_t>(rng());
    std::memcpy(&x[i], &bits, 4);
  }
  std::vector<uint16_t> out(static_cast<size_t>(tokens * stride), 0xabcd);
  round(x.data(), tokens, cols, stride, out.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < cols; ++k) {
      EXPECT_EQ(out[static_cast<size_t>(t * stride + k)], f32_to_bf16(x[static_cast<size_t>(t * cols + k)]))
          << t << " " << k;
    }
    EXPECT_EQ(out[static_cast<size_t>(t * stride + cols)], 0) << t;
  }
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

struct Shape {
  int64_t tokens, cols, rows;  // T, K, N
};

// T = 1, 2, 3, 5, 17, 64, 130 (decode, tails of the 4-token tile, several
// x blocks), K and N on and off every vector width and tile size.
const Shape kShapes[] = {
    {1, 1, 1},     {1, 7, 5},      {1, 1024, 130}, {1, 3072, 97},  {2, 33, 13},  {2, 1024, 50},
    {3, 100, 48},  {3, 257, 7},    {5, 16, 1},     {5, 64, 49},    {5, 3072, 200}, {17, 31, 97},
    {17, 257, 50}, {64, 1024, 13}, {64, 96, 100},  {130, 1024, 61}, {130, 65, 130}, {130, 3000, 21},
};

using testing::random_floats;

// A weight matrix in one dtype plus its values as fp32 (exact for each dtype).
struct TestWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<float> values;

  WeightMatrix view() const {
    return {dtype, dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data(), rows, cols};
  }
};

TestWeights make_weights(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  TestWeights w{dtype, rows, cols, random_floats(rng, static_cast<size_t>(rows * cols)), {}, {}};
  w.values = w.f32;
  if (dtype != DType::kF32) {
    w.half.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.half[i] = dtype == DType::kBF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
      w.values[i] = dtype == DType::kBF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
    }
  }
  return w;
}

// S = sum_k |x[t,k]| |w[n,k]| for every output.
std::vector<double> abs_sums(const std::vector<float>& x, const TestWeights& w, int64_t tokens) {
  std::vector<double> s(static_cast<size_t>(tokens * w.rows));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) {
        acc += std::fabs(static_cast<double>(x[t * w.cols + k]) * w.values[n * w.cols + k]);
      }
      s[t * w.rows + n] = acc;
    }
  }
  return s;
}

double exact_tolerance(int64_t cols) { return (static_cast<double>(cols) / 4 + 64) * std::ldexp(1.0, -24); }

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool cpu_runs(CpuIsa isa) { return isa <= best_cpu_isa(); }

std::vector<float> run_fast(int threads, const std::vector<float>& x, int64_t tokens, const TestWeights& w,
                            const LinearOptions& options) {
  ThreadPool pool(threads);
  // Filled with NaN so an output the kernel never writes fails the comparison.
  std::vector<float> y(static_cast<size_t>(tokens * w.rows), std::nanf(""));
  linear_fast(pool, x.data(), tokens, w.view(), y.data(), options);
  return y;
}

std::vector<float> run_reference(const std::vector<float>& x, int64_t tokens, const TestWeights& w) {
  ThreadPool pool(1);
  std::vector<float> y(static_cast<size_t>(tokens * w.rows));
  linear(pool, x.data(), tokens, w.view(), y.data());
  return y;
}

// Every output within tol_rel * S of the reference; reports the first miss.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& s,
                  double tol_rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    // `!(err <= tol)` so a NaN output fails too.
    if (!(err <= tol_rel * s[i])) {
      ADD_FAILURE() << what << ": output " << i << " is " << got[i] << ", reference " << want[i] << ", error "
                    << err << " > " << tol_rel * s[i];
      return;
    }
  }
}

class LinearKernelsTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(LinearKernelsTest, ExactActivationsMatchReferenceForEveryDtypeAndShape) {
  const CpuIsa isa = GetParam();
  if (!cpu_runs(isa)) GTEST_SKIP() << "this CPU has no " << isa_name(isa);
  std::mt19937 rng(1234);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const Shape& s : kShapes) {
      TestWeights w = make_weights(rng, dtype, s.rows, s.cols);
      std::vector<float> x = random_floats(rng, static_cast<size_t>(s.tokens * s.cols));
      std::vector<float> want = run_reference(x, s.tokens, w);
      std::vector<double> sums = abs_sums(x, w, s.tokens);
      for (int threads : {1, 2}) {
        std::vector<float> got = run_fast(threads, x, s.tokens, w, {.max_isa = isa});
        expect_close(got, want, sums, exact_tolerance(s.cols),
                     std::string(isa_name(isa)) + " dtype " + std::to_string(static_cast<int>(dtype)) + " T=" +
                         std::to_string(s.tokens) + " K=" + std::to_string(s.cols) + " N=" +
                         std::to_string(s.rows) + " threads=" + std::to_string(threads));
      }
    }
  }
}

TEST_P(LinearKernelsTest, Bf16ActivationsMatchReferenceWithinRoundingOfX) {
  const CpuIsa isa = GetParam();
  if (!cpu_runs(isa)) GTEST_SKIP() << "this CPU has no " << isa_name(isa);
  std::mt19937 rng(99);
  for (const Shape& s : kShapes) {
    TestWeights w = make_weights(rng, DType::kBF16, s.rows, s.cols);
    std::vector<float> x = random_floats(rng, static_cast<size_t>(s.tokens * s.cols));
    std::vector<float> x_rounded(x.size());
    for (size_t i = 0; i < x.size(); ++i) x_rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
    std::vector<float> want = run_reference(x, s.tokens, w);
    std::vector<float> want_rounded = run_reference(x_rounded, s.tokens, w);
    std::vector<double> sums = abs_sums(x, w, s.tokens);
    const std::string what = std::string(isa_name(isa)) + " T=" + std::to_string(s.tokens) +
                             " K=" + std::to_string(s.cols) + " N=" + std::to_string(s.rows);
    for (int threads : {1, 2}) {
      std::vector<float> got = run_fast(threads, x, s.tokens, w, {.max_isa = isa, .activations = Activations::kBf16});
      expect_close(got, want, sums, std::ldexp(1.0, -9) + exact_tolerance(s.cols), what);
      // Paths without a bf16 dot product keep x exact, so only the AVX512_BF16
      // path is compared against the reference on the rounded x.
      const bool rounds_x = isa == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
      if (rounds_x) expect_close(got, want_rounded, sums, exact_tolerance(s.cols), what + " (rounded x)");
    }
  }
}

// bf16 weights repacked in 16-row panels (what the fast kernel set does on
// AVX512_BF16 CPUs) take the outer-product kernel: within the exact bound of
// the reference on the bf16-rounded x, and the same bits for any thread
// count and any batching of the tokens.
TEST(LinearKernels, Bf16PanelsMatchReferenceWithinRoundingOfX) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(41);
  const LinearOptions options{.max_isa = CpuIsa::kAvx512, .activations = Activations::kBf16};
  for (const Shape& s : kShapes) {
    TestWeights w = make_weights(rng, DType::kBF16, s.rows, s.cols);
    const std::unique_ptr<PackedWeight> panels = pack_bf16_panels(w.view());
    ASSERT_NE(panels, nullptr);
    WeightMatrix view = w.view();
    view.packed = panels.get();
    std::vector<float> x = random_floats(rng, static_cast<size_t>(s.tokens * s.cols));
    std::vector<float> x_rounded(x.size());
    for (size_t i = 0; i < x.size(); ++i) x_rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
    const std::vector<float> want = run_reference(x, s.tokens, w);
    const std::vector<float> want_rounded = run_reference(x_rounded, s.tokens, w);
    const std::vector<double> sums = abs_sums(x, w, s.tokens);
    const std::string what = "panels T=" + std::to_string(s.tokens) + " K=" + std::to_string(s.cols) +
                             " N=" + std::to_string(s.rows);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      got.emplace_back(static_cast<size_t>(s.tokens * s.rows), std::nanf(""));
      linear_fast(pool, x.data(), s.tokens, view, got.back().data(), options);
      expect_close(got.back(), want_rounded, sums, exact_tolerance(s.cols), what + " (rounded x)");
      expect_close(got.back(), want, sums, std::ldexp(1.0, -9) + exact_tolerance(s.cols), what);
    }
    EXPECT_EQ(got[0], got[1]) << what << ": 1 vs 2 threads";
    EXPECT_EQ(got[0], got[2]) << what << ": 1 vs 3 threads";
    ThreadPool pool(2);
    for (int64_t t = 0; t < std::min<int64_t>(s.tokens, 6); ++t) {
      std::vector<float> alone(static_cast<size_t>(s.rows));
      linear_fast(pool, x.data() + t * s.cols, 1, view, alone.data(), options);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got[0].begin() + t * s.rows)) << what << " token " << t;
    }
  }
}

// Large steps on many threads run in chunks of rows x tokens (row_split.h):
// the same bits as one token a call, for every kernel
// form (fp32 x with bf16, f16 and f32 weights; bf16 x; bf16 panels), token
// counts that leave a short last block and a short last MR tile, and
// stacked matrices.
TEST(LinearKernels, RowByTokenChunksGiveTheBitsOfOneThread) {
  std::mt19937 rng(23);
  const int64_t cols = 72, tokens = 203;
  const int64_t rows[] = {300, 37};
  ASSERT_LT(tokens_per_chunk(rows[0] + rows[1], tokens, 16), tokens) << "16 threads must take row x token chunks";
  ASSERT_LT(tokens_per_chunk(1024, tokens, 2), tokens) << "2 threads take row x token chunks below 2,048 rows";
  ASSERT_EQ(tokens_per_chunk(6144, tokens, 2), tokens) << "2 threads keep chunks of rows alone for gate|up";
  ASSERT_EQ(tokens_per_chunk(6144, tokens, 16), tokens) << "16 threads keep chunks of rows alone for gate|up";
  ASSERT_EQ(tokens_per_chunk(1024, 100, 2), 100) << "steps under two token blocks keep chunks of rows alone";
  // The bits to match: one token a call, which always runs chunks of rows alone.
  const auto by_tokens = [&](const WeightMatrix& w, const std::vector<float>& x, const LinearOptions& options) {
    std::vector<float> y(static_cast<size_t>(tokens * w.rows), std::nanf(""));
    ThreadPool pool(2);
    for (int64_t t = 0; t < tokens; ++t) linear_fast(pool, x.data() + t * cols, 1, w, y.data() + t * w.rows, options);
    return y;
  };
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Activations activations : {Activations::kExact, Activations::kBf16}) {
      for (bool panels : {false, true}) {
        if (panels && (dtype != DType::kBF16 || activations != Activations::kBf16 || !cpu_has_avx512_bf16())) continue;
        std::vector<TestWeights> ws;
        std::vector<std::unique_ptr<PackedWeight>> packs;
        std::vector<WeightMatrix> views;
        for (int64_t r : rows) {
          ws.push_back(make_weights(rng, dtype, r, cols));
          views.push_back(ws.back().view());
          if (panels) {
            packs.push_back(pack_bf16_panels(views.back()));
            views.back().packed = packs.back().get();
          }
        }
        const std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * cols));
        const LinearOptions options{.activations = activations};
        const std::string what = "dtype " + std::to_string(static_cast<int>(dtype)) + (panels ? " panels" : "") +
                                 (activations == Activations::kBf16 ? " bf16 x" : " exact x");
        for (size_t i = 0; i < ws.size(); ++i) {
          const std::vector<float> one = by_tokens(views[i], x, options);
          std::vector<float> many(one.size(), std::nanf(""));
          ThreadPool wide(16);
          linear_fast(wide, x.data(), tokens, views[i], many.data(), options);
          EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float))) << what << " matrix " << i;
        }
        std::vector<std::vector<float>> got;
        for (size_t i = 0; i < ws.size(); ++i) got.emplace_back(static_cast<size_t>(tokens * rows[i]), std::nanf(""));
        const WeightMatrix* wp[] = {&views[0], &views[1]};
        float* yp[] = {got[0].data(), got[1].data()};
        ThreadPool wide(16);
        linear_fast_many(wide, x.data(), tokens, wp, yp, options);
        for (size_t i = 0; i < ws.size(); ++i) {
          const std::vector<float> want = by_tokens(views[i], x, options);
          EXPECT_EQ(0, std::memcmp(want.data(), got[i].data(), want.size() * sizeof(float))) << what << " stacked " << i;
        }
      }
    }
  }
}

// A panel copy gives back every row of its source, bit for bit (the fast
// set looks a tied embedding up from it and lets the source's pages go),
// and the fast set's lookup reads it: the same rows as the reference's.
TEST(LinearKernels, Bf16PanelRowsAreTheSourceRows) {
  std::mt19937 rng(43);
  const KernelSet& fast = fast_kernel_set();
  for (const Shape& s : kShapes) {
    TestWeights w = make_weights(rng, DType::kBF16, s.rows, s.cols);
    const std::unique_ptr<PackedWeight> panels = pack_bf16_panels(w.view());
    ASSERT_NE(panels, nullptr);
    ASSERT_TRUE(is_bf16_panels(panels.get()));
    std::vector<float> want(static_cast<size_t>(s.cols)), got(static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      weight_row_to_f32(w.view(), r, want.data());
      bf16_panel_row_to_f32(*panels, r, got.data());
      ASSERT_EQ(got, want) << "row " << r << " of " << s.rows << "x" << s.cols;
    }
    WeightMatrix view = w.view();
    view.packed = panels.get();
    const std::vector<int32_t> ids = {0, static_cast<int32_t>(s.rows - 1), static_cast<int32_t>(s.rows / 2), 0};
    std::vector<float> looked(ids.size() * static_cast<size_t>(s.cols)), ref(looked.size());
    fast.embedding_lookup(view, ids, looked.data());
    embedding_lookup(w.view(), ids, ref.data());
    EXPECT_EQ(looked, ref) << s.rows << "x" << s.cols;
  }
}

// Each output is summed in an order fixed by K alone, so decode (one token),
// prefill (many) and any thread count give the same bits: a prompt's logits
// do not depend on how the engine batched it.
TEST_P(LinearKernelsTest, ResultsAreIndependentOfThreadsAndBatching) {
  const CpuIsa isa = GetParam();
  if (!cpu_runs(isa)) GTEST_SKIP() << "this CPU has no " << isa_name(isa);
  std::mt19937 rng(7);
  const int64_t tokens = 11, cols = 300, rows = 101;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Activations activations : {Activations::kExact, Activations::kBf16}) {
      TestWeights w = make_weights(rng, dtype, rows, cols);
      std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * cols));
      const LinearOptions options{.max_isa = isa, .activations = activations};
      std::vector<float> one = run_fast(1, x, tokens, w, options);
      std::vector<float> two = run_fast(2, x, tokens, w, options);
      std::vector<float> single(one.size());
      ThreadPool pool(2);
      for (int64_t t = 0; t < tokens; ++t) {
        linear_fast(pool, x.data() + t * cols, 1, w.view(), single.data() + t * rows, options);
      }
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << "threads";
      EXPECT_EQ(0, std::memcmp(one.data(), single.data(), one.size() * sizeof(float))) << "batching";
    }
  }
}

// linear_fast_many stacks unquantized matrices of one dtype and width into
// one pool call: each output still gets the bits of its own linear_fast call,
// also where a thread's rows straddle two matrices.
TEST_P(LinearKernelsTest, ManyMatricesGiveTheBitsOfSeparateCalls) {
  const CpuIsa isa = GetParam();
  if (!cpu_runs(isa)) GTEST_SKIP() << "this CPU has no " << isa_name(isa);
  std::mt19937 rng(17);
  const int64_t cols = 96;
  const int64_t rows[] = {70, 13, 13};
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Activations activations : {Activations::kExact, Activations::kBf16}) {
      for (int64_t tokens : {1, 5}) {
        std::vector<TestWeights> ws;
        for (int64_t r : rows) ws.push_back(make_weights(rng, dtype, r, cols));
        std::vector<float> x = random_floats(rng, static_cast<size_t>(tokens * cols));
        const LinearOptions options{.max_isa = isa, .activations = activations};
        std::vector<WeightMatrix> views;
        std::vector<std::vector<float>> got;
        for (const TestWeights& w : ws) {
          views.push_back(w.view());
          got.emplace_back(static_cast<size_t>(tokens * w.rows), std::nanf(""));
        }
        const WeightMatrix* wp[] = {&views[0], &views[1], &views[2]};
        float* yp[] = {got[0].data(), got[1].data(), got[2].data()};
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          linear_fast_many(pool, x.data(), tokens, wp, yp, options);
          for (size_t i = 0; i < ws.size(); ++i) {
            std::vector<float> want = run_fast(1, x, tokens, ws[i], options);
            EXPECT_EQ(0, std::memcmp(want.data(), got[i].data(), want.size() * sizeof(float)))
                << "matrix " << i << " dtype " << static_cast<int>(dtype) << " T=" << tokens << " threads "
                << threads;
          }
        }
      }
    }
  }
}

TEST(LinearKernels, PortablePathIsTheReference) {
  std::mt19937 rng(5);
  TestWeights w = make_weights(rng, DType::kBF16, 37, 70);
  std::vector<float> x = random_floats(rng, 3 * 70);
  std::vector<float> got = run_fast(2, x, 3, w, {.max_isa = CpuIsa::kPortable});
  std::vector<float> want = run_reference(x, 3, w);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST(LinearKernels, BestIsaMatchesCpuFlags) {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const CpuIsa want = avx2 && avx512 ? CpuIsa::kAvx512 : avx2 ? CpuIsa::kAvx2 : CpuIsa::kPortable;
  EXPECT_EQ(best_cpu_isa(), want);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, LinearKernelsTest,
                         ::testing::Values(CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace tern::cpu
