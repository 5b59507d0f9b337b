// Reads a Hugging Face config.json / generation_config.json into plain
// structs and validates them, so the forward pass can trust every size.
// The text is untrusted: each field is type-checked before it is read and
// nothing throws. Features tern does not implement are refused by name.
#include "model/model_config.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "formats/json_util.h"

namespace tern {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 2> kSupportedArchitectures = {"Ernie4_5ForCausalLM", "Ernie4_5_ForCausalLM"};
constexpr std::string_view kSupportedModelType = "ernie4_5";
// Larger than any real model dimension; keeps products of two dims far from overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;

// "1e-05", "500000": doubles as config.json writes them, not std::to_string's "0.000010".
std::string number_text(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

std::string supported_list() {
  std::string out;
  for (auto a : kSupportedArchitectures) {
    if (!out.empty()) out += ", ";
    out += a;
  }
  return out;
}

// Typed, non-throwing field access on one JSON object. An absent or null
// field leaves the output untouched (the default stands) unless required.
class FieldReader {
 public:
  FieldReader(const json& object, const std::string& source) : object_(object), source_(source) {}

  const json* get(std::string_view key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  Status missing(std::string_view key) const {
    return parse_error(source_ + ": field '" + std::string(key) + "' is missing");
  }
  Status wrong_type(std::string_view key, const json& v, std::string_view expected) const {
    return parse_error(source_ + ": field '" + std::string(key) + "' is " + json_brief(v) + ", expected " +
                       std::string(expected));
  }
  Status bad_value(std::string_view key, const std::string& found, std::string_view expected) const {
    return out_of_range(source_ + ": field '" + std::string(key) + "' is " + found + ", expected " +
                        std::string(expected));
  }

  Status read_int(std::string_view key, int64_t* out, bool required = false) const {
    const json* v = get(key);
    if (v == nullptr) return required ? missing(key) : Status::ok();
    if (!v->is_number_integer()) return wrong_type(key, *v, "an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad_value(key, std::to_string(v->get<uint64_t>()), "a value below 2^63");
    }
    *out = v->get<int64_t>();
    return Status::ok();
  }

  // A dimension: required unless `out` already has a default, 1..kMaxDim.
  Status read_dim(std::string_view key, int64_t* out, bool required = true) const {
    TERN_RETURN_IF_ERROR(read_int(key, out, required));
    if (get(key) != nullptr && (*out < 1 || *out > kMaxDim)) {
      return bad_value(key, std::to_string(*out), "a positive integer at most " + std::to_string(kMaxDim));
    }
    return Status::ok();
  }

  Status read_double(std::string_view key, double* out) const {
    const json* v = get(key);
    if (v == nullptr) return Status::ok();
    if (!v->is_number()) return wrong_type(key, *v, "a number");
    const double d = v->get<double>();
    if (!std::isfinite(d)) return bad_value(key, number_text(d), "a finite number");
    *out = d;
    return Status::ok();
  }

  Status read_bool(std::string_view key, bool* out) const {
    const json* v = get(key);
    if (v == nullptr) return Status::ok();
    const auto* b = v->get_ptr<const json::boolean_t*>();
    if (b == nullptr) return wrong_type(key, *v, "true or false");
    *out = *b;
    return Status::ok();
  }

  Status read_string(std::string_view key, std::string* out) const {
    const json* v = get(key);
    if (v == nullptr) return Status::ok();
    const auto* s = v->get_ptr<const json::string_t*>();
    if (s == nullptr) return wrong_type(key, *v, "a string");
    *out = *s;
    return Status::ok();
  }

  Status read_token_id(std::string_view key, int32_t* out) const {
    int64_t id = *out;
    TERN_RETURN_IF_ERROR(read_int(key, &id));
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return bad_value(key, std::to_string(id), "a token id (non-negative, 32-bit)");
    }
    *out = static_cast<int32_t>(id);
    return Status::ok();
  }

  // An int or a list of ints, as HF writes eos_token_id. Absent: unchanged.
  Status read_token_ids(std::string_view key, std::vector<int32_t>* out) const {
    const json* v = get(key);
    if (v == nullptr) return Status::ok();
    std::vector<const json*> items;
    if (v->is_array()) {
      for (const json& item : *v) items.push_back(&item);
    } else {
      items.push_back(v);
    }
    std::vector<int32_t> ids;
    for (const json* item : items) {
      if (!item->is_number_integer()) return wrong_type(key, *v, "a token id or a list of token ids");
      if (item->is_number_unsigned() ? item->get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                                     : item->get<int64_t>() < 0) {
        return bad_value(key, json_brief(*item), "a token id (non-negative, 32-bit)");
      }
      ids.push_back(static_cast<int32_t>(item->get<int64_t>()));
    }
    *out = std::move(ids);
    return Status::ok();
  }

 private:
  const json& object_;
  const std::string& source_;
};

Result<json> parse_object(std::string_view text, const std::string& source) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return parse_error(source + ": not valid JSON");
  if (!root.is_object()) return parse_error(source + ": expected a JSON object, found " + json_brief(root));
  return root;
}

// Picks the architecture: the first supported entry of `architectures`, or
// model_type when the list is absent (as some converted copies write it).
Status read_architecture(const FieldReader& r, const std::string& source, ModelConfig* c) {
  TERN_RETURN_IF_ERROR(r.read_string("model_type", &c->model_type));
  const json* archs = r.get("architectures");
  if (archs != nullptr) {
    if (!archs->is_array()) return r.wrong_type("architectures", *archs, "a list of class names");
    std::string seen;
    for (const json& a : *archs) {
      const auto* name = a.get_ptr<const json::string_t*>();
      if (name == nullptr) return r.wrong_type("architectures", *archs, "a list of class names");
      for (auto supported : kSupportedArchitectures) {
        if (*name == supported && c->architecture.empty()) c->architecture = *name;
      }
      seen += seen.empty() ? "'" + *name + "'" : ", '" + *name + "'";
    }
    if (c->architecture.empty() && !seen.empty()) {
      return unsupported(source + ": architecture " + seen + " is not supported (supported: " + supported_list() + ")");
    }
  }
  if (c->architecture.empty()) {
    if (c->model_type.empty()) {
      return parse_error(source + ": neither 'architectures' nor 'model_type' says what model this is");
    }
    if (c->model_type != kSupportedModelType) {
      return unsupported(source + ": model_type '" + c->model_type + "' is not supported (supported: " +
                         std::string(kSupportedModelType) + ", architectures " + supported_list() + ")");
    }
    c->architecture = std::string(kSupportedArchitectures[0]);
  }
  if (c->model_type.empty()) c->model_type = std::string(kSupportedModelType);
  return Status::ok();
}

// RoPE: only the plain (unscaled) form is implemented. Newer transformers
// write the base inside rope_parameters instead of rope_theta.
Status read_rope(const FieldReader& r, const std::string& source, ModelConfig* c) {
  if (const json* scaling = r.get("rope_scaling"); scaling != nullptr) {
    return unsupported(source + ": rope_scaling " + json_brief(*scaling) + " is not supported (only plain RoPE)");
  }
  if (const json* params = r.get("rope_parameters"); params != nullptr) {
    if (!params->is_object()) return r.wrong_type("rope_parameters", *params, "an object");
    FieldReader pr(*params, source);
    std::string type = "default";
    TERN_RETURN_IF_ERROR(pr.read_string("rope_type", &type));
    if (type != "default") {
      return unsupported(source + ": rope_parameters.rope_type '" + type + "' is not supported (only 'default')");
    }
    TERN_RETURN_IF_ERROR(pr.read_double("rope_theta", &c->rope_theta));
  }
  TERN_RETURN_IF_ERROR(r.read_double("rope_theta", &c->rope_theta));
  if (!(c->rope_theta > 0)) return r.bad_value("rope_theta", number_text(c->rope_theta), "a positive number");
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& source) {
  TERN_ASSIGN_OR_RETURN(json root, parse_object(json_text, source));
  FieldReader r(root, source);
  ModelConfig c;
  TERN_RETURN_IF_ERROR(read_architecture(r, source, &c));

  TERN_RETURN_IF_ERROR(r.read_dim("vocab_size", &c.vocab_size));
  TERN_RETURN_IF_ERROR(r.read_dim("hidden_size", &c.hidden_size));
  TERN_RETURN_IF_ERROR(r.read_dim("intermediate_size", &c.intermediate_size));
  TERN_RETURN_IF_ERROR(r.read_dim("num_hidden_layers", &c.num_layers));
  TERN_RETURN_IF_ERROR(r.read_dim("num_attention_heads", &c.num_heads));
  TERN_RETURN_IF_ERROR(r.read_dim("max_position_embeddings", &c.max_position_embeddings));
  c.num_kv_heads = c.num_heads;
  TERN_RETURN_IF_ERROR(r.read_dim("num_key_value_heads", &c.num_kv_heads, /*required=*/false));
  if (r.get("head_dim") == nullptr) {
    if (c.hidden_size % c.num_heads != 0) {
      return parse_error(source + ": head_dim is absent and hidden_size " + std::to_string(c.hidden_size) +
                         " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  TERN_RETURN_IF_ERROR(r.read_dim("head_dim", &c.head_dim, /*required=*/false));

  if (c.num_heads % c.num_kv_heads != 0) {
    return parse_error(source + ": num_attention_heads " + std::to_string(c.num_heads) +
                       " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return parse_error(source + ": head_dim " + std::to_string(c.head_dim) + " is odd; RoPE rotates pairs");
  }

  TERN_RETURN_IF_ERROR(r.read_double("rms_norm_eps", &c.rms_norm_eps));
  if (!(c.rms_norm_eps > 0)) {
    return r.bad_value("rms_norm_eps", number_text(c.rms_norm_eps), "a positive number");
  }
  TERN_RETURN_IF_ERROR(read_rope(r, source, &c));

  std::string act = "silu";
  TERN_RETURN_IF_ERROR(r.read_string("hidden_act", &act));
  if (act != "silu" && act != "swish") {
    return unsupported(source + ": hidden_act '" + act + "' is not supported (only silu)");
  }
  TERN_RETURN_IF_ERROR(r.read_bool("tie_word_embeddings", &c.tie_word_embeddings));
  TERN_RETURN_IF_ERROR(r.read_string("tern_notice", &c.notice));
  TERN_RETURN_IF_ERROR(r.read_bool("use_bias", &c.use_bias));
  if (c.use_bias) {
    return unsupported(source + ": use_bias true is not supported (ERNIE 4.5 dense models have no biases)");
  }

  // Newer transformers write "dtype"; older ones "torch_dtype".
  TERN_RETURN_IF_ERROR(r.read_string("torch_dtype", &c.torch_dtype));
  TERN_RETURN_IF_ERROR(r.read_string("dtype", &c.torch_dtype));
  if (c.torch_dtype != "bfloat16" && c.torch_dtype != "float16" && c.torch_dtype != "float32") {
    return unsupported(source + ": dtype '" + c.torch_dtype + "' is not supported (bfloat16, float16, float32)");
  }

  c.eos_token_ids = {2};
  TERN_RETURN_IF_ERROR(r.read_token_id("bos_token_id", &c.bos_token_id));
  TERN_RETURN_IF_ERROR(r.read_token_id("pad_token_id", &c.pad_token_id));
  TERN_RETURN_IF_ERROR(r.read_token_ids("eos_token_id", &c.eos_token_ids));
  std::vector<std::pair<const char*, int32_t>> ids = {{"bos_token_id", c.bos_token_id},
                                                      {"pad_token_id", c.pad_token_id}};
  for (int32_t eos : c.eos_token_ids) ids.emplace_back("eos_token_id", eos);
  for (const auto& [key, id] : ids) {
    if (id >= c.vocab_size) {
      return r.bad_value(key, std::to_string(id), "an id below vocab_size " + std::to_string(c.vocab_size));
    }
  }
  return c;
}

Result<GenerationDefaults> parse_generation_config(std::string_view json_text, const std::string& source) {
  TERN_ASSIGN_OR_RETURN(json root, parse_object(json_text, source));
  FieldReader r(root, source);
  GenerationDefaults g;

  if (r.get("do_sample") != nullptr) {
    bool b = false;
    TERN_RETURN_IF_ERROR(r.read_bool("do_sample", &b));
    g.do_sample = b;
  }
  // Each number is read into a local first so an absent field stays nullopt.
  struct NumberField {
    const char* key;
    std::optional<double>* out;
    double min;
    bool min_inclusive;
    double max;
  };
  const std::array<NumberField, 3> numbers = {{
      {"temperature", &g.temperature, 0.0, true, 1e6},
      {"top_p", &g.top_p, 0.0, false, 1.0},
      {"repetition_penalty", &g.repetition_penalty, 0.0, false, 1e6},
  }};
  for (const NumberField& f : numbers) {
    if (r.get(f.key) == nullptr) continue;
    double d = 0;
    TERN_RETURN_IF_ERROR(r.read_double(f.key, &d));
    if ((f.min_inclusive ? d < f.min : d <= f.min) || d > f.max) {
      return r.bad_value(
          f.key, number_text(d),
          std::string(f.min_inclusive ? "[" : "(") + number_text(f.min) + ", " + number_text(f.max) + "]");
    }
    *f.out = d;
  }
  if (r.get("top_k") != nullptr) {
    int64_t k = 0;
    TERN_RETURN_IF_ERROR(r.read_int("top_k", &k));
    if (k < 0) return r.bad_value("top_k", std::to_string(k), "a non-negative integer (0 = off)");
    g.top_k = k;
  }
  TERN_RETURN_IF_ERROR(r.read_token_ids("eos_token_id", &g.eos_token_ids));
  return g;
}

}  // namespace tern
