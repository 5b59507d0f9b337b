// Shared helpers for the tests that need a tokenizer: the committed fixture
// folder (tests/data/tokenizer-fixture, made by tools/make_tokenizer_fixture.py)
// loaded once per test binary, and throw-away model folders for the error and
// config-variant cases.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "tokenizer/tokenizer.h"

namespace tern::testing {

inline std::string fixture_dir() { return std::string(TERN_TEST_DATA_DIR) + "/tokenizer-fixture"; }

// The fixture's tokenizer, loaded on first use and shared by the binary's
// tests (a Tokenizer is immutable). A load failure aborts the binary with
// the error: no test of it could mean anything.
inline const Tokenizer& fixture_tokenizer() {
  static const Tokenizer* tok = [] {
    auto loaded = Tokenizer::load(fixture_dir());
    if (!loaded.is_ok()) {
      std::fprintf(stderr, "tokenizer fixture: %s\n", loaded.status().to_string().c_str());
      std::abort();
    }
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tok;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace tern::testing
