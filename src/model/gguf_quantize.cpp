// GGUF -> GGUF requantization. The type rules are llama-quant.cpp's
// (llama_tensor_get_type_impl and tensor_type_fallback) for the five mixes
// tern writes, for a dense model without an importance matrix:
//  - output.weight, and token_embd.weight when there is no output.weight
//    (tied): Q8_0 when its rows do not split into the mix's blocks, else
//    Q6_K for every mix but q8_0 (which keeps Q8_0).
//  - attn_v and ffn_down under q4_k_m and q5_k_m: Q6_K in the layers
//    use_more_bits picks (the first and last eighth, every third between).
//  - everything else the mix's base type, token_embd included.
// Then the fallback for rows that do not split into the chosen type's
// blocks, as llama.cpp's: Q5_0 / Q5_1 / Q8_0 for Q4_K / Q5_K / Q6_K (tern
// reads the two Q5 types by expanding them to F32 at load, formats/gguf_q5.h);
// rows that do not split into 32 either are F16.
#include "model/gguf_quantize.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <optional>

#include "backend/cpu/quant_reference.h"
#include "base/bf16.h"
#include "formats/gguf_q5.h"
#include "formats/gguf_writer.h"

namespace tern {
namespace {

constexpr QuantMixInfo kMixes[] = {
    {QuantMix::kQ8_0, "q8_0", GgmlType::kQ8_0, "every matrix Q8_0 (8.5 bits a weight)"},
    {QuantMix::kQ4_0, "q4_0", GgmlType::kQ4_0, "Q4_0, output Q6_K (4.5 bits a weight)"},
    {QuantMix::kQ4_K_M, "q4_k_m", GgmlType::kQ4_K, "Q4_K; output, about half of attn_v and ffn_down Q6_K"},
    {QuantMix::kQ5_K_M, "q5_k_m", GgmlType::kQ5_K, "Q5_K; output, about half of attn_v and ffn_down Q6_K"},
    {QuantMix::kQ6_K, "q6_k", GgmlType::kQ6_K, "every matrix Q6_K (6.6 bits a weight)"},
};

// general.quantization_version as llama.cpp writes it (GGML_QNT_VERSION).
constexpr uint32_t kQuantizationVersion = 2;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// llama.cpp's tensor_allows_quantization, for the tensors tern's
// architectures have: matrices named "...weight"; norms and biases stay.
bool quantizable(const GgufTensor& t) { return t.dims.size() >= 2 && ends_with(t.name, "weight"); }

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// tensor_type_fallback for the types the five mixes choose.
GgmlType fallback(GgmlType chosen, int64_t ncols) {
  if (ncols % ggml_type_info(chosen).block_size == 0) return chosen;
  GgmlType t = chosen;
  if (chosen == GgmlType::kQ4_K) t = GgmlType::kQ5_0;
  if (chosen == GgmlType::kQ5_K) t = GgmlType::kQ5_1;
  if (chosen == GgmlType::kQ6_K) t = GgmlType::kQ8_0;
  if (ncols % ggml_type_info(t).block_size != 0) t = GgmlType::kF16;
  return t;
}

// llama_tensor_get_type_impl for `mix` (dense, no imatrix, not Falcon).
GgmlType chosen_type(QuantMix mix, const GgufTensor& t, bool tied, int64_t i_attn_v, int64_t n_attn_v,
                     int64_t i_ffn_down, int64_t n_ffn_down) {
  const GgmlType base = quant_mix_info(mix).base;
  const bool k_mix = mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M;
  if (t.name == "output.weight" || (tied && t.name == "token_embd.weight")) {
    if (t.dims[0] % ggml_type_info(base).block_size != 0) return GgmlType::kQ8_0;
    return base == GgmlType::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ6_K;
  }
  if (k_mix && ends_with(t.name, ".attn_v.weight") && use_more_bits(i_attn_v, n_attn_v)) return GgmlType::kQ6_K;
  if (k_mix && ends_with(t.name, ".ffn_down.weight") && use_more_bits(i_ffn_down, n_ffn_down)) {
    return GgmlType::kQ6_K;
  }
  return base;
}

// One row of `t` as f32. `t`'s size was checked by the reader.
void dequantize(GgmlType type, const uint8_t* row, int64_t n, float* out) {
  if (is_q5_type(type)) return dequantize_q5_row(type, row, n, out);
  const DType dtype = *ggml_type_to_dtype(type);
  if (is_quantized(dtype)) return cpu::dequantize_row(dtype, row, n, out);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[i], row + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      out[i] = dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
}

// Writes one f32 row as `type` (F16 or a quantized type) at `out`.
void quantize(GgmlType type, const float* row, int64_t n, uint8_t* out) {
  if (type == GgmlType::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_f16(row[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  if (is_q5_type(type)) return quantize_q5_row(type, row, n, out);
  cpu::quantize_row(*ggml_type_to_dtype(type), row, n, out);
}

bool readable(GgmlType t) {
  if (is_q5_type(t)) return true;
  const std::optional<DType> d = ggml_type_to_dtype(t);
  return d && (*d == DType::kF32 || *d == DType::kF16 || *d == DType::kBF16 ||
               (is_quantized(*d) && *d != DType::kQ8_K));
}

// `t`'s data as `type`, requantized row by row into a new buffer.
Result<std::vector<uint8_t>> requantize(const GgufTensor& t, GgmlType type, const std::string& file) {
  if (!readable(t.type)) {
    return unsupported(file + ": tensor '" + t.name + "' is " + std::string(ggml_type_name(t.type)) +
                       "; tern quantize reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1");
  }
  const int64_t ncols = t.dims[0];
  const std::optional<uint64_t> out_bytes = ggml_tensor_bytes(type, t.dims);
  if (ncols <= 0 || t.num_elements() == 0 || !out_bytes) return std::vector<uint8_t>();
  const int64_t nrows = static_cast<int64_t>(t.num_elements()) / ncols;
  const uint64_t in_row = t.data.size() / static_cast<uint64_t>(nrows);
  const uint64_t out_row = *out_bytes / static_cast<uint64_t>(nrows);
  std::vector<uint8_t> out(*out_bytes);
  std::vector<float> row(static_cast<size_t>(ncols));
  for (int64_t r = 0; r < nrows; ++r) {
    dequantize(t.type, t.data.data() + r * in_row, ncols, row.data());
    quantize(type, row.data(), ncols, out.data() + r * out_row);
  }
  return out;
}

struct PlannedType {
  GgmlType type;
  bool fallback;  // the rows did not split into the type llama.cpp's rules chose
};
std::vector<PlannedType> plan(QuantMix mix, std::span<const GgufTensor> tensors);

Status check_paths(const std::string& input, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(input, ec)) return not_found("input file '" + input + "' does not exist");
  if (fs::is_directory(input, ec)) {
    return invalid_argument("input '" + input + "' is a folder; tern quantize reads a .gguf file");
  }
  const bool same = fs::equivalent(input, output, ec) ||
                    fs::weakly_canonical(input, ec) == fs::weakly_canonical(output, ec);
  if (same) return invalid_argument("output '" + output + "' is the input file; write to another path");
  return Status::ok();
}

}  // namespace

std::span<const QuantMixInfo> quant_mixes() { return kMixes; }

const QuantMixInfo& quant_mix_info(QuantMix mix) {
  for (const QuantMixInfo& m : kMixes) {
    if (m.mix == mix) return m;
  }
  return kMixes[0];  // unreachable: every enumerator is listed
}

Result<QuantMix> parse_quant_mix(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string names;
  for (const QuantMixInfo& m : kMixes) {
    if (m.name == lower) return m.mix;
    names += (names.empty() ? "" : ", ") + std::string(m.name);
  }
  return invalid_argument("unknown quantization type '" + std::string(name) + "'; tern quantize writes " + names);
}

std::vector<GgmlType> plan_quant_types(QuantMix mix, std::span<const GgufTensor> tensors) {
  std::vector<GgmlType> types;
  for (const PlannedType& p : plan(mix, tensors)) types.push_back(p.type);
  return types;
}

namespace {

std::vector<PlannedType> plan(QuantMix mix, std::span<const GgufTensor> tensors) {
  int64_t n_attn_v = 0, n_ffn_down = 0;
  bool tied = true;
  for (const GgufTensor& t : tensors) {
    n_attn_v += ends_with(t.name, ".attn_v.weight");
    n_ffn_down += ends_with(t.name, ".ffn_down.weight");
    if (t.name == "output.weight") tied = false;
  }
  std::vector<PlannedType> types;
  int64_t i_attn_v = 0, i_ffn_down = 0;
  for (const GgufTensor& t : tensors) {
    if (!quantizable(t)) {
      types.push_back({t.type, false});
      continue;
    }
    const GgmlType chosen = chosen_type(mix, t, tied, i_attn_v, n_attn_v, i_ffn_down, n_ffn_down);
    const GgmlType type = fallback(chosen, t.dims[0]);
    types.push_back({type, type != chosen});
    i_attn_v += ends_with(t.name, ".attn_v.weight");
    i_ffn_down += ends_with(t.name, ".ffn_down.weight");
  }
  return types;
}

}  // namespace

Result<QuantizeSummary> quantize_gguf(const std::string& input, const std::string& output, QuantMix mix) {
  TERN_RETURN_IF_ERROR(check_paths(input, output));
  TERN_ASSIGN_OR_RETURN(GgufFile in, GgufFile::open(input));

  GgufWriter writer;
  for (const GgufKeyValue& kv : in.metadata()) {
    if (kv.key == "general.quantization_version" || kv.key == "general.file_type") continue;
    TERN_RETURN_IF_ERROR(writer.add(kv.key, kv.value));
  }
  TERN_RETURN_IF_ERROR(writer.add("general.quantization_version", GgufValue(kQuantizationVersion)));
  TERN_RETURN_IF_ERROR(writer.add("general.file_type", GgufValue(static_cast<uint32_t>(mix))));

  const std::vector<PlannedType> types = plan(mix, in.tensors());
  std::vector<std::vector<uint8_t>> owned;  // each buffer lives until the file is written
  QuantizeSummary summary;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const GgufTensor& t = in.tensors()[i];
    std::span<const uint8_t> data = t.data;
    const GgmlType type = types[i].type;
    if (type != t.type) {
      TERN_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, requantize(t, type, in.name()));
      owned.push_back(std::move(bytes));
      data = owned.back();
      ++summary.num_quantized;
    }
    summary.num_fallbacks += types[i].fallback;
    TERN_RETURN_IF_ERROR(writer.add_tensor(t.name, type, t.dims, data));
    ++summary.num_tensors;
    summary.bytes_in += t.data.size();
    summary.bytes_out += data.size();
  }
  TERN_RETURN_IF_ERROR(writer.write_file(output));
  return summary;
}

}  // namespace tern
