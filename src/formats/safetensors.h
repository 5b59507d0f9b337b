// Parser of the safetensors format: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then raw tensor bytes. Untrusted input: every size is checked, tensors must
// lie inside the file and must not overlap; errors name the file, the tensor
// and what was wrong. Tensor data stays in the memory map (zero copy).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "formats/dtype.h"

namespace tern {

// Largest JSON header accepted (the limit HF's safetensors also uses): a
// header past it is an attack or a broken file, not a model.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Largest tensor rank accepted.
inline constexpr size_t kMaxSafetensorsRank = 8;

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // points into the owning file's bytes

  uint64_t num_elements() const;
  std::string shape_string() const;  // "[2048, 1024]"
};

class SafetensorsFile {
 public:
  // Maps and parses the file at `path`. The returned object owns the map.
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses bytes owned by the caller (who keeps them alive); `name` is used
  // in error messages. The entry point of the fuzzer. Error codes: kParse for
  // malformed bytes, kOutOfRange for sizes past the file or a limit (or past
  // 64 bits), kUnsupported for a valid safetensors dtype tern does not read
  // (F8_E4M3, U32, ...). Duplicate keys anywhere in the header are errors.
  static Result<SafetensorsFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& name() const { return name_; }
  // The file's map; empty for bytes given to parse().
  const MappedFile& mapping() const { return file_; }

 private:
  MappedFile file_;
  std::string name_;
  std::vector<TensorView> tensors_;  // sorted by name
  std::map<std::string, std::string> metadata_;
};

// "[2048, 1024]" ("[]" for a scalar): how shapes appear in every message.
std::string format_shape(const std::vector<int64_t>& shape);

// One tensor to write.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// Serializes tensors (in the given order) into a safetensors byte string;
// used by tests and converters. Fails (kInvalidArgument) on a size that does
// not match the shape, a duplicate or non-UTF-8 name, or a negative dim.
Result<std::string> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});

}  // namespace tern
