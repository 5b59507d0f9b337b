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

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tern-tok-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void write(const std::string& name, const std::string& bytes) const { write_file(file(name), bytes); }

 private:
  std::string path_;
};

}  // namespace tern::testing
