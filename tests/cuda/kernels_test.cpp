// Each CUDA kernel against the CPU reference kernel it replaces, on random
// inputs of varied shapes: lengths 1..300 across block boundaries, GQA 8:1
// and 2:1 and 1:1, head_dim 8..128, one and several attention splits.
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

struct Shape {
  int num_heads, num_kv_heads, head_dim, block_size;
};

// rope_store_kv's params for T tokens of q|k|v rows (stride apart) into the K/V planes k, v.
cuda::RopeKvParams rope_params(const Shape& s, int64_t T, bf16* qkv, int64_t stride, const int32_t* positions,
                               const int32_t* slots, const float* inv_freq, bf16* k, bf16* v) {
  cuda::RopeKvParams p;
  p.qkv = qkv;
  p.row_stride = stride;
  p.num_tokens = T;
  p.heads = {s.num_heads, s.num_kv_heads, s.head_dim};
  p.places = {positions, slots, inv_freq};
  p.planes = cuda::KvPlanes{k, v, nullptr, nullptr};
  return p;
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

// A step over many sequences: each has `length` positions of which the last
// `fresh` are this step's tokens (fresh == length: whole prefill; 1: decode;
// between: a prefill chunk over a cached prefix).
struct AttnSeq {
  int64_t length, fresh;
  std::vector<int32_t> table;
};

// The device side of one attention launch over T tokens: the sequences'
// metadata, the output (NaN-filled) and the splits' scratch; params() names
// them with the q rows and K/V planes given.
struct AttnLaunch {
  Shape s;
  int num_splits;
  int64_t T;
  DeviceArray<int32_t> pos, seq, off, tables;
  DeviceArray<bf16> out;
  DeviceArray<float> partial, ml;
  DeviceArray<int> counters;
  AttnLaunch(const Shape& shape, int splits, const std::vector<int32_t>& positions,
             const std::vector<int32_t>& token_seq, const std::vector<int32_t>& table_offsets,
             const std::vector<int32_t>& block_tables)
      : s(shape),
        num_splits(splits),
        T(static_cast<int64_t>(positions.size())),
        pos(positions),
        seq(token_seq),
        off(table_offsets),
        tables(block_tables),
        out(std::vector<bf16>(static_cast<size_t>(T * s.num_heads * s.head_dim), kNanBf16)),
        partial(static_cast<size_t>(T * s.num_heads * splits * s.head_dim)),
        ml(static_cast<size_t>(T * s.num_heads * splits * 2)),
        counters(std::vector<int>(static_cast<size_t>(T * s.num_kv_heads), 0)) {}
  cuda::PagedAttentionParams params(const bf16* q, int64_t q_stride, bf16* k, bf16* v) const {
    return params(q, q_stride, cuda::KvPlanes{k, v, nullptr, nullptr});
  }
  cuda::PagedAttentionParams params(const bf16* q, int64_t q_stride, const cuda::KvPlanes& planes) const {
    cuda::PagedAttentionParams p;
    p.q = q;
    p.q_row_stride = q_stride;
    p.heads = {s.num_heads, s.num_kv_heads, s.head_dim};
    p.places.positions = pos.get();
    p.planes = planes;
    p.tables = {seq.get(), off.get(), tables.get(), s.block_size};
    p.num_tokens = T;
    p.num_splits = num_splits;
    p.partial_out = partial.get();
    p.partial_ml = ml.get();
    p.split_counters = counters.get();
    p.out = out.get();
    p.out_row_stride = static_cast<int64_t>(s.num_heads) * s.head_dim;
    return p;
  }
};

// tiles: the prefill form, as a general step with a multi-token chunk runs
// it: chunks of >= 2 tokens in query tiles (paged_attention_prefill), the
// one-token chunks through the decode kernel's token list. fp8: the pool
// holds e4m3 bytes, and the reference reads the same bytes through an fp8
// KvRowTable (the CPU reference of --kv-cache-dtype fp8). stage_kv false:
// the tensor-core decode form's register loads (what GPUs with less shared
// memory run) instead of its shared-memory stages; an e4m3 pool takes the
// register loads either way.
void check_attention(const Shape& s, uint32_t seed, int num_splits, bool tiles = false, int chunk_keys = 64,
                     bool fp8 = false, bool stage_kv = true) {
  std::mt19937 rng(seed);
  const int64_t bs = s.block_size;
  std::vector<int64_t> lengths = {1, bs - 1 > 0 ? bs - 1 : 1, bs, bs + 1, 2 * bs, 299, 300, 33, 64, 700, 65};
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
  int64_t T = 0;
  for (const AttnSeq& q : seqs) T += q.fresh;
  Bf16Data q_all = test::random_bf16(rng, static_cast<size_t>(T * q_stride), -2, 2);
  Bf16Data k_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -2, 2);
  Bf16Data v_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -1, 1);
  // The fp8 pool: e4m3 of the same numbers scaled to use the format's range
  // (some past +-448, saturated).
  std::vector<uint8_t> k8(k_pool.values.size()), v8(v_pool.values.size());
  for (size_t i = 0; i < k8.size(); ++i) {
    k8[i] = f32_to_fp8_e4m3(k_pool.values[i] * (i % 97 == 3 ? 400.0f : 1.5f));
    v8[i] = f32_to_fp8_e4m3(v_pool.values[i] * (i % 89 == 5 ? 600.0f : 3.0f));
  }

  // Reference: the CPU batched attention over the same (bf16-valued) numbers.
  std::vector<float> q_ref;
  std::vector<int64_t> positions;
  std::vector<int32_t> positions32, token_seq, table_offsets, tables;
  std::vector<std::vector<const float*>> kptr(seqs.size()), vptr(seqs.size());
  std::vector<std::vector<const uint8_t*>> kptr8(seqs.size()), vptr8(seqs.size());
  std::vector<cpu::AttentionSequence> ref_seqs;
  int64_t first = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeq& q = seqs[i];
    table_offsets.push_back(static_cast<int32_t>(tables.size()));
    tables.insert(tables.end(), q.table.begin(), q.table.end());
    for (int32_t b : q.table) {
      kptr[i].push_back(k_pool.values.data() + static_cast<int64_t>(b) * bs * kv_dim);
      vptr[i].push_back(v_pool.values.data() + static_cast<int64_t>(b) * bs * kv_dim);
      kptr8[i].push_back(k8.data() + static_cast<int64_t>(b) * bs * kv_dim);
      vptr8[i].push_back(v8.data() + static_cast<int64_t>(b) * bs * kv_dim);
    }
    cpu::AttentionSequence as;
    as.first_token = first;
    as.num_tokens = q.fresh;
    as.k = fp8 ? cpu::KvRowTable{{}, bs, kv_dim, kptr8[i], 1.0f, {}} : cpu::KvRowTable{kptr[i], bs, kv_dim, {}, 1.0f, {}};
    as.v = fp8 ? cpu::KvRowTable{{}, bs, kv_dim, vptr8[i], 1.0f, {}} : cpu::KvRowTable{vptr[i], bs, kv_dim, {}, 1.0f, {}};
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

  DeviceArray<bf16> d_q(q_all.words), d_k(k_pool.words), d_v(v_pool.words);
  DeviceArray<uint8_t> d_k8(k8), d_v8(v8);
  AttnLaunch launch_bufs(s, num_splits, positions32, token_seq, table_offsets, tables);
  DeviceArray<bf16>& d_out = launch_bufs.out;
  cuda::PagedAttentionParams p =
      fp8 ? launch_bufs.params(d_q.get(), q_stride, cuda::KvPlanes{nullptr, nullptr, d_k8.get(), d_v8.get()})
          : launch_bufs.params(d_q.get(), q_stride, d_k.get(), d_v.get());
  std::vector<int32_t> singles, tile_list;
  if (tiles) {
    const int tile = cuda::prefill_tile_tokens(s.num_heads, s.num_kv_heads, s.head_dim);
    ASSERT_GT(tile, 0);
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const AttnSeq& q = seqs[i];
      if (q.fresh == 1) singles.push_back(static_cast<int32_t>(row));
      for (int64_t at = 0; q.fresh > 1 && at < q.fresh; at += tile) {
        const int64_t count = std::min<int64_t>(tile, q.fresh - at);
        tile_list.push_back(static_cast<int32_t>(row + at));
        tile_list.push_back(static_cast<int32_t>(count));
        tile_list.push_back(static_cast<int32_t>(q.length - q.fresh + at + count));  // keys its last token sees
        tile_list.push_back(table_offsets[i]);
      }
      row += q.fresh;
    }
    ASSERT_FALSE(tile_list.empty());
    ASSERT_FALSE(singles.empty());
  }
  DeviceArray<int32_t> d_singles(singles.empty() ? std::vector<int32_t>{0} : singles);
  DeviceArray<int32_t> d_tiles(tile_list.empty() ? std::vector<int32_t>{0, 0, 0, 0} : tile_list);
  p.stage_kv = stage_kv;
  auto launch = [&] {
    if (!tiles) return cuda::paged_attention(p, nullptr);
    cuda::PagedAttentionParams single = p;
    single.token_list = d_singles.get();
    single.num_tokens = static_cast<int64_t>(singles.size());
    const cudaError_t e = cuda::paged_attention(single, nullptr);
    if (e != cudaSuccess) return e;
    return cuda::paged_attention_prefill(p, d_tiles.get(), static_cast<int64_t>(tile_list.size() / 4), nullptr,
                                         chunk_keys);
  };
  TERN_ASSERT_CUDA(launch());
  TERN_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = test::to_f32(d_out.download());
  // The merge leaves the counters at zero, and a second launch (as a graph
  // replay) gives the same bits whichever split merged.
  for (int c : launch_bufs.counters.download()) ASSERT_EQ(c, 0) << "split counters not reset";
  d_out.upload(std::vector<bf16>(static_cast<size_t>(T * q_dim), kNanBf16));
  TERN_ASSERT_CUDA(launch());
  EXPECT_EQ(test::to_f32(d_out.download()), got) << "second launch differs";
  // Another prefetch distance changes no bit.
  p.prefetch_chunks = 3;
  d_out.upload(std::vector<bf16>(static_cast<size_t>(T * q_dim), kNanBf16));
  TERN_ASSERT_CUDA(launch());
  EXPECT_EQ(test::to_f32(d_out.download()), got) << "prefetch distance 3 differs";
  for (int c : launch_bufs.counters.download()) ASSERT_EQ(c, 0) << "split counters not reset";
  p.prefetch_chunks = 1;
  const std::string what = "attention heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
                           " head_dim " + std::to_string(s.head_dim) + " block " + std::to_string(bs) + " splits " +
                           std::to_string(num_splits) +
                           (tiles ? " query tiles of " + std::to_string(chunk_keys) + "-key chunks" : "") +
                           (fp8 ? " fp8 cache" : "") + (stage_kv ? "" : " register loads");
  const auto expect_near_reference = [&](const std::vector<float>& out, const std::string& form) {
    test::expect_bf16_close(out, ref, form);
    // Per token too, so one bad sequence cannot hide in the total.
    int64_t at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto b = static_cast<size_t>(at * q_dim), e = static_cast<size_t>((at + seqs[i].fresh) * q_dim);
      std::vector<float> g(out.begin() + b, out.begin() + e), r(ref.begin() + b, ref.begin() + e);
      EXPECT_LT(test::relative_l2(g, r), 1e-2)
          << form << ": sequence " << i << " length " << seqs[i].length << " fresh " << seqs[i].fresh;
      at += seqs[i].fresh;
    }
  };
  expect_near_reference(got, what);
  // Up to 8 q heads per kv head, the tensor-core decode form takes the heads as its MMA columns and the
  // keys as the rows of S^T by default; the heads-as-rows form and the one with the scores' heads as rows
  // must match the reference too.
  if (cuda::paged_attention_takes_rope(s.num_heads, s.num_kv_heads, s.head_dim) && s.num_heads <= 8 * s.num_kv_heads) {
    const auto other_form = [&](bool columns, bool transposed, const std::string& form) {
      p.heads_as_columns = columns;
      p.scores_transposed = transposed;
      d_out.upload(std::vector<bf16>(static_cast<size_t>(T * q_dim), kNanBf16));
      TERN_ASSERT_CUDA(launch());
      TERN_ASSERT_CUDA(cudaDeviceSynchronize());
      for (int c : launch_bufs.counters.download()) ASSERT_EQ(c, 0) << "split counters not reset";
      expect_near_reference(test::to_f32(d_out.download()), what + form);
      p.heads_as_columns = true;
      p.scores_transposed = true;
    };
    other_form(false, false, " heads as rows");
    other_form(true, false, " scores with the heads as rows");
  }
}

TEST(CudaKernels, PagedAttentionMatchesReference) {
  uint32_t seed = 10;
  // head_dim 64 and 128 with up to 16 q heads per kv head take the tensor-core kernel, its chunks staged
  // through shared memory (sm_90) or loaded into registers.
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{16, 2, 8, 16}, Shape{4, 2, 16, 7}, Shape{8, 8, 64, 1},
                        Shape{16, 2, 128, 5}, Shape{32, 2, 64, 16}, Shape{12, 2, 128, 3}, Shape{24, 2, 96, 16}}) {
    check_attention(s, seed++, /*num_splits=*/1);
    if (s.head_dim == 64 || s.head_dim == 128) {
      check_attention(s, seed++, 1, false, 64, false, /*stage_kv=*/false);
    }
  }
}

TEST(CudaKernels, SplitAttentionMatchesReference) {
  uint32_t seed = 20;
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7}, Shape{16, 2, 8, 3}, Shape{32, 2, 64, 5}}) {
    // 2 and 5 split every context; 32 leaves most splits of short contexts empty.
    for (int num_splits : {2, 5, 32}) check_attention(s, seed++, num_splits);
  }
  check_attention(Shape{16, 2, 128, 16}, seed++, 5, false, 64, false, /*stage_kv=*/false);
  check_attention(Shape{16, 2, 128, 16}, seed++, 5, false, 64, /*fp8=*/true, /*stage_kv=*/false);
}

// Prefill chunks in query tiles (paged_attention_prefill) beside one-token
// chunks through the decode kernel's token list, split or not: GQA 8:1
// (2 tokens per warp), 16:1 (1), 4:1 (4), 1:1 (16), head_dim 64 and 128,
// block sizes that do and do not divide a tile's 64-key chunks.
TEST(CudaKernels, PrefillTileAttentionMatchesReference) {
  uint32_t seed = 40;
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{16, 2, 128, 5}, Shape{32, 2, 64, 16}, Shape{8, 2, 128, 3},
                        Shape{8, 8, 64, 1}}) {
    for (int num_splits : {1, 5}) check_attention(s, seed++, num_splits, /*tiles=*/true);
    check_attention(s, seed++, 1, /*tiles=*/true, /*chunk_keys=*/32);  // the form for 100 KB per SM
  }
  EXPECT_EQ(cuda::prefill_tile_tokens(16, 2, 128), 8);
  // 64-key chunks where three blocks fit per multiprocessor: H100/H200 (228 KB), not A100 (164 KB) or
  // sm_86/sm_89 (100 KB) at head_dim 128; head_dim 64 fits everywhere.
  EXPECT_EQ(cuda::prefill_chunk_keys(128, 228 * 1024), 64);
  EXPECT_EQ(cuda::prefill_chunk_keys(128, 164 * 1024), 32);
  EXPECT_EQ(cuda::prefill_chunk_keys(128, 100 * 1024), 32);
  EXPECT_EQ(cuda::prefill_chunk_keys(64, 100 * 1024), 64);
  EXPECT_EQ(cuda::prefill_tile_tokens(12, 2, 128), 0) << "6 q heads per kv head do not divide the 16 MMA rows";
  EXPECT_EQ(cuda::prefill_tile_tokens(16, 2, 96), 0);
}

// A decode step's attention with RoPE and the KV write inside it
// (PagedAttentionParams::rope_kv), and with q's RoPE alone inside it after
// rope_store_kv's kv_only (rope_q), against rope_store_kv then the
// attention: the same output, K and V planes and untouched q|k|v rows, bit
// for bit, with one split and several (only the split holding the token's
// own key writes it); contexts from 1 key to 700, block boundaries, GQA
// 8:1, 16:1, 1:1, head_dim 64 and 128; the scalar form's shapes refuse it.
void check_attention_with_rope(bool fp8) {
  std::mt19937 rng(fp8 ? 42 : 41);
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{32, 2, 64, 16}, Shape{8, 8, 64, 1}, Shape{16, 2, 128, 5}}) {
    for (int num_splits : {1, 3, 8}) {
      const int64_t bs = s.block_size;
      const std::vector<int64_t> lengths = {1, 2, bs, bs + 1, 64, 65, 299, 700, 17, 128};
      const auto T = static_cast<int64_t>(lengths.size());
      const int64_t q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
      const int64_t stride = q_dim + 2 * kv_dim;
      int64_t num_blocks = 2;
      for (int64_t L : lengths) num_blocks += (L + bs - 1) / bs;
      std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int32_t> positions, slots, token_seq, offsets, tables;
      size_t next = 0;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t L = lengths[static_cast<size_t>(i)];
        offsets.push_back(static_cast<int32_t>(tables.size()));
        for (int64_t b = 0; b < (L + bs - 1) / bs; ++b) tables.push_back(ids[next++]);
        const int64_t pos = L - 1;  // the token's own key, its slot's place in its table
        positions.push_back(static_cast<int32_t>(pos));
        slots.push_back(tables[static_cast<size_t>(offsets.back() + pos / bs)] * static_cast<int32_t>(bs) +
                        static_cast<int32_t>(pos % bs));
        token_seq.push_back(static_cast<int32_t>(i));
      }
      Bf16Data qkv = test::random_bf16(rng, static_cast<size_t>(T * stride), -2, 2);
      Bf16Data k_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -2, 2);
      Bf16Data v_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -1, 1);
      const std::vector<float> inv_freq = cpu::rope_inv_freq(s.head_dim, 500000.0);
      DeviceArray<int32_t> d_pos(positions), d_slots(slots);
      DeviceArray<float> d_freq(inv_freq);

      std::vector<uint8_t> k8(k_pool.values.size()), v8(v_pool.values.size());
      for (size_t i = 0; i < k8.size(); ++i) {
        k8[i] = f32_to_fp8_e4m3(k_pool.values[i]);
        v8[i] = f32_to_fp8_e4m3(v_pool.values[i]);
      }

      struct Run {
        std::vector<bf16> out, k, v, qkv;
        std::vector<uint8_t> k8, v8;
      };
      // kStore: rope_store_kv, then the attention; kFused: rope_kv; kQOnly: rope_store_kv with kv_only, then
      // the attention rotating q (rope_q).
      enum Mode { kStore, kFused, kQOnly };
      auto run = [&](Mode mode) {
        DeviceArray<bf16> d_qkv(qkv.words), d_k(k_pool.words), d_v(v_pool.words);
        DeviceArray<uint8_t> d_k8(k8), d_v8(v8);
        const cuda::KvPlanes planes = fp8 ? cuda::KvPlanes{nullptr, nullptr, d_k8.get(), d_v8.get()}
                                          : cuda::KvPlanes{d_k.get(), d_v.get(), nullptr, nullptr};
        AttnLaunch bufs(s, num_splits, positions, token_seq, offsets, tables);
        cuda::PagedAttentionParams p = bufs.params(d_qkv.get(), stride, planes);
        if (mode == kFused) {
          p.rope_kv = true;
          p.places.inv_freq = d_freq.get();
          p.places.slots = d_slots.get();
        } else {
          cuda::RopeKvParams rp = rope_params(s, T, d_qkv.get(), stride, d_pos.get(), d_slots.get(),
                                              d_freq.get(), d_k.get(), d_v.get());
          rp.planes = planes;
          rp.kv_only = mode == kQOnly;
          EXPECT_EQ(cuda::rope_store_kv(rp, nullptr), cudaSuccess);
          p.rope_q = mode == kQOnly;
          p.places.inv_freq = d_freq.get();
        }
        EXPECT_EQ(cuda::paged_attention(p, nullptr), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return Run{bufs.out.download(), d_k.download(), d_v.download(), d_qkv.download(), d_k8.download(),
                   d_v8.download()};
      };
      const Run want = run(kStore);
      for (const Mode mode : {kFused, kQOnly}) {
        const Run got = run(mode);
        const std::string what = std::string(mode == kFused ? "rope_kv" : "rope_q") + " heads " +
                                 std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) + " head_dim " +
                                 std::to_string(s.head_dim) + " block " + std::to_string(bs) + " splits " +
                                 std::to_string(num_splits) + (fp8 ? " fp8 cache" : "");
        EXPECT_TRUE(want.out == got.out) << what << ": attention output differs";
        EXPECT_TRUE(want.k == got.k && want.k8 == got.k8) << what << ": K plane differs";
        EXPECT_TRUE(want.v == got.v && want.v8 == got.v8) << what << ": V plane differs";
        if (fp8) {
          EXPECT_FALSE(got.k8 == k8) << what << ": nothing written to the fp8 K plane";
        }
        // Both leave the q|k|v rows as they were (rope_store_kv rotates q in place).
        EXPECT_TRUE(got.qkv == qkv.words) << what << ": q|k|v rows written";
      }
    }
  }
}

TEST(CudaKernels, AttentionWithRopeEqualsRopeStoreKvThenAttention) {
  check_attention_with_rope(/*fp8=*/false);
  EXPECT_TRUE(cuda::paged_attention_takes_rope(16, 2, 128));
  EXPECT_FALSE(cuda::paged_attention_takes_rope(16, 2, 96));
  EXPECT_FALSE(cuda::paged_attention_takes_rope(64, 2, 128)) << "32 q heads per kv head: the scalar form";
  cuda::PagedAttentionParams p;
  p.num_tokens = 1;
  p.heads = {4, 2, 96};
  float freq = 1.0f;
  p.rope_kv = true;
  p.places.inv_freq = &freq;
  EXPECT_EQ(cuda::paged_attention(p, nullptr), cudaErrorInvalidValue) << "the scalar form takes no RoPE";
  p.rope_kv = false;
  p.rope_q = true;
  EXPECT_EQ(cuda::paged_attention(p, nullptr), cudaErrorInvalidValue) << "nor q's alone";
  // Everything rope_kv needs is there (host pointers: the call fails before any launch).
  bf16 plane[2] = {};
  int32_t slot = 0;
  p.heads = {16, 2, 128};
  p.planes = cuda::KvPlanes{plane, plane + 1, nullptr, nullptr};
  p.places.slots = &slot;
  p.rope_kv = true;
  EXPECT_EQ(cuda::paged_attention(p, nullptr), cudaErrorInvalidValue) << "rope_kv and rope_q at once";
}

// Prefill tiles rotating q as they load it (PagedAttentionParams::rope_q,
// after rope_store_kv with kv_only) against rope_store_kv rotating it in
// place, then the same tiles: the same output and K/V planes bit for bit,
// and kv_only leaves the q|k|v rows untouched. Prompt chunks after earlier
// keys and from position 0, lengths across tile and block edges, 32- and
// 64-key chunks, GQA 8:1, 16:1 and 4:1, bf16 and fp8 pools.
TEST(CudaKernels, PrefillTilesRotatingQEqualRopeStoreKvThenTiles) {
  std::mt19937 rng(44);
  for (const bool fp8 : {false, true}) {
    for (const Shape s : {Shape{16, 2, 128, 16}, Shape{32, 2, 64, 5}, Shape{8, 2, 128, 7}}) {
      for (const int chunk_keys : {64, 32}) {
        ASSERT_TRUE(cuda::prefill_tiles_take_rope(s.num_heads, s.num_kv_heads, s.head_dim));
        const int tile = cuda::prefill_tile_tokens(s.num_heads, s.num_kv_heads, s.head_dim);
        const int64_t bs = s.block_size;
        // (keys before the chunk, chunk tokens)
        const std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 2}, {0, 37}, {5, 9}, {100, 64}, {3, 1 + 2 * tile},
                                                                 {250, 17}};
        const int64_t q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
        const int64_t stride = q_dim + 2 * kv_dim;
        int64_t num_blocks = 2;
        for (const auto& [before, n] : chunks) num_blocks += (before + n + bs - 1) / bs;
        std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        std::vector<int32_t> positions, slots, token_seq, offsets, tables, tile_list;
        size_t next = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
          const auto [before, n] = chunks[i];
          offsets.push_back(static_cast<int32_t>(tables.size()));
          for (int64_t b = 0; b < (before + n + bs - 1) / bs; ++b) tables.push_back(ids[next++]);
          const auto row0 = static_cast<int64_t>(positions.size());
          for (int64_t j = 0; j < n; ++j) {
            const int64_t pos = before + j;
            positions.push_back(static_cast<int32_t>(pos));
            slots.push_back(tables[static_cast<size_t>(offsets.back() + pos / bs)] * static_cast<int32_t>(bs) +
                            static_cast<int32_t>(pos % bs));
            token_seq.push_back(static_cast<int32_t>(i));
          }
          for (int64_t at = 0; at < n; at += tile) {
            const int64_t count = std::min<int64_t>(tile, n - at);
            tile_list.insert(tile_list.end(), {static_cast<int32_t>(row0 + at), static_cast<int32_t>(count),
                                               static_cast<int32_t>(before + at + count), offsets.back()});
          }
        }
        const auto T = static_cast<int64_t>(positions.size());
        Bf16Data qkv = test::random_bf16(rng, static_cast<size_t>(T * stride), -2, 2);
        Bf16Data k_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -2, 2);
        Bf16Data v_pool = test::random_bf16(rng, static_cast<size_t>(num_blocks * bs * kv_dim), -1, 1);
        std::vector<uint8_t> k8(k_pool.values.size()), v8(v_pool.values.size());
        for (size_t i = 0; i < k8.size(); ++i) {
          k8[i] = f32_to_fp8_e4m3(k_pool.values[i]);
          v8[i] = f32_to_fp8_e4m3(v_pool.values[i]);
        }
        const std::vector<float> inv_freq = cpu::rope_inv_freq(s.head_dim, 500000.0);
        DeviceArray<int32_t> d_pos(positions), d_slots(slots), d_tiles(tile_list);
        DeviceArray<float> d_freq(inv_freq);
        struct Run {
          std::vector<bf16> out, k, v, qkv;
          std::vector<uint8_t> k8, v8;
        };
        auto run = [&](bool in_tiles) {
          DeviceArray<bf16> d_qkv(qkv.words), d_k(k_pool.words), d_v(v_pool.words);
          DeviceArray<uint8_t> d_k8(k8), d_v8(v8);
          const cuda::KvPlanes planes = fp8 ? cuda::KvPlanes{nullptr, nullptr, d_k8.get(), d_v8.get()}
                                            : cuda::KvPlanes{d_k.get(), d_v.get(), nullptr, nullptr};
          cuda::RopeKvParams rp = rope_params(s, T, d_qkv.get(), stride, d_pos.get(), d_slots.get(), d_freq.get(),
                                              d_k.get(), d_v.get());
          rp.planes = planes;
          rp.kv_only = in_tiles;
          EXPECT_EQ(cuda::rope_store_kv(rp, nullptr), cudaSuccess);
          AttnLaunch bufs(s, 1, positions, token_seq, offsets, tables);
          cuda::PagedAttentionParams p = bufs.params(d_qkv.get(), stride, planes);
          p.rope_q = in_tiles;
          p.places.inv_freq = d_freq.get();
          EXPECT_EQ(cuda::paged_attention_prefill(p, d_tiles.get(), static_cast<int64_t>(tile_list.size() / 4), nullptr,
                                                  chunk_keys),
                    cudaSuccess);
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          return Run{bufs.out.download(), d_k.download(), d_v.download(), d_qkv.download(), d_k8.download(),
                     d_v8.download()};
        };
        const Run want = run(false), got = run(true);
        const std::string what = "heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
                                 " head_dim " + std::to_string(s.head_dim) + " block " + std::to_string(bs) + " " +
                                 std::to_string(chunk_keys) + "-key chunks" + (fp8 ? " fp8 cache" : "");
        EXPECT_TRUE(want.out == got.out) << what << ": attention output differs";
        EXPECT_TRUE(want.k == got.k && want.k8 == got.k8) << what << ": K plane differs";
        EXPECT_TRUE(want.v == got.v && want.v8 == got.v8) << what << ": V plane differs";
        EXPECT_TRUE(got.qkv == qkv.words) << what << ": kv_only wrote the q|k|v rows";
        EXPECT_FALSE(want.qkv == qkv.words) << what << ": rope_store_kv left q unrotated";
      }
    }
  }
  // Refused: a shape whose tiles cannot hold their rotations, and no frequencies.
  cuda::PagedAttentionParams p;
  p.heads = {8, 8, 64};
  p.rope_q = true;
  float freq = 1.0f;
  p.places.inv_freq = &freq;
  const int32_t record[4] = {0, 1, 1, 0};
  EXPECT_EQ(cuda::paged_attention_prefill(p, record, 1, nullptr, 64), cudaErrorInvalidValue);
  p.heads = {16, 2, 128};
  p.places.inv_freq = nullptr;
  EXPECT_EQ(cuda::paged_attention_prefill(p, record, 1, nullptr, 64), cudaErrorInvalidValue);
}

// --kv-cache-dtype fp8: the fused RoPE + KV write rounds K/V to e4m3 exactly as rope_store_kv does.
TEST(CudaKernels, AttentionWithRopeEqualsRopeStoreKvThenAttentionFp8) { check_attention_with_rope(/*fp8=*/true); }

// Every attention form over an fp8 pool against the CPU reference reading
// the same e4m3 bytes: the scalar and tensor-core decode forms, split or
// not, and prefill query tiles (64- and 32-key chunks); odd block sizes,
// lengths across block tails.
TEST(CudaKernels, AttentionOverFp8CacheMatchesReference) {
  uint32_t seed = 60;
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{16, 2, 8, 16}, Shape{4, 2, 16, 7}, Shape{8, 8, 64, 1},
                        Shape{16, 2, 128, 5}, Shape{32, 2, 64, 16}, Shape{24, 2, 96, 16}}) {
    for (int num_splits : {1, 5}) check_attention(s, seed++, num_splits, false, 64, /*fp8=*/true);
    if (s.head_dim == 128) check_attention(s, seed++, 1, false, 64, /*fp8=*/true, /*stage_kv=*/false);
  }
  for (const Shape s : {Shape{16, 2, 128, 16}, Shape{16, 2, 128, 5}, Shape{32, 2, 64, 16}, Shape{8, 8, 64, 1}}) {
    for (int num_splits : {1, 3}) check_attention(s, seed++, num_splits, /*tiles=*/true, 64, /*fp8=*/true);
    check_attention(s, seed++, 1, /*tiles=*/true, /*chunk_keys=*/32, /*fp8=*/true);
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

// ---- Sampling on the device against the host sampler's semantics.

// The host sampler's filter (engine/sampler.cpp draw()) as exact
// probabilities: finite logits, temperature, top-k, top-p, min-p, ties to
// the lower id. Returns the probability of each id (0 where filtered out).
std::vector<double> reference_distribution(const std::vector<float>& x, float t, int top_k, float top_p,
                                           float min_p) {
  struct C {
    float logit;
    int32_t id;
    double w;
  };
  std::vector<C> c;
  float mx = -INFINITY;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > -INFINITY) {
      c.push_back({x[i], static_cast<int32_t>(i), 0});
      mx = std::max(mx, x[i]);
    }
  }
  for (C& e : c) e.w = std::exp((static_cast<double>(e.logit) - mx) / t);
  std::sort(c.begin(), c.end(), [](const C& a, const C& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  if (top_k > 0 && static_cast<size_t>(top_k) < c.size()) c.resize(static_cast<size_t>(top_k));
  if (top_p < 1.0f) {
    double total = 0;
    for (const C& e : c) total += e.w;
    double mass = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      mass += c[i].w;
      if (mass >= top_p * total) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  if (min_p > 0) std::erase_if(c, [&](const C& e) { return e.w < min_p; });
  std::vector<double> p(x.size(), 0.0);
  double sum = 0;
  for (const C& e : c) sum += e.w;
  for (const C& e : c) p[static_cast<size_t>(e.id)] = e.w / sum;
  return p;
}

struct SampleCase {
  float temperature;
  int top_k;
  float top_p, min_p;
};

// Draws `draws` tokens from copies of one row of logits under distinct keys,
// per_launch rows a launch (a few rows a launch run as clusters on sm_90).
std::vector<int32_t> device_draws(const std::vector<float>& row, const SampleCase& sc, int draws, uint64_t seed,
                                  int per_launch = 0, bool cuts_first = false) {
  const auto V = static_cast<int64_t>(row.size());
  std::vector<float> logits;
  std::vector<cuda::SampleRow> rows;
  for (int i = 0; i < draws; ++i) {
    logits.insert(logits.end(), row.begin(), row.end());
    cuda::SampleRow r;
    r.row = i;
    r.pick = i;
    r.temperature = sc.temperature;
    r.top_k = sc.top_k;
    r.top_p = sc.top_p;
    r.min_p = sc.min_p;
    r.key = seed * 1000003u + static_cast<uint64_t>(i) * 7919u;
    rows.push_back(r);
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<cuda::SampleRow> d_rows(rows);
  DeviceArray<cuda::LogitOp> d_ops(1);
  DeviceArray<uint64_t> d_keys(std::vector<uint64_t>(static_cast<size_t>(draws), 0));
  const int step = per_launch > 0 ? per_launch : draws;
  for (int first = 0; first < draws; first += step) {
    EXPECT_EQ(cuda::sample_rows(d_logits.get(), V, d_rows.get() + first, std::min(step, draws - first), d_ops.get(),
                                d_keys.get(), nullptr, cuts_first),
              cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> out;
  for (uint64_t k : d_keys.download()) out.push_back(cuda::pick_of(k));
  return out;
}

// Every draw lands in the host sampler's kept set, and the draws'
// frequencies are within sampling error of its probabilities (total
// variation; the keys are fixed, so the test is deterministic).
TEST(CudaKernels, SampleRowsDrawsFromTheHostSamplersDistribution) {
  std::mt19937 rng(11);
  std::vector<float> row = test::random_f32(rng, 48, -3, 3);
  row[5] = row[9] = row[20] = 2.5f;  // ties at the top and at the cuts
  row[30] = row[31] = 1.0f;
  row[40] = -INFINITY;
  row[41] = NAN;
  const SampleCase cases[] = {{1.0f, 0, 1.0f, 0.0f},  {0.7f, 0, 1.0f, 0.0f}, {1.0f, 2, 1.0f, 0.0f},
                              {1.0f, 8, 1.0f, 0.0f},  {1.0f, 0, 0.5f, 0.0f}, {1.3f, 0, 0.9f, 0.0f},
                              {1.0f, 0, 1.0f, 0.2f},  {0.8f, 6, 0.7f, 0.05f}, {2.0f, 3, 0.3f, 0.0f}};
  constexpr int kDraws = 16384;
  uint64_t seed = 1;
  for (const SampleCase& sc : cases) {
    const std::string what = "T " + std::to_string(sc.temperature) + " top_k " + std::to_string(sc.top_k) +
                             " top_p " + std::to_string(sc.top_p) + " min_p " + std::to_string(sc.min_p);
    const std::vector<double> p = reference_distribution(row, sc.temperature, sc.top_k, sc.top_p, sc.min_p);
    const std::vector<int32_t> got = device_draws(row, sc, kDraws, seed++);
    std::vector<double> freq(row.size(), 0.0);
    for (int32_t id : got) {
      ASSERT_TRUE(id >= 0 && static_cast<size_t>(id) < row.size()) << what;
      ASSERT_GT(p[static_cast<size_t>(id)], 0.0) << what << ": drew filtered-out id " << id;
      freq[static_cast<size_t>(id)] += 1.0 / kDraws;
    }
    double tv = 0;
    for (size_t i = 0; i < row.size(); ++i) tv += std::abs(freq[i] - p[i]) / 2;
    EXPECT_LT(tv, 0.03) << what;
    // The same keys draw the same tokens, whatever the rows per launch (clusters of 8, 4, 2 blocks or one).
    const std::vector<int32_t> first(got.begin(), got.begin() + 64);
    for (int per_launch : {1, 5, 12, 20, 40, 64}) {
      EXPECT_EQ(device_draws(row, sc, 64, seed - 1, per_launch), first) << what << ", " << per_launch << " a launch";
    }
  }
}

// A full-size vocabulary: top-k and top-p cuts over 103,424 logits, ties
// at the cut resolved to the lower ids, and draws only from the kept set;
// and 270,000 logits, past which top-p sums its masses in 64-bit atomics
// instead of 32-bit limbs; and an odd vocabulary, whose rows after the first
// do not start on a 16-byte boundary (read one logit at a time).
TEST(CudaKernels, SampleRowsCutsAFullVocabulary) {
  std::mt19937 rng(12);
  for (const size_t vocab : {size_t{103424}, size_t{270000}, size_t{103423}}) {
    std::vector<float> row = test::random_f32(rng, vocab, -8, 8);
    for (int i = 0; i < 50; ++i) row[static_cast<size_t>(1000 + 977 * i)] = 9.0f;  // 50 tied maxima
    const SampleCase cases[] = {{1.0f, 10, 1.0f, 0.0f}, {1.0f, 60, 1.0f, 0.0f}, {1.0f, 0, 0.1f, 0.0f},
                                {0.9f, 0, 0.95f, 0.0f}, {1.0f, 40, 0.5f, 0.01f}};
    uint64_t seed = 100;
    for (const SampleCase& sc : cases) {
      const std::string what = "vocab " + std::to_string(vocab) + " top_k " + std::to_string(sc.top_k) +
                               " top_p " + std::to_string(sc.top_p);
      const std::vector<double> p = reference_distribution(row, sc.temperature, sc.top_k, sc.top_p, sc.min_p);
      const int draws = vocab > 200000 ? 128 : 512;
      const std::vector<int32_t> got = device_draws(row, sc, draws, seed++);
      for (int32_t id : got) EXPECT_GT(p[static_cast<size_t>(id)], 0.0) << what << ": drew filtered-out id " << id;
      // One row a launch (a cluster of 8 on sm_90) draws the same tokens.
      const std::vector<int32_t> alone = device_draws(row, sc, 32, seed - 1, 1);
      EXPECT_EQ(alone, std::vector<int32_t>(got.begin(), got.begin() + 32)) << what << ", one row a launch";
    }
  }
}

// Top-p rows without a top-k cut try the draw over every finite logit
// first and keep it when the cuts would (draw_if_kept: the first kept of
// the row's best few scores): the tokens equal those of cutting first,
// whether a candidate is kept (a wide top-p) or none (a narrow one), with
// min-p, over a small row with ties, -inf and NaN, a full-size random
// vocabulary and a peaked one, a row at a time (clusters) and many.
TEST(CudaKernels, SampleRowsDrawWithoutCutsGivesTheCutsTokens) {
  std::mt19937 rng(14);
  std::vector<float> small = test::random_f32(rng, 48, -3, 3);
  small[5] = small[9] = small[20] = 2.5f;
  small[40] = -INFINITY;
  small[41] = NAN;  // no weight in either form's sums
  std::vector<float> full = test::random_f32(rng, 103424, -8, 8);
  std::vector<float> peaked = test::random_f32(rng, 103424, -12, 2);
  for (int i = 0; i < 30; ++i) peaked[static_cast<size_t>(7 + 3001 * i)] = 6.0f + 0.2f * static_cast<float>(i % 7);
  const SampleCase cases[] = {{0.8f, 0, 0.8f, 0.0f}, {1.0f, 0, 0.95f, 0.0f}, {1.0f, 0, 0.1f, 0.0f},
                              {0.7f, 0, 0.5f, 0.05f}, {1.3f, 0, 0.9f, 0.3f}};
  uint64_t seed = 400;
  for (const std::vector<float>* row : {&small, &full, &peaked}) {
    for (const SampleCase& sc : cases) {
      const std::string what = "vocab " + std::to_string(row->size()) + " T " + std::to_string(sc.temperature) +
                               " top_p " + std::to_string(sc.top_p) + " min_p " + std::to_string(sc.min_p);
      const int draws = 256;
      const std::vector<int32_t> fast = device_draws(*row, sc, draws, seed, 0, false);
      const std::vector<int32_t> cuts = device_draws(*row, sc, draws, seed, 0, true);
      EXPECT_EQ(fast, cuts) << what;
      EXPECT_EQ(device_draws(*row, sc, 16, seed, 1, false), std::vector<int32_t>(cuts.begin(), cuts.begin() + 16))
          << what << ", one row a launch";
      ++seed;
    }
  }
}

// A row whose cut falls among more equal logits than the bins can sort
// (the radix-select fallback): 100,000 zeros and a few larger values; top-p
// and top-k cuts inside the zeros keep their lowest ids, as the host's sort.
TEST(CudaKernels, SampleRowsFallBackToTheRadixSelectOnFlatRows) {
  std::vector<float> row(103424, 0.0f);
  for (int i = 0; i < 20; ++i) row[static_cast<size_t>(500 + 4000 * i)] = 1.0f + 0.1f * static_cast<float>(i);
  const SampleCase cases[] = {{1.0f, 0, 0.5f, 0.0f}, {1.0f, 3000, 1.0f, 0.0f}, {0.7f, 5000, 0.9f, 0.0f}};
  uint64_t seed = 300;
  for (const SampleCase& sc : cases) {
    const std::string what = "top_k " + std::to_string(sc.top_k) + " top_p " + std::to_string(sc.top_p);
    const std::vector<double> p = reference_distribution(row, sc.temperature, sc.top_k, sc.top_p, sc.min_p);
    const std::vector<int32_t> got = device_draws(row, sc, 256, seed++);
    for (int32_t id : got) EXPECT_GT(p[static_cast<size_t>(id)], 0.0) << what << ": drew filtered-out id " << id;
    EXPECT_EQ(device_draws(row, sc, 16, seed - 1, 1), std::vector<int32_t>(got.begin(), got.begin() + 16)) << what;
  }
}

// The logit ops (bias, min_tokens mask, repetition, frequency + presence)
// change the row exactly as the host sampler's steps 1-3, and a greedy row
// is the argmax after them.
TEST(CudaKernels, SampleRowsAppliesLogitOpsThenGreedyArgmax) {
  std::mt19937 rng(13);
  const int64_t V = 3000;
  std::vector<float> row = test::random_f32(rng, static_cast<size_t>(V), -4, 4);
  std::vector<cuda::LogitOp> ops = {{7, 0, 3.5f, 0}, {8, 0, -100.0f, 0},                // bias
                                    {11, 1, 0, 0},     {12, 1, 0, 0},     {11, 1, 0, 0},  // mask (repeats are fine)
                                    {7, 2, 1.3f, 0},   {20, 2, 1.3f, 0},  {21, 2, 1.3f, 0},
                                    {7, 3, 0.6f, 0.2f}, {30, 3, 1.2f, 0.2f}};
  row[20] = 3.0f;
  row[21] = -3.0f;
  std::vector<float> want = row;
  std::vector<LogitAdjust> adjust;
  for (const cuda::LogitOp& op : ops) adjust.push_back({op.id, op.phase, op.a, op.b});
  apply_adjustments(want, adjust);
  DeviceArray<float> d_logits(row);
  cuda::SampleRow r;
  r.ops_begin = 0;
  r.ops_end = static_cast<int32_t>(ops.size());
  r.greedy = 1;
  DeviceArray<cuda::SampleRow> d_rows(std::vector<cuda::SampleRow>{r});
  DeviceArray<cuda::LogitOp> d_ops(ops);
  DeviceArray<uint64_t> d_keys(std::vector<uint64_t>{0});
  TERN_ASSERT_CUDA(cuda::sample_rows(d_logits.get(), V, d_rows.get(), 1, d_ops.get(), d_keys.get(), nullptr));
  const std::vector<float> got = d_logits.download();
  for (int64_t i = 0; i < V; ++i) {
    const auto u = static_cast<size_t>(i);
    if (std::isinf(want[u])) {
      EXPECT_TRUE(std::isinf(got[u]) && got[u] < 0) << "id " << i;
    } else {
      EXPECT_EQ(got[u], want[u]) << "id " << i;
    }
  }
  EXPECT_EQ(cuda::pick_of(d_keys.download()[0]), argmax(std::span<const float>(want)));
}

}  // namespace
}  // namespace tern
