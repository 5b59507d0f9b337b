// attention_batch (one call for all sequences of an engine step) against
// attention() run on each sequence alone: the same bits whatever the mix of
// lengths, the thread count and the split of work between threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/reference_kernels.h"

namespace tern::cpu {
namespace {

struct SeqData {
  std::vector<int64_t> positions;  // of its new tokens
  std::vector<float> k, v;         // [positions.back() + 1, kv_dim], contiguous
};

TEST(AttentionBatch, EqualsEachSequenceAloneForAnyThreadCount) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  for (AttentionShape shape : {AttentionShape{16, 2, 128}, AttentionShape{4, 4, 24}, AttentionShape{8, 1, 16}}) {
    const int64_t q_dim = shape.num_heads * shape.head_dim, kv_dim = shape.num_kv_heads * shape.head_dim;
    // A long decode, a chunk in the middle of a prompt, a whole prefill, a first token.
    std::vector<SeqData> seqs(4);
    seqs[0].positions = {300};
    for (int64_t p = 30; p < 37; ++p) seqs[1].positions.push_back(p);
    for (int64_t p = 0; p < 13; ++p) seqs[2].positions.push_back(p);
    seqs[3].positions = {0};
    int64_t rows = 0;
    for (SeqData& s : seqs) {
      const auto len = static_cast<size_t>((s.positions.back() + 1) * kv_dim);
      s.k.resize(len);
      s.v.resize(len);
      for (auto& x : s.k) x = d(rng);
      for (auto& x : s.v) x = d(rng);
      rows += static_cast<int64_t>(s.positions.size()) + 1;  // one unused row after each sequence
    }
    std::vector<float> q(static_cast<size_t>(rows * q_dim));
    for (auto& x : q) x = d(rng);

    std::vector<int64_t> positions(static_cast<size_t>(rows), 0);
    std::vector<AttentionSequence> batch;
    std::vector<std::vector<const float*>> blocks(2 * seqs.size());
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const SeqData& s = seqs[i];
      blocks[2 * i] = {s.k.data()};
      blocks[2 * i + 1] = {s.v.data()};
      const int64_t len = s.positions.back() + 1;
      AttentionSequence a{row, static_cast<int64_t>(s.positions.size()), KvRowTable{blocks[2 * i], len, kv_dim, {}, 1.0f, {}},
                          KvRowTable{blocks[2 * i + 1], len, kv_dim, {}, 1.0f, {}}};
      batch.push_back(a);
      std::copy(s.positions.begin(), s.positions.end(), positions.begin() + row);
      row += a.num_tokens + 1;
    }

    for (int threads : {1, 2, 3, 8}) {
      ThreadPool pool(threads);
      std::vector<float> out(q.size(), NAN);
      attention_batch(pool, q.data(), positions, batch, shape, out.data());
      for (size_t i = 0; i < batch.size(); ++i) {
        const AttentionSequence& a = batch[i];
        std::vector<float> alone(static_cast<size_t>(a.num_tokens * q_dim));
        attention(pool, q.data() + a.first_token * q_dim, seqs[i].positions, a.k, a.v, shape, alone.data());
        ASSERT_EQ(0, std::memcmp(alone.data(), out.data() + a.first_token * q_dim, alone.size() * 4))
            << "sequence " << i << ", " << threads << " threads, " << shape.num_heads << " heads";
        // The row after each sequence belongs to none: not written.
        const float* gap = out.data() + (a.first_token + a.num_tokens) * q_dim;
        ASSERT_TRUE(std::all_of(gap, gap + q_dim, [](float x) { return std::isnan(x); }));
      }
    }
  }
}

}  // namespace
}  // namespace tern::cpu
