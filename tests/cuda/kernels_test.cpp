// Each CUDA kernel against the CPU reference kernel it replaces, on random
// inputs of varied shapes (the attention: attention_test.cpp; the sampler:
// sample_test.cpp): lengths across block boundaries, GQA 8:1, 2:1 and 1:1,
// head_dim 8..128.
// Tolerances: bit-exact where the GPU only moves data (embedding, V rows,
// the fp32 residual add) and for the argmax; bf16 outputs of fp32 math
// within 1/128 per element (gpu_test_util.h); GEMMs with fp32 output within
// 1e-4 relative L2, 2e-3 where the GEMV makes its bf16 input itself (a
// norm or SiLU rounded to bf16 one way or the other moves a few inputs by
// an ulp, 2^-8 relative).
// Outputs are poisoned with NaN first so an unwritten element fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "base/thread_pool.h"
#include "engine/sampler.h"
#include "gemv_check.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::bf16;
using test::Bf16Data;
using test::DeviceArray;
using test::kNanBf16;
using test::round_bf16;
using test::rope_params;
using test::Shape;

cpu::WeightMatrix bf16_matrix(const Bf16Data& d, int64_t rows, int64_t cols) {
  return cpu::WeightMatrix{DType::kBF16, d.words.data(), rows, cols};
}

TEST(CudaKernels, EmbeddingGatherCopiesRowsExactly) {
  std::mt19937 rng(1);
  for (int64_t hidden : {64, 1000, 1024}) {
    const int64_t vocab = 1000, T = 37;
    Bf16Data table = test::random_bf16(rng, static_cast<size_t>(vocab * hidden));
    std::vector<int32_t> ids(static_cast<size_t>(T));
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
    for (auto& id : ids) id = d(rng);
    ids[0] = 0;
    ids[1] = static_cast<int32_t>(vocab - 1);
    DeviceArray<bf16> d_table(table.words);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> d_x(std::vector<float>(static_cast<size_t>(T * hidden), NAN));
    TERN_ASSERT_CUDA(cuda::embedding_gather(d_table.get(), d_ids.get(), T, hidden, d_x.get(), nullptr));
    std::vector<float> ref(static_cast<size_t>(T * hidden));
    cpu::embedding_lookup(bf16_matrix(table, vocab, hidden), ids, ref.data());
    EXPECT_EQ(d_x.download(), ref) << "hidden " << hidden;
  }
}

TEST(CudaKernels, AddRmsnormMatchesReference) {
  std::mt19937 rng(2);
  ThreadPool pool(1);
  // 256, 512, 1024, 2048: the row form (rmsnorm_row.cuh); 64, 1000: the 256-thread block per row.
  for (int64_t hidden : {64, 256, 512, 1000, 1024, 2048}) {
    for (int64_t T : {1, 5, 33}) {
      // 0: no delta, 1: delta, 2: delta + gathered rows, 3: three deltas (a K-split GEMM's partials),
      // 4: three deltas + gathered rows.
      for (int mode = 0; mode < 5; ++mode) {
        const auto n = static_cast<size_t>(T * hidden);
        const int deltas = mode >= 3 ? 3 : 1;
        std::vector<float> x = test::random_f32(rng, n, -3, 3), delta = test::random_f32(rng, deltas * n, -1, 1);
        std::vector<float> w = test::random_f32(rng, static_cast<size_t>(hidden), 0.5f, 1.5f);
        std::vector<int32_t> rows;
        const bool gather = mode == 2 || mode == 4;
        if (gather) {
          for (int64_t r = T - 1; r >= 0; r -= 2) rows.push_back(static_cast<int32_t>(r));
        }
        const int64_t out_rows = gather ? static_cast<int64_t>(rows.size()) : T;
        DeviceArray<float> d_x(x), d_delta(delta), d_w(w);
        DeviceArray<int32_t> d_rows(rows.empty() ? std::vector<int32_t>{0} : rows);
        DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(out_rows * hidden), kNanBf16));
        TERN_ASSERT_CUDA(cuda::add_rmsnorm(d_x.get(), mode == 0 ? nullptr : d_delta.get(), d_w.get(),
                                           gather ? d_rows.get() : nullptr, out_rows, hidden, 1e-5f, d_out.get(),
                                           nullptr, deltas, static_cast<int64_t>(n)));
        std::vector<float> x_ref = x;
        if (mode != 0) {
          for (int64_t r = 0; r < T; ++r) {
            const bool touched = !gather || std::find(rows.begin(), rows.end(), r) != rows.end();
            if (!touched) continue;
            for (int64_t j = 0; j < hidden; ++j) {
              const auto at = static_cast<size_t>(r * hidden + j);
              float d = delta[at];
              for (int k = 1; k < deltas; ++k) d += delta[k * n + at];  // the deltas summed in order, then added
              x_ref[at] += d;
            }
          }
        }
        EXPECT_EQ(d_x.download(), x_ref) << "the deltas' sum and the residual add are fp32 adds in order: exact";
        std::vector<float> gathered;
        for (int64_t i = 0; i < out_rows; ++i) {
          const int64_t r = gather ? rows[static_cast<size_t>(i)] : i;
          gathered.insert(gathered.end(), x_ref.begin() + r * hidden, x_ref.begin() + (r + 1) * hidden);
        }
        std::vector<float> ref(gathered.size());
        cpu::rmsnorm(gathered.data(), out_rows, cpu::WeightVector{DType::kF32, w.data(), hidden}, 1e-5f, ref.data());
        test::expect_bf16_close(test::to_f32(d_out.download()), ref,
                                "rmsnorm hidden " + std::to_string(hidden) + " T " + std::to_string(T) + " mode " +
                                    std::to_string(mode));
      }
    }
  }
}

TEST(CudaKernels, SiluMulMatchesReference) {
  std::mt19937 rng(3);
  for (int64_t inter : {192, 300, 3072}) {
    for (int64_t T : {1, 7, 64}) {
      Bf16Data gu = test::random_bf16(rng, static_cast<size_t>(T * 2 * inter), -6, 6);
      DeviceArray<bf16> d_gu(gu.words);
      DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(T * inter), kNanBf16));
      TERN_ASSERT_CUDA(cuda::silu_mul(d_gu.get(), T, inter, d_out.get(), nullptr));
      std::vector<float> gate, up, ref(static_cast<size_t>(T * inter));
      for (int64_t t = 0; t < T; ++t) {
        auto row = gu.values.begin() + t * 2 * inter;
        gate.insert(gate.end(), row, row + inter);
        up.insert(up.end(), row + inter, row + 2 * inter);
      }
      cpu::silu_mul(gate.data(), up.data(), T * inter, ref.data());
      test::expect_bf16_close(test::to_f32(d_out.download()), ref,
                              "silu_mul inter " + std::to_string(inter) + " T " + std::to_string(T));
    }
  }
}


TEST(CudaKernels, RopeStoreKvMatchesReferenceAndWritesOnlyItsSlots) {
  std::mt19937 rng(4);
  // 64/8 heads of 128: 1,280 16-byte units per token, eight rounds of loads per lane.
  // head_dim 6 takes the one-pair units; the others 16-byte ones.
  for (const Shape s :
       {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 1}, Shape{64, 8, 128, 16}, Shape{4, 2, 6, 3}}) {
    const int64_t T = 23, q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
    const int64_t stride = q_dim + 2 * kv_dim;
    const int64_t num_slots = 64 * s.block_size;
    Bf16Data qkv = test::random_bf16(rng, static_cast<size_t>(T * stride), -2, 2);
    std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(num_slots));
    std::uniform_int_distribution<int32_t> pos_d(0, 131071);
    for (auto& p : positions) p = pos_d(rng);
    positions[0] = 0;
    positions[1] = 1;
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(static_cast<size_t>(T));
    const std::vector<float> inv_freq = cpu::rope_inv_freq(s.head_dim, 500000.0);

    const bf16 kPoison = 0x1234;
    DeviceArray<bf16> d_qkv(qkv.words);
    DeviceArray<int32_t> d_pos(positions), d_slots(slots);
    DeviceArray<float> d_freq(inv_freq);
    DeviceArray<bf16> d_k(std::vector<bf16>(static_cast<size_t>(num_slots * kv_dim), kPoison));
    DeviceArray<bf16> d_v(std::vector<bf16>(static_cast<size_t>(num_slots * kv_dim), kPoison));
    const cuda::RopeKvParams p =
        rope_params(s, T, d_qkv.get(), stride, d_pos.get(), d_slots.get(), d_freq.get(), d_k.get(), d_v.get());
    TERN_ASSERT_CUDA(cuda::rope_store_kv(p, nullptr));

    std::vector<float> q_ref, k_ref, v_ref;
    for (int64_t t = 0; t < T; ++t) {
      auto row = qkv.values.begin() + t * stride;
      q_ref.insert(q_ref.end(), row, row + q_dim);
      k_ref.insert(k_ref.end(), row + q_dim, row + q_dim + kv_dim);
      v_ref.insert(v_ref.end(), row + q_dim + kv_dim, row + stride);
    }
    std::vector<int64_t> pos64(positions.begin(), positions.end());
    cpu::rope_interleaved(q_ref.data(), T, s.num_heads, s.head_dim, pos64, inv_freq);
    cpu::rope_interleaved(k_ref.data(), T, s.num_kv_heads, s.head_dim, pos64, inv_freq);

    const std::vector<float> qkv_got = test::to_f32(d_qkv.download());
    const std::vector<bf16> k_got = d_k.download(), v_got = d_v.download();
    std::vector<float> q_got, k_slot, v_slot;
    for (int64_t t = 0; t < T; ++t) {
      q_got.insert(q_got.end(), qkv_got.begin() + t * stride, qkv_got.begin() + t * stride + q_dim);
      const int64_t slot = slots[static_cast<size_t>(t)];
      for (int64_t j = 0; j < kv_dim; ++j) {
        k_slot.push_back(bf16_to_f32(k_got[static_cast<size_t>(slot * kv_dim + j)]));
        v_slot.push_back(bf16_to_f32(v_got[static_cast<size_t>(slot * kv_dim + j)]));
      }
    }
    const std::string what = "rope head_dim " + std::to_string(s.head_dim);
    test::expect_bf16_close(q_got, q_ref, what + " q");
    test::expect_bf16_close(k_slot, k_ref, what + " k");
    EXPECT_EQ(v_slot, v_ref) << what << ": v is copied exactly";
    // k and v of the step's rows in qkv are left alone, and no other slot is touched.
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = q_dim; j < stride; ++j) {
        ASSERT_EQ(qkv_got[static_cast<size_t>(t * stride + j)], qkv.values[static_cast<size_t>(t * stride + j)]);
      }
    }
    std::vector<bool> written(static_cast<size_t>(num_slots), false);
    for (int32_t slot : slots) written[static_cast<size_t>(slot)] = true;
    for (int64_t slot = 0; slot < num_slots; ++slot) {
      if (written[static_cast<size_t>(slot)]) continue;
      for (int64_t j = 0; j < kv_dim; ++j) {
        ASSERT_EQ(k_got[static_cast<size_t>(slot * kv_dim + j)], kPoison) << what << " slot " << slot;
        ASSERT_EQ(v_got[static_cast<size_t>(slot * kv_dim + j)], kPoison) << what << " slot " << slot;
      }
    }
  }
}

// rope_store_kv into an fp8 pool: q rotated in place as before, k rotated in
// fp32 and rounded once to e4m3 (the CPU reference's rope then
// f32_to_fp8_e4m3; the GPU's sincosf may move a value across a rounding
// midpoint, so a code may differ by one step, rarely), v rounded to e4m3
// exactly as the reference, no other slot touched; values past +-448
// saturate.
TEST(CudaKernels, RopeStoreKvIntoFp8MatchesReference) {
  std::mt19937 rng(44);
  // head_dim 6 takes the one-pair units; the others 16-byte ones.
  for (const Shape s :
       {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 1}, Shape{64, 8, 128, 16}, Shape{4, 2, 6, 3}}) {
    const int64_t T = 23, q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
    const int64_t stride = q_dim + 2 * kv_dim;
    const int64_t num_slots = 64 * s.block_size;
    Bf16Data qkv = test::random_bf16(rng, static_cast<size_t>(T * stride), -20, 20);
    for (size_t i = 0; i < qkv.words.size(); i += 211) {  // a few past e4m3's range
      qkv.values[i] *= 50.0f;
      qkv.words[i] = f32_to_bf16(qkv.values[i]);
      qkv.values[i] = bf16_to_f32(qkv.words[i]);
    }
    // Token 0's first k pair (1000, 1000): one of its rotated values is past 448 at any angle.
    for (int64_t j = q_dim; j < q_dim + 2; ++j) {
      qkv.words[static_cast<size_t>(j)] = f32_to_bf16(1000.0f);
      qkv.values[static_cast<size_t>(j)] = 1000.0f;
    }
    std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(num_slots));
    std::uniform_int_distribution<int32_t> pos_d(0, 131071);
    for (auto& p : positions) p = pos_d(rng);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(static_cast<size_t>(T));
    const std::vector<float> inv_freq = cpu::rope_inv_freq(s.head_dim, 500000.0);

    const uint8_t kPoison = 0x5a;
    DeviceArray<bf16> d_qkv(qkv.words);
    DeviceArray<int32_t> d_pos(positions), d_slots(slots);
    DeviceArray<float> d_freq(inv_freq);
    DeviceArray<uint8_t> d_k(std::vector<uint8_t>(static_cast<size_t>(num_slots * kv_dim), kPoison));
    DeviceArray<uint8_t> d_v(std::vector<uint8_t>(static_cast<size_t>(num_slots * kv_dim), kPoison));
    cuda::RopeKvParams p =
        rope_params(s, T, d_qkv.get(), stride, d_pos.get(), d_slots.get(), d_freq.get(), nullptr, nullptr);
    p.planes = cuda::KvPlanes{nullptr, nullptr, d_k.get(), d_v.get()};
    TERN_ASSERT_CUDA(cuda::rope_store_kv(p, nullptr));

    std::vector<float> q_ref, k_ref, v_ref;
    for (int64_t t = 0; t < T; ++t) {
      auto row = qkv.values.begin() + t * stride;
      q_ref.insert(q_ref.end(), row, row + q_dim);
      k_ref.insert(k_ref.end(), row + q_dim, row + q_dim + kv_dim);
      v_ref.insert(v_ref.end(), row + q_dim + kv_dim, row + stride);
    }
    std::vector<int64_t> pos64(positions.begin(), positions.end());
    cpu::rope_interleaved(q_ref.data(), T, s.num_heads, s.head_dim, pos64, inv_freq);
    cpu::rope_interleaved(k_ref.data(), T, s.num_kv_heads, s.head_dim, pos64, inv_freq);

    const std::vector<float> qkv_got = test::to_f32(d_qkv.download());
    const std::vector<uint8_t> k_got = d_k.download(), v_got = d_v.download();
    std::vector<float> q_got;
    int64_t k_exact = 0, saturated = 0;
    const std::string what = "rope into fp8, head_dim " + std::to_string(s.head_dim);
    for (int64_t t = 0; t < T; ++t) {
      q_got.insert(q_got.end(), qkv_got.begin() + t * stride, qkv_got.begin() + t * stride + q_dim);
      const int64_t slot = slots[static_cast<size_t>(t)];
      for (int64_t j = 0; j < kv_dim; ++j) {
        const auto r = static_cast<size_t>(t * kv_dim + j);
        const uint8_t k = k_got[static_cast<size_t>(slot * kv_dim + j)], want = f32_to_fp8_e4m3(k_ref[r]);
        k_exact += k == want ? 1 : 0;
        saturated += (want & 0x7f) == 0x7e ? 1 : 0;
        // One code step apart at most, and never a NaN.
        ASSERT_LE(std::abs(fp8_e4m3_to_f32(k) - fp8_e4m3_to_f32(want)),
                  std::ldexp(1.0f, std::max(std::ilogb(std::fabs(k_ref[r]) + 1e-30f), -6) - 3) * 1.01f)
            << what << " k " << k_ref[r];
        ASSERT_EQ(v_got[static_cast<size_t>(slot * kv_dim + j)], f32_to_fp8_e4m3(v_ref[r])) << what << " v";
      }
    }
    EXPECT_GE(static_cast<double>(k_exact), 0.99 * static_cast<double>(T * kv_dim)) << what;
    EXPECT_GT(saturated, 0) << what << ": no value reached the saturation";
    test::expect_bf16_close(q_got, q_ref, what + " q");
    std::vector<bool> written(static_cast<size_t>(num_slots), false);
    for (int32_t slot : slots) written[static_cast<size_t>(slot)] = true;
    for (int64_t slot = 0; slot < num_slots; ++slot) {
      if (written[static_cast<size_t>(slot)]) continue;
      for (int64_t j = 0; j < kv_dim; ++j) {
        ASSERT_EQ(k_got[static_cast<size_t>(slot * kv_dim + j)], kPoison) << what << " slot " << slot;
        ASSERT_EQ(v_got[static_cast<size_t>(slot * kv_dim + j)], kPoison) << what << " slot " << slot;
      }
    }
  }
}

// x [T][K] and W [N][K] in bf16 (W scaled as a layer's), and cpu::linear's product of the same values.
struct GemmProblem {
  Bf16Data x, w;
  std::vector<float> ref;
};
GemmProblem gemm_problem(std::mt19937& rng, ThreadPool& pool, int64_t T, int64_t K, int64_t N) {
  GemmProblem g;
  g.x = test::random_bf16(rng, static_cast<size_t>(T * K));
  const float a = 1.7f / std::sqrt(static_cast<float>(K));
  g.w = test::random_bf16(rng, static_cast<size_t>(N * K), -a, a);
  g.ref.resize(static_cast<size_t>(T * N));
  cpu::linear(pool, g.x.values.data(), T, bf16_matrix(g.w, N, K), g.ref.data());
  return g;
}

TEST(CudaKernels, GemmMatchesReference) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Case {
    int64_t T, K, N;
  };
  for (const Case c : {Case{1, 1024, 2560}, Case{3, 1024, 6144}, Case{64, 3072, 1024}, Case{37, 64, 1280},
                       Case{200, 2048, 1024}}) {
    const auto [x, w, ref] = gemm_problem(rng, pool, c.T, c.K, c.N);
    DeviceArray<bf16> d_x(x.words), d_w(w.words);
    DeviceArray<bf16> d_y16(std::vector<bf16>(ref.size(), kNanBf16));
    DeviceArray<float> d_y32(std::vector<float>(ref.size(), NAN));
    const std::string what = "gemm " + std::to_string(c.T) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N);
    Status s16 = cuda::linear(handle, d_x.get(), c.T, c.K, d_w.get(), c.N, d_y16.get(), cuda::GemmOut::kBf16);
    Status s32 = cuda::linear(handle, d_x.get(), c.T, c.K, d_w.get(), c.N, d_y32.get(), cuda::GemmOut::kF32);
    ASSERT_TRUE(s16.is_ok()) << s16.to_string();
    ASSERT_TRUE(s32.is_ok()) << s32.to_string();
    test::expect_bf16_close(test::to_f32(d_y16.download()), ref, what + " bf16 out");
    EXPECT_LT(test::relative_l2(d_y32.download(), ref), 1e-4) << what << " fp32 out";
  }
  cublasDestroy(handle);
}

// linear_k_split: the K slices' fp32 partials sum to the product (cpu::linear over the same bf16 values), at
// decode sizes and the model's o and down shapes; a K the slices do not divide into multiples of 8 is refused.
TEST(CudaKernels, KSplitGemmPartialsSumToTheProduct) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Case {
    int64_t T, K, N;
    int splits;
  };
  for (const Case c : {Case{8, 2048, 1024, 2}, Case{256, 3072, 1024, 3}, Case{37, 384, 256, 3}, Case{5, 128, 64, 4},
                       Case{64, 3072, 1024, 4}}) {
    const auto [x, w, ref] = gemm_problem(rng, pool, c.T, c.K, c.N);
    DeviceArray<bf16> d_x(x.words), d_w(w.words);
    DeviceArray<float> d_p(std::vector<float>(ref.size() * static_cast<size_t>(c.splits), NAN));
    Status s = cuda::linear_k_split(handle, d_x.get(), c.T, c.K, d_w.get(), c.N, d_p.get(), c.splits);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    const std::vector<float> parts = d_p.download();
    std::vector<float> sum(ref.size(), 0.0f);
    for (int k = 0; k < c.splits; ++k) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += parts[k * sum.size() + i];
    }
    EXPECT_LT(test::relative_l2(sum, ref), 1e-4) << "k-split gemm " << c.T << "x" << c.K << "x" << c.N << " in "
                                                << c.splits;
  }
  DeviceArray<bf16> d_x(std::vector<bf16>(8 * 100)), d_w(std::vector<bf16>(100 * 64));
  DeviceArray<float> d_p(std::vector<float>(2 * 8 * 64));
  const Status bad = cuda::linear_k_split(handle, d_x.get(), 8, 100, d_w.get(), 64, d_p.get(), 2);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("does not split"), std::string::npos) << bad.to_string();
  cublasDestroy(handle);
}

// ---- The decode GEMV, each input and output form against cpu::linear over
// the same bf16 inputs (made on the host as the kernel makes them).

// sm_count sizes the grid: 4 makes the warps stride over several rows, 132
// (an H100/H200) gives most shapes here one row per warp.
void check_gemv(cuda::GemvInput in, cuda::GemvOutput out, int64_t T, int64_t K, int64_t N, int sm_count,
                std::mt19937& rng) {
  ThreadPool pool(2);
  const std::string what = "gemv in " + std::to_string(static_cast<int>(in)) + " out " +
                           std::to_string(static_cast<int>(out)) + " T " + std::to_string(T) + " K " +
                           std::to_string(K) + " N " + std::to_string(N) + " sms " + std::to_string(sm_count);
  const float a = 1.7f / std::sqrt(static_cast<float>(K));
  Bf16Data w = test::random_bf16(rng, static_cast<size_t>(N * K), -a, a);
  DeviceArray<bf16> d_w(w.words);
  cuda::GemvParams p;
  p.input = in;
  p.output = out;
  p.num_tokens = T;
  p.in_features = K;
  p.out_features = N;
  p.w = d_w.get();
  p.eps = 1e-5f;

  std::vector<float> input;  // the bf16 rows the kernel should build, as fp32
  Bf16Data xb;
  std::vector<float> xf, nw;
  std::vector<int32_t> rows;
  std::unique_ptr<DeviceArray<bf16>> d_xb;
  std::unique_ptr<DeviceArray<float>> d_xf, d_nw;
  std::unique_ptr<DeviceArray<int32_t>> d_rows;
  if (in == cuda::GemvInput::kBf16) {
    xb = test::random_bf16(rng, static_cast<size_t>(T * K));
    input = xb.values;
    d_xb = std::make_unique<DeviceArray<bf16>>(xb.words);
    p.x_bf16 = d_xb->get();
  } else if (in == cuda::GemvInput::kSiluMul) {
    xb = test::random_bf16(rng, static_cast<size_t>(T * 2 * K), -6, 6);
    input.resize(static_cast<size_t>(T * K));
    for (int64_t t = 0; t < T; ++t) {
      const float* row = xb.values.data() + t * 2 * K;
      cpu::silu_mul(row, row + K, K, input.data() + t * K);
    }
    input = round_bf16(input);
    d_xb = std::make_unique<DeviceArray<bf16>>(xb.words);
    p.x_bf16 = d_xb->get();
  } else {
    // Residual rows gathered in reverse from 2T rows, as the final norm gathers logit rows.
    xf = test::random_f32(rng, static_cast<size_t>(2 * T * K), -3, 3);
    nw = test::random_f32(rng, static_cast<size_t>(K), 0.5f, 1.5f);
    std::vector<float> gathered;
    for (int64_t t = 0; t < T; ++t) {
      rows.push_back(static_cast<int32_t>(2 * T - 1 - 2 * t));
      gathered.insert(gathered.end(), xf.begin() + rows.back() * K, xf.begin() + (rows.back() + 1) * K);
    }
    input.resize(gathered.size());
    cpu::rmsnorm(gathered.data(), T, cpu::WeightVector{DType::kF32, nw.data(), K}, 1e-5f, input.data());
    input = round_bf16(input);
    d_xf = std::make_unique<DeviceArray<float>>(xf);
    d_nw = std::make_unique<DeviceArray<float>>(nw);
    d_rows = std::make_unique<DeviceArray<int32_t>>(rows);
    p.x_f32 = d_xf->get();
    p.norm_weight = d_nw->get();
    p.rows = d_rows->get();
  }
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(pool, input.data(), T, bf16_matrix(w, N, K), ref.data());
  const double tol = in == cuda::GemvInput::kBf16 ? 1e-4 : 2e-3;
  if (out == cuda::GemvOutput::kBf16) {
    DeviceArray<bf16> d_y(std::vector<bf16>(ref.size(), kNanBf16));
    p.y = d_y.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    const std::vector<float> got = test::to_f32(d_y.download());
    if (in == cuda::GemvInput::kBf16) {
      test::expect_bf16_close(got, ref, what);
    } else {
      EXPECT_LT(test::relative_l2(got, ref), 1e-2) << what;
    }
  } else if (out == cuda::GemvOutput::kF32) {
    DeviceArray<float> d_y(std::vector<float>(ref.size(), NAN));
    p.y = d_y.get();
    // The folded argmax: each token's key names the host argmax of the row written.
    DeviceArray<uint64_t> d_keys(std::vector<uint64_t>(static_cast<size_t>(T), 0));
    p.argmax_keys = d_keys.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    const std::vector<float> got = d_y.download();
    EXPECT_LT(test::relative_l2(got, ref), tol) << what;
    const std::vector<uint64_t> keys = d_keys.download();
    for (int64_t t = 0; t < T; ++t) {
      const std::span<const float> row(got.data() + t * N, static_cast<size_t>(N));
      EXPECT_EQ(cuda::pick_of(keys[static_cast<size_t>(t)]), argmax(row)) << what << " token " << t;
    }
  } else {
    const std::vector<float> y0 = test::random_f32(rng, ref.size(), -1, 1);
    DeviceArray<float> d_y(y0);
    p.y = d_y.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    std::vector<float> got = d_y.download();
    for (size_t i = 0; i < got.size(); ++i) got[i] -= y0[i];
    EXPECT_LT(test::relative_l2(got, ref), tol) << what << " (added into y)";
  }
}

TEST(CudaKernels, GemvMatchesReference) {
  std::mt19937 rng(6);
  using In = cuda::GemvInput;
  using Out = cuda::GemvOutput;
  const std::pair<In, Out> forms[] = {{In::kRmsNorm, Out::kBf16},
                                      {In::kRmsNorm, Out::kF32},
                                      {In::kBf16, Out::kAddF32},
                                      {In::kSiluMul, Out::kAddF32},
                                      {In::kBf16, Out::kBf16}};
  struct Shape2 {
    int64_t K, N;
  };
  for (const auto& [in, out] : forms) {
    for (int64_t T : {1, 3, 4, 8}) {
      // K past one unrolled step (2048) and not a multiple of it; N not a
      // multiple of the rows per block, and more rows than the grid's warps.
      for (const Shape2 sh : {Shape2{64, 37}, Shape2{1000, 300}, Shape2{1024, 2560}, Shape2{3072, 1024},
                              Shape2{2056, 129}}) {
        for (int sms : {4, 132}) check_gemv(in, out, T, sh.K, sh.N, sms, rng);
      }
    }
  }
  EXPECT_TRUE(cuda::gemv_supported(1024));
  EXPECT_FALSE(cuda::gemv_supported(1001));
}

// The q|k|v form: RoPE and the KV-cache write done on the fp32 sums, so
// against cpu::linear then cpu::rope_interleaved, within bf16 tolerance.
// fp8: the planes are e4m3, each k and v code the reference's rounding or
// one code step from it (the GEMV rotates its fp32 sums, the reference
// bf16-rounded ones).
void check_gemv_qkv_rope(bool fp8) {
  std::mt19937 rng(fp8 ? 9 : 8);
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 1}}) {
    for (int64_t T : {1, 5, 8}) {
      const int64_t K = s.head_dim == 128 ? 1024 : 64;
      const int64_t q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
      const int64_t N = q_dim + 2 * kv_dim, num_slots = 40;
      const float a = 1.7f / std::sqrt(static_cast<float>(K));
      Bf16Data w = test::random_bf16(rng, static_cast<size_t>(N * K), -a, a);
      std::vector<float> x = test::random_f32(rng, static_cast<size_t>(T * K), -3, 3);
      std::vector<float> nw = test::random_f32(rng, static_cast<size_t>(K), 0.5f, 1.5f);
      std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(num_slots));
      std::uniform_int_distribution<int32_t> pos_d(0, 5000);
      for (auto& p : positions) p = pos_d(rng);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(static_cast<size_t>(T));
      const std::vector<float> inv_freq = cpu::rope_inv_freq(s.head_dim, 500000.0);

      const bf16 kPoison = 0x1234;
      DeviceArray<bf16> d_w(w.words);
      DeviceArray<float> d_x(x), d_nw(nw), d_freq(inv_freq);
      DeviceArray<int32_t> d_pos(positions), d_slots(slots);
      DeviceArray<bf16> d_y(std::vector<bf16>(static_cast<size_t>(T * N), kPoison));
      DeviceArray<bf16> d_k(std::vector<bf16>(static_cast<size_t>(num_slots * kv_dim), kPoison));
      DeviceArray<bf16> d_v(std::vector<bf16>(static_cast<size_t>(num_slots * kv_dim), kPoison));
      const uint8_t kPoison8 = 0x5a;
      DeviceArray<uint8_t> d_k8(std::vector<uint8_t>(static_cast<size_t>(num_slots * kv_dim), kPoison8));
      DeviceArray<uint8_t> d_v8(std::vector<uint8_t>(static_cast<size_t>(num_slots * kv_dim), kPoison8));
      cuda::GemvParams p;
      p.input = cuda::GemvInput::kRmsNorm;
      p.output = cuda::GemvOutput::kQkvRope;
      p.x_f32 = d_x.get();
      p.norm_weight = d_nw.get();
      p.eps = 1e-5f;
      p.num_tokens = T;
      p.in_features = K;
      p.out_features = N;
      p.w = d_w.get();
      p.y = d_y.get();
      p.heads = {s.num_heads, s.num_kv_heads, s.head_dim};
      p.places = {d_pos.get(), d_slots.get(), d_freq.get()};
      p.planes = fp8 ? cuda::KvPlanes{nullptr, nullptr, d_k8.get(), d_v8.get()}
                     : cuda::KvPlanes{d_k.get(), d_v.get(), nullptr, nullptr};
      // 4 multiprocessors: each warp strides over several row pairs.
      TERN_ASSERT_CUDA(cuda::gemv(p, T == 5 ? 132 : 4, nullptr));

      const test::QkvReference want = test::qkv_rope_reference(x, nw, bf16_matrix(w, N, K), T, s.num_heads,
                                                               s.num_kv_heads, s.head_dim, positions, inv_freq);

      const std::vector<bf16> y = d_y.download(), k_got = d_k.download(), v_got = d_v.download();
      const std::vector<uint8_t> k8 = d_k8.download(), v8 = d_v8.download();
      const std::string what = std::string("gemv qkv+rope") + (fp8 ? " into fp8" : "") + " head_dim " +
                               std::to_string(s.head_dim) + " T " + std::to_string(T);
      std::vector<float> q_got, k_slot, v_slot;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < N; ++j) {
          const bf16 word = y[static_cast<size_t>(t * N + j)];
          if (j < q_dim) {
            q_got.push_back(bf16_to_f32(word));
          } else {
            ASSERT_EQ(word, kPoison) << "the k and v parts of the q|k|v row are not written";
          }
        }
        const int64_t slot = slots[static_cast<size_t>(t)];
        for (int64_t j = 0; j < kv_dim; ++j) {
          const auto at = static_cast<size_t>(slot * kv_dim + j);
          k_slot.push_back(fp8 ? fp8_e4m3_to_f32(k8[at]) : bf16_to_f32(k_got[at]));
          v_slot.push_back(fp8 ? fp8_e4m3_to_f32(v8[at]) : bf16_to_f32(v_got[at]));
        }
      }
      EXPECT_LT(test::relative_l2(q_got, want.q), 1e-2) << what << " q";
      if (fp8) {
        int64_t exact = 0;
        for (size_t i = 0; i < k_slot.size(); ++i) {
          for (const auto& [got, ref] : {std::pair{k_slot[i], want.k[i]}, std::pair{v_slot[i], want.v[i]}}) {
            const float want = fp8_e4m3_to_f32(f32_to_fp8_e4m3(ref));
            exact += got == want ? 1 : 0;
            ASSERT_LE(std::abs(got - want), std::ldexp(1.0f, std::max(std::ilogb(std::fabs(ref) + 1e-30f), -6) - 3) * 1.01f)
                << what << " element " << i << " reference " << ref;
          }
        }
        EXPECT_GE(static_cast<double>(exact), 0.95 * 2.0 * static_cast<double>(k_slot.size())) << what;
      } else {
        EXPECT_LT(test::relative_l2(k_slot, want.k), 1e-2) << what << " k";
        EXPECT_LT(test::relative_l2(v_slot, want.v), 1e-2) << what << " v";
      }
      size_t untouched = 0;
      for (size_t i = 0; i < k_got.size(); ++i) {
        untouched += fp8 ? (k8[i] == kPoison8) + (v8[i] == kPoison8) : (k_got[i] == kPoison) + (v_got[i] == kPoison);
      }
      EXPECT_EQ(untouched, 2 * static_cast<size_t>((num_slots - T) * kv_dim)) << what << ": other slots written";
      if (fp8) {
        for (size_t i = 0; i < k_got.size(); ++i) {
          ASSERT_TRUE(k_got[i] == kPoison && v_got[i] == kPoison) << what << ": the bf16 planes written";
        }
      }
    }
  }
}

TEST(CudaKernels, GemvQkvRopeMatchesLinearThenRope) { check_gemv_qkv_rope(false); }
TEST(CudaKernels, GemvQkvRopeIntoFp8MatchesLinearThenRope) { check_gemv_qkv_rope(true); }

TEST(CudaKernels, ArgmaxMatchesHostArgmax) {
  std::mt19937 rng(7);
  for (int64_t vocab : {1, 7, 1280, 103424, 1001, 4, 4004}) {  // 4004: 16 uneven slices of whole float4s
    const int64_t rows = 9;
    std::vector<float> logits = test::random_f32(rng, static_cast<size_t>(rows * vocab), -10, 10);
    auto row = [&](int64_t r) { return logits.begin() + r * vocab; };
    // Row 1: a tie between two maxima (the lower index wins); row 2: NaNs
    // around the maximum; row 3: all NaN (0); row 4: all -inf (the first);
    // row 5: the maximum last; row 6: all equal.
    if (vocab > 3) {
      row(1)[vocab - 1] = 50;
      row(1)[2] = 50;
      row(2)[0] = NAN;
      row(2)[vocab / 2] = 40;
      row(2)[vocab - 1] = NAN;
    }
    std::fill(row(3), row(3) + vocab, NAN);
    std::fill(row(4), row(4) + vocab, -INFINITY);
    row(5)[vocab - 1] = 99;
    std::fill(row(6), row(6) + vocab, 0.25f);
    // Row 7: -0 and +0 are equal, so the first of them wins.
    std::fill(row(7), row(7) + vocab, -100.0f);
    row(7)[0] = -0.0f;
    if (vocab > 5) row(7)[5] = 0.0f;
    DeviceArray<float> d_logits(logits);
    DeviceArray<uint64_t> d_keys(std::vector<uint64_t>(static_cast<size_t>(rows), 0));
    TERN_ASSERT_CUDA(cuda::argmax_rows(d_logits.get(), rows, vocab, d_keys.get(), nullptr));
    const std::vector<uint64_t> got = d_keys.download();
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t want = argmax(std::span<const float>(&*row(r), static_cast<size_t>(vocab)));
      EXPECT_EQ(cuda::pick_of(got[static_cast<size_t>(r)]), want) << "vocab " << vocab << " row " << r;
    }
  }
}

}  // namespace
}  // namespace tern
