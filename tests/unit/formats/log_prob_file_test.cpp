// llama-perplexity's log-probability file: rows encode the log-softmax in
// 65535 steps, a file written reads back, the KL statistics are those of the
// distributions, and a corrupt file is refused naming what is wrong.
#include "formats/log_prob_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "support/temp_dir.h"

namespace tern {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_logits(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = x[0];
  for (float v : x) m = std::max<double>(m, v);
  double s = 0;
  for (float v : x) s += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(s));
  return out;
}

TEST(LogProbFile, RowsHoldTheLogSoftmaxToWithinAStep) {
  const size_t n = 1001;  // odd: the row is padded to an even count
  const auto logits = random_logits(n, 1, 3.0f);
  std::vector<uint16_t> row(static_cast<size_t>(log_prob_row_values(n)));
  EXPECT_EQ(row.size(), 4 + 1002u);
  const double nll = encode_log_prob_row(logits, 5, row);
  const auto want = log_softmax(logits);
  EXPECT_NEAR(nll, -want[5], 1e-4);
  float scale, min;
  std::memcpy(&scale, row.data(), 4);
  std::memcpy(&min, row.data() + 2, 4);
  for (size_t i = 0; i < n; ++i) {
    if (want[i] < min) continue;  // below the floor: stored as the floor
    EXPECT_NEAR(scale * row[4 + i] + min, want[i], scale) << i;
  }
  EXPECT_EQ(row.back(), 0);
}

TEST(LogProbFile, KlAgainstItselfIsZeroAndAgainstAnotherIsTheDistributionsKl) {
  const size_t n = 300;
  const auto base = random_logits(n, 2, 2.0f);
  auto other = base;
  for (size_t i = 0; i < n; ++i) other[i] += 0.3f * std::sin(static_cast<float>(i));
  std::vector<uint16_t> row(static_cast<size_t>(log_prob_row_values(n)));
  encode_log_prob_row(base, 7, row);

  KlStats same;
  EXPECT_NEAR(score_against_base(base, row, 7, same), 0.0, 1e-4);
  EXPECT_EQ(same.same_top, 1);

  KlStats s;
  const double kld = score_against_base(other, row, 7, s);
  const auto p = log_softmax(base), q = log_softmax(other);
  double want = 0;
  for (size_t i = 0; i < n; ++i) want += std::exp(p[i]) * (p[i] - q[i]);
  EXPECT_NEAR(kld, want, 1e-3 * want + 1e-5);
  EXPECT_GT(kld, 1e-3);
  EXPECT_NEAR(s.sum_nll, -q[7], 1e-4);
  EXPECT_NEAR(s.sum_nll_base, -p[7], 1e-3);
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.kld.size(), 1u);
}

TEST(LogProbFile, WrittenFilesReadBackAndCorruptOnesAreRefused) {
  testing::TempDir dir;
  LogProbFileHeader h{8, 10, 2, {}};
  for (int i = 0; i < 16; ++i) h.tokens.push_back(i % 10);
  const std::string path = dir.file("base.bin");
  LogProbFileWriter w;
  ASSERT_TRUE(w.open(path, h).is_ok());
  const int64_t values = log_prob_rows_per_chunk(8) * log_prob_row_values(10);
  EXPECT_EQ(log_prob_rows_per_chunk(8), 3);
  std::vector<uint16_t> chunk(static_cast<size_t>(values));
  for (int c = 0; c < 2; ++c) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<uint16_t>(i + 100 * c);
    ASSERT_TRUE(w.write_rows(chunk).is_ok());
  }
  ASSERT_TRUE(w.finish().is_ok());

  LogProbFileReader r;
  auto got = r.open(path);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->n_ctx, 8u);
  EXPECT_EQ(got->n_vocab, 10);
  EXPECT_EQ(got->n_chunk, 2);
  EXPECT_EQ(got->tokens, h.tokens);
  std::vector<uint16_t> rows;
  ASSERT_TRUE(r.read_chunk(rows).is_ok());
  ASSERT_TRUE(r.read_chunk(rows).is_ok());
  EXPECT_EQ(rows, chunk);
  EXPECT_EQ(r.read_chunk(rows).code(), ErrorCode::kOutOfRange);

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto refused = [&](std::string b, const std::string& what) {
    dir.write("bad.bin", b);
    LogProbFileReader bad;
    auto res = bad.open(dir.file("bad.bin"));
    ASSERT_FALSE(res.is_ok()) << what;
    EXPECT_EQ(res.status().code(), ErrorCode::kParse) << res.status().to_string();
    EXPECT_THAT(res.status().message(), HasSubstr(what));
  };
  refused("_logits", "shorter than the 20-byte header");
  refused("_LOGITS_" + bytes.substr(8), "no \"_logits_\" magic");
  refused(bytes.substr(0, bytes.size() - 2), "need " + std::to_string(bytes.size()));
  std::string big = bytes;
  const int32_t huge = 1 << 30;
  std::memcpy(big.data() + 16, &huge, 4);  // n_chunk: sizes past the file
  refused(big, "n_chunk 1073741824");
  std::string bad_token = bytes;
  const int32_t t = 10;
  std::memcpy(bad_token.data() + 20 + 4 * 3, &t, 4);
  refused(bad_token, "offset 32: token 10 outside [0, 10)");
}

}  // namespace
}  // namespace tern
