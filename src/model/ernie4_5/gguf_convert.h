// `tern convert`'s model half: an ERNIE 4.5 Hugging Face folder into a GGUF
// v3 file laid out as llama.cpp's convert_hf_to_gguf.py writes it (keys in
// its order, tensor names from gguf_names.h, tensors in checkpoint order,
// norms and 1-D tensors in F32). The tokenizer keys come from the caller
// (tokenizer/gguf_vocab.h), since model/ does not know tokenizers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "formats/gguf.h"
#include "formats/gguf_types.h"

namespace tern::ernie45 {

// --outtype. kAuto is the converter's default: BF16 or F16 after the first
// tensor of two or more dims that is bf16 or f16, else F16. kQ8_0 is the
// converter's q8_0: every matrix (token_embd and output too) Q8_0 as gguf-py
// quantizes it, F16 for one whose rows do not split into 32-element blocks
// (gguf-py's fallback).
enum class OutType { kAuto, kF32, kF16, kBF16, kQ8_0 };
Result<OutType> parse_out_type(std::string_view name);  // "auto", "f32", "f16", "bf16", "q8_0"

struct GgufConversion {
  GgmlType weight_type = GgmlType::kF16;  // what the 2-D weights were written as
  uint32_t file_type = 0;                 // general.file_type (llama_ftype)
  size_t num_tensors = 0;
  uint64_t num_params = 0;
  std::string size_label;  // general.size_label, "361M"
  uint64_t bytes = 0;      // of the file written
};

// Converts the folder `dir` (config.json, generation_config.json if any, the
// safetensors checkpoint) into `outfile`, written through `outfile`.tmp and a
// rename. `vocab` is the tokenizer's key/values, written where the converter
// writes them (after general.quantization_version). Refused with an error
// naming it: a tensor outside the ERNIE table, one of a dtype other than
// F32/F16/BF16, a shape that disagrees with config.json.
Result<GgufConversion> convert_to_gguf(const std::string& dir, OutType outtype, std::span<const GgufKeyValue> vocab,
                                       const std::string& outfile);

// llama.cpp's general.size_label for a parameter count ("361M", "1.5B",
// "0.40K"): gguf-py's model_weight_count_rounded_notation.
std::string size_label(uint64_t num_params);
// general.name from the folder's name, as convert_hf_to_gguf.py titles it when
// nothing else names the model: '-' become spaces, and each all-lower-case
// word is capitalized (title case) unless it is a version ("v2", "v1.5") or
// starts with a digit: "ernie-tiny" -> "Ernie Tiny", "ERNIE-4.5-0.3B-PT" kept
// but for the spaces. Only ASCII letters are re-cased.
std::string model_title(std::string_view folder_name);

}  // namespace tern::ernie45
