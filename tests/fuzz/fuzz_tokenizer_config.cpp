// libFuzzer target for the Hugging Face tokenizer JSON files. The reader takes
// a folder, so each input is written out as files of a private temp folder:
// byte 0 says which files exist (bit i = kFiles[i]) and the rest, split at NUL
// bytes (never valid inside JSON text), gives their contents in order. Any
// input must give an error naming a file, or every file read, in load order,
// with well-formed added tokens. A violation traps. The folder is made under
// $TMPDIR: point it at a RAM disk (/dev/shm, as `make fuzz` does) for ~4x the speed.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tokenizer/tokenizer_files.h"

namespace {

// In the order read_tokenizer_files loads them.
constexpr std::string_view kFiles[] = {"tokenizer.json", "added_tokens.json", "tokenizer_config.json",
                                       "special_tokens_map.json", "chat_template.json"};

std::string& folder() {
  static std::string dir;
  return dir;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void remove_folder() {
  std::error_code ec;
  if (!folder().empty()) std::filesystem::remove_all(folder(), ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  std::error_code ec;
  std::string pattern = (std::filesystem::temp_directory_path(ec) / "tern-fuzz-tokenizer-XXXXXX").string();
  if (ec || mkdtemp(pattern.data()) == nullptr) std::abort();
  folder() = pattern;
  std::atexit(remove_folder);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned mask = data[0];
  std::vector<std::string_view> parts;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (size_t nul; (nul = rest.find('\0')) != std::string_view::npos; rest.remove_prefix(nul + 1)) {
    parts.push_back(rest.substr(0, nul));
  }
  parts.push_back(rest);

  // Set bits past the last part get no file.
  std::vector<std::string_view> written;
  for (size_t i = 0, next = 0; i < std::size(kFiles); ++i) {
    const std::string path = folder() + "/" + std::string(kFiles[i]);
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if ((mask >> i & 1) == 0 || next == parts.size()) continue;
    const std::string_view part = parts[next++];
    std::ofstream(path, std::ios::binary).write(part.data(), static_cast<std::streamsize>(part.size()));
    written.push_back(kFiles[i]);
  }

  auto files = tern::read_tokenizer_files(folder());
  if (!files.is_ok()) {
    // The error must name the file it is about.
    bool named = false;
    for (std::string_view f : written) named = named || files.status().message().find(f) != std::string::npos;
    check(named);
    return 0;
  }
  check(files->files_read.size() == written.size());
  for (size_t i = 0; i < written.size(); ++i) check(files->files_read[i] == written[i]);
  for (const tern::AddedTokenSpec& t : files->added) check(t.id >= 0 && !t.content.empty());
  if (written.empty()) check(files->added.empty() && files->chat_template.empty() && !files->bos);
  return 0;
}
