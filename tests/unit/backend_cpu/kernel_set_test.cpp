// The kernel sets a model can run on: found by the names --cpu-kernels takes,
// every op present, the optimized set's linear within the reference's
// rounding and the reference set's bit for bit the reference kernels.
#include "backend/cpu/kernel_set.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/linear_kernels.h"

namespace tern::cpu {
namespace {

TEST(KernelSet, NamedSetsHaveEveryOp) {
  for (const char* name : {"reference", "optimized", "fast"}) {
    const KernelSet* set = kernel_set_named(name);
    ASSERT_NE(set, nullptr) << name;
    EXPECT_STREQ(set->name, name);
    EXPECT_NE(set->embedding_lookup, nullptr);
    EXPECT_NE(set->linear, nullptr);
    EXPECT_NE(set->rmsnorm, nullptr);
    EXPECT_NE(set->rope_interleaved, nullptr);
    EXPECT_NE(set->silu_mul, nullptr);
    EXPECT_NE(set->attention_batch, nullptr);
  }
  EXPECT_EQ(kernel_set_named("fastest"), nullptr);
  EXPECT_EQ(kernel_set_named(""), nullptr);
}

// auto is the fast set on AMD CPUs with AVX512_BF16 and the optimized set
// elsewhere, and is named by the set it picked.
TEST(KernelSet, AutoPicksFastOnlyWhereBf16ProductsPay) {
  const KernelSet* picked = kernel_set_named("auto");
  ASSERT_NE(picked, nullptr);
  EXPECT_EQ(picked, &auto_kernel_set());
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool fast = __builtin_cpu_is("amd") && cpu_has_avx512_bf16();
#else
  const bool fast = false;
#endif
  EXPECT_EQ(picked, fast ? &fast_kernel_set() : &optimized_kernel_set());
  EXPECT_STREQ(picked->name, fast ? "fast" : "optimized");
}

TEST(KernelSet, OptimizedLinearAgreesWithTheReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t T = 5, K = 203, N = 77;
  std::vector<float> x(T * K), wf(N * K), want(T * N), got(T * N, NAN);
  for (float& v : x) v = u(rng);
  for (float& v : wf) v = u(rng);
  WeightMatrix w{DType::kF32, wf.data(), N, K};
  ThreadPool pool(2);
  reference_kernel_set().linear(pool, x.data(), T, w, want.data());
  optimized_kernel_set().linear(pool, x.data(), T, w, got.data());
  for (int64_t i = 0; i < T * N; ++i) {
    double scale = 0;
    for (int64_t k = 0; k < K; ++k) scale += std::fabs(x[i / N * K + k] * wf[i % N * K + k]);
    EXPECT_NEAR(got[i], want[i], 1e-5 * scale) << i;
  }
}

}  // namespace
}  // namespace tern::cpu
