// libFuzzer target for the GGUF reader: any bytes must give either an error
// or a file whose tensors lie inside the input at aligned, non-overlapping
// offsets with the size their type and dims need, whose typed getters answer
// without crashing, and which GgufWriter accepts and writes back to a file
// that parses and writes again to the same bytes. A violation traps.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Every getter on `key`: each must fail cleanly or agree with the stored type.
void probe_getters(const tern::GgufFile& file, const tern::GgufKeyValue& kv) {
  const tern::GgufType type = kv.value.type();
  const tern::GgufType element = kv.value.element_type();
  const bool is_array = type == tern::GgufType::kArray;
  check(file.find(kv.key) == &kv.value);
  check(file.get_u32(kv.key).is_ok() == (type == tern::GgufType::kU32));
  check(file.get_f32(kv.key).is_ok() == (type == tern::GgufType::kF32));
  check(file.get_bool(kv.key).is_ok() == (type == tern::GgufType::kBool));
  check(file.get_string(kv.key).is_ok() == (type == tern::GgufType::kString));
  check(file.get_string_array(kv.key).is_ok() == (is_array && element == tern::GgufType::kString));
  check(file.get_f32_array(kv.key).is_ok() == (is_array && element == tern::GgufType::kF32));
  check(file.get_i32_array(kv.key).is_ok() == (is_array && element == tern::GgufType::kI32));
  (void)file.get_uint(kv.key);
  if (auto s = file.get_string_array(kv.key); s.is_ok()) check(s->size() == kv.value.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tern::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.is_ok()) {
    check(file.status().message().starts_with("fuzz.gguf: "));
    return 0;
  }
  check(file->version() == 2 || file->version() == 3);
  check(file->alignment() != 0 && file->data_offset() % file->alignment() == 0);
  check(!file->get_u32("no such key").is_ok());

  tern::GgufWriter writer;
  for (const tern::GgufKeyValue& kv : file->metadata()) {
    probe_getters(*file, kv);
    check(writer.add(kv.key, kv.value).is_ok());
  }

  // Reading every byte lets AddressSanitizer catch a view past the input.
  uint64_t sum = 0;
  for (const tern::GgufTensor& t : file->tensors()) {
    check(t.data.empty() || (t.data.data() >= data && t.data.data() + t.data.size() <= data + size));
    check(t.dims.size() <= tern::kMaxGgufDims);
    const auto bytes = tern::ggml_tensor_bytes(t.type, t.dims);
    check(bytes.has_value() && *bytes == t.data.size());
    check(t.offset % file->alignment() == 0);
    if (!t.data.empty()) check(static_cast<uint64_t>(t.data.data() - data) == file->data_offset() + t.offset);
    check(file->find_tensor(t.name) == &t);
    for (uint8_t b : t.data) sum += b;
    check(writer.add_tensor(t.name, t.type, t.dims, t.data).is_ok());
  }
  // No two non-empty tensors share a byte.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const tern::GgufTensor& t : file->tensors()) {
    if (!t.data.empty()) ranges.emplace_back(t.offset, t.offset + t.data.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) check(ranges[i].first >= ranges[i - 1].second);

  // Write, parse, write: the second write must equal the first (bytes, not
  // values, so NaN metadata compares equal to itself).
  const std::string first = writer.serialize();
  auto again = tern::GgufFile::parse(as_bytes(first), "again");
  check(again.is_ok());
  check(again->metadata().size() == file->metadata().size());
  check(again->tensors().size() == file->tensors().size());
  tern::GgufWriter rewriter;
  for (const tern::GgufKeyValue& kv : again->metadata()) check(rewriter.add(kv.key, kv.value).is_ok());
  for (const tern::GgufTensor& t : again->tensors()) {
    check(rewriter.add_tensor(t.name, t.type, t.dims, t.data).is_ok());
  }
  check(rewriter.serialize() == first);
  return sum == 0xffffffffffffffffull ? 1 : 0;  // keeps `sum` live
}
