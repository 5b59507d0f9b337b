// Sampling on the device (sample_rows, the argmax's keys) against the host
// sampler's semantics: the distribution drawn from, the cuts, the logit ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/kernels.h"
#include "engine/sampler.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using test::DeviceArray;

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
