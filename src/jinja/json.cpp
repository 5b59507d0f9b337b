// nlohmann JSON -> JinjaValue, and Python json.dumps for the `tojson` filter
// (float repr, separators, indent, ensure_ascii and sort_keys as Python).
#include "jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "jinja/text.h"

namespace tern {
namespace {

template <typename Json>
Result<JinjaValue> from_json_at(const Json& j, uint32_t depth) {
  if (depth >= kJinjaMaxNesting) return out_of_range("JSON nested deeper than " + std::to_string(kJinjaMaxNesting));
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return JinjaValue::none();
    case nlohmann::json::value_t::boolean:
      return JinjaValue::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return JinjaValue::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return JinjaValue::integer(static_cast<int64_t>(u));
      return JinjaValue::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return JinjaValue::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return JinjaValue::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<JinjaValue> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        TERN_ASSIGN_OR_RETURN(JinjaValue v, from_json_at(e, depth + 1));
        items.push_back(std::move(v));
      }
      return JinjaValue::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      JinjaDict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        TERN_ASSIGN_OR_RETURN(JinjaValue v, from_json_at(it.value(), depth + 1));
        d.set(std::string(it.key()), std::move(v));
      }
      return JinjaValue::dict(std::move(d));
    }
    default:  // binary, discarded
      return invalid_argument("unsupported JSON value");
  }
}

}  // namespace

Result<JinjaValue> jinja_from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }
Result<JinjaValue> jinja_from_json(const nlohmann::json& j) { return from_json_at(j, 0); }

namespace jinja {
namespace {

class JsonWriter {
 public:
  JsonWriter(const JsonDumpOptions& o, size_t max_size) : o_(o), max_size_(max_size) {
    if (o.separators) {
      item_sep_ = o.separators->first;
      key_sep_ = o.separators->second;
    } else {
      item_sep_ = o.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  Status write(const JinjaValue& v, int level) {
    if (level > static_cast<int>(kJinjaMaxNesting) * 2) return invalid_argument("Circular reference detected");
    if (out_.size() > max_size_) return out_of_range("tojson output too large");
    switch (v.kind()) {
      case JinjaValue::Kind::kNone:
        out_ += "null";
        return Status::ok();
      case JinjaValue::Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return Status::ok();
      case JinjaValue::Kind::kInt:
        out_ += std::to_string(v.as_int());
        return Status::ok();
      case JinjaValue::Kind::kFloat:
        write_float(v.as_float());
        return Status::ok();
      case JinjaValue::Kind::kString:
        write_string(v.as_string());
        return Status::ok();
      case JinjaValue::Kind::kList:
        if (v.as_list().is_iterator) return invalid_argument("Object of type generator is not JSON serializable");
        return write_list(v.as_list(), level);
      case JinjaValue::Kind::kDict:
        return write_dict(v.as_dict(), level);
      default:
        return invalid_argument("Object of type " + std::string(v.type_name()) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += *o_.indent;
  }

  void write_float(double d) {
    if (std::isnan(d)) {
      out_ += "NaN";
    } else if (std::isinf(d)) {
      out_ += d < 0 ? "-Infinity" : "Infinity";
    } else {
      out_ += py_float_repr(d);
    }
  }

  void write_string(const std::string& s) {
    out_ += '"';
    char buf[16];
    for (char32_t c : decode_utf8(s)) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          continue;
        case '\\':
          out_ += "\\\\";
          continue;
        case '\n':
          out_ += "\\n";
          continue;
        case '\r':
          out_ += "\\r";
          continue;
        case '\t':
          out_ += "\\t";
          continue;
        case '\b':
          out_ += "\\b";
          continue;
        case '\f':
          out_ += "\\f";
          continue;
        default:
          break;
      }
      if (c < 0x20 || (o_.ensure_ascii && c >= 0x7F)) {
        if (c >= 0x10000) {
          char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                        static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
        } else {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        }
        out_ += buf;
      } else {
        append_utf8(out_, c);
      }
    }
    out_ += '"';
  }

  Status write_list(const JinjaList& l, int level) {
    if (l.items.empty()) {
      out_ += "[]";
      return Status::ok();
    }
    out_ += '[';
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      newline(level + 1);
      TERN_RETURN_IF_ERROR(write(l.items[i], level + 1));
    }
    newline(level);
    out_ += ']';
    return Status::ok();
  }

  Status key_string(const JinjaValue& k, std::string* out) {
    switch (k.kind()) {
      case JinjaValue::Kind::kString:
        *out = k.as_string();
        return Status::ok();
      case JinjaValue::Kind::kInt:
        *out = std::to_string(k.as_int());
        return Status::ok();
      case JinjaValue::Kind::kBool:
        *out = k.as_bool() ? "true" : "false";
        return Status::ok();
      case JinjaValue::Kind::kNone:
        *out = "null";
        return Status::ok();
      case JinjaValue::Kind::kFloat: {
        double d = k.as_float();
        *out = std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : py_float_repr(d);
        return Status::ok();
      }
      default:
        return invalid_argument("keys must be str, int, float, bool or None, not " + std::string(k.type_name()));
    }
  }

  Status write_dict(const JinjaDict& d, int level) {
    if (d.empty()) {
      out_ += "{}";
      return Status::ok();
    }
    std::vector<const std::pair<JinjaValue, JinjaValue>*> items;
    for (const auto& kv : d.items()) items.push_back(&kv);
    if (o_.sort_keys) {
      for (const auto* kv : items) {
        if (!kv->first.is_string()) return invalid_argument("'<' not supported between dict keys of different types");
      }
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* a, const auto* b) { return a->first.as_string() < b->first.as_string(); });
    }
    out_ += '{';
    bool first = true;
    for (const auto* kv : items) {
      if (!first) out_ += item_sep_;
      first = false;
      newline(level + 1);
      std::string key;
      TERN_RETURN_IF_ERROR(key_string(kv->first, &key));
      write_string(key);
      out_ += key_sep_;
      TERN_RETURN_IF_ERROR(write(kv->second, level + 1));
    }
    newline(level);
    out_ += '}';
    return Status::ok();
  }

  const JsonDumpOptions& o_;
  size_t max_size_;
  std::string item_sep_;
  std::string key_sep_;
  std::string out_;
};

}  // namespace

Result<std::string> json_dumps(const JinjaValue& v, const JsonDumpOptions& options, size_t max_size) {
  JsonWriter w(options, max_size);
  TERN_RETURN_IF_ERROR(w.write(v, 0));
  std::string out = w.take();
  if (out.size() > max_size) return out_of_range("tojson output too large");
  return out;
}

}  // namespace jinja
}  // namespace tern
