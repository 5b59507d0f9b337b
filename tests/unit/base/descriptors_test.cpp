// reserve_descriptors: the soft limit on open files goes up to what is wanted
// (never past the hard limit, never down), and the descriptor table is grown
// to hold that many descriptors at once.
#include "base/descriptors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace tern {
namespace {

rlimit open_file_limit() {
  rlimit lim{};
  EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  return lim;
}

TEST(Descriptors, GrowsTheTableToWhatIsWanted) {
  const rlimit before = open_file_limit();
  const int64_t wanted = before.rlim_max == RLIM_INFINITY ? 3000 : std::min<int64_t>(3000, before.rlim_max);
  const DescriptorRoom room = reserve_descriptors(wanted);
  EXPECT_GE(room.soft_limit, wanted);
  EXPECT_EQ(static_cast<int64_t>(open_file_limit().rlim_cur), room.soft_limit);
  EXPECT_GE(room.table_size, wanted);  // tables grow in powers of two
  EXPECT_EQ(room.table_size, descriptor_table_size());
}

TEST(Descriptors, NeverLowersTheSoftLimit) {
  reserve_descriptors(2048);
  const rlimit before = open_file_limit();
  const DescriptorRoom room = reserve_descriptors(16);
  EXPECT_EQ(open_file_limit().rlim_cur, before.rlim_cur);
  EXPECT_EQ(room.soft_limit_before, room.soft_limit);
}

TEST(Descriptors, StopsAtTheHardLimit) {
  // In a child: lowering the hard limit cannot be undone.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit lim{512, 1500};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(10);
    const DescriptorRoom room = reserve_descriptors(1 << 20);
    if (room.soft_limit_before != 512) _exit(11);
    if (room.soft_limit != 1500) _exit(12);
    if (room.table_size < 1500 - 64) _exit(13);  // slots up to descriptor 1499 (a power of two: 2048)
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace tern
