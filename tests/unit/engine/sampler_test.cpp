// Sampler and SamplingParams: each parameter's effect on the drawn tokens or
// on the logits (exact arithmetic where the spec is arithmetic, empirical
// distributions with fixed seeds where it is statistical), logprobs, seeding,
// and validate()'s messages.
#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace tern {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 2.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int32_t reference_argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> v;
  for (double p : probs) v.push_back(static_cast<float>(std::log(p)));
  return v;
}

// Draws `n` tokens from fresh copies of `logits` and counts them.
std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[static_cast<size_t>(s.sample(row))];
  }
  return counts;
}

double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    double expected = probs[i] * n;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi;
}

// Chi-square critical value for 4 degrees of freedom at p = 0.001.
constexpr double kChi4dof = 18.467;

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

TEST(Sampler, TopK1EqualsGreedy) {
  for (uint64_t trial = 0; trial < 200; ++trial) {
    auto logits = random_logits(1000, trial);
    SamplingParams p = seeded(trial);
    p.top_k = 1;
    Sampler s(p);
    std::vector<float> row = logits;
    EXPECT_EQ(s.sample(row), reference_argmax(logits)) << "trial " << trial;
  }
}

TEST(Sampler, TemperatureNearZeroEqualsGreedy) {
  int checked = 0;
  for (uint64_t trial = 0; trial < 200; ++trial) {
    auto logits = random_logits(1000, 1000 + trial);
    auto sorted = logits;
    std::sort(sorted.rbegin(), sorted.rend());
    for (double t : {0.0, 1e-6, 1e-3}) {
      // At T = 1e-3 a gap of 0.05 leaves the runner-up exp(-50) of the mass.
      if (t > 0.0 && sorted[0] - sorted[1] < 0.05f) continue;
      SamplingParams p = seeded(trial);
      p.temperature = t;
      Sampler s(p);
      std::vector<float> row = logits;
      EXPECT_EQ(s.sample(row), reference_argmax(logits)) << "trial " << trial << " T " << t;
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

TEST(Sampler, LogitBiasMinus100NeverAppears) {
  // Token 3 would win most draws without the bias.
  std::vector<float> logits = random_logits(20, 7, 0.5f);
  logits[3] = 4.0f;
  SamplingParams p = seeded(11);
  p.logit_bias[3] = -100.0;
  Sampler s(p);
  auto counts = histogram(s, logits, 2000);
  EXPECT_EQ(counts[3], 0);
  // Control: without the bias token 3 does appear.
  Sampler control(seeded(11));
  EXPECT_GT(histogram(control, logits, 2000)[3], 1000);
}

TEST(Sampler, LogitBiasBeyondLimitIsClamped) {
  // -1000 is clamped to -100, so a token 150 above the rest still wins.
  std::vector<float> logits(10, 0.0f);
  logits[4] = 150.0f;
  SamplingParams p = seeded(1);
  p.temperature = 0.0;
  p.logit_bias[4] = -1000.0;
  Sampler s(p);
  std::vector<float> row = logits;
  EXPECT_EQ(s.sample(row), 4);
  EXPECT_FLOAT_EQ(row[4], 50.0f);
}

TEST(Sampler, LogitBiasPlus100AlwaysChosen) {
  auto logits = random_logits(500, 3);
  SamplingParams p = seeded(5);
  p.logit_bias[7] = 100.0;
  Sampler s(p);
  auto counts = histogram(s, logits, 2000);
  EXPECT_EQ(counts[7], 2000);
}

TEST(Sampler, TopPDrawsOnlyFromNucleus) {
  // Probabilities 0.3, 0.25, 0.2, 0.15, 0.1 on shuffled ids: the 0.5 nucleus
  // is {0.3, 0.25} (0.3 alone is short of 0.5).
  const std::vector<int32_t> ids = {3, 0, 4, 1, 2};
  const std::vector<double> probs = {0.3, 0.25, 0.2, 0.15, 0.1};
  std::vector<float> logits(5);
  for (size_t i = 0; i < 5; ++i) logits[static_cast<size_t>(ids[i])] = static_cast<float>(std::log(probs[i]));
  SamplingParams p = seeded(9);
  p.top_p = 0.5;
  Sampler s(p);
  auto counts = histogram(s, logits, 4000);
  EXPECT_GT(counts[3], 0);
  EXPECT_GT(counts[0], 0);
  EXPECT_EQ(counts[3] + counts[0], 4000);
  // Renormalised within the nucleus: 0.3 / 0.55 of the draws.
  EXPECT_NEAR(counts[3] / 4000.0, 0.3 / 0.55, 0.03);
}

TEST(Sampler, TopPOverLargeVocabularyMatchesSortedNucleus) {
  // A flat distribution over 5000 ids: the 0.9 nucleus has thousands of ids,
  // so the sampler's growing partial sort must run several rounds.
  auto logits = random_logits(5000, 21, 1.0f);
  auto probs = softmax(logits);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::set<int32_t> nucleus;
  double mass = 0.0;
  for (int32_t id : order) {
    nucleus.insert(id);
    mass += probs[static_cast<size_t>(id)];
    if (mass >= 0.9) break;
  }
  ASSERT_GT(nucleus.size(), 256u);
  ASSERT_LT(nucleus.size(), 4900u);
  SamplingParams p = seeded(4);
  p.top_p = 0.9;
  Sampler s(p);
  auto counts = histogram(s, logits, 2000);
  for (size_t id = 0; id < counts.size(); ++id)
    if (!nucleus.count(static_cast<int32_t>(id))) {
      EXPECT_EQ(counts[id], 0) << "id " << id << " is outside the nucleus";
    }
}

TEST(Sampler, TopPThresholdSplitsTiesByIdBehindAnOutlier) {
  // 21000 ids in 7 tied groups (logit 0.001 * (id % 7)) and one outlier at 3:
  // the outlier stretches the logit range so the groups share a few
  // histogram buckets, and the nucleus ends half-way through the group
  // id % 7 == 3, whose lower ids are kept (more likely, then lower id).
  const size_t n = 21000;
  std::vector<float> logits(n);
  for (size_t id = 0; id < n; ++id) logits[id] = 0.001f * static_cast<float>(id % 7);
  logits[5] = 3.0f;
  const auto probs = softmax(logits);
  double mass = probs[5];
  for (size_t id = 0; id < n; ++id)
    if (id != 5 && id % 7 >= 4) mass += probs[id];
  const double tie = probs[3];  // every id with id % 7 == 3
  mass += 1500.5 * tie;         // the boundary falls half-way into the 1501st tied id
  const size_t boundary = 3 + 7 * 1500;
  SamplingParams p = seeded(17);
  p.top_p = mass;
  Sampler s(p);
  auto counts = histogram(s, logits, 4000);
  int kept_ties = 0;
  for (size_t id = 0; id < n; ++id) {
    if (id % 7 < 3 || (id % 7 == 3 && id > boundary)) {
      EXPECT_EQ(counts[id], 0) << "id " << id << " is outside the nucleus";
    } else if (id % 7 == 3) {
      kept_ties += counts[id];
    }
  }
  // 1501 of about 10500 kept ids.
  EXPECT_NEAR(kept_ties / 4000.0, 1501.0 / 10500.0, 0.03);
}

TEST(Sampler, TopPWithTopKAndMinPKeepsTheIntersection) {
  auto logits = random_logits(3000, 23, 1.0f);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  SamplingParams p = seeded(6);
  p.top_k = 200;
  p.top_p = 0.5;
  p.min_p = 0.2;
  Sampler s(p);
  auto counts = histogram(s, logits, 2000);
  // The 200 most likely, then the 0.5 mass of those, then p >= 0.2 * p(max).
  std::vector<double> top(200);
  for (size_t i = 0; i < 200; ++i) top[i] = std::exp(static_cast<double>(logits[order[i]] - logits[order[0]]));
  double total = std::accumulate(top.begin(), top.end(), 0.0), mass = 0.0;
  size_t keep = 0;
  while (keep < 200 && mass < 0.5 * total) mass += top[keep++];
  std::set<int32_t> allowed;
  for (size_t i = 0; i < keep; ++i)
    if (top[i] >= 0.2) allowed.insert(order[i]);
  ASSERT_GT(allowed.size(), 3u);
  for (size_t id = 0; id < counts.size(); ++id)
    if (!allowed.count(static_cast<int32_t>(id))) {
      EXPECT_EQ(counts[id], 0) << "id " << id;
    }
}

TEST(Sampler, MinPDropsTokensBelowThreshold) {
  // min_p 0.25 of p(max) 0.5 is 0.125: 0.2 and 0.15 stay, 0.1 and 0.05 go.
  const std::vector<double> probs = {0.1, 0.5, 0.05, 0.2, 0.15};
  auto logits = log_of(probs);
  SamplingParams p = seeded(2);
  p.min_p = 0.25;
  Sampler s(p);
  auto counts = histogram(s, logits, 4000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  EXPECT_GT(counts[4], 0);
  EXPECT_NEAR(counts[1] / 4000.0, 0.5 / 0.85, 0.03);
}

TEST(Sampler, TopKKeepsOnlyKMostLikely) {
  auto logits = random_logits(100, 31, 0.3f);
  SamplingParams p = seeded(8);
  p.top_k = 3;
  Sampler s(p);
  auto counts = histogram(s, logits, 3000);
  auto sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  int in_top = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (logits[id] >= sorted[2]) {
      EXPECT_GT(counts[id], 0);
      in_top += counts[id];
    }
  }
  EXPECT_EQ(in_top, 3000);
}

TEST(Sampler, TemperatureOneMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.5f};
  Sampler s(seeded(1234));
  const int n = 20000;
  auto counts = histogram(s, logits, n);
  EXPECT_LT(chi_square(counts, softmax(logits), n), kChi4dof);
  // The bound discriminates: a uniform distribution fails it.
  EXPECT_GT(chi_square(counts, std::vector<double>(5, 0.2), n), kChi4dof);
}

TEST(Sampler, TemperatureHalfSharpens) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.5f};
  SamplingParams p = seeded(99);
  p.temperature = 0.5;
  Sampler s(p);
  const int n = 20000;
  auto counts = histogram(s, logits, n);
  auto sharp = softmax(logits, 0.5);
  EXPECT_LT(chi_square(counts, sharp, n), kChi4dof);
  EXPECT_GT(chi_square(counts, softmax(logits, 1.0), n), kChi4dof);
  EXPECT_GT(counts[0] / static_cast<double>(n), softmax(logits)[0] + 0.1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  // id: 0 unseen, 1 prompt (+), 2 output (-), 3 prompt and output (+),
  // 4 output twice (-), 5 exactly zero (seen), 6 unseen negative.
  std::vector<float> logits = {1.5f, 2.0f, -1.0f, 3.0f, -0.5f, 0.0f, -2.0f};
  const std::vector<int32_t> prompt = {1, 3, 1, 5};
  const std::vector<int32_t> output = {2, 3, 4, 4};
  SamplingParams p = seeded(1);
  p.temperature = 0.0;
  p.repetition_penalty = 1.3;
  Sampler s(p);
  std::vector<float> row = logits;
  SampleResult r = s.sample(row, {prompt, output, {}});
  const float k = 1.3f;
  EXPECT_EQ(row[0], 1.5f);
  EXPECT_EQ(row[1], 2.0f / k);
  EXPECT_EQ(row[2], -1.0f * k);
  EXPECT_EQ(row[3], 3.0f / k);  // once, though seen in both
  EXPECT_EQ(row[4], -0.5f * k);  // once, though seen twice
  EXPECT_EQ(row[5], 0.0f);
  EXPECT_EQ(row[6], -2.0f);
  EXPECT_EQ(r.token, 3);  // 3 / 1.3 = 2.31 still beats 1.5
}

TEST(Sampler, PresenceAndFrequencyPenaltiesOverOutputOnly) {
  std::vector<float> logits = {0.5f, 1.0f, 2.0f, -1.0f, 0.25f, 3.0f, 0.0f, 1.25f};
  const std::vector<int32_t> prompt = {7, 7, 1};
  std::vector<int32_t> output = {5, 5, 5, 2};
  SamplingParams p = seeded(1);
  p.temperature = 0.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  Sampler s(p);
  std::vector<float> row = logits;
  s.sample(row, {prompt, output, {}});
  EXPECT_EQ(row[5], 3.0f - 0.5f * 3 - 0.25f);
  EXPECT_EQ(row[2], 2.0f - 0.5f * 1 - 0.25f);
  EXPECT_EQ(row[7], 1.25f);  // prompt only: untouched
  EXPECT_EQ(row[1], 1.0f);
  EXPECT_EQ(row[0], 0.5f);

  // Next step: the sampler counts only the new tail.
  output.push_back(2);
  output.push_back(3);
  row = logits;
  s.sample(row, {prompt, output, {}});
  EXPECT_EQ(row[5], 3.0f - 0.5f * 3 - 0.25f);
  EXPECT_EQ(row[2], 2.0f - 0.5f * 2 - 0.25f);
  EXPECT_EQ(row[3], -1.0f - 0.5f * 1 - 0.25f);

  // A shorter output (a reset sequence) is recounted from scratch.
  output = {2};
  row = logits;
  s.sample(row, {prompt, output, {}});
  EXPECT_EQ(row[5], 3.0f);
  EXPECT_EQ(row[2], 2.0f - 0.5f - 0.25f);
}

TEST(Sampler, MinTokensMasksStopIdsUntilReached) {
  auto logits = random_logits(50, 17);
  logits[9] = 20.0f;   // eos, passed in the context
  logits[12] = 19.0f;  // a request stop_token_id
  const std::vector<int32_t> eos = {9};
  for (bool greedy : {true, false}) {
    SamplingParams p = seeded(3);
    p.temperature = greedy ? 0.0 : 1.0;
    p.min_tokens = 3;
    p.stop_token_ids = {12};
    Sampler s(p);
    std::vector<int32_t> output;
    for (int step = 0; step < 3; ++step) {
      for (int draw = 0; draw < 200; ++draw) {
        std::vector<float> row = logits;
        int32_t t = s.sample(row, {{}, output, eos}).token;
        EXPECT_NE(t, 9);
        EXPECT_NE(t, 12);
      }
      output.push_back(0);
    }
    // Reached: the stop ids (which dwarf every other logit) come back.
    int stops = 0;
    for (int draw = 0; draw < 200; ++draw) {
      std::vector<float> row = logits;
      int32_t t = s.sample(row, {{}, output, eos}).token;
      stops += t == 9 || t == 12;
      if (greedy) {
        EXPECT_EQ(t, 9);
      }
    }
    EXPECT_EQ(stops, 200) << "greedy " << greedy;
  }
}

TEST(Sampler, SeedReproducibleWhateverElseRuns) {
  auto logits = random_logits(50, 5, 0.5f);
  SamplingParams p = seeded(42);
  p.top_p = 0.95;
  Sampler a(p), b(p), other(seeded(7));
  std::vector<int32_t> da, db;
  for (int i = 0; i < 100; ++i) {
    std::vector<float> row = logits;
    da.push_back(a.sample(row));
    // Another sequence draws between b's draws, as in a mixed batch.
    for (int j = 0; j < i % 3; ++j) {
      row = logits;
      other.sample(row);
    }
    row = logits;
    db.push_back(b.sample(row));
  }
  EXPECT_EQ(da, db);

  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> dc;
  for (int i = 0; i < 100; ++i) {
    std::vector<float> row = logits;
    dc.push_back(c.sample(row));
  }
  EXPECT_NE(da, dc);
}

TEST(Sampler, UnseededSamplersDiffer) {
  auto logits = random_logits(50, 6, 0.5f);
  SamplingParams p;  // no seed
  Sampler a(p), b(p);
  std::vector<int32_t> da, db;
  for (int i = 0; i < 100; ++i) {
    std::vector<float> row = logits;
    da.push_back(a.sample(row));
    row = logits;
    db.push_back(b.sample(row));
  }
  EXPECT_NE(da, db);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  auto logits = random_logits(300, 8);
  // Processing that changes the distribution must not change the logprobs.
  SamplingParams p = seeded(12);
  p.temperature = 0.7;
  p.top_k = 20;
  p.logit_bias[17] = 5.0;
  p.repetition_penalty = 1.5;
  p.logprobs = 5;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> output = {4};
  auto probs = softmax(logits);
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = logits;
    SampleResult r = s.sample(row, {prompt, output, {}});
    EXPECT_NEAR(r.logprob, std::log(probs[static_cast<size_t>(r.token)]), 1e-4);
    ASSERT_EQ(r.top.size(), 5u);
    auto sorted = logits;
    std::sort(sorted.rbegin(), sorted.rend());
    for (size_t j = 0; j < r.top.size(); ++j) {
      if (j > 0) {
        EXPECT_GE(r.top[j - 1].logprob, r.top[j].logprob);
      }
      EXPECT_EQ(logits[static_cast<size_t>(r.top[j].id)], sorted[j]);
      EXPECT_NEAR(r.top[j].logprob, std::log(probs[static_cast<size_t>(r.top[j].id)]), 1e-4);
    }
  }
}

TEST(Sampler, LogprobsZeroReportsOnlySampledToken) {
  auto logits = random_logits(100, 9);
  SamplingParams p = seeded(1);
  p.logprobs = 0;
  Sampler s(p);
  std::vector<float> row = logits;
  SampleResult r = s.sample(row, {});
  EXPECT_TRUE(r.top.empty());
  EXPECT_NEAR(r.logprob, std::log(softmax(logits)[static_cast<size_t>(r.token)]), 1e-4);

  Sampler off(seeded(1));
  row = logits;
  r = off.sample(row, {});
  EXPECT_TRUE(std::isnan(r.logprob));
  EXPECT_TRUE(r.top.empty());
}

// What a device applies (plan_device's adjustments, phase by phase:
// apply_adjustments, as sample_rows in backend/cuda/sample.cu does) is bit
// for bit what sample() leaves in the row after steps 1-3, over several
// steps of one sequence.
TEST(Sampler, DeviceAdjustmentsEqualTheHostSteps) {
  const auto logits = random_logits(64, 23);
  SamplingParams p = seeded(5);
  p.temperature = 0.8;
  p.top_k = 7;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.repetition_penalty = 1.4;
  p.frequency_penalty = 0.3;
  p.presence_penalty = 0.1;
  p.logit_bias = {{3, 5.0}, {9, -250.0}, {70, 1.0}};  // 70: outside the vocabulary, skipped
  p.min_tokens = 3;
  p.stop_token_ids = {11, 12};
  const std::vector<int32_t> prompt = {1, 2, 2, 40, 63};
  const std::vector<int32_t> stop = {11, 13};
  Sampler host(p), device(p);
  std::vector<int32_t> output;
  for (int step = 0; step < 6; ++step) {
    const SamplingContext ctx{prompt, output, stop};
    std::vector<float> row = logits;
    const SampleResult r = host.sample(row, ctx);
    std::vector<LogitAdjust> adjust;
    const DeviceSampling d = device.plan_device(ctx, logits.size(), adjust);
    EXPECT_EQ(d.adjust_begin, 0u);
    EXPECT_EQ(d.adjust_end, adjust.size());
    EXPECT_FALSE(d.greedy);
    EXPECT_EQ(d.top_k, 7);
    EXPECT_FLOAT_EQ(d.temperature, 0.8f);
    std::vector<float> got = logits;
    apply_adjustments(got, adjust);
    for (size_t i = 0; i < row.size(); ++i) {
      if (std::isinf(row[i])) {
        EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "step " << step << " id " << i;
      } else {
        EXPECT_EQ(got[i], row[i]) << "step " << step << " id " << i;
      }
    }
    output.push_back(r.token);
  }
  // The keys come from the seeded generator: the same seed, the same keys.
  Sampler a(p), b(p);
  std::vector<LogitAdjust> scratch;
  const SamplingContext ctx{prompt, {}, stop};
  EXPECT_EQ(a.plan_device(ctx, 64, scratch).key, b.plan_device(ctx, 64, scratch).key);
}

TEST(SamplingParams, PythonFloatFormatting) {
  EXPECT_EQ(python_float(-1.0), "-1.0");
  EXPECT_EQ(python_float(0.0), "0.0");
  EXPECT_EQ(python_float(0.5), "0.5");
  EXPECT_EQ(python_float(2.5), "2.5");
  EXPECT_EQ(python_float(0.1), "0.1");
  EXPECT_EQ(python_float(123.25), "123.25");
  EXPECT_EQ(python_float(1e-5), "1e-05");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(1.5e20), "1.5e+20");
  EXPECT_EQ(python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float(0.0001), "0.0001");
  EXPECT_EQ(python_float(std::nan("")), "nan");
}

struct BadParams {
  const char* name;
  void (*mutate)(SamplingParams&);
  const char* message;
};

TEST(SamplingParams, ValidateNamesEachBadField) {
  const BadParams cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -1.0; }, "temperature must be non-negative, got -1.0."},
      {"temperature nan", [](SamplingParams& p) { p.temperature = std::nan(""); },
       "temperature must be a finite number, got nan."},
      {"top_p 0", [](SamplingParams& p) { p.top_p = 0.0; }, "top_p must be in (0, 1], got 0.0."},
      {"top_p big", [](SamplingParams& p) { p.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5."},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }, "top_k must be 0 (disable), or at least 1, got -2."},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5; }, "min_p must be in [0, 1], got 1.5."},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0; },
       "repetition_penalty must be greater than zero, got 0.0."},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5; },
       "presence_penalty must be in [-2, 2], got 2.5."},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0; },
       "frequency_penalty must be in [-2, 2], got -3.0."},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens must be at least 0, got -1."},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = 21; }, "prompt_logprobs must be in [0, 20], got 21."},
      {"min_tokens negative", [](SamplingParams& p) { p.min_tokens = -1; },
       "min_tokens must be greater than or equal to 0, got -1."},
      {"min_tokens over max", [](SamplingParams& p) { p.min_tokens = 20; },
       "min_tokens must be less than or equal to max_tokens=16, got 20."},
      {"logprobs negative", [](SamplingParams& p) { p.logprobs = -1; }, "logprobs must be non-negative, got -1."},
      {"logprobs big", [](SamplingParams& p) { p.logprobs = 21; },
       "Requested sample logprobs of 21, which is greater than max allowed: 20"},
      {"logit_bias id", [](SamplingParams& p) { p.logit_bias[1000] = 1.0; },
       "logit_bias token id 1000 is out of range (vocabulary size 1000)."},
      {"logit_bias negative id", [](SamplingParams& p) { p.logit_bias[-5] = 1.0; },
       "logit_bias token id -5 is out of range (vocabulary size 1000)."},
      {"logit_bias value", [](SamplingParams& p) { p.logit_bias[3] = INFINITY; },
       "logit_bias value for token id 3 must be a finite number, got inf."},
      {"stop empty", [](SamplingParams& p) { p.stop = {"a", ""}; }, "stop cannot contain an empty string."},
      {"stop many", [](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); },
       "stop cannot contain more than 16 strings, got 17."},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.mutate(p);
    Status st = p.validate(1000);
    EXPECT_FALSE(st.is_ok()) << c.name;
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << c.name;
    EXPECT_EQ(st.message(), c.message) << c.name;
  }
}

TEST(SamplingParams, ValidateAcceptsEdgesOfEachRange) {
  SamplingParams p;
  p.temperature = 0.0;
  p.top_p = 1.0;
  p.top_k = -1;
  p.min_p = 1.0;
  p.repetition_penalty = 2.0;
  p.presence_penalty = -2.0;
  p.frequency_penalty = 2.0;
  p.min_tokens = p.max_tokens;
  p.logprobs = 20;
  p.logit_bias = {{0, -100.0}, {999, 300.0}};  // values beyond 100 are clamped, not rejected
  p.stop = std::vector<std::string>(16, "x");
  EXPECT_TRUE(p.validate(1000).is_ok()) << p.validate(1000).message();
  // Without a vocabulary size only negative ids are rejected.
  p.logit_bias[5000] = 1.0;
  EXPECT_TRUE(p.validate().is_ok());
  EXPECT_THAT(p.validate(1000).message(), HasSubstr("logit_bias token id 5000 is out of range"));
}

}  // namespace
}  // namespace tern
