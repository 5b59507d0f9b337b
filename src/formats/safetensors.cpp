// Safetensors reading and writing. The file is untrusted: every field of the
// JSON header is type-checked before use, every size is computed with
// checked math, and each error names the file, the tensor and what was
// expected versus found. No exception leaves this file.
#include "formats/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/checked_math.h"
#include "base/utf8.h"
#include "formats/json_util.h"

namespace tern {
namespace {

using nlohmann::json;

// Names come from the file: escape control bytes and cap the length so an
// error message stays one readable line whatever the header holds.
std::string printable(std::string_view s) {
  constexpr size_t kMaxChars = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxChars; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxChars) out += "...";
  return out;
}

std::string offsets_to_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Valid safetensors dtypes that tern has no DType for: a distinct error
// (unsupported, not malformed) tells the user the file is fine but exotic.
bool is_other_safetensors_dtype(std::string_view name) {
  static constexpr std::array<std::string_view, 11> kOthers = {
      "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "U16", "U32", "U64", "C64", "E8M0"};
  return std::find(kOthers.begin(), kOthers.end(), name) != kOthers.end();
}

// nlohmann keeps the last of two equal keys; this callback sees every key
// while parsing and remembers the first repeated one, per object.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_.emplace_back();
        break;
      case json::parse_event_t::key:
        if (!open_.empty()) {
          const auto* key = parsed.get_ptr<const json::string_t*>();
          if (key != nullptr && !open_.back().insert(*key).second && !found_) {
            found_ = true;
            key_ = *key;
          }
        }
        break;
      case json::parse_event_t::object_end:
        if (!open_.empty()) open_.pop_back();
        break;
      default:
        break;
    }
    return true;
  }
  bool found() const { return found_; }
  const std::string& key() const { return key_; }

 private:
  std::vector<std::set<std::string>> open_;
  bool found_ = false;
  std::string key_;
};

// Runs only after a failed parse, to say where the JSON went wrong.
class SyntaxErrorFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    message_ = ex.what();
    return false;
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

std::string describe_syntax_error(const char* begin, const char* end) {
  SyntaxErrorFinder finder;
  json::sax_parse(begin, end, &finder);
  std::string m = finder.message();
  // Drop nlohmann's "[json.exception.parse_error.101] " tag: users need the place.
  if (auto pos = m.find("] "); pos != std::string::npos && m.starts_with("[json.")) m = m.substr(pos + 2);
  return m.empty() ? "syntax error" : printable(m);
}

struct Range {
  uint64_t begin;
  uint64_t end;
  size_t tensor;  // index into the parsed tensors
};

class HeaderParser {
 public:
  HeaderParser(const std::string& file, std::span<const uint8_t> data) : file_(file), data_(data) {}

  // One tensor entry of the header; records its byte range for the overlap check.
  Result<TensorView> parse_tensor(const std::string& name, const json& entry) {
    if (!entry.is_object()) return fail(name, "entry is " + json_brief(entry) + ", expected an object");
    TERN_ASSIGN_OR_RETURN(DType dtype, parse_dtype(name, entry));
    TERN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, parse_shape(name, entry));

    auto offsets = entry.find("data_offsets");
    if (offsets == entry.end()) return fail(name, "data_offsets is missing");
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return fail(name, "data_offsets is " + json_brief(*offsets) + ", expected two non-negative integers");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) {
      return fail(name, "data_offsets " + offsets_to_string(begin, end) + " begin after end");
    }
    if (end > data_.size()) {
      return fail(name,
                  "data_offsets " + offsets_to_string(begin, end) + " end past the data region (" +
                      std::to_string(data_.size()) + " bytes)",
                  ErrorCode::kOutOfRange);
    }

    auto elements = checked_product(shape);
    if (!elements) {
      return fail(name, "shape " + format_shape(shape) + " has more elements than fit in 64 bits",
                  ErrorCode::kOutOfRange);
    }
    auto bytes = checked_mul(*elements, dtype_size(dtype));
    if (!bytes) {
      return fail(name,
                  "shape " + format_shape(shape) + " of " + std::string(dtype_name(dtype)) +
                      " needs more bytes than fit in 64 bits",
                  ErrorCode::kOutOfRange);
    }
    if (*bytes != end - begin) {
      return fail(name, "data_offsets " + offsets_to_string(begin, end) + " hold " + std::to_string(end - begin) +
                            " bytes but shape " + format_shape(shape) + " of " + std::string(dtype_name(dtype)) +
                            " needs " + std::to_string(*bytes));
    }

    TensorView view;
    view.name = name;
    view.dtype = dtype;
    view.shape = std::move(shape);
    view.data = data_.subspan(begin, end - begin);
    return view;
  }

  Status fail(const std::string& tensor, const std::string& what, ErrorCode code = ErrorCode::kParse) const {
    return {code, file_ + ": tensor '" + printable(tensor) + "': " + what};
  }

 private:
  Result<DType> parse_dtype(const std::string& name, const json& entry) const {
    auto it = entry.find("dtype");
    if (it == entry.end()) return fail(name, "dtype is missing");
    const auto* text = it->get_ptr<const json::string_t*>();
    if (text == nullptr) return fail(name, "dtype is " + json_brief(*it) + ", expected a string such as \"BF16\"");
    if (auto dtype = dtype_from_name(*text)) return *dtype;
    if (is_other_safetensors_dtype(*text)) {
      return fail(name,
                  "dtype " + *text + " is not supported (tern reads F32, F16, BF16, F64, I8, U8, I16, I32, I64, BOOL)",
                  ErrorCode::kUnsupported);
    }
    return fail(name, "unknown dtype '" + printable(*text) + "'");
  }

  Result<std::vector<int64_t>> parse_shape(const std::string& name, const json& entry) const {
    auto it = entry.find("shape");
    if (it == entry.end()) return fail(name, "shape is missing");
    if (!it->is_array()) return fail(name, "shape is " + json_brief(*it) + ", expected an array of integers");
    if (it->size() > kMaxSafetensorsRank) {
      return fail(name,
                  "shape has rank " + std::to_string(it->size()) + ", at most " + std::to_string(kMaxSafetensorsRank) +
                      " is accepted",
                  ErrorCode::kOutOfRange);
    }
    std::vector<int64_t> shape;
    shape.reserve(it->size());
    for (const json& dim : *it) {
      if (dim.is_number_unsigned()) {
        const uint64_t d = dim.get<uint64_t>();
        if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return fail(name, "shape " + json_brief(*it) + " has a dimension past 2^63", ErrorCode::kOutOfRange);
        }
        shape.push_back(static_cast<int64_t>(d));
      } else if (dim.is_number_integer()) {
        return fail(name, "shape " + json_brief(*it) + " has negative dimension " + std::to_string(dim.get<int64_t>()));
      } else {
        return fail(name, "shape " + json_brief(*it) + " has element " + json_brief(dim) +
                              ", expected a non-negative integer");
      }
    }
    return shape;
  }

  const std::string& file_;
  std::span<const uint8_t> data_;
};

}  // namespace

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

uint64_t TensorView::num_elements() const { return checked_product(shape).value_or(0); }

std::string TensorView::shape_string() const { return format_shape(shape); }

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  TERN_ASSIGN_OR_RETURN(SafetensorsFile file, parse(mapped.bytes(), path));
  // The views point into the mapping, which stays put when the handle moves.
  file.file_ = std::move(mapped);
  return file;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  const uint64_t size = bytes.size();
  if (size < 8) {
    return parse_error(name + ": file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return out_of_range(name + ": header length " + std::to_string(header_len) + " is past the limit of " +
                        std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_len > size - 8) {
    return parse_error(name + ": header length " + std::to_string(header_len) + " past end of file (size " +
                       std::to_string(size) + ")");
  }

  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  // nlohmann stops at a NUL as if the input ended; valid JSON never holds
  // one, so refuse it rather than ignore whatever follows.
  if (const void* nul = std::memchr(text, 0, header_len); nul != nullptr) {
    return parse_error(name + ": header has a NUL byte at offset " +
                       std::to_string(8 + (static_cast<const char*>(nul) - text)));
  }
  DuplicateKeyFinder duplicates;
  json header = json::parse(text, text + header_len, std::ref(duplicates), /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return parse_error(name + ": header is not valid JSON: " + describe_syntax_error(text, text + header_len));
  }
  if (!header.is_object()) {
    return parse_error(name + ": header is " + json_brief(header) + ", expected a JSON object");
  }
  if (duplicates.found()) {
    return parse_error(name + ": header has key '" + printable(duplicates.key()) + "' twice");
  }

  SafetensorsFile out;
  out.name_ = name;
  HeaderParser parser(name, bytes.subspan(8 + header_len));
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) {
        return parse_error(name + ": __metadata__ is " + json_brief(value) + ", expected an object of strings");
      }
      for (auto m = value.begin(); m != value.end(); ++m) {
        const auto* s = m.value().get_ptr<const json::string_t*>();
        if (s == nullptr) {
          return parse_error(name + ": __metadata__ '" + printable(m.key()) + "' is " + json_brief(m.value()) +
                             ", expected a string");
        }
        out.metadata_[m.key()] = *s;
      }
      continue;
    }
    TERN_ASSIGN_OR_RETURN(TensorView view, parser.parse_tensor(key, value));
    const auto* base = bytes.data() + 8 + header_len;
    const uint64_t begin = static_cast<uint64_t>(view.data.data() - base);
    ranges.push_back({begin, begin + view.data.size(), out.tensors_.size()});
    out.tensors_.push_back(std::move(view));
  }

  // Overlap check: sorted by start, each non-empty range must begin at or
  // after the furthest end seen so far. Empty tensors own no bytes.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const Range* furthest = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (furthest != nullptr && r.begin < furthest->end) {
      return parser.fail(out.tensors_[r.tensor].name, "data_offsets " + offsets_to_string(r.begin, r.end) +
                                                          " overlap tensor '" +
                                                          printable(out.tensors_[furthest->tensor].name) + "' at " +
                                                          offsets_to_string(furthest->begin, furthest->end));
    }
    if (furthest == nullptr || r.end > furthest->end) furthest = &r;
  }

  std::sort(out.tensors_.begin(), out.tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  return out;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

Result<std::string> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps tensors in the caller's order, matching the data layout.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (!utf8_valid(k) || !utf8_valid(v)) {
        return invalid_argument("safetensors metadata '" + printable(k) + "' is not valid UTF-8");
      }
      meta[k] = v;
    }
    header["__metadata__"] = std::move(meta);
  }

  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string who = "tensor '" + printable(t.name) + "': ";
    if (t.name == "__metadata__" || !utf8_valid(t.name)) return invalid_argument(who + "name cannot be written");
    if (!names.insert(t.name).second) return invalid_argument(who + "written twice");
    if (t.shape.size() > kMaxSafetensorsRank) return invalid_argument(who + "rank above 8");
    auto elements = checked_product(t.shape);
    if (!elements) return invalid_argument(who + "shape " + format_shape(t.shape) + " is negative or too large");
    auto bytes = checked_mul(*elements, dtype_size(t.dtype));
    if (!bytes || *bytes != t.data.size()) {
      return invalid_argument(who + "has " + std::to_string(t.data.size()) + " bytes but shape " +
                              format_shape(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs " +
                              (bytes ? std::to_string(*bytes) : std::string("more than 2^64")));
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.data.size()};
    header[t.name] = std::move(entry);
    offset += t.data.size();
  }

  std::string text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // HF pads with spaces so the data region starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += text;
  for (const TensorToWrite& t : tensors) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

}  // namespace tern
