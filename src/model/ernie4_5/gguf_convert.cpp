// HF folder -> GGUF, following convert_hf_to_gguf.py's Ernie4_5Model: the
// same keys in the same order, the same tensor names, dtypes and order.
// Tensors already in the output dtype are written straight from the
// checkpoint's memory map; the others are converted (round to nearest even,
// as numpy and gguf-py do) into buffers that live until the file is written.
#include "model/ernie4_5/gguf_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "backend/cpu/quant_reference.h"
#include "base/bf16.h"
#include "base/mapped_file.h"
#include "formats/checkpoint.h"
#include "formats/gguf_writer.h"
#include "model/ernie4_5/gguf_names.h"
#include "model/model_config.h"

namespace tern::ernie45 {
namespace {

// llama_ftype values of general.file_type.
constexpr uint32_t kFileTypeAllF32 = 0;
constexpr uint32_t kFileTypeMostlyF16 = 1;
constexpr uint32_t kFileTypeMostlyQ8_0 = 7;
constexpr uint32_t kFileTypeMostlyBF16 = 32;
// general.quantization_version as gguf-py writes it (GGML_QUANT_VERSION).
constexpr uint32_t kQuantizationVersion = 2;

// Tensors the converter drops without a word.
bool skipped(std::string_view name) {
  for (std::string_view suffix : {".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"}) {
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

// Ernie4_5Model.filter_tensors: Paddle-era checkpoints say "ernie." for "model.".
std::string hf_name(std::string name) {
  const size_t pos = name.find("ernie.");
  if (pos != std::string::npos) name.replace(pos, 6, "model.");
  return name;
}

// The element at `i` of a tensor as f32 (the bytes may sit at any offset).
float element(const TensorView& t, size_t i) {
  const uint8_t* p = t.data.data();
  if (t.dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

GgmlType ggml_of(DType d) {
  return d == DType::kF32 ? GgmlType::kF32 : d == DType::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
}

// The tensor's rows (the last PyTorch dim) quantized to Q8_0, into `owned`.
std::span<const uint8_t> as_q8_0(const TensorView& t, std::vector<std::vector<uint8_t>>& owned) {
  const int64_t cols = t.shape.back();
  const int64_t rows = t.num_elements() / cols;
  const int64_t row_bytes = cpu::row_bytes(DType::kQ8_0, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = element(t, static_cast<size_t>(r * cols + c));
    cpu::quantize_row(DType::kQ8_0, row.data(), cols, bytes.data() + r * row_bytes);
  }
  owned.push_back(std::move(bytes));
  return owned.back();
}

// The tensor's bytes as `out`: a view of the checkpoint when it already is,
// else a converted copy kept in `owned`.
std::span<const uint8_t> as_type(const TensorView& t, GgmlType out, std::vector<std::vector<uint8_t>>& owned) {
  if (out == GgmlType::kQ8_0) return as_q8_0(t, owned);
  if (ggml_of(t.dtype) == out) return t.data;
  const size_t n = static_cast<size_t>(t.num_elements());
  std::vector<uint8_t> bytes(n * (out == GgmlType::kF32 ? 4 : 2));
  for (size_t i = 0; i < n; ++i) {
    const float f = element(t, i);
    if (out == GgmlType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = out == GgmlType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  owned.push_back(std::move(bytes));
  return owned.back();
}

// The type a weight is written as: norms and 1-D tensors F32; under q8_0 a
// matrix whose rows do not split into 32-element blocks F16, as gguf-py's
// QuantError fallback writes it.
GgmlType written_type(const std::string& gguf_name, const TensorView& t, GgmlType weight_type) {
  if (gguf_keeps_f32(gguf_name, t.shape.size())) return GgmlType::kF32;
  if (weight_type == GgmlType::kQ8_0 && t.shape.back() % cpu::kQK8_0 != 0) return GgmlType::kF16;
  return weight_type;
}

// The checkpoint's tensors in the order the converter meets them: shards by
// file name, then each file's tensors by offset (the order of its header).
std::vector<const TensorView*> checkpoint_order(const Checkpoint& ckpt) {
  std::vector<std::pair<std::string, const TensorView*>> all;
  for (const std::string& name : ckpt.tensor_names()) all.emplace_back(ckpt.file_of(name), ckpt.find(name));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return std::less<const uint8_t*>()(a.second->data.data(), b.second->data.data());
  });
  std::vector<const TensorView*> out;
  for (const auto& [file, view] : all) out.push_back(view);
  return out;
}

std::string folder_name(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(dir, ec);
  if (ec) p = std::filesystem::path(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

std::string model_title(std::string_view folder_name) {
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    bool has_lower = false, has_upper = false;
    for (char c : word) {
      has_lower |= c >= 'a' && c <= 'z';
      has_upper |= c >= 'A' && c <= 'Z';
    }
    const bool digit_first = word[0] >= '0' && word[0] <= '9';
    bool version = word.size() > 1 && word[0] == 'v' && word[1] >= '0' && word[1] <= '9';
    for (size_t i = 1; version && i < word.size(); ++i) {
      version = (word[i] >= '0' && word[i] <= '9') || (word[i] == '.' && i + 1 < word.size() && word[i - 1] != '.');
    }
    if (has_lower && !has_upper && !digit_first && !version) {
      bool start = true;  // str.title(): a letter after a non-letter starts a word
      for (char& c : word) {
        const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (letter && start) c = static_cast<char>(c - 'a' + 'A');
        start = !letter;
      }
    }
    out += (out.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : folder_name) {
    if (c == '-' || c == ' ' || c == '\t' || c == '\n') {
      flush();
    } else {
      word += c;
    }
  }
  flush();
  return out;
}

Result<OutType> parse_out_type(std::string_view name) {
  if (name == "auto") return OutType::kAuto;
  if (name == "f32") return OutType::kF32;
  if (name == "f16") return OutType::kF16;
  if (name == "bf16") return OutType::kBF16;
  if (name == "q8_0") return OutType::kQ8_0;
  return invalid_argument("--outtype takes f32, f16, bf16, q8_0 or auto, not '" + std::string(name) +
                          "' (for other quantized types, convert and then run tern quantize)");
}

std::string size_label(uint64_t num_params) {
  double x = static_cast<double>(num_params);
  const char* suffix = "K";
  if (x > 1e12) {
    x *= 1e-12;
    suffix = "T";
  } else if (x > 1e9) {
    x *= 1e-9;
    suffix = "B";
  } else if (x > 1e6) {
    x *= 1e-6;
    suffix = "M";
  } else {
    x *= 1e-3;
  }
  // Python: fix = max(2 - len(str(round(x)).lstrip('0')), 0); round() is half to even, as nearbyint.
  std::string digits = std::to_string(static_cast<uint64_t>(std::nearbyint(x)));
  digits.erase(0, digits.find_first_not_of('0') == std::string::npos ? digits.size() : digits.find_first_not_of('0'));
  const int fix = std::max(2 - static_cast<int>(digits.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", fix, x, suffix);
  return buf;
}

Result<GgufConversion> convert_to_gguf(const std::string& dir, OutType outtype, std::span<const GgufKeyValue> vocab,
                                       const std::string& outfile) {
  const std::string config_path = dir + "/config.json";
  TERN_ASSIGN_OR_RETURN(std::string config_text, read_text_file(config_path));
  TERN_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(config_text, config_path));
  TERN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  GenerationDefaults gen;
  const std::string gen_path = dir + "/generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(gen_path));
    TERN_ASSIGN_OR_RETURN(gen, parse_generation_config(text, gen_path));
  }

  std::vector<const TensorView*> tensors;
  for (const TensorView* t : checkpoint_order(ckpt)) {
    if (skipped(t->name)) continue;
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      return unsupported(ckpt.file_of(t->name) + ": tensor '" + t->name + "' has dtype " +
                         std::string(dtype_name(t->dtype)) + "; tern converts F32, F16 and BF16 tensors");
    }
    tensors.push_back(t);
  }
  GgmlType weight_type = GgmlType::kF16;
  if (outtype == OutType::kF32) weight_type = GgmlType::kF32;
  if (outtype == OutType::kBF16) weight_type = GgmlType::kBF16;
  if (outtype == OutType::kQ8_0) weight_type = GgmlType::kQ8_0;
  if (outtype == OutType::kAuto) {
    for (const TensorView* t : tensors) {
      if (t->shape.size() < 2) continue;
      if (t->dtype == DType::kBF16 || t->dtype == DType::kF16) {
        weight_type = ggml_of(t->dtype);
        break;
      }
    }
  }

  GgufWriter writer;
  std::vector<std::vector<uint8_t>> owned;
  std::set<std::string> written;
  GgufConversion result;
  result.weight_type = weight_type;
  for (const TensorView* t : tensors) {
    const std::string name = hf_name(t->name);
    auto parsed = parse_hf_weight_name(name);
    if (!parsed) {
      return unsupported(ckpt.file_of(t->name) + ": tensor '" + t->name +
                         "' has no GGUF name for ernie4_5 (fused qkv_proj / up_gate_proj and MoE are not supported)");
    }
    const auto [weight, layer] = *parsed;
    if (layer >= config.num_layers) {
      return invalid_argument(ckpt.file_of(t->name) + ": tensor '" + t->name + "' is for layer " +
                              std::to_string(layer) + " but config.json has " + std::to_string(config.num_layers) +
                              " layers");
    }
    const std::vector<int64_t> want = weight_shape(weight, config);
    if (t->shape != want) {
      return invalid_argument(ckpt.file_of(t->name) + ": tensor '" + t->name + "' has shape " + t->shape_string() +
                              ", config.json gives " + format_shape(want));
    }
    const std::string gguf_name = gguf_weight_name(weight, layer);
    const GgmlType type = written_type(gguf_name, *t, weight_type);
    std::vector<int64_t> ne(t->shape.rbegin(), t->shape.rend());
    TERN_RETURN_IF_ERROR(writer.add_tensor(gguf_name, type, std::move(ne), as_type(*t, type, owned)));
    written.insert(gguf_name);
    result.num_params += t->num_elements();
    ++result.num_tensors;
  }
  // A folder that lacks a weight would give a GGUF nobody can load.
  for (const WeightName& w : weight_names()) {
    if (w.weight == Weight::kOutput) {
      if (!config.tie_word_embeddings && written.count(gguf_weight_name(w.weight)) == 0) {
        return not_found(ckpt.source() + ": lm_head.weight is missing but config.json has tie_word_embeddings=false");
      }
      continue;
    }
    for (int64_t l = 0; l < (w.per_layer ? config.num_layers : 1); ++l) {
      if (written.count(gguf_weight_name(w.weight, l)) == 0) {
        return not_found(ckpt.source() + ": tensor '" + hf_weight_name(w.weight, l) + "' is missing");
      }
    }
  }
  result.size_label = size_label(result.num_params);
  result.file_type = weight_type == GgmlType::kF32    ? kFileTypeAllF32
                     : weight_type == GgmlType::kBF16 ? kFileTypeMostlyBF16
                     : weight_type == GgmlType::kQ8_0 ? kFileTypeMostlyQ8_0
                                                      : kFileTypeMostlyF16;

  // Keys in the converter's order: the writer's general.architecture, then
  // set_type, the model card metadata (sampling defaults, name, size),
  // set_gguf_parameters, the quantization version, and set_vocab.
  TERN_RETURN_IF_ERROR(writer.add("general.architecture", GgufValue(std::string(kGgufArchitecture))));
  TERN_RETURN_IF_ERROR(writer.add("general.type", GgufValue("model")));
  if (gen.top_k) TERN_RETURN_IF_ERROR(writer.add("general.sampling.top_k", GgufValue(static_cast<int32_t>(*gen.top_k))));
  if (gen.top_p) TERN_RETURN_IF_ERROR(writer.add("general.sampling.top_p", GgufValue(static_cast<float>(*gen.top_p))));
  if (gen.temperature) {
    TERN_RETURN_IF_ERROR(writer.add("general.sampling.temp", GgufValue(static_cast<float>(*gen.temperature))));
  }
  if (gen.repetition_penalty) {
    TERN_RETURN_IF_ERROR(
        writer.add("general.sampling.penalty_repeat", GgufValue(static_cast<float>(*gen.repetition_penalty))));
  }
  TERN_RETURN_IF_ERROR(writer.add("general.name", GgufValue(model_title(folder_name(dir)))));
  TERN_RETURN_IF_ERROR(writer.add("general.size_label", GgufValue(result.size_label)));
  for (GgufKeyValue& kv : hparam_key_values(config)) TERN_RETURN_IF_ERROR(writer.add(kv.key, std::move(kv.value)));
  TERN_RETURN_IF_ERROR(writer.add("general.file_type", GgufValue(result.file_type)));
  TERN_RETURN_IF_ERROR(writer.add("general.quantization_version", GgufValue(kQuantizationVersion)));
  for (const GgufKeyValue& kv : vocab) TERN_RETURN_IF_ERROR(writer.add(kv.key, kv.value));

  TERN_RETURN_IF_ERROR(writer.write_file(outfile));
  result.bytes = std::filesystem::file_size(outfile, ec);
  return result;
}

}  // namespace tern::ernie45
