// Reader of GGUF, llama.cpp's model file: a header (magic "GGUF", version,
// tensor and key counts), typed metadata key/values, tensor infos (name,
// dims, ggml type, offset), then the aligned tensor data. Untrusted input:
// every count, length and offset is checked against 64 bits and against the
// bytes left before anything is allocated or indexed; errors name the file,
// the byte offset and the key or tensor. Tensor data stays in the memory map.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "formats/gguf_types.h"
#include "formats/gguf_value.h"

namespace tern {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufVersion = 3;         // what the writer produces; the reader takes 2 and 3
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr std::string_view kGgufAlignmentKey = "general.alignment";

// Limits past which a file is refused (kOutOfRange) however many bytes it
// has. Each is far above any real model and keeps a hostile header from
// making the reader allocate memory out of proportion to the file.
// GGML_MAX_DIMS.
inline constexpr uint32_t kMaxGgufDims = 4;
// Tensors and keys: real models have a few thousand tensors and under a
// hundred keys; both counts are also bounded by the bytes left in the file.
inline constexpr uint64_t kMaxGgufTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxGgufKeyValues = uint64_t{1} << 20;
// The spec's key limit (keys are at most 65535 bytes).
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;
// llama.cpp's GGML_MAX_NAME (64) less its NUL: a longer name would load here
// and fail there.
inline constexpr uint64_t kMaxGgufTensorNameBytes = 63;
// One string value (chat templates are kilobytes).
inline constexpr uint64_t kMaxGgufStringBytes = uint64_t{1} << 28;
// Elements of one array (vocabularies and merge lists are a few 100k).
inline constexpr uint64_t kMaxGgufArrayElements = uint64_t{1} << 24;
// Largest general.alignment accepted (a page is 4096; ggml uses 32).
inline constexpr uint64_t kMaxGgufAlignment = uint64_t{1} << 20;

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  // ne[0] first: the innermost (contiguous) dimension leads, the reverse of
  // the numpy / safetensors order. Each dim is in [0, 2^63).
  std::vector<int64_t> dims;
  uint64_t offset = 0;            // from the start of the data section
  std::span<const uint8_t> data;  // points into the owning file's bytes

  uint64_t num_elements() const;
  std::string dims_string() const;  // "[64, 32]" in ne order
};

class GgufFile {
 public:
  // Maps and parses the file at `path`. The returned object owns the map.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes owned by the caller (who keeps them alive); `name` is used in
  // error messages. The entry point of the fuzzer. Error codes: kParse for
  // malformed bytes (bad magic, truncation, duplicate keys or tensors, bad
  // bool, misaligned or overlapping tensors), kOutOfRange for a count, length
  // or offset past the file, a limit above or 64 bits, kUnsupported for a
  // well-formed file tern does not read (version 1 or past 3, big-endian,
  // arrays of arrays, an unknown ggml type id).
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& name() const { return name_; }
  // The file's map; empty for bytes given to parse().
  const MappedFile& mapping() const { return file_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Byte offset of the data section in the file (a multiple of alignment()).
  uint64_t data_offset() const { return data_offset_; }

  // Key/values in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: kNotFound when the key is missing, kParse when it holds
  // another type; the message names the file, the key and both types.
  Result<uint8_t> get_u8(std::string_view key) const { return get_scalar<uint8_t>(key); }
  Result<int8_t> get_i8(std::string_view key) const { return get_scalar<int8_t>(key); }
  Result<uint16_t> get_u16(std::string_view key) const { return get_scalar<uint16_t>(key); }
  Result<int16_t> get_i16(std::string_view key) const { return get_scalar<int16_t>(key); }
  Result<uint32_t> get_u32(std::string_view key) const { return get_scalar<uint32_t>(key); }
  Result<int32_t> get_i32(std::string_view key) const { return get_scalar<int32_t>(key); }
  Result<uint64_t> get_u64(std::string_view key) const { return get_scalar<uint64_t>(key); }
  Result<int64_t> get_i64(std::string_view key) const { return get_scalar<int64_t>(key); }
  Result<float> get_f32(std::string_view key) const { return get_scalar<float>(key); }
  Result<double> get_f64(std::string_view key) const { return get_scalar<double>(key); }
  Result<bool> get_bool(std::string_view key) const { return get_scalar<bool>(key); }
  // Views stay valid as long as this GgufFile lives and is not assigned to.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<std::span<const std::string>> get_string_array(std::string_view key) const {
    return get_array<std::string>(key);
  }
  Result<std::span<const float>> get_f32_array(std::string_view key) const { return get_array<float>(key); }
  Result<std::span<const int32_t>> get_i32_array(std::string_view key) const { return get_array<int32_t>(key); }
  Result<std::span<const uint32_t>> get_u32_array(std::string_view key) const { return get_array<uint32_t>(key); }
  // Any integer type whose value is non-negative: converters disagree on
  // whether a count is u32, i32 or u64, and readers should not care.
  Result<uint64_t> get_uint(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

 private:
  // The value of `key` if it holds a T, else kNotFound / kParse.
  template <typename T>
  Result<const T*> get_typed(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return missing_key(key);
    if (const T* p = v->get_if<T>()) return p;
    return wrong_type(key, *v, GgufValue(T{}).type_string());
  }
  template <typename T>
  Result<T> get_scalar(std::string_view key) const {
    TERN_ASSIGN_OR_RETURN(const T* p, get_typed<T>(key));
    return *p;
  }
  template <typename T>
  Result<std::span<const T>> get_array(std::string_view key) const {
    TERN_ASSIGN_OR_RETURN(const std::vector<T>* p, get_typed<std::vector<T>>(key));
    return std::span<const T>(*p);
  }
  Status missing_key(std::string_view key) const;
  Status wrong_type(std::string_view key, const GgufValue& found, const std::string& expected) const;

  friend class GgufParser;

  MappedFile file_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace tern
