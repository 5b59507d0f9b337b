// `tern quantize`: a GGUF file's matrices requantized to one of
// llama-quantize's mixes, every key kept. Which type each tensor gets follows
// llama.cpp's llama-quant.cpp for dense models (the rules are in
// gguf_quantize.cpp's plan_quant_types and in README / docs); the bytes come
// from the reference quantizers of backend/cpu/quant_reference.h. Works on
// tensor names alone (llama.cpp's "blk.N.attn_v.weight" ...), so it does not
// depend on the architecture. Thread-compatible: no state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/gguf.h"
#include "formats/gguf_types.h"

namespace tern {

// llama-quantize's type names; the numbers are llama_ftype ids, written as
// general.file_type.
enum class QuantMix : uint32_t {
  kQ4_0 = 2,
  kQ8_0 = 7,
  kQ4_K_M = 15,
  kQ5_K_M = 17,
  kQ6_K = 18,
};

struct QuantMixInfo {
  QuantMix mix;
  std::string_view name;  // "q4_k_m", as llama-quantize's usage lists it (lower case)
  GgmlType base;          // the type of a matrix no rule singles out
  std::string_view about;
};

// Every mix, in the order `tern quantize --help` lists them.
std::span<const QuantMixInfo> quant_mixes();
const QuantMixInfo& quant_mix_info(QuantMix mix);
// "q4_k_m" or "Q4_K_M"; kInvalidArgument naming the accepted names otherwise.
Result<QuantMix> parse_quant_mix(std::string_view name);

// The type `mix` gives each of `tensors` (same order): tensors that are not
// quantized (fewer than 2 dims or a name not ending in "weight": norms)
// keep their type; the others get llama.cpp's choice, then its fallback
// when the rows do not split into the chosen type's blocks (Q5_0, Q5_1,
// Q8_0 or F16; see the .cpp). The layer counters of attn_v and
// ffn_down run over the tensors in this order, as llama.cpp's do.
std::vector<GgmlType> plan_quant_types(QuantMix mix, std::span<const GgufTensor> tensors);

struct QuantizeSummary {
  size_t num_tensors = 0;
  size_t num_quantized = 0;   // tensors whose bytes were requantized (the others are copied)
  size_t num_fallbacks = 0;   // matrices whose rows did not split into the rules' type
  uint64_t bytes_in = 0;      // tensor data, before and after
  uint64_t bytes_out = 0;
};

// Reads `input`, writes `output` (through output.tmp and a rename). Each
// planned matrix is dequantized to f32 (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K, Q5_0, Q5_1) and quantized to its new type; one already of its new type is
// copied as is. Keys are copied in order, then general.quantization_version
// (2) and general.file_type (the mix's id) are set as llama-quantize sets
// them: removed where they were and appended, in that order. Errors:
// kNotFound for a missing input, kInvalidArgument when output names the
// input, kUnsupported naming a tensor of a type tern cannot dequantize;
// the reader's errors for a malformed input.
Result<QuantizeSummary> quantize_gguf(const std::string& input, const std::string& output, QuantMix mix);

}  // namespace tern
