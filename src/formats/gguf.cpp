// GGUF reading. The file is untrusted: the parser reads it front to back
// through one cursor that checks every read against the bytes left; counts and
// lengths are bounded by named limits and by those bytes before any vector is
// reserved; tensor sizes and offsets use checked math. Errors name the file,
// the byte offset where the bad field starts, the key or tensor, and what was
// expected versus found. No exception leaves this file.
#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "base/checked_math.h"

namespace tern {
namespace {

// The fewest bytes a key/value can take (u64 length, 1-byte key, u32 type,
// 1-byte value) and a tensor info (u64 length, 1-byte name, u32 n_dims, u32
// type, u64 offset): the counts in the header are checked against these
// times the bytes left, so a huge count fails before anything is reserved.
constexpr uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;
constexpr uint64_t kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Keys and names come from the file: escape control bytes and quotes and cap
// the length so an error stays one readable line whatever the file holds.
std::string quoted(std::string_view s) {
  constexpr size_t kMaxChars = 120;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxChars; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxChars) out += "...";
  return out + "'";
}

std::string dims_to_string(std::span<const int64_t> dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

// Where a tensor's info started in the file and how many data bytes it has.
struct TensorExtent {
  uint64_t info_offset;
  uint64_t bytes;
};

}  // namespace

// Reads one file; lives for one parse() call. A friend of GgufFile.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  Result<GgufFile> run() {
    GgufFile out;
    out.name_ = name_;
    TERN_RETURN_IF_ERROR(read_header(out));
    TERN_ASSIGN_OR_RETURN(const uint64_t n_tensors, read_u64("tensor count"));
    TERN_ASSIGN_OR_RETURN(const uint64_t n_kv, read_u64("key/value count"));
    TERN_RETURN_IF_ERROR(check_counts(n_tensors, n_kv));

    out.metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) TERN_RETURN_IF_ERROR(read_key_value(out));
    TERN_RETURN_IF_ERROR(read_alignment(out));

    std::vector<TensorExtent> extents;
    extents.reserve(n_tensors);
    out.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) TERN_RETURN_IF_ERROR(read_tensor_info(out, extents));
    TERN_RETURN_IF_ERROR(place_tensors(out, extents));
    return out;
  }

 private:
  uint64_t left() const { return bytes_.size() - pos_; }

  Status fail(ErrorCode code, uint64_t at, const std::string& what) const {
    return {code, name_ + ": offset " + std::to_string(at) + ": " + context_ + what};
  }
  Status truncated(uint64_t need, std::string_view what) const {
    return fail(ErrorCode::kParse, pos_,
                std::string(what) + " needs " + std::to_string(need) + " bytes but the file ends after " +
                    std::to_string(left()) + " (file is " + std::to_string(bytes_.size()) + " bytes)");
  }

  // Little-endian on any host: the bytes are assembled, never cast.
  template <typename T>
  Result<T> read_le(std::string_view what) {
    using Bits = std::conditional_t<
        sizeof(T) == 1, uint8_t,
        std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    if (left() < sizeof(T)) return truncated(sizeof(T), what);
    Bits bits = 0;
    for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<Bits>(static_cast<Bits>(bytes_[pos_ + i]) << (8 * i));
    pos_ += sizeof(T);
    return std::bit_cast<T>(bits);
  }
  Result<uint32_t> read_u32(std::string_view what) { return read_le<uint32_t>(what); }
  Result<uint64_t> read_u64(std::string_view what) { return read_le<uint64_t>(what); }

  Result<bool> read_bool(std::string_view what) {
    const uint64_t at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint8_t b, read_le<uint8_t>(what));
    if (b > 1) return fail(ErrorCode::kParse, at, std::string(what) + " is " + std::to_string(b) + ", not 0 or 1");
    return b == 1;
  }

  // A u64 length then that many bytes, at most `max_len`.
  Result<std::string> read_string(std::string_view what, uint64_t max_len) {
    const uint64_t at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint64_t len, read_u64(what));
    if (len > max_len) {
      return fail(
          ErrorCode::kOutOfRange, at,
          std::string(what) + " length " + std::to_string(len) + " is past the limit of " + std::to_string(max_len));
    }
    if (len > left()) {
      return fail(ErrorCode::kOutOfRange, at,
                  std::string(what) + " length " + std::to_string(len) + " is past the end of the file (" +
                      std::to_string(left()) + " bytes left)");
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  Status read_header(GgufFile& out) {
    if (bytes_.size() < 4) {
      return fail(ErrorCode::kParse, 0,
                  "file is " + std::to_string(bytes_.size()) + " bytes, too short for the magic 'GGUF'");
    }
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      return fail(ErrorCode::kParse, 0,
                  "bad magic " + quoted({reinterpret_cast<const char*>(bytes_.data()), 4}) +
                      ", expected 'GGUF': not a GGUF file");
    }
    pos_ = 4;
    TERN_ASSIGN_OR_RETURN(const uint32_t version, read_u32("version"));
    // A big-endian file stores version 3 as 00 00 00 03; read little-endian
    // that has only high bytes set. No version will ever reach 2^16.
    if (version != 0 && (version & 0xffff) == 0) {
      return fail(ErrorCode::kUnsupported, 4,
                  "version reads as " + std::to_string(version) + ", which is version " +
                      std::to_string(__builtin_bswap32(version)) +
                      " written big-endian; tern reads little-endian GGUF only");
    }
    if (version == 1) {
      return fail(ErrorCode::kUnsupported, 4,
                  "GGUF version 1 (32-bit counts, 2023) is not supported; convert the model again with a current "
                  "llama.cpp (tern reads versions 2 and 3)");
    }
    if (version != 2 && version != 3) {
      return fail(ErrorCode::kUnsupported, 4,
                  "GGUF version " + std::to_string(version) + " is not supported (tern reads versions 2 and 3)");
    }
    out.version_ = version;
    return Status::ok();
  }

  Status check_counts(uint64_t n_tensors, uint64_t n_kv) const {
    if (n_tensors > kMaxGgufTensors) {
      return fail(
          ErrorCode::kOutOfRange, 8,
          "tensor count " + std::to_string(n_tensors) + " is past the limit of " + std::to_string(kMaxGgufTensors));
    }
    if (n_kv > kMaxGgufKeyValues) {
      return fail(
          ErrorCode::kOutOfRange, 16,
          "key/value count " + std::to_string(n_kv) + " is past the limit of " + std::to_string(kMaxGgufKeyValues));
    }
    // Both are below 2^20 here, so these products cannot overflow.
    const uint64_t least = n_kv * kMinKeyValueBytes + n_tensors * kMinTensorInfoBytes;
    if (least > left()) {
      return fail(ErrorCode::kOutOfRange, 8,
                  std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) + " keys need at least " +
                      std::to_string(least) + " bytes but the file has " + std::to_string(left()) + " left");
    }
    return Status::ok();
  }

  Status read_key_value(GgufFile& out) {
    const uint64_t at = pos_;
    context_.clear();
    TERN_ASSIGN_OR_RETURN(std::string key, read_string("key", kMaxGgufKeyBytes));
    if (key.empty()) return fail(ErrorCode::kParse, at, "key is empty");
    if (auto it = out.key_index_.find(key); it != out.key_index_.end()) {
      return fail(ErrorCode::kParse, at, "key " + quoted(key) + " appears twice");
    }
    context_ = "key " + quoted(key) + ": ";
    const uint64_t type_at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint32_t type_id, read_u32("value type"));
    auto type = gguf_type_from_id(type_id);
    if (!type) return fail(ErrorCode::kParse, type_at, "value type id " + std::to_string(type_id) + " is unknown");
    TERN_ASSIGN_OR_RETURN(GgufValue value, read_value(*type));
    context_.clear();
    out.key_index_.emplace(key, out.metadata_.size());
    out.metadata_.push_back({std::move(key), std::move(value)});
    return Status::ok();
  }

  Result<GgufValue> read_value(GgufType type) {
    switch (type) {
      case GgufType::kU8:
        return wrap(read_le<uint8_t>("u8 value"));
      case GgufType::kI8:
        return wrap(read_le<int8_t>("i8 value"));
      case GgufType::kU16:
        return wrap(read_le<uint16_t>("u16 value"));
      case GgufType::kI16:
        return wrap(read_le<int16_t>("i16 value"));
      case GgufType::kU32:
        return wrap(read_le<uint32_t>("u32 value"));
      case GgufType::kI32:
        return wrap(read_le<int32_t>("i32 value"));
      case GgufType::kF32:
        return wrap(read_le<float>("f32 value"));
      case GgufType::kBool:
        return wrap(read_bool("bool value"));
      case GgufType::kString:
        return wrap(read_string("string value", kMaxGgufStringBytes));
      case GgufType::kU64:
        return wrap(read_le<uint64_t>("u64 value"));
      case GgufType::kI64:
        return wrap(read_le<int64_t>("i64 value"));
      case GgufType::kF64:
        return wrap(read_le<double>("f64 value"));
      case GgufType::kArray:
        return read_array();
    }
    return fail(ErrorCode::kInternal, pos_, "unhandled value type");
  }

  template <typename T>
  static Result<GgufValue> wrap(Result<T> r) {
    if (!r.is_ok()) return r.status();
    return GgufValue(std::move(r).value());
  }

  Result<GgufValue> read_array() {
    const uint64_t at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint32_t type_id, read_u32("array element type"));
    auto type = gguf_type_from_id(type_id);
    if (!type) {
      return fail(ErrorCode::kParse, at, "array element type id " + std::to_string(type_id) + " is unknown");
    }
    if (*type == GgufType::kArray) {
      return fail(ErrorCode::kUnsupported, at, "arrays of arrays are not supported");
    }
    const uint64_t count_at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint64_t count, read_u64("array length"));
    if (count > kMaxGgufArrayElements) {
      return fail(
          ErrorCode::kOutOfRange, count_at,
          "array length " + std::to_string(count) + " is past the limit of " + std::to_string(kMaxGgufArrayElements));
    }
    // A string element takes at least its 8-byte length.
    const uint64_t element_bytes = *type == GgufType::kString ? 8 : gguf_type_size(*type);
    const auto least = checked_mul(count, element_bytes);
    if (!least || *least > left()) {
      return fail(ErrorCode::kOutOfRange, count_at,
                  "array of " + std::to_string(count) + " " + std::string(gguf_type_name(*type)) + " needs at least " +
                      (least ? std::to_string(*least) : std::string("2^64")) + " bytes but the file has " +
                      std::to_string(left()) + " left");
    }
    switch (*type) {
      case GgufType::kU8:
        return read_elements<uint8_t>(count);
      case GgufType::kI8:
        return read_elements<int8_t>(count);
      case GgufType::kU16:
        return read_elements<uint16_t>(count);
      case GgufType::kI16:
        return read_elements<int16_t>(count);
      case GgufType::kU32:
        return read_elements<uint32_t>(count);
      case GgufType::kI32:
        return read_elements<int32_t>(count);
      case GgufType::kF32:
        return read_elements<float>(count);
      case GgufType::kBool:
        return read_elements<bool>(count);
      case GgufType::kString:
        return read_elements<std::string>(count);
      case GgufType::kU64:
        return read_elements<uint64_t>(count);
      case GgufType::kI64:
        return read_elements<int64_t>(count);
      case GgufType::kF64:
        return read_elements<double>(count);
      case GgufType::kArray:
        break;
    }
    return fail(ErrorCode::kInternal, at, "unhandled array element type");
  }

  // `count` was checked against the bytes left, so reserving is bounded.
  template <typename T>
  Result<GgufValue> read_elements(uint64_t count) {
    std::vector<T> values;
    values.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        TERN_ASSIGN_OR_RETURN(std::string s, read_string("array string", kMaxGgufStringBytes));
        values.push_back(std::move(s));
      } else if constexpr (std::is_same_v<T, bool>) {
        TERN_ASSIGN_OR_RETURN(const bool b, read_bool("array bool"));
        values.push_back(b);
      } else {
        TERN_ASSIGN_OR_RETURN(const T v, read_le<T>("array element"));
        values.push_back(v);
      }
    }
    return GgufValue(std::move(values));
  }

  Status read_alignment(GgufFile& out) const {
    const GgufValue* v = out.find(kGgufAlignmentKey);
    if (v == nullptr) return Status::ok();
    const std::string where = name_ + ": key " + quoted(kGgufAlignmentKey) + ": ";
    const auto* a = v->get_if<uint32_t>();
    if (a == nullptr) return parse_error(where + "is " + v->type_string() + ", expected u32");
    if (*a == 0 || !std::has_single_bit(*a)) {
      return parse_error(where + "alignment " + std::to_string(*a) + " is not a power of two");
    }
    if (*a > kMaxGgufAlignment) {
      return out_of_range(where + "alignment " + std::to_string(*a) + " is past the limit of " +
                          std::to_string(kMaxGgufAlignment));
    }
    out.alignment_ = *a;
    return Status::ok();
  }

  Status read_tensor_info(GgufFile& out, std::vector<TensorExtent>& extents) {
    const uint64_t at = pos_;
    context_.clear();
    TERN_ASSIGN_OR_RETURN(std::string name, read_string("tensor name", kMaxGgufTensorNameBytes));
    if (name.empty()) return fail(ErrorCode::kParse, at, "tensor name is empty");
    if (out.tensor_index_.count(name) != 0) {
      return fail(ErrorCode::kParse, at, "tensor " + quoted(name) + " appears twice");
    }
    context_ = "tensor " + quoted(name) + ": ";

    const uint64_t dims_at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint32_t n_dims, read_u32("dimension count"));
    if (n_dims > kMaxGgufDims) {
      return fail(ErrorCode::kOutOfRange, dims_at,
                  std::to_string(n_dims) + " dimensions, at most " + std::to_string(kMaxGgufDims) + " are accepted");
    }
    std::vector<int64_t> dims;
    dims.reserve(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      TERN_ASSIGN_OR_RETURN(const uint64_t dim, read_u64("dimension"));
      if (dim > kMaxDim) {
        return fail(ErrorCode::kOutOfRange, dim_at,
                    "ne[" + std::to_string(d) + "] = " + std::to_string(dim) + " is past 2^63");
      }
      dims.push_back(static_cast<int64_t>(dim));
    }

    const uint64_t type_at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint32_t type_id, read_u32("ggml type"));
    const GgmlTypeInfo* info = ggml_type_info(type_id);
    if (info == nullptr) {
      return fail(ErrorCode::kUnsupported, type_at, "ggml type id " + std::to_string(type_id) + " is unknown");
    }
    const uint64_t offset_at = pos_;
    TERN_ASSIGN_OR_RETURN(const uint64_t offset, read_u64("data offset"));

    auto shape = [&] { return dims_to_string(dims) + " of " + std::string(info->name); };
    const int64_t ne0 = dims.empty() ? 1 : dims[0];
    if (ne0 % info->block_size != 0) {
      return fail(ErrorCode::kParse, dims_at,
                  "ne[0] = " + std::to_string(ne0) + " is not a multiple of " + std::string(info->name) +
                      "'s block of " + std::to_string(info->block_size));
    }
    const auto elements = checked_product(dims);
    if (!elements || *elements > kMaxDim) {
      return fail(ErrorCode::kOutOfRange, dims_at, "dims " + shape() + " have more than 2^63 elements");
    }
    const auto bytes = ggml_tensor_bytes(info->type, dims);
    if (!bytes) return fail(ErrorCode::kOutOfRange, dims_at, "dims " + shape() + " need more than 2^64 bytes");
    if (offset % out.alignment_ != 0) {
      return fail(ErrorCode::kParse, offset_at,
                  "data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                      std::to_string(out.alignment_));
    }
    context_.clear();

    GgufTensor t;
    t.name = name;
    t.type = info->type;
    t.dims = std::move(dims);
    t.offset = offset;
    out.tensor_index_.emplace(std::move(name), out.tensors_.size());
    out.tensors_.push_back(std::move(t));
    extents.push_back({at, *bytes});
    return Status::ok();
  }

  // Points each tensor at its bytes once the data section's start is known,
  // and refuses tensors past the end or overlapping another.
  Status place_tensors(GgufFile& out, const std::vector<TensorExtent>& extents) {
    // pos_ <= file size and alignment <= 2^20, so this cannot overflow.
    const uint64_t data_offset = (pos_ + out.alignment_ - 1) / out.alignment_ * out.alignment_;
    const uint64_t size = bytes_.size();
    const uint64_t data_size = size > data_offset ? size - data_offset : 0;
    out.data_offset_ = data_offset;

    struct Range {
      uint64_t begin;
      uint64_t end;
      size_t tensor;
    };
    std::vector<Range> ranges;
    ranges.reserve(out.tensors_.size());
    for (size_t i = 0; i < out.tensors_.size(); ++i) {
      GgufTensor& t = out.tensors_[i];
      const uint64_t bytes = extents[i].bytes;
      const auto end = checked_add(t.offset, bytes);
      if (!end || *end > data_size) {
        context_ = "tensor " + quoted(t.name) + ": ";
        return fail(ErrorCode::kOutOfRange, extents[i].info_offset,
                    "data [" + std::to_string(t.offset) + ", " + (end ? std::to_string(*end) : std::string("2^64+")) +
                        ") of the data section is past its end (the section starts at " + std::to_string(data_offset) +
                        " and holds " + std::to_string(data_size) + " bytes)");
      }
      if (bytes == 0) continue;
      t.data = bytes_.subspan(data_offset + t.offset, bytes);
      ranges.push_back({t.offset, *end, i});
    }

    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    const Range* furthest = nullptr;
    for (const Range& r : ranges) {
      if (furthest != nullptr && r.begin < furthest->end) {
        const GgufTensor& t = out.tensors_[r.tensor];
        const GgufTensor& other = out.tensors_[furthest->tensor];
        context_ = "tensor " + quoted(t.name) + ": ";
        return fail(ErrorCode::kParse, extents[r.tensor].info_offset,
                    "data [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") overlaps tensor " +
                        quoted(other.name) + " at [" + std::to_string(furthest->begin) + ", " +
                        std::to_string(furthest->end) + ")");
      }
      if (furthest == nullptr || r.end > furthest->end) furthest = &r;
    }
    return Status::ok();
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
  std::string context_;  // "key 'x': " while reading that key's value
};

uint64_t GgufTensor::num_elements() const { return checked_product(dims).value_or(0); }

std::string GgufTensor::dims_string() const { return dims_to_string(dims); }

Result<GgufFile> GgufFile::open(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  TERN_ASSIGN_OR_RETURN(GgufFile file, parse(mapped.bytes(), path));
  // The tensor views point into the mapping, which stays put when the handle moves.
  file.file_ = std::move(mapped);
  return file;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  return GgufParser(bytes, name).run();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string_view> GgufFile::get_string(std::string_view key) const {
  TERN_ASSIGN_OR_RETURN(const std::string* s, get_typed<std::string>(key));
  return std::string_view(*s);
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  return std::visit(
      [&](const auto& x) -> Result<uint64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) {
              return Status(ErrorCode::kParse,
                            name_ + ": key " + quoted(key) + " is " + std::to_string(x) + ", expected >= 0");
            }
          }
          return static_cast<uint64_t>(x);
        } else {
          return wrong_type(key, *v, "an integer");
        }
      },
      v->storage());
}

Status GgufFile::missing_key(std::string_view key) const {
  return not_found(name_ + ": key " + quoted(key) + " is missing");
}

Status GgufFile::wrong_type(std::string_view key, const GgufValue& found, const std::string& expected) const {
  return parse_error(name_ + ": key " + quoted(key) + " is " + found.type_string() + ", expected " + expected);
}

}  // namespace tern
