// The hub's answer to GET /api/models/ORG/NAME/revision/REVISION: the commit
// the revision resolves to ("sha") and the repo's files ("siblings", each
// with an "rfilename"). Parsed from untrusted JSON: never throws.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tern::hub {

struct RepoInfo {
  std::string commit;
  std::vector<std::string> files;  // only names safe to join under a folder (is_safe_repo_file)
};

// Errors (kParse) name the repo and what is missing or malformed.
Result<RepoInfo> parse_repo_info(std::string_view json, std::string_view repo_id);

}  // namespace tern::hub
