// A model named by its Hugging Face hub repo: ORG/NAME, optionally @REVISION
// (a branch, tag or commit) and :FILE (one GGUF file of the repo, by its name
// or by a quantization tag such as Q4_K_M). Parsing only; nothing is fetched.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace tern::hub {

struct RepoRef {
  std::string repo_id;            // "baidu/ERNIE-4.5-0.3B-PT"
  std::string revision = "main";  // branch, tag or commit hash
  std::string file;               // empty: the model's files; else a .gguf name or a quantization tag
};

// Parses ORG/NAME[@REVISION][:FILE]. Errors (kInvalidArgument) say which
// part is malformed.
Result<RepoRef> parse_repo_ref(std::string_view text);

// True when `text` has the shape of a repo reference (ORG/NAME, optionally
// with @REVISION and :FILE); used to tell a hub name from a mistyped path.
bool looks_like_repo_ref(std::string_view text);

// ORG/NAME as the hub spells it: letters, digits, '-', '_', '.'; no '--' or
// '..'; neither part starts or ends with '-' or '.'; at most 96 characters.
bool is_valid_repo_id(std::string_view repo_id);

// A revision usable as a file name under refs/: no "..", no leading '/', no
// empty path segment, no control characters.
bool is_safe_revision(std::string_view revision);

// True for a full 40-hex-digit commit hash.
bool is_commit_hash(std::string_view revision);

std::string to_string(const RepoRef& ref);

}  // namespace tern::hub
