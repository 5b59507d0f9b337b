#include "formats/log_prob_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "base/checked_math.h"

namespace tern {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint64_t kHeaderBytes = 8 + 4 + 4 + 4;
// Bounds on the header's sizes: far past any model or window tern runs, so
// that a corrupt header is refused before anything is sized from it.
constexpr int64_t kMaxCtx = int64_t{1} << 24;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
// llama-perplexity's base: probabilities below e^-16 are stored as the floor.
constexpr float kLogProbFloor = 16.0f;

struct RowHeader {
  float scale;
  float min_log_prob;
};

RowHeader read_row_header(std::span<const uint16_t> row) {
  RowHeader h;
  std::memcpy(&h.scale, row.data(), 4);
  std::memcpy(&h.min_log_prob, row.data() + 2, 4);
  return h;
}

// max, log(sum exp(x - max)) of a row, with the sum in double as llama.cpp keeps it.
std::pair<float, float> max_and_log_sum_exp(std::span<const float> logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max_logit);
  return {max_logit, static_cast<float>(std::log(sum))};
}

std::optional<uint64_t> file_bytes(int64_t n_ctx, int64_t n_vocab, int64_t n_chunk) {
  const auto tokens = checked_product(std::vector<uint64_t>{static_cast<uint64_t>(n_chunk),
                                                            static_cast<uint64_t>(n_ctx), 4});
  const auto rows = checked_product(std::vector<uint64_t>{
      static_cast<uint64_t>(n_chunk), static_cast<uint64_t>(log_prob_rows_per_chunk(n_ctx)),
      static_cast<uint64_t>(log_prob_row_values(n_vocab)), 2});
  if (!tokens || !rows) return std::nullopt;
  const auto head = checked_add(kHeaderBytes, *tokens);
  return head ? checked_add(*head, *rows) : std::nullopt;
}

}  // namespace

double encode_log_prob_row(std::span<const float> logits, int32_t token, std::span<uint16_t> row) {
  const auto [max_logit, log_sum_exp] = max_and_log_sum_exp(logits);
  const float min_logit = std::max(*std::min_element(logits.begin(), logits.end()), max_logit - kLogProbFloor);
  const RowHeader h{(max_logit - min_logit) / 65535.0f, min_logit - max_logit - log_sum_exp};
  std::fill(row.begin(), row.end(), 0);
  std::memcpy(row.data(), &h.scale, 4);
  std::memcpy(row.data() + 2, &h.min_log_prob, 4);
  if (h.scale != 0) {
    const float inv_scale = 1 / h.scale;
    for (size_t i = 0; i < logits.size(); ++i) {
      // Round half to even, as llama.cpp's nearest_int does.
      if (logits[i] > min_logit) row[4 + i] = static_cast<uint16_t>(std::lrintf(inv_scale * (logits[i] - min_logit)));
    }
  }
  return max_logit + log_sum_exp - logits[static_cast<size_t>(token)];
}

double score_against_base(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token,
                          KlStats& s) {
  const auto [max_logit, log_sum_exp] = max_and_log_sum_exp(logits);
  const float log_norm = max_logit + log_sum_exp;  // log-softmax is logit - log_norm
  const RowHeader h = read_row_header(base_row);
  const uint16_t* q = base_row.data() + 4;
  const auto tok = static_cast<size_t>(token);

  const double nll = log_norm - logits[tok];
  const double nll_base = -(h.scale * q[tok] + h.min_log_prob);
  double kld = 0;
  size_t top = 0, top_base = 0;
  float top_base_lp = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > logits[top]) top = i;
    const float lp_base = h.scale * q[i] + h.min_log_prob;
    if (i == 0 || lp_base > top_base_lp) {
      top_base_lp = lp_base;
      top_base = i;
    }
    if (lp_base > -kLogProbFloor) kld += std::exp(lp_base) * (lp_base - (logits[i] - log_norm));
  }
  s.sum_nll += nll;
  s.sum_nll2 += nll * nll;
  s.sum_nll_base += nll_base;
  s.sum_nll_base2 += nll_base * nll_base;
  s.sum_nll_nll_base += nll * nll_base;
  s.sum_kld += kld;
  s.sum_kld2 += kld * kld;
  const double p_diff = std::exp(-nll) - std::exp(-nll_base);
  s.sum_p_diff += p_diff;
  s.sum_p_diff2 += p_diff * p_diff;
  s.sum_p_diff4 += p_diff * p_diff * p_diff * p_diff;
  s.max_p_diff = std::max(s.max_p_diff, std::fabs(p_diff));
  s.same_top += top == top_base;
  ++s.count;
  s.kld.push_back(static_cast<float>(kld));
  return kld;
}

MeanAndError mean_and_error(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count);
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, var > 0 && count > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

Status LogProbFileWriter::open(const std::string& path, const LogProbFileHeader& h) {
  if (h.n_ctx < 2 || h.n_ctx > kMaxCtx || h.n_vocab < 1 || h.n_vocab > kMaxVocab || h.n_chunk < 1 ||
      h.tokens.size() != static_cast<size_t>(h.n_chunk) * h.n_ctx) {
    return invalid_argument(path + ": a log-probability file needs n_ctx >= 2, n_vocab >= 1, n_chunk >= 1 and "
                            "n_chunk * n_ctx tokens");
  }
  path_ = path;
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) return io_error(path + ": cannot open for writing");
  out_.write(kMagic, sizeof(kMagic));
  out_.write(reinterpret_cast<const char*>(&h.n_ctx), 4);
  out_.write(reinterpret_cast<const char*>(&h.n_vocab), 4);
  out_.write(reinterpret_cast<const char*>(&h.n_chunk), 4);
  out_.write(reinterpret_cast<const char*>(h.tokens.data()), static_cast<std::streamsize>(h.tokens.size() * 4));
  rows_expected_ = static_cast<uint64_t>(h.n_chunk) * static_cast<uint64_t>(log_prob_rows_per_chunk(h.n_ctx));
  rows_written_ = 0;
  row_values_ = log_prob_row_values(h.n_vocab);
  return out_ ? Status::ok() : io_error(path + ": write failed");
}

Status LogProbFileWriter::write_rows(std::span<const uint16_t> rows) {
  if (rows.size() % static_cast<size_t>(row_values_) != 0) {
    return invalid_argument(path_ + ": rows of " + std::to_string(row_values_) + " values expected");
  }
  out_.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * 2));
  rows_written_ += rows.size() / static_cast<size_t>(row_values_);
  return out_ ? Status::ok() : io_error(path_ + ": write failed");
}

Status LogProbFileWriter::finish() {
  if (rows_written_ != rows_expected_) {
    return internal_error(path_ + ": " + std::to_string(rows_written_) + " rows written, the header promises " +
                          std::to_string(rows_expected_));
  }
  out_.close();
  return out_ ? Status::ok() : io_error(path_ + ": close failed");
}

Result<LogProbFileHeader> LogProbFileReader::open(const std::string& path) {
  path_ = path;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return not_found(path + ": " + ec.message());
  in_.open(path, std::ios::binary);
  if (!in_) return io_error(path + ": cannot open");
  if (size < kHeaderBytes) {
    return parse_error(path + ": " + std::to_string(size) + " bytes, shorter than the 20-byte header");
  }
  char magic[8];
  LogProbFileHeader h;
  in_.read(magic, 8);
  in_.read(reinterpret_cast<char*>(&h.n_ctx), 4);
  in_.read(reinterpret_cast<char*>(&h.n_vocab), 4);
  in_.read(reinterpret_cast<char*>(&h.n_chunk), 4);
  if (!in_) return io_error(path + ": read failed at offset 0");
  if (std::memcmp(magic, kMagic, 8) != 0) {
    return parse_error(path + ": offset 0: no \"_logits_\" magic; not a llama-perplexity log-probability file");
  }
  if (h.n_ctx < 2 || h.n_ctx > kMaxCtx) {
    return parse_error(path + ": offset 8: n_ctx " + std::to_string(h.n_ctx) + " outside [2, 2^24]");
  }
  if (h.n_vocab < 1 || h.n_vocab > kMaxVocab) {
    return parse_error(path + ": offset 12: n_vocab " + std::to_string(h.n_vocab) + " outside [1, 2^24]");
  }
  if (h.n_chunk < 1) return parse_error(path + ": offset 16: n_chunk " + std::to_string(h.n_chunk) + " < 1");
  const std::optional<uint64_t> want = file_bytes(h.n_ctx, h.n_vocab, h.n_chunk);
  if (!want || *want != size) {
    return parse_error(path + ": " + std::to_string(size) + " bytes, but n_ctx " + std::to_string(h.n_ctx) +
                       ", n_vocab " + std::to_string(h.n_vocab) + " and n_chunk " + std::to_string(h.n_chunk) +
                       " need " + (want ? std::to_string(*want) : std::string("more than 2^64")));
  }
  h.tokens.resize(static_cast<size_t>(h.n_chunk) * h.n_ctx);
  in_.read(reinterpret_cast<char*>(h.tokens.data()), static_cast<std::streamsize>(h.tokens.size() * 4));
  if (!in_) return io_error(path + ": read failed at offset 20");
  for (size_t i = 0; i < h.tokens.size(); ++i) {
    if (h.tokens[i] < 0 || h.tokens[i] >= h.n_vocab) {
      return parse_error(path + ": offset " + std::to_string(kHeaderBytes + 4 * i) + ": token " +
                         std::to_string(h.tokens[i]) + " outside [0, " + std::to_string(h.n_vocab) + ")");
    }
  }
  offset_ = kHeaderBytes + 4 * h.tokens.size();
  chunks_left_ = h.n_chunk;
  chunk_values_ = static_cast<uint64_t>(log_prob_rows_per_chunk(h.n_ctx)) *
                  static_cast<uint64_t>(log_prob_row_values(h.n_vocab));
  return h;
}

Status LogProbFileReader::read_chunk(std::vector<uint16_t>& rows) {
  if (chunks_left_ <= 0) return out_of_range(path_ + ": every chunk was read already");
  rows.resize(chunk_values_);
  in_.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(chunk_values_ * 2));
  if (!in_) return io_error(path_ + ": read failed at offset " + std::to_string(offset_));
  offset_ += chunk_values_ * 2;
  --chunks_left_;
  return Status::ok();
}

}  // namespace tern
