// MappedFile: a file's bytes through the map, contains() on its edges, and
// release(): the pages wholly inside the range stop counting in the
// process's resident memory, and reads afterwards still see the file's bytes.
#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "support/temp_dir.h"

namespace tern {
namespace {

// Resident pages of this process (/proc/self/statm's second field).
int64_t resident_pages() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident;
}

TEST(MappedFile, ReleaseDropsResidentPagesAndKeepsTheBytes) {
  testing::TempDir dir;
  const size_t n = size_t{32} << 20;
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 131) >> 7);
  dir.write("w.bin", bytes);
  auto file = MappedFile::open(dir.file("w.bin"));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const MappedFile& f = file.value();
  const uint8_t* p = f.bytes().data();
  ASSERT_EQ(f.bytes().size(), n);
  EXPECT_TRUE(f.contains(p, n));
  EXPECT_TRUE(f.contains(p + 1, n - 1));
  EXPECT_FALSE(f.contains(p + 1, n));
  EXPECT_FALSE(f.contains(bytes.data(), 1));

  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 512) sum += p[i];  // every page resident
  const int64_t before = resident_pages();
  f.release(p + 100, n - 200);  // all but the first and last (partial) pages
  const int64_t after = resident_pages();
  const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  // Nearly all of its 8192 pages (statm counts the whole process, which may touch a few meanwhile).
  EXPECT_GE(before - after, static_cast<int64_t>(n) / page - 64) << "pages resident before " << before;
  EXPECT_EQ(0, std::memcmp(p, bytes.data(), n)) << "the bytes read back from the file";
  EXPECT_GT(sum, 0u);
  f.release(bytes.data(), 16);  // not in the map: nothing happens
  EXPECT_EQ(bytes[7], static_cast<char>((7 * 131) >> 7));
}

}  // namespace
}  // namespace tern
