// libFuzzer target for the safetensors parser: any bytes must give either an
// error or tensors that lie inside the input, match their shapes, and survive
// a serialize -> parse round trip unchanged. A violation traps.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tern::SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  if (!file.is_ok()) {
    check(!file.status().message().empty());
    return 0;
  }

  // Reading every byte lets AddressSanitizer catch a view past the input.
  uint64_t sum = 0;
  std::vector<tern::TensorToWrite> again;
  for (const tern::TensorView& t : file->tensors()) {
    check(t.data.empty() || (t.data.data() >= data && t.data.data() + t.data.size() <= data + size));
    check(t.data.size() == t.num_elements() * tern::dtype_size(t.dtype));
    check(file->find(t.name) == &t);
    for (uint8_t b : t.data) sum += b;
    again.push_back({t.name, t.dtype, t.shape, t.data});
  }

  auto bytes = tern::serialize_safetensors(again, file->metadata());
  check(bytes.is_ok());
  auto reparsed = tern::SafetensorsFile::parse(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), "again");
  check(reparsed.is_ok());
  check(reparsed->tensors().size() == file->tensors().size());
  check(reparsed->metadata() == file->metadata());
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const auto& a = file->tensors()[i];
    const auto& b = reparsed->tensors()[i];
    check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape);
    check(std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end()));
  }
  return sum == 0xffffffffffffffffull ? 1 : 0;  // keeps `sum` live
}
