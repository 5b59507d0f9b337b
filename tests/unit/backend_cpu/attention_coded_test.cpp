// Attention over an FP8 E4M3 cache (KvRowTable::fp8_blocks) or a bf16 cache
// (KvRowTable::bf16_blocks) against the fp32 attention over the values the
// codes stand for (e4m3 code * scale, bf16 widened): the reference widens
// each row before the same arithmetic, so the outputs must have the same
// bits. Paged tables with odd block sizes and lengths (block tails),
// per-table fp8 scales, values past the e4m3 range (saturated when stored)
// and below bf16's normals, GQA shapes. attention_batch_fast over a coded
// cache has the bits of attention_batch_fast over the widened fp32 cache (fp8:
// it dequantizes each unit's rows, then runs the same AVX2 code; bf16: the
// same code widens each value as it loads it), with P V on AVX-512 or AVX2
// alike, and is within its stated 2e-5 of the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_fast.h"
#include "backend/cpu/reference_kernels.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"

namespace tern::cpu {
namespace {

enum class Code { kFp8, kBf16 };

// One sequence's K or V in blocks of `block_size` rows, as codes (e4m3 of
// x / scale, or bf16 of x) and as the fp32 values they stand for.
struct PagedRows {
  Code code;
  float scale = 1;
  std::vector<std::vector<uint8_t>> fp8;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<std::vector<float>> values;
  std::vector<const uint8_t*> fp8_ptrs;
  std::vector<const uint16_t*> bf16_ptrs;
  std::vector<const float*> f32_ptrs;

  PagedRows(Code c, std::mt19937& rng, int64_t len, int64_t kv_dim, int64_t block_size, float spread, float s)
      : code(c), scale(c == Code::kFp8 ? s : 1.0f) {
    std::normal_distribution<float> d(0.0f, spread);
    const int64_t blocks = (len + block_size - 1) / block_size;
    const auto n = static_cast<size_t>(block_size * kv_dim);
    for (int64_t b = 0; b < blocks; ++b) {
      fp8.emplace_back(code == Code::kFp8 ? n : 0);
      bf16.emplace_back(code == Code::kBf16 ? n : 0);
      values.emplace_back(n);
      for (size_t i = 0; i < n; ++i) {
        float x = d(rng);
        if (i % 53 == 7) x *= 1000.0f;  // past +-448 * scale: e4m3 saturates
        if (i % 41 == 5) x *= 1e-39f;   // below bf16's normals (zero in e4m3)
        if (code == Code::kFp8) {
          fp8.back()[i] = f32_to_fp8_e4m3(x / scale);
          values.back()[i] = fp8_e4m3_to_f32(fp8.back()[i]) * scale;
        } else {
          bf16.back()[i] = f32_to_bf16(x);
          values.back()[i] = bf16_to_f32(bf16.back()[i]);
        }
      }
    }
    for (size_t b = 0; b < values.size(); ++b) {
      fp8_ptrs.push_back(fp8[b].data());
      bf16_ptrs.push_back(bf16[b].data());
      f32_ptrs.push_back(values[b].data());
    }
  }
  KvRowTable coded_table(int64_t block_size, int64_t kv_dim) const {
    return code == Code::kFp8 ? KvRowTable{{}, block_size, kv_dim, fp8_ptrs, scale, {}}
                              : KvRowTable{{}, block_size, kv_dim, {}, 1.0f, bf16_ptrs};
  }
  KvRowTable f32_table(int64_t block_size, int64_t kv_dim) const {
    return KvRowTable{f32_ptrs, block_size, kv_dim, {}, 1.0f, {}};
  }
};

void expect_coded_attention_equals_fp32(Code code, unsigned seed) {
  std::mt19937 rng(seed);
  struct Case {
    AttentionShape shape;
    int64_t block_size;
  };
  for (const Case& c : {Case{{16, 2, 128}, 16}, Case{{16, 2, 64}, 16}, Case{{4, 4, 24}, 5}, Case{{8, 1, 16}, 7},
                        Case{{6, 2, 40}, 3}, Case{{3, 1, 20}, 1}}) {
    const AttentionShape& shape = c.shape;
    const int64_t kv_dim = shape.num_kv_heads * shape.head_dim, q_dim = shape.num_heads * shape.head_dim;
    // A decode at an odd length, a prefill chunk mid-prompt, a whole short prompt.
    const std::vector<std::vector<int64_t>> seq_positions = {{36}, {9, 10, 11, 12, 13}, {0, 1, 2}};
    std::vector<PagedRows> ks, vs;
    std::vector<int64_t> positions;
    std::vector<AttentionSequence> coded_seqs, f32_seqs;
    for (size_t i = 0; i < seq_positions.size(); ++i) {
      const int64_t len = seq_positions[i].back() + 1;
      const float scale = i == 0 ? 1.0f : i == 1 ? 0.03125f : 3.0f;
      ks.emplace_back(code, rng, len, kv_dim, c.block_size, 2.0f, scale);
      vs.emplace_back(code, rng, len, kv_dim, c.block_size, 1.0f, scale * 0.5f);
    }
    for (size_t i = 0; i < seq_positions.size(); ++i) {
      const auto first = static_cast<int64_t>(positions.size());
      const auto n = static_cast<int64_t>(seq_positions[i].size());
      positions.insert(positions.end(), seq_positions[i].begin(), seq_positions[i].end());
      coded_seqs.push_back({first, n, ks[i].coded_table(c.block_size, kv_dim), vs[i].coded_table(c.block_size, kv_dim)});
      f32_seqs.push_back({first, n, ks[i].f32_table(c.block_size, kv_dim), vs[i].f32_table(c.block_size, kv_dim)});
    }
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> q(positions.size() * static_cast<size_t>(q_dim));
    for (float& x : q) x = d(rng);
    const std::string what = std::string(code == Code::kFp8 ? "fp8 " : "bf16 ") + std::to_string(shape.num_heads) +
                             "/" + std::to_string(shape.num_kv_heads) + "x" + std::to_string(shape.head_dim) +
                             " block " + std::to_string(c.block_size);

    ThreadPool pool(3);
    std::vector<float> f32(q.size(), NAN), coded(q.size(), NAN), fast(q.size(), NAN), fast_f32(q.size(), NAN);
    attention_batch(pool, q.data(), positions, f32_seqs, shape, f32.data());
    attention_batch(pool, q.data(), positions, coded_seqs, shape, coded.data());
    attention_batch_fast(pool, q.data(), positions, coded_seqs, shape, fast.data());
    attention_batch_fast(pool, q.data(), positions, f32_seqs, shape, fast_f32.data());
    std::vector<float> fast_avx2(q.size(), NAN);  // P V on AVX2 only: the same bits
    attention_batch_fast_isa(pool, q.data(), positions, coded_seqs, shape, fast_avx2.data(), CpuIsa::kAvx2);
    for (float x : coded) ASSERT_FALSE(std::isnan(x)) << what;
    EXPECT_EQ(0, std::memcmp(f32.data(), coded.data(), f32.size() * 4)) << what;
    EXPECT_EQ(0, std::memcmp(fast_f32.data(), fast.data(), fast.size() * 4)) << what;
    EXPECT_EQ(0, std::memcmp(fast_avx2.data(), fast.data(), fast.size() * 4)) << what;
    double worst = 0;
    for (size_t i = 0; i < coded.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(fast[i]) - coded[i]));
    }
    // The reference's 2e-5 on outputs within +-2 (attention_fast_test.cpp), scaled by these V rows' reach.
    double reach = 0;
    for (float x : coded) reach = std::max(reach, std::fabs(static_cast<double>(x)));
    EXPECT_LE(worst, 2e-5 * std::max(1.0, reach)) << what;
  }
}

TEST(AttentionFp8, EqualsFp32AttentionOverDequantizedValues) { expect_coded_attention_equals_fp32(Code::kFp8, 8); }

TEST(AttentionBf16, EqualsFp32AttentionOverTheSameValues) { expect_coded_attention_equals_fp32(Code::kBf16, 16); }

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
  const AttentionSequence fp8_seq{0, n, KvRowTable{{}, block_size, kv_dim, fp8_ptrs[0], scales[0], {}},
                                  KvRowTable{{}, block_size, kv_dim, fp8_ptrs[1], scales[1], {}}};
  const AttentionSequence f32_seq{0, n, KvRowTable{f32_ptrs[0], block_size, kv_dim, {}, 1.0f, {}},
                                  KvRowTable{f32_ptrs[1], block_size, kv_dim, {}, 1.0f, {}}};
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
