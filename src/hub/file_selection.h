// Which files of a repo to fetch. For a model: its config, generation config
// and tokenizer files and its top-level *.safetensors (with the index), or
// one GGUF file chosen by name or quantization tag. For `tern download
// --include`: the files matching shell-style patterns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tern::hub {

struct FileSelection {
  std::vector<std::string> files;  // repo-relative names, in the repo's order
  std::string model_file;          // empty: the model is the snapshot folder; else the GGUF file in it
};

// `choice` is empty (safetensors; or the repo's only GGUF file when it has
// no safetensors), a .gguf file name, or a quantization tag matched against
// the GGUF file names (case-insensitive, e.g. Q4_K_M). Errors name the repo,
// what it holds and how to choose.
Result<FileSelection> select_model_files(const std::vector<std::string>& repo_files, std::string_view choice,
                                         std::string_view repo_id);

// The files matching any of `patterns` (fnmatch(3): '*' also matches '/').
std::vector<std::string> select_matching(const std::vector<std::string>& repo_files,
                                         const std::vector<std::string>& patterns);

}  // namespace tern::hub
