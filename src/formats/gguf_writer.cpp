// GGUF writing. The header is encoded byte by byte little-endian (right on
// any host); tensor offsets are the running sum of sizes padded to the
// alignment, and the data section starts at the first aligned offset after
// the tensor infos.
#include "formats/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "base/checked_math.h"
#include "formats/gguf.h"

namespace tern {
namespace {

template <typename T>
void put(std::string& out, T v) {
  using Bits = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  const auto bits = std::bit_cast<Bits>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

template <typename T>
void put_element(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    put_string(out, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    put<uint8_t>(out, v ? 1 : 0);
  } else {
    put<T>(out, v);
  }
}

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

void put_value(std::string& out, const GgufValue& value) {
  put<uint32_t>(out, static_cast<uint32_t>(value.type()));
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          put<uint32_t>(out, static_cast<uint32_t>(value.element_type()));
          put<uint64_t>(out, v.size());
          for (const auto& e : v) put_element<typename T::value_type>(out, e);
        } else {
          put_element<T>(out, v);
        }
      },
      value.storage());
}

uint64_t padding(uint64_t size, uint64_t alignment) { return (alignment - size % alignment) % alignment; }

// The longest string in a value: the reader's per-string limit applies to each.
uint64_t longest_string(const GgufValue& value) {
  if (const auto* s = value.get_if<std::string>()) return s->size();
  uint64_t longest = 0;
  if (const auto* a = value.get_if<std::vector<std::string>>()) {
    for (const std::string& s : *a) longest = std::max<uint64_t>(longest, s.size());
  }
  return longest;
}

}  // namespace

Status GgufWriter::add(std::string key, GgufValue value) {
  const std::string who = "gguf key '" + key.substr(0, 120) + "': ";
  if (key.empty()) return invalid_argument("gguf key is empty");
  if (key.size() > kMaxGgufKeyBytes) return invalid_argument(who + "longer than 65535 bytes");
  if (keys_.count(key) != 0) return invalid_argument(who + "added twice");
  if (longest_string(value) > kMaxGgufStringBytes) return invalid_argument(who + "string past the reader's limit");
  if (value.is_array() && value.size() > kMaxGgufArrayElements) {
    return invalid_argument(who + "array of " + std::to_string(value.size()) + " elements is past the limit of " +
                            std::to_string(kMaxGgufArrayElements));
  }
  if (key == kGgufAlignmentKey) {
    const auto* a = value.get_if<uint32_t>();
    if (a == nullptr) return invalid_argument(who + "is " + value.type_string() + ", expected u32");
    if (*a == 0 || !std::has_single_bit(*a) || *a > kMaxGgufAlignment) {
      return invalid_argument(who + std::to_string(*a) + " is not a power of two in [1, 2^20]");
    }
    alignment_ = *a;
  }
  keys_.insert(key);
  metadata_.emplace_back(std::move(key), std::move(value));
  return Status::ok();
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                              std::span<const uint8_t> data) {
  const std::string who = "gguf tensor '" + name.substr(0, 120) + "': ";
  if (name.empty()) return invalid_argument("gguf tensor name is empty");
  if (name.size() > kMaxGgufTensorNameBytes) return invalid_argument(who + "name longer than 63 bytes");
  if (names_.count(name) != 0) return invalid_argument(who + "added twice");
  if (dims.size() > kMaxGgufDims) return invalid_argument(who + "more than 4 dims");
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  if (info == nullptr) return invalid_argument(who + "unknown ggml type");
  const auto elements = checked_product(dims);
  if (!elements || *elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return invalid_argument(who + "dims negative or past 2^63 elements");
  }
  const auto bytes = ggml_tensor_bytes(type, dims);
  if (!bytes) {
    return invalid_argument(who + "ne[0] is not a multiple of " + std::string(info->name) + "'s block of " +
                            std::to_string(info->block_size));
  }
  if (*bytes != data.size()) {
    return invalid_argument(who + "has " + std::to_string(data.size()) + " bytes, its dims and type need " +
                            std::to_string(*bytes));
  }
  names_.insert(name);
  tensors_.push_back({std::move(name), type, std::move(dims), data});
  return Status::ok();
}

std::string GgufWriter::header() const {
  std::string out;
  out.append("GGUF");
  put<uint32_t>(out, kGgufVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put_value(out, value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += t.data.size() + padding(t.data.size(), alignment_);
  }
  out.append(padding(out.size(), alignment_), '\0');
  return out;
}

bool GgufWriter::emit(const std::function<bool(std::span<const uint8_t>)>& sink) const {
  static constexpr uint8_t kZeros[4096] = {};
  auto pad = [&](uint64_t n) {
    while (n > 0) {
      const uint64_t chunk = std::min<uint64_t>(n, sizeof(kZeros));
      if (!sink({kZeros, chunk})) return false;
      n -= chunk;
    }
    return true;
  };
  const std::string head = header();
  if (!sink({reinterpret_cast<const uint8_t*>(head.data()), head.size()})) return false;
  for (const Tensor& t : tensors_) {
    if (!sink(t.data) || !pad(padding(t.data.size(), alignment_))) return false;
  }
  return true;
}

std::string GgufWriter::serialize() const {
  std::string out;
  emit([&](std::span<const uint8_t> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  });
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("cannot create " + tmp + ": " + std::strerror(errno));
  const bool written =
      emit([&](std::span<const uint8_t> b) { return b.empty() || std::fwrite(b.data(), 1, b.size(), f) == b.size(); });
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const std::string why = std::strerror(written ? errno : write_errno);
    std::remove(tmp.c_str());
    return io_error("cannot write " + tmp + ": " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path);
  }
  return Status::ok();
}

}  // namespace tern
