// A read-only memory map of a whole file (RAII). Model weights are mapped,
// not read, so loading is fast and pages are shared between processes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace tern {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path`; an empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // True when [p, p + n) lies inside this map.
  bool contains(const void* p, size_t n) const;
  // Drops this process's resident pages wholly inside [p, p + n) (which
  // contains() must hold): the map is private and read-only, so a later read
  // faults them back in from the file, the same bytes. For weights the
  // kernels read from a repacked copy: their pages stop counting against the
  // process's memory.
  void release(const void* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string: config and tokenizer files.
Result<std::string> read_text_file(const std::string& path);

}  // namespace tern
