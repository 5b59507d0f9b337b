// tern_jinja_render: renders a chat template with tern's Jinja engine, for
// the differential test against Python jinja2 (tests/e2e/test_jinja_differential.py)
// and for checking a --chat-template file by hand.
//
//   tern_jinja_render [--raw] [--batch] TEMPLATE < input.json
//   tern_jinja_render --templates < lines of {"template": ..., "context": {...}}
//
// TEMPLATE is a .jinja file or a tokenizer_config.json (its "chat_template").
// Input is {"messages": [...], "tools": [...], "documents": [...],
// "add_generation_prompt": bool, "special_tokens": {"bos_token": ...},
// "chat_template_kwargs": {...}} turned into the context transformers builds;
// with --raw it is the context itself. Prints the render (exit 0) or the
// error on stderr (exit 1). --batch reads one input per line and writes one
// JSON line each: {"ok": true, "text": ...} or {"ok": false, "error": ...};
// --templates does the same for a different template (and raw context) per line.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "chat/chat_context.h"
#include "jinja/json.h"
#include "jinja/template.h"

namespace {

using nlohmann::ordered_json;

tern::Result<std::string> read_template(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return tern::io_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) return text;
  ordered_json config = ordered_json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.contains("chat_template")) {
    return tern::parse_error(path + ": no \"chat_template\" in this JSON file");
  }
  const ordered_json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const ordered_json& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template")) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return tern::parse_error(path + ": \"chat_template\" is neither a string nor has a \"default\" entry");
}

tern::Result<tern::JinjaValue> value_of(const ordered_json& j, const char* key) {
  if (!j.contains(key)) return tern::JinjaValue();
  return tern::jinja_from_json(j[key]);
}

tern::Result<tern::JinjaValue> build_context(const std::string& line, bool raw) {
  ordered_json input = ordered_json::parse(line, nullptr, false);
  if (input.is_discarded() || !input.is_object()) return tern::invalid_argument("input is not a JSON object");
  if (raw) return tern::jinja_from_json(input);
  tern::ChatTemplateInputs in;
  TERN_ASSIGN_OR_RETURN(in.messages, value_of(input, "messages"));
  TERN_ASSIGN_OR_RETURN(in.tools, value_of(input, "tools"));
  TERN_ASSIGN_OR_RETURN(in.documents, value_of(input, "documents"));
  TERN_ASSIGN_OR_RETURN(in.chat_template_kwargs, value_of(input, "chat_template_kwargs"));
  in.add_generation_prompt = input.value("add_generation_prompt", false);
  if (input.contains("special_tokens") && input["special_tokens"].is_object()) {
    for (auto it = input["special_tokens"].begin(); it != input["special_tokens"].end(); ++it) {
      if (it.value().is_string()) in.special_tokens.emplace_back(it.key(), it.value().get<std::string>());
    }
  }
  return tern::make_chat_context(in);
}

tern::Result<std::string> render_one(const tern::JinjaTemplate& tmpl, const std::string& line, bool raw) {
  TERN_ASSIGN_OR_RETURN(tern::JinjaValue context, build_context(line, raw));
  return tmpl.render(context);
}

tern::Result<std::string> render_template_line(const std::string& line) {
  ordered_json input = ordered_json::parse(line, nullptr, false);
  if (input.is_discarded() || !input.is_object() || !input.contains("template") || !input["template"].is_string()) {
    return tern::invalid_argument("input is not {\"template\": ..., \"context\": ...}");
  }
  TERN_ASSIGN_OR_RETURN(tern::JinjaTemplate tmpl, tern::JinjaTemplate::compile(input["template"].get<std::string>()));
  TERN_ASSIGN_OR_RETURN(tern::JinjaValue context,
                        tern::jinja_from_json(input.contains("context") ? input["context"] : ordered_json::object()));
  return tmpl.render(context);
}

void print_result(const tern::Result<std::string>& out) {
  ordered_json result;
  if (out.is_ok()) {
    result["ok"] = true;
    result["text"] = out.value();
  } else {
    result["ok"] = false;
    result["error"] = out.status().to_string();
  }
  std::cout << result.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n" << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  bool raw = false;
  bool batch = false;
  bool templates = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--raw") {
      raw = true;
    } else if (a == "--batch") {
      batch = true;
    } else if (a == "--templates") {
      templates = true;
    } else if (path.empty() && a.rfind("--", 0) != 0) {
      path = a;
    } else {
      std::cerr << "usage: tern_jinja_render [--raw] [--batch] TEMPLATE < input.json | --templates < lines\n";
      return 2;
    }
  }
  if (templates) {
    std::string line;
    while (std::getline(std::cin, line)) print_result(render_template_line(line));
    return 0;
  }
  if (path.empty()) {
    std::cerr << "usage: tern_jinja_render [--raw] [--batch] TEMPLATE < input.json\n";
    return 2;
  }
  auto source = read_template(path);
  if (!source.is_ok()) {
    std::cerr << source.status().to_string() << "\n";
    return 1;
  }
  auto tmpl = tern::JinjaTemplate::compile(source.value());
  if (!batch) {
    if (!tmpl.is_ok()) {
      std::cerr << tmpl.status().to_string() << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << std::cin.rdbuf();
    auto out = render_one(tmpl.value(), ss.str(), raw);
    if (!out.is_ok()) {
      std::cerr << out.status().to_string() << "\n";
      return 1;
    }
    std::cout << out.value();
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    print_result(tmpl.is_ok() ? render_one(tmpl.value(), line, raw) : tern::Result<std::string>(tmpl.status()));
  }
  return 0;
}
