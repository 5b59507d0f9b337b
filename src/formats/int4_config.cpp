// Reads config.json's quantization_config into an Int4Config. Field names
// and defaults follow what the writers put there: AutoAWQ / transformers'
// AwqConfig (bits or w_bit, group_size or q_group_size, version, zero_point),
// AutoGPTQ / GPTQModel (bits, group_size, desc_act, sym, checkpoint_format)
// and compressed-tensors (format, config_groups.*.weights, ignore, ...).
#include "formats/int4_config.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "formats/json_util.h"

namespace tern {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Typed access to the fields of one object of the quantization config;
// `where` ("config.json: quantization_config") prefixes every message.
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  // nullptr when absent or null.
  const json* get(std::string_view key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  // The first of `keys` present (writers spell some fields two ways), or nullptr.
  const json* get_any(std::initializer_list<std::string_view> keys, std::string_view* found) const {
    for (std::string_view k : keys) {
      if (const json* v = get(k)) {
        *found = k;
        return v;
      }
    }
    return nullptr;
  }

  Status wrong_type(std::string_view key, const json& v, std::string_view expected) const {
    return parse_error(where_ + "." + std::string(key) + " is " + json_brief(v) + ", expected " +
                       std::string(expected));
  }
  Status refuse(std::string_view key, const std::string& value, std::string_view why) const {
    return unsupported(where_ + "." + std::string(key) + " is " + value + ": " + std::string(why));
  }

  Result<std::optional<int64_t>> integer(std::initializer_list<std::string_view> keys, std::string_view* key) const {
    const json* v = get_any(keys, key);
    if (v == nullptr) return std::optional<int64_t>();
    if (!v->is_number_integer()) return wrong_type(*key, *v, "an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t{1} << 40)) {
      return out_of_range(where_ + "." + std::string(*key) + " is " + json_brief(*v) + ", far past any layer's width");
    }
    return std::optional<int64_t>(v->get<int64_t>());
  }
  Result<std::optional<bool>> boolean(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<bool>();
    const auto* b = v->get_ptr<const json::boolean_t*>();
    if (b == nullptr) return wrong_type(key, *v, "true or false");
    return std::optional<bool>(*b);
  }
  Result<std::optional<std::string>> string(std::initializer_list<std::string_view> keys,
                                            std::string_view* key) const {
    const json* v = get_any(keys, key);
    if (v == nullptr) return std::optional<std::string>();
    const auto* s = v->get_ptr<const json::string_t*>();
    if (s == nullptr) return wrong_type(*key, *v, "a string");
    return std::optional<std::string>(*s);
  }

  const std::string& where() const { return where_; }

 private:
  const json& object_;
  std::string where_;
};

// bits (any spelling in `keys`) must be present and 4.
Status require_four_bits(const Fields& f, std::initializer_list<std::string_view> keys, std::string_view method) {
  std::string_view key = *keys.begin();
  TERN_ASSIGN_OR_RETURN(std::optional<int64_t> bits, f.integer(keys, &key));
  if (!bits) return parse_error(f.where() + ".bits is missing");
  if (*bits != 4) {
    return f.refuse(key, std::to_string(*bits),
                    "tern loads 4-bit " + std::string(method) + " checkpoints only (int4 weights)");
  }
  return Status::ok();
}

// group_size: a positive width, or -1 for one group per row (stored as 0).
Result<int64_t> read_group_size(const Fields& f, std::initializer_list<std::string_view> keys) {
  std::string_view key = *keys.begin();
  TERN_ASSIGN_OR_RETURN(std::optional<int64_t> g, f.integer(keys, &key));
  if (!g) return parse_error(f.where() + ".group_size is missing");
  if (*g == -1) return int64_t{0};
  if (*g <= 0) {
    return out_of_range(f.where() + "." + std::string(key) + " is " + std::to_string(*g) +
                        ", expected a positive number of input channels or -1 (one group per row)");
  }
  return *g;
}

Result<Int4Config> parse_awq(const Fields& f) {
  Int4Config c;
  c.scheme = Int4Scheme::kAwqGemm;
  TERN_RETURN_IF_ERROR(require_four_bits(f, {"bits", "w_bit"}, "AWQ"));
  TERN_ASSIGN_OR_RETURN(c.group_size, read_group_size(f, {"group_size", "q_group_size"}));
  std::string_view key = "version";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> version, f.string({"version"}, &key));
  if (version && lower(*version) != "gemm") {
    return f.refuse("version", "\"" + *version + "\"",
                    "tern reads AutoAWQ's GEMM packing only (qweight [in, out/8]); GEMV and other packings differ");
  }
  TERN_ASSIGN_OR_RETURN(std::optional<bool> zero_point, f.boolean("zero_point"));
  if (zero_point && !*zero_point) {
    return f.refuse("zero_point", "false", "AWQ GEMM checkpoints without zero points are not supported");
  }
  key = "backend";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> backend, f.string({"backend"}, &key));
  if (backend && lower(*backend) != "autoawq") {
    return f.refuse("backend", "\"" + *backend + "\"", "tern reads AutoAWQ's packing (backend \"autoawq\") only");
  }
  return c;
}

Result<Int4Config> parse_gptq(const Fields& f) {
  Int4Config c;
  c.scheme = Int4Scheme::kGptq;
  TERN_RETURN_IF_ERROR(require_four_bits(f, {"bits"}, "GPTQ"));
  TERN_ASSIGN_OR_RETURN(c.group_size, read_group_size(f, {"group_size"}));
  TERN_ASSIGN_OR_RETURN(std::optional<bool> desc_act, f.boolean("desc_act"));
  c.act_order = desc_act.value_or(false);
  TERN_ASSIGN_OR_RETURN(std::optional<bool> sym, f.boolean("sym"));
  c.symmetric = sym.value_or(true);  // GPTQ's default
  std::string_view key = "checkpoint_format";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> format, f.string({"checkpoint_format", "format"}, &key));
  const std::string fmt = lower(format.value_or("gptq"));
  if (fmt == "gptq") {
    c.zero_minus_one = true;
  } else if (fmt != "gptq_v2") {
    return f.refuse(key, "\"" + *format + "\"", "tern reads the \"gptq\" and \"gptq_v2\" layouts only");
  }
  return c;
}

// A compressed-tensors field that must be absent, null or empty for W4A16.
Status require_empty(const Fields& f, std::string_view key, std::string_view why) {
  const json* v = f.get(key);
  if (v == nullptr || (v->is_object() && v->empty())) return Status::ok();
  return f.refuse(key, json_brief(*v), why);
}

Result<Int4Config> parse_compressed_tensors(const Fields& f) {
  Int4Config c;
  c.scheme = Int4Scheme::kCompressedTensors;
  std::string_view key = "format";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> format, f.string({"format"}, &key));
  if (!format) return parse_error(f.where() + ".format is missing");
  if (*format != "pack-quantized") {
    return f.refuse("format", "\"" + *format + "\"", "tern reads pack-quantized (int4 in int32) checkpoints only");
  }
  key = "quantization_status";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> status, f.string({"quantization_status"}, &key));
  if (status && *status != "compressed") {
    return f.refuse("quantization_status", "\"" + *status + "\"", "only compressed checkpoints hold packed weights");
  }
  TERN_RETURN_IF_ERROR(require_empty(f, "kv_cache_scheme", "KV cache quantization is not supported"));
  TERN_RETURN_IF_ERROR(require_empty(f, "transform_config", "weight transforms are not supported"));
  if (const json* sparsity = f.get("sparsity_config"); sparsity != nullptr && !sparsity->empty()) {
    auto sf = sparsity->is_object() ? sparsity->find("format") : sparsity->end();
    if (sf == sparsity->end() || !sf->is_string() || sf->get<std::string>() != "dense") {
      return f.refuse("sparsity_config", json_brief(*sparsity), "sparse checkpoints are not supported");
    }
  }

  const json* groups = f.get("config_groups");
  if (groups == nullptr) return parse_error(f.where() + ".config_groups is missing");
  if (!groups->is_object()) return f.wrong_type("config_groups", *groups, "an object {name: scheme}");
  if (groups->size() != 1) {
    return f.refuse("config_groups", "an object of " + std::to_string(groups->size()) + " schemes",
                    "tern loads checkpoints with one quantization scheme (a single config group)");
  }
  const std::string group_name = groups->begin().key();
  const json& group = groups->begin().value();
  if (!group.is_object()) return f.wrong_type("config_groups." + group_name, group, "an object");
  const Fields g(group, f.where() + ".config_groups." + group_name);
  TERN_RETURN_IF_ERROR(require_empty(g, "input_activations",
                                     "activation quantization (W4A8, W8A8) is not supported; tern loads W4A16"));
  TERN_RETURN_IF_ERROR(require_empty(g, "output_activations", "output quantization is not supported"));
  key = "format";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> group_format, g.string({"format"}, &key));
  if (group_format && *group_format != "pack-quantized") {
    return g.refuse("format", "\"" + *group_format + "\"", "tern reads pack-quantized weights only");
  }
  const json* weights = g.get("weights");
  if (weights == nullptr) return parse_error(g.where() + ".weights is missing");
  if (!weights->is_object()) return g.wrong_type("weights", *weights, "an object");
  const Fields w(*weights, g.where() + ".weights");

  TERN_RETURN_IF_ERROR(require_four_bits(w, {"num_bits"}, "compressed-tensors"));
  key = "type";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> type, w.string({"type"}, &key));
  if (type.value_or("int") != "int") {
    return w.refuse("type", "\"" + *type + "\"", "tern loads integer weights only");
  }
  TERN_ASSIGN_OR_RETURN(std::optional<bool> symmetric, w.boolean("symmetric"));
  c.symmetric = symmetric.value_or(true);
  if (const json* dynamic = w.get("dynamic"); dynamic != nullptr && !(dynamic->is_boolean() && !dynamic->get<bool>())) {
    return w.refuse("dynamic", json_brief(*dynamic), "dynamic weight quantization is not supported");
  }
  // actorder: "group" (alias "dynamic", or true) stores weight_g_idx; "weight"
  // (alias "static") only changed the calibration, not the layout.
  if (const json* actorder = w.get("actorder"); actorder != nullptr) {
    const std::string order = actorder->is_string() ? lower(actorder->get<std::string>())
                              : actorder->is_boolean() ? (actorder->get<bool>() ? "group" : "")
                                                       : "?";
    if (order == "group" || order == "dynamic") {
      c.act_order = true;
    } else if (order != "" && order != "weight" && order != "static") {
      return w.refuse("actorder", json_brief(*actorder), "expected null, \"group\" or \"weight\"");
    }
  }
  key = "strategy";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> strategy, w.string({"strategy"}, &key));
  if (!strategy) return parse_error(w.where() + ".strategy is missing");
  if (*strategy == "channel") {
    c.group_size = 0;
  } else if (*strategy == "group") {
    key = "group_size";
    TERN_ASSIGN_OR_RETURN(std::optional<int64_t> size, w.integer({"group_size"}, &key));
    if (!size) return parse_error(w.where() + ".group_size is missing (strategy \"group\")");
    if (*size <= 0) {
      return out_of_range(w.where() + ".group_size is " + std::to_string(*size) +
                          ", expected a positive number of input channels");
    }
    c.group_size = *size;
  } else {
    return w.refuse("strategy", "\"" + *strategy + "\"", "tern reads \"group\" and \"channel\" int4 weights only");
  }
  return c;
}

}  // namespace

std::string_view int4_method_name(Int4Scheme scheme) {
  switch (scheme) {
    case Int4Scheme::kAwqGemm:
      return "awq";
    case Int4Scheme::kGptq:
      return "gptq";
    case Int4Scheme::kCompressedTensors:
      return "compressed-tensors";
  }
  return "?";
}

std::string_view int4_scheme_label(Int4Scheme scheme) {
  switch (scheme) {
    case Int4Scheme::kAwqGemm:
      return "AWQ (GEMM)";
    case Int4Scheme::kGptq:
      return "GPTQ";
    case Int4Scheme::kCompressedTensors:
      return "compressed-tensors pack-quantized";
  }
  return "?";
}

std::string describe_int4_config(const Int4Config& c) {
  std::string out(int4_scheme_label(c.scheme));
  out += ", 4-bit, ";
  out += c.group_size > 0 ? "group " + std::to_string(c.group_size) : std::string("one group per row");
  out += c.symmetric ? ", symmetric" : ", asymmetric";
  if (c.act_order) out += ", act-order (g_idx)";
  return out;
}

Result<std::optional<Int4Config>> parse_int4_config(std::string_view config_json, const std::string& source) {
  const json root = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return parse_error(source + ": not valid JSON");
  if (!root.is_object()) return parse_error(source + ": expected a JSON object, found " + json_brief(root));
  auto it = root.find("quantization_config");
  if (it == root.end() || it->is_null()) return std::optional<Int4Config>();
  const std::string where = source + ": quantization_config";
  if (!it->is_object()) return parse_error(where + " is " + json_brief(*it) + ", expected an object");
  const Fields f(*it, where);
  std::string_view key = "quant_method";
  TERN_ASSIGN_OR_RETURN(std::optional<std::string> method, f.string({"quant_method"}, &key));
  if (!method) return parse_error(where + ".quant_method is missing");
  const std::string m = lower(*method);
  Result<Int4Config> config = m == "awq"                  ? parse_awq(f)
                              : m == "gptq"               ? parse_gptq(f)
                              : m == "compressed-tensors" ? parse_compressed_tensors(f)
                                                          : Result<Int4Config>(f.refuse(
                                                                "quant_method", "\"" + *method + "\"",
                                                                "tern loads int4 weight-only awq, gptq and "
                                                                "compressed-tensors checkpoints"));
  if (!config.is_ok()) return config.status();
  return std::optional<Int4Config>(std::move(config).value());
}

}  // namespace tern
