// `tern perplexity`: llama-perplexity's perplexity and KL-divergence runs on
// the model alone. The text is tokenized and cut into windows of -c tokens;
// each window runs as one forward from an empty cache and its second half is
// scored (the first half is context), as llama-perplexity does. With
// --kl-divergence-base it also writes the next-token log-probabilities in
// llama-perplexity's file format; with --kl-divergence it reads such a file
// (tern's or llama.cpp's: the tokens come from it) and reports how far this
// model's distributions are from the base's, the figure that ranks
// quantizations (docs/compat.md). With --kv-cache-dtype fp8 each window runs
// through an fp8 paged pool instead (its K/V rounded to e4m3), so the KL
// against an auto run's base file is what the fp8 cache costs.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/percentile.h"
#include "formats/log_prob_file.h"
#include "setup/engine_setup.h"
#include "setup/model_source.h"
#include "tern_git_commit.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tern perplexity: %s\n", s.to_string().c_str());
  return 1;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open --file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<Tokenizer> load_tokenizer(const Ernie45Model& model, const std::string& path) {
  if (const GgufFile* gguf = model.gguf()) return Tokenizer::from_gguf(*gguf);
  return Tokenizer::load(path);
}

// Row r of a [rows, width] matrix.
template <typename T>
std::span<T> row_of(std::span<T> m, int64_t r, int64_t width) {
  return m.subspan(static_cast<size_t>(r * width), static_cast<size_t>(width));
}

// Runs each window of `tokens` and hands the logits of its scored rows to
// `score(chunk, rows)` ([rows_per_chunk, vocab]). kv_dtype auto: the
// contiguous fp32 cache; fp8: a paged e4m3 pool holding one window.
template <typename Score>
Status run_windows(Ernie45Model& model, std::span<const int32_t> tokens, int64_t n_ctx, int64_t n_chunk,
                   KvCacheDType kv_dtype, Score&& score) {
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  const bool paged = kv_dtype != KvCacheDType::kAuto;
  constexpr int64_t kBlock = 16;
  KvCache cache = model.make_cache(paged ? 0 : n_ctx);
  PagedKvPool pool = paged ? model.make_pool((n_ctx + kBlock - 1) / kBlock, kBlock, kv_dtype) : PagedKvPool();
  std::vector<int32_t> table(static_cast<size_t>(pool.num_blocks()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(n_ctx) * vocab);
  const auto first = static_cast<size_t>(log_prob_first_scored(n_ctx));
  const auto rows = static_cast<size_t>(log_prob_rows_per_chunk(n_ctx));
  for (int64_t c = 0; c < n_chunk; ++c) {
    cache.clear();
    auto window = tokens.subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx));
    if (paged) {
      SequenceChunk chunk;
      chunk.tokens = window;
      chunk.block_table = table;
      chunk.all_logits = true;
      TERN_RETURN_IF_ERROR(model.forward_batch({&chunk, 1}, pool, logits));
    } else {
      TERN_RETURN_IF_ERROR(model.forward_all(window, cache, logits));
    }
    TERN_RETURN_IF_ERROR(score(c, std::span<const float>(logits).subspan(first * vocab, rows * vocab)));
  }
  return Status::ok();
}

// The model's perplexity on --file; with --kl-divergence-base, also the base file.
int run_base(const PerplexityOptions& o, Ernie45Model& model, const Tokenizer& tokenizer, KvCacheDType kv_dtype,
             nlohmann::json& report) {
  auto text = read_file(o.file);
  if (!text.is_ok()) return fail(text.status());
  const std::vector<int32_t> tokens = tokenizer.encode(*text, true);
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * o.n_ctx) {
    return fail(invalid_argument("--file tokenizes to " + std::to_string(n_tokens) + " tokens; a window of " +
                                 std::to_string(o.n_ctx) + " needs at least " + std::to_string(2 * o.n_ctx)));
  }
  int64_t n_chunk = n_tokens / o.n_ctx;
  if (o.n_chunks > 0) n_chunk = std::min(n_chunk, o.n_chunks);
  const int64_t vocab = model.config().vocab_size;
  const auto first = log_prob_first_scored(o.n_ctx);
  const auto rows = log_prob_rows_per_chunk(o.n_ctx);

  LogProbFileWriter writer;
  LogProbFileHeader header{static_cast<uint32_t>(o.n_ctx), static_cast<int32_t>(vocab),
                           static_cast<int32_t>(n_chunk),
                           std::vector<int32_t>(tokens.begin(), tokens.begin() + n_chunk * o.n_ctx)};
  if (!o.kl_base.empty()) {
    Status st = writer.open(o.kl_base, header);
    if (!st.is_ok()) return fail(st);
  }
  const int64_t row_values = log_prob_row_values(vocab);
  std::vector<uint16_t> encoded(static_cast<size_t>(rows * row_values));
  double nll = 0, nll2 = 0;
  Status st = run_windows(model, header.tokens, o.n_ctx, n_chunk, kv_dtype, [&](int64_t c, std::span<const float> logits) {
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t next = header.tokens[static_cast<size_t>(c * o.n_ctx + first + r + 1)];
      const double v = encode_log_prob_row(row_of(logits, r, vocab), next, row_of(std::span(encoded), r, row_values));
      nll += v;
      nll2 += v * v;
    }
    return o.kl_base.empty() ? Status::ok() : writer.write_rows(encoded);
  });
  if (st.is_ok() && !o.kl_base.empty()) st = writer.finish();
  if (!st.is_ok()) return fail(st);

  const int64_t count = n_chunk * rows;
  const MeanAndError log_ppl = mean_and_error(nll, nll2, count);
  const double ppl = std::exp(log_ppl.mean);
  std::printf("%lld tokens in %lld windows of %lld, %lld positions scored\n", static_cast<long long>(n_tokens),
              static_cast<long long>(n_chunk), static_cast<long long>(o.n_ctx), static_cast<long long>(count));
  std::printf("PPL: %.4f ± %.4f\n", ppl, ppl * log_ppl.error);
  if (!o.kl_base.empty()) std::printf("log-probabilities written to %s\n", o.kl_base.c_str());
  report.update({{"n_tokens", n_tokens}, {"n_chunks", n_chunk}, {"n_ctx", o.n_ctx}, {"positions", count},
                 {"ppl", ppl}, {"ppl_error", ppl * log_ppl.error}});
  return 0;
}

// The model against a base file: KL divergence and the rest of llama-perplexity's summary.
int run_kl(const PerplexityOptions& o, Ernie45Model& model, KvCacheDType kv_dtype, nlohmann::json& report) {
  LogProbFileReader reader;
  auto header = reader.open(o.kl_base);
  if (!header.is_ok()) return fail(header.status());
  const int64_t vocab = model.config().vocab_size;
  if (header->n_vocab != vocab) {
    return fail(invalid_argument(o.kl_base + " has a vocabulary of " + std::to_string(header->n_vocab) +
                                 " tokens, the model " + std::to_string(vocab)));
  }
  const int64_t n_ctx = header->n_ctx;
  if (n_ctx > model.config().max_position_embeddings) {
    return fail(invalid_argument(o.kl_base + "'s window of " + std::to_string(n_ctx) + " tokens is past the model's " +
                                 std::to_string(model.config().max_position_embeddings) + " positions"));
  }
  int64_t n_chunk = header->n_chunk;
  if (o.n_chunks > 0) n_chunk = std::min(n_chunk, o.n_chunks);
  const auto first = log_prob_first_scored(n_ctx);
  const auto rows = log_prob_rows_per_chunk(n_ctx);
  const int64_t row_values = log_prob_row_values(vocab);
  KlStats s;
  std::vector<uint16_t> base;
  Status st = run_windows(model, header->tokens, n_ctx, n_chunk, kv_dtype, [&](int64_t c, std::span<const float> logits) {
    TERN_RETURN_IF_ERROR(reader.read_chunk(base));
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t next = header->tokens[static_cast<size_t>(c * n_ctx + first + r + 1)];
      score_against_base(row_of(logits, r, vocab), row_of(std::span<const uint16_t>(base), r, row_values), next, s);
    }
    return Status::ok();
  });
  if (!st.is_ok()) return fail(st);

  const MeanAndError log_ppl = mean_and_error(s.sum_nll, s.sum_nll2, s.count);
  const MeanAndError log_ppl_base = mean_and_error(s.sum_nll_base, s.sum_nll_base2, s.count);
  const MeanAndError kld = mean_and_error(s.sum_kld, s.sum_kld2, s.count);
  const MeanAndError p_diff2 = mean_and_error(s.sum_p_diff2, s.sum_p_diff4, s.count);
  const double same_top = s.count ? static_cast<double>(s.same_top) / static_cast<double>(s.count) : 0;
  const double same_top_error =
      s.count > 1 ? std::sqrt(same_top * (1 - same_top) / static_cast<double>(s.count - 1)) : 0;
  const double rms_p_diff = std::sqrt(p_diff2.mean);
  std::printf("%lld windows of %lld tokens from %s, %lld positions scored\n", static_cast<long long>(n_chunk),
              static_cast<long long>(n_ctx), o.kl_base.c_str(), static_cast<long long>(s.count));
  std::printf("Mean PPL(Q)   : %.6f ± %.6f\n", std::exp(log_ppl.mean), std::exp(log_ppl.mean) * log_ppl.error);
  std::printf("Mean PPL(base): %.6f ± %.6f\n", std::exp(log_ppl_base.mean),
              std::exp(log_ppl_base.mean) * log_ppl_base.error);
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", kld.mean, kld.error);
  std::printf("Maximum KLD: %10.6f\n", percentile(s.kld, 1.0));
  std::printf("99.0%%   KLD: %10.6f\n", percentile(s.kld, 0.99));
  std::printf("Median  KLD: %10.6f\n", percentile(s.kld, 0.5));
  std::printf("Same top p: %6.3f ± %5.3f %%\n", 100 * same_top, 100 * same_top_error);
  std::printf("RMS Δp    : %6.3f %%, maximum %6.3f %%\n", 100 * rms_p_diff, 100 * s.max_p_diff);
  report.update({{"n_chunks", n_chunk}, {"n_ctx", n_ctx}, {"positions", s.count},
                 {"ppl", std::exp(log_ppl.mean)}, {"ppl_base", std::exp(log_ppl_base.mean)},
                 {"kld_mean", kld.mean}, {"kld_error", kld.error}, {"kld_max", percentile(s.kld, 1.0)},
                 {"kld_99", percentile(s.kld, 0.99)}, {"kld_median", percentile(s.kld, 0.5)},
                 {"same_top", same_top}, {"rms_p_diff", rms_p_diff}, {"max_p_diff", s.max_p_diff}});
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, PerplexityOptions& o) {
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a text, or the KL divergence of the next-token distributions against a base, as "
      "llama-perplexity computes them (its --kl-divergence-base files work both ways)");
  add_model_options(*cmd, o.engine);
  add_kv_cache_dtype_option(*cmd, o.engine);
  cmd->add_option("-f,--file", o.file, "Text to score (not with --kl-divergence: the base file holds the tokens)");
  cmd->add_option("-c,--ctx-size", o.n_ctx, "Window in tokens: the first half is context, the second half is scored")
      ->check(between(int64_t{4}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--chunks", o.n_chunks, "Windows to score (-1: all that the text or the base file holds)")
      ->capture_default_str();
  cmd->add_option("--kl-divergence-base", o.kl_base,
                  "Log-probability file: written from --file, or read with --kl-divergence");
  cmd->add_flag("--kl-divergence", o.kl_divergence,
                "Score the model against --kl-divergence-base (on its tokens): mean KL divergence, "
                "perplexities, same top token");
  cmd->add_option("--json-out", o.json_out, "Also write the figures as one JSON object");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_perplexity(const PerplexityOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  if (o.kl_divergence && o.kl_base.empty()) return fail(invalid_argument("--kl-divergence needs --kl-divergence-base"));
  if (!o.kl_divergence && o.file.empty()) return fail(invalid_argument("--file is required (the text to score)"));
  if (o.engine.device == "cuda" || o.engine.device == "null") {
    return fail(unsupported("runs the CPU forward only (--device cpu)"));
  }
  auto kv_dtype = parse_kv_cache_dtype(o.engine.kv_cache_dtype);
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status());
  const cpu::KernelSet* kernels = cpu::kernel_set_named(o.engine.cpu_kernels);
  if (kernels == nullptr) return fail(invalid_argument("unknown --cpu-kernels '" + o.engine.cpu_kernels + "'"));
  auto source = resolve_model_source(o.engine.model);
  if (!source.is_ok()) return fail(source.status());
  auto loaded = Ernie45Model::load(source->path, o.engine.threads, *kernels);
  if (!loaded.is_ok()) return fail(loaded.status());
  Ernie45Model& model = **loaded;
  RunnerOptions unused;
  if (Status q = apply_quantization(model, source->path, o.engine.quantization, "cpu", unused); !q.is_ok()) {
    return fail(q);
  }

  nlohmann::json report = {{"model", o.engine.model}, {"commit", TERN_GIT_COMMIT}, {"cpu_kernels", kernels->name},
                           {"quantization", o.engine.quantization},
                           {"threads", model.num_threads()}, {"kv_cache_dtype", kv_cache_dtype_name(*kv_dtype)}};
  int rc = 0;
  if (o.kl_divergence) {
    report["kl_divergence_base"] = o.kl_base;
    rc = run_kl(o, model, *kv_dtype, report);
  } else {
    if (o.n_ctx > model.config().max_position_embeddings) {
      return fail(invalid_argument("-c " + std::to_string(o.n_ctx) + " is past the model's " +
                                   std::to_string(model.config().max_position_embeddings) + " positions"));
    }
    auto tokenizer = load_tokenizer(model, source->path);
    if (!tokenizer.is_ok()) return fail(tokenizer.status());
    report["file"] = o.file;
    rc = run_base(o, model, *tokenizer, *kv_dtype, report);
  }
  if (rc == 0 && !o.json_out.empty()) std::ofstream(o.json_out) << report.dump(2) << "\n";
  return rc;
}

}  // namespace tern::cli
