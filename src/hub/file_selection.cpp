// Choosing the files a model needs from a repo's file list.
#include "hub/file_selection.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace tern::hub {
namespace {

// Files beside the weights that loading a Hugging Face folder reads.
constexpr std::array<std::string_view, 9> kModelSideFiles = {
    "config.json",          "generation_config.json",  "tokenizer.model",
    "tokenizer.json",       "tokenizer_config.json",   "special_tokens_map.json",
    "added_tokens.json",    "chat_template.jinja",     "chat_template.json"};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool top_level(std::string_view file) { return file.find('/') == std::string_view::npos; }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Result<FileSelection> select_gguf(const std::vector<std::string>& ggufs, std::string_view choice,
                                  std::string_view repo_id) {
  const std::string repo(repo_id);
  std::vector<std::string> matches;
  if (ends_with(lower(choice), ".gguf")) {
    for (const std::string& f : ggufs)
      if (f == choice) matches.push_back(f);
    if (matches.empty()) {
      return not_found("repo " + repo + " has no file " + std::string(choice) +
                       (ggufs.empty() ? std::string(" (and no GGUF files)") : "; its GGUF files: " + join(ggufs)));
    }
  } else {
    const std::string tag = lower(choice);
    for (const std::string& f : ggufs)
      if (lower(f).find(tag) != std::string::npos) matches.push_back(f);
    if (matches.empty()) {
      return not_found("repo " + repo + " has no GGUF file matching '" + std::string(choice) + "'" +
                       (ggufs.empty() ? std::string(" (it has no GGUF files)") : "; its GGUF files: " + join(ggufs)));
    }
    if (matches.size() > 1) {
      return invalid_argument("'" + std::string(choice) + "' matches several GGUF files of " + repo + ": " +
                              join(matches) + "; name one: " + repo + ":FILE.gguf");
    }
  }
  return FileSelection{{matches.front()}, matches.front()};
}

}  // namespace

Result<FileSelection> select_model_files(const std::vector<std::string>& repo_files, std::string_view choice,
                                         std::string_view repo_id) {
  const std::string repo(repo_id);
  std::vector<std::string> ggufs, safetensors;
  for (const std::string& f : repo_files) {
    if (ends_with(lower(f), ".gguf")) ggufs.push_back(f);
    if (top_level(f) && ends_with(f, ".safetensors")) safetensors.push_back(f);
  }
  if (!choice.empty()) return select_gguf(ggufs, choice, repo_id);
  if (safetensors.empty()) {
    if (ggufs.size() == 1) return FileSelection{{ggufs.front()}, ggufs.front()};
    if (ggufs.size() > 1) {
      return invalid_argument("repo " + repo + " holds several GGUF files and no safetensors; choose one as " + repo +
                              ":FILE.gguf or " + repo + ":QUANT (e.g. :Q4_K_M): " + join(ggufs));
    }
    return unsupported("repo " + repo + " has no *.safetensors or *.gguf files, the weight formats tern loads");
  }
  if (std::find(repo_files.begin(), repo_files.end(), "config.json") == repo_files.end()) {
    return unsupported("repo " + repo + " has safetensors weights but no config.json; tern needs both");
  }
  FileSelection selection;
  for (const std::string& f : repo_files) {
    if (!top_level(f)) continue;
    bool side = std::find(kModelSideFiles.begin(), kModelSideFiles.end(), f) != kModelSideFiles.end();
    if (side || ends_with(f, ".safetensors") || ends_with(f, ".safetensors.index.json")) {
      selection.files.push_back(f);
    }
  }
  return selection;
}

std::vector<std::string> select_matching(const std::vector<std::string>& repo_files,
                                         const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& f : repo_files) {
    for (const std::string& p : patterns) {
      if (fnmatch(p.c_str(), f.c_str(), 0) == 0) {
        out.push_back(f);
        break;
      }
    }
  }
  return out;
}

}  // namespace tern::hub
