// Parsing the hub's repo info JSON.
#include "hub/repo_info.h"

#include <nlohmann/json.hpp>

#include "hub/hub_cache.h"
#include "hub/repo_ref.h"

namespace tern::hub {

Result<RepoInfo> parse_repo_info(std::string_view json, std::string_view repo_id) {
  const std::string where = "the hub's file list for " + std::string(repo_id);
  nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return parse_error(where + " is not a JSON object");
  RepoInfo info;
  auto sha = doc.find("sha");
  if (sha == doc.end() || !sha->is_string() || !is_commit_hash(sha->get<std::string>())) {
    return parse_error(where + " has no commit hash (\"sha\")");
  }
  info.commit = sha->get<std::string>();
  auto siblings = doc.find("siblings");
  if (siblings == doc.end() || !siblings->is_array()) return parse_error(where + " has no \"siblings\" list");
  for (const nlohmann::json& sibling : *siblings) {
    if (!sibling.is_object()) continue;
    auto name = sibling.find("rfilename");
    if (name == sibling.end() || !name->is_string()) continue;
    std::string file = name->get<std::string>();
    if (is_safe_repo_file(file)) info.files.push_back(std::move(file));
  }
  return info;
}

}  // namespace tern::hub
