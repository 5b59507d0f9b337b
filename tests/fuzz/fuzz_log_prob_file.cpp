// libFuzzer target for llama-perplexity's log-probability files
// (formats/log_prob_file.h), which `tern perplexity --kl-divergence` reads
// from wherever the user points it. The reader takes a path, so each input is
// written to a private temp file first. Any input must give an error, or a
// header whose tokens are in [0, n_vocab) and exactly n_chunk chunks of rows.
// A violation traps. The file is made under $TMPDIR (a RAM disk under `make fuzz`).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "formats/log_prob_file.h"

namespace {

std::string& path() {
  static std::string p;
  return p;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void remove_file() {
  std::error_code ec;
  if (!path().empty()) std::filesystem::remove_all(std::filesystem::path(path()).parent_path(), ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  std::error_code ec;
  std::string dir = (std::filesystem::temp_directory_path(ec) / "tern-fuzz-logprob-XXXXXX").string();
  if (ec || mkdtemp(dir.data()) == nullptr) std::abort();
  path() = dir + "/base.bin";
  std::atexit(remove_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  tern::LogProbFileReader reader;
  auto header = reader.open(path());
  if (!header.is_ok()) return 0;
  check(header->n_ctx >= 2 && header->n_vocab >= 1 && header->n_chunk >= 1);
  check(header->tokens.size() == static_cast<size_t>(header->n_chunk) * header->n_ctx);
  for (int32_t t : header->tokens) check(t >= 0 && t < header->n_vocab);
  const auto values = static_cast<size_t>(tern::log_prob_rows_per_chunk(header->n_ctx) *
                                          tern::log_prob_row_values(header->n_vocab));
  std::vector<uint16_t> rows;
  for (int32_t c = 0; c < header->n_chunk; ++c) {
    check(reader.read_chunk(rows).is_ok());
    check(rows.size() == values);
  }
  check(!reader.read_chunk(rows).is_ok());
  return 0;
}
