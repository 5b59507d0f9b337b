// The attention kernels against the CPU reference on random inputs: the
// decode form (one and several splits, shared-memory stages and register
// loads), the prefill tiles, RoPE inside them, and FP8 K/V pools; lengths
// 1..300 across block boundaries, GQA 8:1, 2:1 and 1:1, head_dim 8..128.
// Outputs are poisoned with NaN first so an unwritten element fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/kernels.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"
#include "base/thread_pool.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::bf16;
using test::Bf16Data;
using test::DeviceArray;
using test::kNanBf16;
using test::rope_params;
using test::Shape;

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


}  // namespace
}  // namespace tern
