// The log-probability file of llama-perplexity's --kl-divergence-base, read
// and written byte for byte as llama.cpp does, so a base computed by either
// tool scores the other's model on the same tokens: a header ("_logits_",
// u32 n_ctx, i32 n_vocab, i32 n_chunk), the n_chunk * n_ctx evaluation
// tokens (i32), then per chunk one row per scored position (n_ctx / 2 ..
// n_ctx - 2), each the next-token log-probabilities as two floats (scale,
// min) and n_vocab u16 steps above min, padded to an even count. Here also
// the statistics llama-perplexity prints against such a base: mean KL
// divergence, perplexities, same top token, probability differences.
// Thread-compatible: no shared state.
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace tern {

struct LogProbFileHeader {
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  std::vector<int32_t> tokens;  // n_chunk * n_ctx, chunk after chunk
};

// The first scored position of a chunk and how many are scored: llama-perplexity
// scores the second half of each window (the first half is context), the last
// position excepted (it has no next token in the window).
constexpr int64_t log_prob_first_scored(int64_t n_ctx) { return n_ctx / 2; }
constexpr int64_t log_prob_rows_per_chunk(int64_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }
// u16 values per row: two floats (as four u16) and n_vocab rounded up to even.
constexpr int64_t log_prob_row_values(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// Encodes one row of raw logits into `row` (log_prob_row_values(n) values):
// log-softmax, clamped 16 nats below the top, in 65535 steps. Returns the
// negative log-likelihood of `token` under the logits.
double encode_log_prob_row(std::span<const float> logits, int32_t token, std::span<uint16_t> row);

// Sums over scored positions, as llama-perplexity keeps them.
struct KlStats {
  double sum_nll = 0, sum_nll2 = 0;            // -log p(token) under the model scored
  double sum_nll_base = 0, sum_nll_base2 = 0;  // ... under the base
  double sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0;            // KL(base || model) per position
  double sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;  // p(token) - p_base(token)
  double max_p_diff = 0;
  int64_t same_top = 0;  // positions whose most likely token is the base's
  int64_t count = 0;
  std::vector<float> kld;  // per position, for percentiles
};

// Scores one row of raw logits against a base row (as encode_log_prob_row
// wrote it): KL(base || model) over the tokens the base gives more than
// e^-16, the token's likelihood under both, whether the top tokens agree.
// Adds to `stats`; returns this position's KL divergence.
double score_against_base(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token,
                          KlStats& stats);

// What llama-perplexity prints from the sums: mean and its standard error.
struct MeanAndError {
  double mean = 0;
  double error = 0;
};
MeanAndError mean_and_error(double sum, double sum2, int64_t count);

// Writes a base file: open() writes the header and tokens, each
// write_rows() appends rows, finish() checks the row count and closes.
class LogProbFileWriter {
 public:
  Status open(const std::string& path, const LogProbFileHeader& header);
  Status write_rows(std::span<const uint16_t> rows);
  Status finish();

 private:
  std::ofstream out_;
  std::string path_;
  uint64_t rows_expected_ = 0, rows_written_ = 0;
  int64_t row_values_ = 0;
};

// Reads a base file. open() checks the magic, that the sizes are positive
// and bounded, that every token is in [0, n_vocab), and that the file holds
// exactly the rows its header promises (kParse naming the offset or the
// sizes otherwise); read_chunk() returns the next chunk's rows.
class LogProbFileReader {
 public:
  Result<LogProbFileHeader> open(const std::string& path);
  // rows_per_chunk * row_values values into `rows` (resized).
  Status read_chunk(std::vector<uint16_t>& rows);

 private:
  std::ifstream in_;
  std::string path_;
  uint64_t offset_ = 0;
  int64_t chunks_left_ = 0;
  uint64_t chunk_values_ = 0;
};

}  // namespace tern
