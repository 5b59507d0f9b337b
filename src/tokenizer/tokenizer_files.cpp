// Parsing of the HF tokenizer JSON files. nlohmann::json is used without
// exceptions (parse with allow_exceptions=false, type checks before every
// access) because these files come from downloaded model folders.
#include "tokenizer/tokenizer_files.h"

#include <charconv>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/mapped_file.h"

namespace tern {
namespace {

using nlohmann::json;

// Reads `path` as JSON; nullopt-like empty object when the file is absent.
Result<std::optional<json>> read_json_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<json>();
  TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(path + ": not valid JSON");
  if (!j.is_object()) return parse_error(path + ": top level is not a JSON object");
  return std::optional<json>(std::move(j));
}

// A special token value is a string, {"content": "..."} (AddedToken), or null.
Status read_token_value(const json& v, const std::string& where, std::optional<std::string>& out) {
  if (v.is_null()) return Status::ok();
  if (v.is_string()) {
    out = v.get<std::string>();
    return Status::ok();
  }
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) {
      out = it->get<std::string>();
      return Status::ok();
    }
  }
  return parse_error(where + ": expected a string or an object with a string \"content\"");
}

Status read_bool(const json& obj, const char* key, const std::string& file, std::optional<bool>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::ok();
  if (!it->is_boolean()) return parse_error(file + ": \"" + key + "\" is not a boolean");
  out = it->get<bool>();
  return Status::ok();
}

bool flag(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

Result<int32_t> parse_id(std::string_view s, const std::string& where) {
  int64_t v = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0 || v > std::numeric_limits<int32_t>::max()) {
    return parse_error(where + ": token id \"" + std::string(s) + "\" is not an integer in 0..2^31-1");
  }
  return static_cast<int32_t>(v);
}

Result<int32_t> json_id(const json& v, const std::string& where) {
  if (!v.is_number_integer()) return parse_error(where + ": token id is not an integer");
  int64_t id = v.get<int64_t>();
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    return parse_error(where + ": token id " + std::to_string(id) + " out of range");
  }
  return static_cast<int32_t>(id);
}

// Reads {"content", "special", "lstrip", "rstrip"} of one added token.
Result<AddedTokenSpec> read_added_token(const json& v, int32_t id, const std::string& where) {
  if (!v.is_object()) return parse_error(where + ": added token is not an object");
  auto it = v.find("content");
  if (it == v.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return parse_error(where + ": added token has no non-empty string \"content\"");
  }
  AddedTokenSpec t;
  t.id = id;
  t.content = it->get<std::string>();
  t.special = flag(v, "special");
  t.lstrip = flag(v, "lstrip");
  t.rstrip = flag(v, "rstrip");
  return t;
}

// The named-token fields shared by tokenizer_config.json and special_tokens_map.json.
Status read_named_tokens(const json& j, const std::string& file, TokenizerFiles& out) {
  const std::pair<const char*, std::optional<std::string>*> fields[] = {
      {"bos_token", &out.bos}, {"eos_token", &out.eos}, {"unk_token", &out.unk},  {"pad_token", &out.pad},
      {"cls_token", &out.cls}, {"sep_token", &out.sep}, {"mask_token", &out.mask}};
  for (const auto& [key, dst] : fields) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    std::optional<std::string> v;
    TERN_RETURN_IF_ERROR(read_token_value(*it, file + ": \"" + key + "\"", v));
    if (v) *dst = std::move(v);
  }
  auto it = j.find("additional_special_tokens");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array()) return parse_error(file + ": \"additional_special_tokens\" is not a list");
    out.additional_special.clear();
    for (const json& v : *it) {
      std::optional<std::string> s;
      TERN_RETURN_IF_ERROR(read_token_value(v, file + ": \"additional_special_tokens\"", s));
      if (s) out.additional_special.push_back(std::move(*s));
    }
  }
  return Status::ok();
}

Status read_tokenizer_json(const json& j, const std::string& file, TokenizerFiles& out) {
  auto it = j.find("added_tokens");
  if (it == j.end() || it->is_null()) return Status::ok();
  if (!it->is_array()) return parse_error(file + ": \"added_tokens\" is not a list");
  for (const json& v : *it) {
    if (!v.is_object() || !v.contains("id")) return parse_error(file + ": added token without \"id\"");
    TERN_ASSIGN_OR_RETURN(int32_t id, json_id(v["id"], file + ": added_tokens"));
    TERN_ASSIGN_OR_RETURN(AddedTokenSpec t, read_added_token(v, id, file + ": added_tokens"));
    t.source = AddedTokenSource::kTokenizerJson;
    out.added.push_back(std::move(t));
  }
  return Status::ok();
}

Status read_added_tokens_json(const json& j, const std::string& file, TokenizerFiles& out) {
  // {"content": id}; HF's slow tokenizers write it and treat these tokens as
  // not special unless a special-token field names them.
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key().empty()) return parse_error(file + ": empty token content");
    TERN_ASSIGN_OR_RETURN(int32_t id, json_id(it.value(), file + ": \"" + it.key() + "\""));
    AddedTokenSpec t;
    t.id = id;
    t.source = AddedTokenSource::kAddedTokensJson;
    t.content = it.key();
    out.added.push_back(std::move(t));
  }
  return Status::ok();
}

// chat_template is a string, or a list of {"name", "template"} (use "default").
Status read_chat_template(const json& v, const std::string& file, std::string& out) {
  if (v.is_null()) return Status::ok();
  if (v.is_string()) {
    out = v.get<std::string>();
    return Status::ok();
  }
  if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
        return parse_error(file + ": chat_template list entry without a string \"template\"");
      }
      bool is_default =
          e.contains("name") && e["name"].is_string() && e["name"].get<std::string>() == "default";
      if (out.empty() || is_default) out = e["template"].get<std::string>();
      if (is_default) break;
    }
    return Status::ok();
  }
  return parse_error(file + ": \"chat_template\" is neither a string nor a list");
}

Status read_config(const json& j, const std::string& file, TokenizerFiles& out) {
  TERN_RETURN_IF_ERROR(read_named_tokens(j, file, out));
  TERN_RETURN_IF_ERROR(read_bool(j, "add_bos_token", file, out.add_bos_token));
  TERN_RETURN_IF_ERROR(read_bool(j, "add_eos_token", file, out.add_eos_token));
  TERN_RETURN_IF_ERROR(read_bool(j, "add_prefix_space", file, out.add_prefix_space));
  if (auto it = j.find("chat_template"); it != j.end()) {
    TERN_RETURN_IF_ERROR(read_chat_template(*it, file, out.chat_template));
    if (!it->is_null()) out.config_chat_template = out.chat_template;
  }
  auto it = j.find("added_tokens_decoder");
  if (it == j.end() || it->is_null()) return Status::ok();
  if (!it->is_object()) return parse_error(file + ": \"added_tokens_decoder\" is not an object");
  for (auto e = it->begin(); e != it->end(); ++e) {
    TERN_ASSIGN_OR_RETURN(int32_t id, parse_id(e.key(), file + ": added_tokens_decoder"));
    TERN_ASSIGN_OR_RETURN(
        AddedTokenSpec t,
        read_added_token(e.value(), id, file + ": added_tokens_decoder[\"" + e.key() + "\"]"));
    out.added.push_back(std::move(t));
  }
  return Status::ok();
}

}  // namespace

Result<TokenizerFiles> read_tokenizer_files(const std::string& dir) {
  TokenizerFiles out;
  const std::string base = dir + "/";

  // Order matters: later sources override earlier ones, as in HF loading
  // (tokenizer.json, then added_tokens.json, then tokenizer_config.json, whose
  // special-token fields special_tokens_map.json overrides in turn).
  TERN_ASSIGN_OR_RETURN(auto tok_json, read_json_file(base + "tokenizer.json"));
  if (tok_json) {
    TERN_RETURN_IF_ERROR(read_tokenizer_json(*tok_json, base + "tokenizer.json", out));
    out.has_tokenizer_json = true;
    out.files_read.push_back("tokenizer.json");
  }
  TERN_ASSIGN_OR_RETURN(auto added_json, read_json_file(base + "added_tokens.json"));
  if (added_json) {
    TERN_RETURN_IF_ERROR(read_added_tokens_json(*added_json, base + "added_tokens.json", out));
    out.files_read.push_back("added_tokens.json");
  }
  TERN_ASSIGN_OR_RETURN(auto config, read_json_file(base + "tokenizer_config.json"));
  if (config) {
    TERN_RETURN_IF_ERROR(read_config(*config, base + "tokenizer_config.json", out));
    out.files_read.push_back("tokenizer_config.json");
  }
  TERN_ASSIGN_OR_RETURN(auto special_map, read_json_file(base + "special_tokens_map.json"));
  if (special_map) {
    TERN_RETURN_IF_ERROR(read_named_tokens(*special_map, base + "special_tokens_map.json", out));
    out.files_read.push_back("special_tokens_map.json");
  }

  // Recent transformers versions save the template beside the config and
  // prefer it over the config's "chat_template" key.
  TERN_ASSIGN_OR_RETURN(auto template_json, read_json_file(base + "chat_template.json"));
  if (template_json) {
    auto it = template_json->find("chat_template");
    if (it != template_json->end()) {
      out.chat_template.clear();
      TERN_RETURN_IF_ERROR(read_chat_template(*it, base + "chat_template.json", out.chat_template));
    }
    out.files_read.push_back("chat_template.json");
  }
  std::error_code ec;
  if (std::filesystem::exists(base + "chat_template.jinja", ec)) {
    TERN_ASSIGN_OR_RETURN(out.chat_template, read_text_file(base + "chat_template.jinja"));
    out.files_read.push_back("chat_template.jinja");
  }
  return out;
}

}  // namespace tern
