// attention_batch_fast against the reference attention_batch: the same
// sequences (a long decode, a chunk mid-prompt, a whole prefill, a first
// token) in one call, on shapes with head_dim a multiple of 8 (the AVX2 path)
// and not (the reference itself, bit for bit). Outputs are convex
// combinations of V rows in [-2, 2]; the fast path differs by fp32 summation
// order in the scores and a few ulp in exp, so |fast - ref| <= 2e-5 per
// element. Each output has the same bits on 1, 2 and 3 threads and with its
// sequence alone in the call. Prefill-shaped calls (tokens attended in tiles
// of several per pass over K/V) over paged fp32 and fp8 caches: the same
// bound, and each token has the same bits in its tile as alone in a call.
#include "backend/cpu/attention_fast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/reference_kernels.h"
#include "base/fp8_e4m3.h"

namespace tern::cpu {
namespace {

struct SeqData {
  std::vector<int64_t> positions;
  std::vector<float> k, v;
};

struct Batch {
  std::vector<SeqData> seqs;
  std::vector<float> q;
  std::vector<int64_t> positions;
  std::vector<std::vector<const float*>> blocks;
  std::vector<AttentionSequence> parts;
};

// One block of K and one of V per sequence; one unused row after each.
Batch make_batch(std::mt19937& rng, const AttentionShape& shape) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  const int64_t q_dim = shape.num_heads * shape.head_dim, kv_dim = shape.num_kv_heads * shape.head_dim;
  Batch b;
  b.seqs.resize(4);
  b.seqs[0].positions = {300};
  for (int64_t p = 30; p < 37; ++p) b.seqs[1].positions.push_back(p);
  for (int64_t p = 0; p < 13; ++p) b.seqs[2].positions.push_back(p);
  b.seqs[3].positions = {0};
  int64_t rows = 0;
  for (SeqData& s : b.seqs) {
    const auto len = static_cast<size_t>((s.positions.back() + 1) * kv_dim);
    s.k.resize(len);
    s.v.resize(len);
    for (auto& x : s.k) x = d(rng);
    for (auto& x : s.v) x = d(rng);
    rows += static_cast<int64_t>(s.positions.size()) + 1;
  }
  b.q.resize(static_cast<size_t>(rows * q_dim));
  for (auto& x : b.q) x = d(rng);
  b.positions.assign(static_cast<size_t>(rows), 0);
  b.blocks.resize(2 * b.seqs.size());
  int64_t row = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const SeqData& s = b.seqs[i];
    b.blocks[2 * i] = {s.k.data()};
    b.blocks[2 * i + 1] = {s.v.data()};
    const int64_t len = s.positions.back() + 1;
    b.parts.push_back(AttentionSequence{row, static_cast<int64_t>(s.positions.size()),
                                        KvRowTable{b.blocks[2 * i], len, kv_dim, {}, 1.0f, {}},
                                        KvRowTable{b.blocks[2 * i + 1], len, kv_dim, {}, 1.0f, {}}});
    std::copy(s.positions.begin(), s.positions.end(), b.positions.begin() + row);
    row += static_cast<int64_t>(s.positions.size()) + 1;
  }
  return b;
}

TEST(AttentionFast, MatchesReferenceAndIsDeterministic) {
  if (best_cpu_isa() < CpuIsa::kAvx2) std::printf("no AVX2 on this CPU: the reference runs\n");
  std::mt19937 rng(11);
  for (AttentionShape shape : {AttentionShape{16, 2, 128}, AttentionShape{4, 4, 24}, AttentionShape{8, 1, 16},
                               AttentionShape{6, 2, 40}, AttentionShape{3, 1, 20}}) {
    const Batch b = make_batch(rng, shape);
    const int64_t q_dim = shape.num_heads * shape.head_dim;
    const std::string what = std::to_string(shape.num_heads) + "/" + std::to_string(shape.num_kv_heads) + "x" +
                             std::to_string(shape.head_dim);
    ThreadPool pool1(1), pool2(2), pool3(3);
    std::vector<float> ref(b.q.size(), NAN), fast(b.q.size(), NAN), fast2(b.q.size(), NAN), fast3(b.q.size(), NAN);
    attention_batch(pool1, b.q.data(), b.positions, b.parts, shape, ref.data());
    attention_batch_fast(pool1, b.q.data(), b.positions, b.parts, shape, fast.data());
    attention_batch_fast(pool2, b.q.data(), b.positions, b.parts, shape, fast2.data());
    attention_batch_fast(pool3, b.q.data(), b.positions, b.parts, shape, fast3.data());
    EXPECT_EQ(0, std::memcmp(fast.data(), fast2.data(), fast.size() * 4)) << what << ": 1 vs 2 threads";
    EXPECT_EQ(0, std::memcmp(fast.data(), fast3.data(), fast.size() * 4)) << what << ": 1 vs 3 threads";
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(fast[i])) << what << ": row outside every sequence written at " << i;
        continue;
      }
      worst = std::max(worst, std::fabs(static_cast<double>(fast[i]) - ref[i]));
    }
    EXPECT_LE(worst, 2e-5) << what;
    if (shape.head_dim % 8 != 0) {
      EXPECT_EQ(0, std::memcmp(fast.data(), ref.data(), ref.size() * 4)) << what;
    }
    for (size_t i = 0; i < b.parts.size(); ++i) {
      const AttentionSequence& a = b.parts[i];
      AttentionSequence alone_part = a;
      alone_part.first_token = 0;
      std::vector<float> alone(static_cast<size_t>(a.num_tokens * q_dim));
      attention_batch_fast(pool2, b.q.data() + a.first_token * q_dim, b.seqs[i].positions,
                           std::span<const AttentionSequence>(&alone_part, 1), shape, alone.data());
      EXPECT_EQ(0, std::memcmp(alone.data(), fast.data() + a.first_token * q_dim, alone.size() * 4))
          << what << ": sequence " << i << " alone";
    }
  }
}

// P V on AVX-512 (16-float slices) and on AVX2 (8-float slices) take each
// output's V rows in the same order: the same bits, prefill tiles included.
TEST(AttentionFast, Avx512AndAvx2FormsGiveTheSameBits) {
  if (best_cpu_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(12);
  for (AttentionShape shape : {AttentionShape{16, 2, 128}, AttentionShape{6, 2, 40}, AttentionShape{8, 1, 16}}) {
    const Batch b = make_batch(rng, shape);
    ThreadPool pool(2);
    std::vector<float> wide(b.q.size(), NAN), narrow(b.q.size(), NAN);
    attention_batch_fast_isa(pool, b.q.data(), b.positions, b.parts, shape, wide.data(), CpuIsa::kAvx512);
    attention_batch_fast_isa(pool, b.q.data(), b.positions, b.parts, shape, narrow.data(), CpuIsa::kAvx2);
    EXPECT_EQ(0, std::memcmp(wide.data(), narrow.data(), wide.size() * 4))
        << shape.num_heads << "/" << shape.num_kv_heads << "x" << shape.head_dim;
  }
}

// One sequence's K or V rows in blocks of `block_size` positions, as fp32
// values in [-2, 2] or, for an fp8 cache, as e4m3 codes and the fp32 values
// they stand for (what the fp32 tables then hold).
struct PagedCache {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<uint8_t>> fp8;
  std::vector<const float*> f32_ptrs;
  std::vector<const uint8_t*> fp8_ptrs;
  int64_t block_size = 0, kv_dim = 0;
  float scale = 0.0625f;

  PagedCache(std::mt19937& rng, int64_t len, int64_t kv_dim_in, int64_t block, bool as_fp8)
      : block_size(block), kv_dim(kv_dim_in) {
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    for (int64_t b = 0; b < (len + block - 1) / block; ++b) {
      f32.emplace_back(static_cast<size_t>(block * kv_dim));
      if (as_fp8) fp8.emplace_back(static_cast<size_t>(block * kv_dim));
      for (size_t i = 0; i < f32.back().size(); ++i) {
        f32.back()[i] = d(rng);
        if (as_fp8) {
          fp8.back()[i] = f32_to_fp8_e4m3(f32.back()[i] / scale);
          f32.back()[i] = fp8_e4m3_to_f32(fp8.back()[i]) * scale;
        }
      }
      f32_ptrs.push_back(f32.back().data());
      if (as_fp8) fp8_ptrs.push_back(fp8.back().data());
    }
  }
  KvRowTable f32_table() const { return KvRowTable{f32_ptrs, block_size, kv_dim, {}, 1.0f, {}}; }
  KvRowTable fp8_table() const { return KvRowTable{{}, block_size, kv_dim, fp8_ptrs, scale, {}}; }
};

TEST(AttentionFast, PrefillTilesMatchReferenceAndEachTokenAlone) {
  std::mt19937 rng(23);
  struct Chunk {
    int64_t first_position,
        num_tokens;  // first_position > 0: a cached prefix before the chunk
  };
  // One whole prompt; then several sequences in one call: prompts with odd
  // tails, chunks after a cached prefix, a decode token and a one-token prompt.
  const std::vector<std::vector<Chunk>> calls = {
      {{0, 130}}, {{0, 67}, {41, 9}, {300, 1}, {5, 130}, {0, 1}, {17, 2}, {0, 5}, {90, 3}}};
  for (AttentionShape shape :
       {AttentionShape{16, 2, 128}, AttentionShape{8, 1, 16}, AttentionShape{6, 2, 40}, AttentionShape{4, 4, 24}}) {
    for (bool fp8 : {false, true}) {
      for (const std::vector<Chunk>& chunks : calls) {
        const int64_t q_dim = shape.num_heads * shape.head_dim, kv_dim = shape.num_kv_heads * shape.head_dim;
        const std::string what = std::to_string(shape.num_heads) + "/" + std::to_string(shape.num_kv_heads) + "x" +
                                 std::to_string(shape.head_dim) + (fp8 ? " fp8" : " fp32") + ", " +
                                 std::to_string(chunks.size()) + " sequences";
        std::vector<PagedCache> ks, vs;
        std::vector<int64_t> positions;
        std::vector<AttentionSequence> seqs, f32_seqs;
        for (const Chunk& c : chunks) {
          const int64_t len = c.first_position + c.num_tokens, block = 7 + static_cast<int64_t>(ks.size()) % 3 * 6;
          ks.emplace_back(rng, len, kv_dim, block, fp8);
          vs.emplace_back(rng, len, kv_dim, block, fp8);
        }
        for (size_t i = 0; i < chunks.size(); ++i) {
          const auto first = static_cast<int64_t>(positions.size());
          for (int64_t t = 0; t < chunks[i].num_tokens; ++t) positions.push_back(chunks[i].first_position + t);
          f32_seqs.push_back({first, chunks[i].num_tokens, ks[i].f32_table(), vs[i].f32_table()});
          seqs.push_back(fp8 ? AttentionSequence{first, chunks[i].num_tokens, ks[i].fp8_table(), vs[i].fp8_table()}
                             : f32_seqs.back());
        }
        std::uniform_real_distribution<float> d(-2.0f, 2.0f);
        std::vector<float> q(positions.size() * static_cast<size_t>(q_dim));
        for (float& x : q) x = d(rng);

        ThreadPool pool1(1), pool2(2), pool3(3);
        std::vector<float> ref(q.size(), NAN), fast(q.size(), NAN), fast2(q.size(), NAN), fast3(q.size(), NAN);
        attention_batch(pool1, q.data(), positions, seqs, shape, ref.data());
        attention_batch_fast(pool1, q.data(), positions, seqs, shape, fast.data());
        attention_batch_fast(pool2, q.data(), positions, seqs, shape, fast2.data());
        attention_batch_fast(pool3, q.data(), positions, seqs, shape, fast3.data());
        EXPECT_EQ(0, std::memcmp(fast.data(), fast2.data(), fast.size() * 4)) << what << ": 1 vs 2 threads";
        EXPECT_EQ(0, std::memcmp(fast.data(), fast3.data(), fast.size() * 4)) << what << ": 1 vs 3 threads";
        double worst = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_FALSE(std::isnan(fast[i])) << what << ": output " << i << " not written";
          worst = std::max(worst, std::fabs(static_cast<double>(fast[i]) - ref[i]));
        }
        EXPECT_LE(worst, 2e-5) << what;
        if (fp8) {
          std::vector<float> over_f32(q.size(), NAN);
          attention_batch_fast(pool2, q.data(), positions, f32_seqs, shape, over_f32.data());
          EXPECT_EQ(0, std::memcmp(fast.data(), over_f32.data(), fast.size() * 4))
              << what << ": fp8 cache against its dequantized values";
        }
        // Each token alone in a call (no tile to share) has its bits from the
        // whole call.
        for (const AttentionSequence& seq : seqs) {
          for (int64_t r = seq.first_token; r < seq.first_token + seq.num_tokens; ++r) {
            AttentionSequence one = seq;
            one.first_token = 0;
            one.num_tokens = 1;
            std::vector<float> alone(static_cast<size_t>(q_dim));
            attention_batch_fast(pool2, q.data() + r * q_dim, std::span<const int64_t>(&positions[r], 1),
                                 std::span<const AttentionSequence>(&one, 1), shape, alone.data());
            ASSERT_EQ(0, std::memcmp(alone.data(), fast.data() + r * q_dim, alone.size() * 4))
                << what << ": token " << r << " (position " << positions[r] << ") alone";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tern::cpu
