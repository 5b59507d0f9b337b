// Each CUDA kernel against the CPU reference kernel it replaces, on random
// inputs of varied shapes: lengths 1..300 across block boundaries, GQA 8:1
// and 2:1 and 1:1, head_dim 8..128, one and several attention splits.
// Tolerances: bit-exact where the GPU only moves data (embedding, V rows,
// the fp32 residual add); bf16 outputs of fp32 math within 1/128 per element
// (gpu_test_util.h); GEMMs with fp32 output within 1e-4 relative L2.
// Outputs are poisoned with NaN first so an unwritten element fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "base/thread_pool.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::bf16;
using test::Bf16Data;
using test::DeviceArray;

constexpr bf16 kNanBf16 = 0x7fc0;

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
  for (int64_t hidden : {64, 1000, 1024}) {
    for (int64_t T : {1, 5, 33}) {
      for (int mode = 0; mode < 3; ++mode) {  // 0: no delta, 1: delta, 2: delta + gathered rows
        const auto n = static_cast<size_t>(T * hidden);
        std::vector<float> x = test::random_f32(rng, n, -3, 3), delta = test::random_f32(rng, n, -1, 1);
        std::vector<float> w = test::random_f32(rng, static_cast<size_t>(hidden), 0.5f, 1.5f);
        std::vector<int32_t> rows;
        if (mode == 2) {
          for (int64_t r = T - 1; r >= 0; r -= 2) rows.push_back(static_cast<int32_t>(r));
        }
        const int64_t out_rows = mode == 2 ? static_cast<int64_t>(rows.size()) : T;
        DeviceArray<float> d_x(x), d_delta(delta), d_w(w);
        DeviceArray<int32_t> d_rows(rows.empty() ? std::vector<int32_t>{0} : rows);
        DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(out_rows * hidden), kNanBf16));
        TERN_ASSERT_CUDA(cuda::add_rmsnorm(d_x.get(), mode == 0 ? nullptr : d_delta.get(), d_w.get(),
                                           mode == 2 ? d_rows.get() : nullptr, out_rows, hidden, 1e-5f,
                                           d_out.get(), nullptr));
        std::vector<float> x_ref = x;
        if (mode != 0) {
          for (int64_t r = 0; r < T; ++r) {
            const bool touched = mode == 1 || std::find(rows.begin(), rows.end(), r) != rows.end();
            if (!touched) continue;
            for (int64_t j = 0; j < hidden; ++j) x_ref[static_cast<size_t>(r * hidden + j)] += delta[static_cast<size_t>(r * hidden + j)];
          }
        }
        EXPECT_EQ(d_x.download(), x_ref) << "the residual add is one fp32 add: exact";
        std::vector<float> gathered;
        for (int64_t i = 0; i < out_rows; ++i) {
          const int64_t r = mode == 2 ? rows[static_cast<size_t>(i)] : i;
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

struct Shape {
  int num_heads, num_kv_heads, head_dim, block_size;
};

TEST(CudaKernels, RopeStoreKvMatchesReferenceAndWritesOnlyItsSlots) {
  std::mt19937 rng(4);
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 1}}) {
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
    cuda::RopeKvParams p;
    p.qkv = d_qkv.get();
    p.row_stride = stride;
    p.positions = d_pos.get();
    p.slots = d_slots.get();
    p.inv_freq = d_freq.get();
    p.num_tokens = T;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = s.head_dim;
    p.k_cache = d_k.get();
    p.v_cache = d_v.get();
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

// A step over many sequences: each has `length` positions of which the last
// `fresh` are this step's tokens (fresh == length: whole prefill; 1: decode;
// between: a prefill chunk over a cached prefix).
struct AttnSeq {
  int64_t length, fresh;
  std::vector<int32_t> table;
};

void check_attention(const Shape& s, uint32_t seed, int split_len) {
  std::mt19937 rng(seed);
  const int64_t bs = s.block_size;
  std::vector<int64_t> lengths = {1, bs - 1 > 0 ? bs - 1 : 1, bs, bs + 1, 2 * bs, 299, 300, 33, 64, 65};
  std::uniform_int_distribution<int64_t> len_d(1, 300);
  for (int i = 0; i < 6; ++i) lengths.push_back(len_d(rng));
  std::vector<AttnSeq> seqs;
  int64_t blocks_needed = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t L = lengths[i];
    int64_t fresh = L;
    if (i % 3 == 1) fresh = 1;
    if (i % 3 == 2) fresh = std::uniform_int_distribution<int64_t>(1, L)(rng);
    seqs.push_back(AttnSeq{L, fresh, {}});
    blocks_needed += (L + bs - 1) / bs;
  }
  const int64_t num_blocks = blocks_needed + 3;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (AttnSeq& q : seqs) {
    for (int64_t b = 0; b < (q.length + bs - 1) / bs; ++b) q.table.push_back(ids[next++]);
  }

  const int64_t q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
  const int64_t q_stride = q_dim + 2 * kv_dim;  // q sits in a fused qkv row, as in the model
  int64_t T = 0, max_ctx = 0;
  for (const AttnSeq& q : seqs) {
    T += q.fresh;
    max_ctx = std::max(max_ctx, q.length);
  }
  Bf16Data q_all = test::random_bf16(rng, static_cast<size_t>(T * q_stride), -2, 2);
  Bf16Data k_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -2, 2);
  Bf16Data v_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -1, 1);

  // Reference: the CPU batched attention over the same (bf16-valued) numbers.
  std::vector<float> q_ref;
  std::vector<int64_t> positions;
  std::vector<int32_t> positions32, token_seq, table_offsets, tables;
  std::vector<std::vector<const float*>> kptr(seqs.size()), vptr(seqs.size());
  std::vector<cpu::AttentionSequence> ref_seqs;
  int64_t first = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeq& q = seqs[i];
    table_offsets.push_back(static_cast<int32_t>(tables.size()));
    tables.insert(tables.end(), q.table.begin(), q.table.end());
    for (int32_t b : q.table) {
      kptr[i].push_back(k_pool.values.data() + static_cast<int64_t>(b) * bs * kv_dim);
      vptr[i].push_back(v_pool.values.data() + static_cast<int64_t>(b) * bs * kv_dim);
    }
    cpu::AttentionSequence as;
    as.first_token = first;
    as.num_tokens = q.fresh;
    as.k = cpu::KvRowTable{kptr[i], bs, kv_dim};
    as.v = cpu::KvRowTable{vptr[i], bs, kv_dim};
    ref_seqs.push_back(as);
    for (int64_t j = 0; j < q.fresh; ++j) {
      positions.push_back(q.length - q.fresh + j);
      positions32.push_back(static_cast<int32_t>(q.length - q.fresh + j));
      token_seq.push_back(static_cast<int32_t>(i));
      auto row = q_all.values.begin() + (first + j) * q_stride;
      q_ref.insert(q_ref.end(), row, row + q_dim);
    }
    first += q.fresh;
  }
  ThreadPool pool(2);
  std::vector<float> ref(static_cast<size_t>(T * q_dim));
  cpu::attention_batch(pool, q_ref.data(), positions, ref_seqs,
                       cpu::AttentionShape{s.num_heads, s.num_kv_heads, s.head_dim}, ref.data());

  int num_splits = 1;
  if (split_len > 0) num_splits = static_cast<int>((max_ctx + split_len - 1) / split_len);
  DeviceArray<bf16> d_q(q_all.words), d_k(k_pool.words), d_v(v_pool.words);
  DeviceArray<int32_t> d_pos(positions32), d_seq(token_seq), d_off(table_offsets), d_tables(tables);
  DeviceArray<bf16> d_out(std::vector<bf16>(static_cast<size_t>(T * q_dim), kNanBf16));
  const size_t partial_rows = static_cast<size_t>(T * s.num_heads * num_splits);
  DeviceArray<float> d_partial(partial_rows * static_cast<size_t>(s.head_dim)), d_ml(partial_rows * 2);
  cuda::PagedAttentionParams p;
  p.q = d_q.get();
  p.q_row_stride = q_stride;
  p.k_cache = d_k.get();
  p.v_cache = d_v.get();
  p.positions = d_pos.get();
  p.token_seq = d_seq.get();
  p.table_offsets = d_off.get();
  p.block_tables = d_tables.get();
  p.num_tokens = T;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.num_splits = num_splits;
  p.split_len = split_len;
  p.partial_out = d_partial.get();
  p.partial_ml = d_ml.get();
  p.out = d_out.get();
  p.out_row_stride = q_dim;
  TERN_ASSERT_CUDA(cuda::paged_attention(p, nullptr));
  TERN_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = test::to_f32(d_out.download());
  const std::string what = "attention heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
                           " head_dim " + std::to_string(s.head_dim) + " block " + std::to_string(bs) + " splits " +
                           std::to_string(num_splits);
  test::expect_bf16_close(got, ref, what);
  // Per token too, so one bad sequence cannot hide in the total.
  first = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto b = static_cast<size_t>(first * q_dim), e = static_cast<size_t>((first + seqs[i].fresh) * q_dim);
    std::vector<float> g(got.begin() + b, got.begin() + e), r(ref.begin() + b, ref.begin() + e);
    EXPECT_LT(test::relative_l2(g, r), 1e-2)
        << what << ": sequence " << i << " length " << seqs[i].length << " fresh " << seqs[i].fresh;
    first += seqs[i].fresh;
  }
}

TEST(CudaKernels, PagedAttentionMatchesReference) {
  uint32_t seed = 10;
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{16, 2, 8, 16}, Shape{4, 2, 16, 7}, Shape{8, 8, 64, 1},
                        Shape{16, 2, 128, 5}}) {
    check_attention(s, seed++, /*split_len=*/0);
  }
}

TEST(CudaKernels, SplitAttentionMatchesReference) {
  uint32_t seed = 20;
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 3}}) {
    for (int split_len : {32, 64, 160}) check_attention(s, seed++, split_len);
  }
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
    Bf16Data x = test::random_bf16(rng, static_cast<size_t>(c.T * c.K));
    const float a = 1.7f / std::sqrt(static_cast<float>(c.K));
    Bf16Data w = test::random_bf16(rng, static_cast<size_t>(c.N * c.K), -a, a);
    std::vector<float> ref(static_cast<size_t>(c.T * c.N));
    cpu::linear(pool, x.values.data(), c.T, bf16_matrix(w, c.N, c.K), ref.data());
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

}  // namespace
}  // namespace tern
