// Parsing ORG/NAME[@REVISION][:FILE].
#include "hub/repo_ref.h"

#include <cctype>

namespace tern::hub {
namespace {

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

bool is_valid_part(std::string_view part) {
  if (part.empty()) return false;
  for (char c : part)
    if (!is_name_char(c)) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
  return part.find("--") == std::string_view::npos && part.find("..") == std::string_view::npos;
}

}  // namespace

bool is_valid_repo_id(std::string_view repo_id) {
  if (repo_id.size() > 96) return false;
  size_t slash = repo_id.find('/');
  if (slash == std::string_view::npos) return false;
  return is_valid_part(repo_id.substr(0, slash)) && is_valid_part(repo_id.substr(slash + 1));
}

bool is_safe_revision(std::string_view revision) {
  if (revision.empty() || revision.size() > 255 || revision.front() == '/' || revision.back() == '/') return false;
  size_t start = 0;
  while (start <= revision.size()) {
    size_t end = revision.find('/', start);
    if (end == std::string_view::npos) end = revision.size();
    std::string_view segment = revision.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    start = end + 1;
  }
  for (char c : revision)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == 0x7f) return false;
  return true;
}

bool is_commit_hash(std::string_view revision) {
  if (revision.size() != 40) return false;
  for (char c : revision)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

Result<RepoRef> parse_repo_ref(std::string_view text) {
  RepoRef ref;
  std::string_view rest = text;
  // The repo id ends at the first '@' or ':'; a revision runs to the next ':'.
  size_t id_end = rest.find_first_of("@:");
  ref.repo_id = std::string(rest.substr(0, id_end));
  if (!is_valid_repo_id(ref.repo_id)) {
    return invalid_argument("'" + std::string(text) + "' is not a Hugging Face repo name: expected ORG/NAME, "
                            "optionally @REVISION and :FILE (e.g. baidu/ERNIE-4.5-0.3B-PT@main)");
  }
  rest = id_end == std::string_view::npos ? std::string_view() : rest.substr(id_end);
  if (!rest.empty() && rest.front() == '@') {
    size_t colon = rest.find(':');
    std::string_view revision = rest.substr(1, colon == std::string_view::npos ? std::string_view::npos : colon - 1);
    if (!is_safe_revision(revision)) {
      return invalid_argument("'" + std::string(text) + "': the revision after '@' must be a branch, tag or commit "
                              "hash, not '" + std::string(revision) + "'");
    }
    ref.revision = std::string(revision);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon);
  }
  if (!rest.empty()) {  // ':' FILE
    std::string_view file = rest.substr(1);
    if (file.empty() || file.front() == '/' || file.find("..") != std::string_view::npos ||
        file.find('\\') != std::string_view::npos) {
      return invalid_argument("'" + std::string(text) + "': after ':' give a GGUF file of the repo "
                              "(e.g. model-Q4_K_M.gguf) or a quantization tag (e.g. Q4_K_M)");
    }
    ref.file = std::string(file);
  }
  return ref;
}

bool looks_like_repo_ref(std::string_view text) { return parse_repo_ref(text).is_ok(); }

std::string to_string(const RepoRef& ref) {
  std::string s = ref.repo_id;
  if (ref.revision != "main") s += "@" + ref.revision;
  if (!ref.file.empty()) s += ":" + ref.file;
  return s;
}

}  // namespace tern::hub
