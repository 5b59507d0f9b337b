// Attention over an FP8 E4M3 cache (KvRowTable::fp8_blocks) against the fp32
// attention over the dequantized values, e4m3 code * scale: the reference
// dequantizes each row before the same arithmetic, so the outputs must have
// the same bits. Paged tables with odd block sizes and lengths (block tails),
// per-table scales, values past the e4m3 range (saturated when stored), GQA
// shapes. attention_batch_fast over the fp8 cache has the bits of
// attention_batch_fast over the dequantized fp32 cache (it dequantizes each
// unit's rows, then runs the same AVX2 code) and is within its stated 2e-5
// of the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_fast.h"
#include "backend/cpu/reference_kernels.h"
#include "base/fp8_e4m3.h"

namespace tern::cpu {
namespace {

// One sequence's K or V in blocks of `block_size` rows, as e4m3 codes of
// x / scale and as the fp32 values they stand for.
struct PagedRows {
  std::vector<std::vector<uint8_t>> fp8;
  std::vector<std::vector<float>> dequant;
  std::vector<const uint8_t*> fp8_ptrs;
  std::vector<const float*> f32_ptrs;
  float scale = 1;

  PagedRows(std::mt19937& rng, int64_t len, int64_t kv_dim, int64_t block_size, float spread, float s) : scale(s) {
    std::normal_distribution<float> d(0.0f, spread);
    const int64_t blocks = (len + block_size - 1) / block_size;
    for (int64_t b = 0; b < blocks; ++b) {
      fp8.emplace_back(static_cast<size_t>(block_size * kv_dim));
      dequant.emplace_back(static_cast<size_t>(block_size * kv_dim));
      for (size_t i = 0; i < fp8.back().size(); ++i) {
        float x = d(rng);
        if (i % 53 == 7) x *= 1000.0f;  // past +-448 * scale: saturates
        fp8.back()[i] = f32_to_fp8_e4m3(x / scale);
        dequant.back()[i] = fp8_e4m3_to_f32(fp8.back()[i]) * scale;
      }
    }
    for (size_t b = 0; b < fp8.size(); ++b) {
      fp8_ptrs.push_back(fp8[b].data());
      f32_ptrs.push_back(dequant[b].data());
    }
  }
  KvRowTable fp8_table(int64_t block_size, int64_t kv_dim) const {
    return KvRowTable{{}, block_size, kv_dim, fp8_ptrs, scale};
  }
  KvRowTable f32_table(int64_t block_size, int64_t kv_dim) const {
    return KvRowTable{f32_ptrs, block_size, kv_dim, {}, 1.0f};
  }
};

TEST(AttentionFp8, EqualsFp32AttentionOverDequantizedValues) {
  std::mt19937 rng(8);
  struct Case {
    AttentionShape shape;
    int64_t block_size;
  };
  for (const Case& c :
       {Case{{16, 2, 64}, 16}, Case{{4, 4, 24}, 5}, Case{{8, 1, 16}, 7}, Case{{6, 2, 40}, 3}, Case{{3, 1, 20}, 1}}) {
    const AttentionShape& shape = c.shape;
    const int64_t kv_dim = shape.num_kv_heads * shape.head_dim, q_dim = shape.num_heads * shape.head_dim;
    // A decode at an odd length, a prefill chunk mid-prompt, a whole short prompt.
    const std::vector<std::vector<int64_t>> seq_positions = {{36}, {9, 10, 11, 12, 13}, {0, 1, 2}};
    std::vector<PagedRows> ks, vs;
    std::vector<int64_t> positions;
    std::vector<AttentionSequence> fp8_seqs, f32_seqs;
    for (size_t i = 0; i < seq_positions.size(); ++i) {
      const int64_t len = seq_positions[i].back() + 1;
      const float scale = i == 0 ? 1.0f : i == 1 ? 0.03125f : 3.0f;
      ks.emplace_back(rng, len, kv_dim, c.block_size, 2.0f, scale);
      vs.emplace_back(rng, len, kv_dim, c.block_size, 1.0f, scale * 0.5f);
    }
    for (size_t i = 0; i < seq_positions.size(); ++i) {
      const auto first = static_cast<int64_t>(positions.size());
      const auto n = static_cast<int64_t>(seq_positions[i].size());
      positions.insert(positions.end(), seq_positions[i].begin(), seq_positions[i].end());
      fp8_seqs.push_back({first, n, ks[i].fp8_table(c.block_size, kv_dim), vs[i].fp8_table(c.block_size, kv_dim)});
      f32_seqs.push_back({first, n, ks[i].f32_table(c.block_size, kv_dim), vs[i].f32_table(c.block_size, kv_dim)});
    }
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> q(positions.size() * static_cast<size_t>(q_dim));
    for (float& x : q) x = d(rng);
    const std::string what = std::to_string(shape.num_heads) + "/" + std::to_string(shape.num_kv_heads) + "x" +
                             std::to_string(shape.head_dim) + " block " + std::to_string(c.block_size);

    ThreadPool pool(3);
    std::vector<float> f32(q.size(), NAN), fp8(q.size(), NAN), fast(q.size(), NAN), fast_f32(q.size(), NAN);
    attention_batch(pool, q.data(), positions, f32_seqs, shape, f32.data());
    attention_batch(pool, q.data(), positions, fp8_seqs, shape, fp8.data());
    attention_batch_fast(pool, q.data(), positions, fp8_seqs, shape, fast.data());
    attention_batch_fast(pool, q.data(), positions, f32_seqs, shape, fast_f32.data());
    for (float x : fp8) ASSERT_FALSE(std::isnan(x)) << what;
    EXPECT_EQ(0, std::memcmp(f32.data(), fp8.data(), f32.size() * 4)) << what;
    EXPECT_EQ(0, std::memcmp(fast_f32.data(), fast.data(), fast.size() * 4)) << what;
    double worst = 0;
    for (size_t i = 0; i < fp8.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(fast[i]) - fp8[i]));
    // The reference's 2e-5 on outputs within +-2 (attention_fast_test.cpp), scaled by these V rows' reach.
    double reach = 0;
    for (float x : fp8) reach = std::max(reach, std::fabs(static_cast<double>(x)));
    EXPECT_LE(worst, 2e-5 * std::max(1.0, reach)) << what;
  }
}

// Every finite e4m3 code, both signs, subnormals and zeros included, in the
// K and V rows of a prefill: the optimized kernel dequantizes eight codes at
// a time from their bits, and must get the table's values.
TEST(AttentionFp8, EveryFiniteCodeDequantizesAsTheTable) {
  const AttentionShape shape{16, 2, 128};
  const int64_t kv_dim = shape.num_kv_heads * shape.head_dim, q_dim = shape.num_heads * shape.head_dim;
  const int64_t len = 19, block_size = 8;
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) codes.push_back(static_cast<uint8_t>(c));
  }
  std::mt19937 rng(5);
  std::shuffle(codes.begin(), codes.end(), rng);
  std::vector<std::vector<uint8_t>> fp8[2];
  std::vector<std::vector<float>> f32[2];
  std::vector<const uint8_t*> fp8_ptrs[2];
  std::vector<const float*> f32_ptrs[2];
  const float scales[2] = {1.0f / 256, 0.5f};  // K: scores within a few units; V: as stored
  size_t next = 0;
  for (int t = 0; t < 2; ++t) {
    for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b) {
      fp8[t].emplace_back(static_cast<size_t>(block_size * kv_dim));
      f32[t].emplace_back(fp8[t].back().size());
      for (size_t i = 0; i < fp8[t].back().size(); ++i) {
        fp8[t].back()[i] = codes[next++ % codes.size()];
        f32[t].back()[i] = fp8_e4m3_to_f32(fp8[t].back()[i]) * scales[t];
      }
    }
    for (size_t b = 0; b < fp8[t].size(); ++b) {
      fp8_ptrs[t].push_back(fp8[t][b].data());
      f32_ptrs[t].push_back(f32[t][b].data());
    }
  }
  std::vector<int64_t> positions;
  for (int64_t p = 0; p < len; ++p) positions.push_back(p);
  const auto n = static_cast<int64_t>(positions.size());
  const AttentionSequence fp8_seq{0, n, KvRowTable{{}, block_size, kv_dim, fp8_ptrs[0], scales[0]},
                                  KvRowTable{{}, block_size, kv_dim, fp8_ptrs[1], scales[1]}};
  const AttentionSequence f32_seq{0, n, KvRowTable{f32_ptrs[0], block_size, kv_dim, {}, 1.0f},
                                  KvRowTable{f32_ptrs[1], block_size, kv_dim, {}, 1.0f}};
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n * q_dim));
  for (float& x : q) x = d(rng);
  ThreadPool pool(2);
  std::vector<float> from_fp8(q.size(), NAN), from_f32(q.size(), NAN);
  attention_batch_fast(pool, q.data(), positions, std::span<const AttentionSequence>(&fp8_seq, 1), shape,
                       from_fp8.data());
  attention_batch_fast(pool, q.data(), positions, std::span<const AttentionSequence>(&f32_seq, 1), shape,
                       from_f32.data());
  for (float x : from_fp8) ASSERT_FALSE(std::isnan(x));
  EXPECT_EQ(0, std::memcmp(from_fp8.data(), from_f32.data(), from_f32.size() * 4));
}

}  // namespace
}  // namespace tern::cpu
