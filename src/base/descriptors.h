// Room for a server's open files: the soft limit on open files raised toward
// what it will need, and the descriptor table grown to that size at start-up.
//
// Linux grows a process's descriptor table by doubling it when a new
// descriptor does not fit. In a multi-threaded process each growth waits for
// an RCU grace period (synchronize_rcu, tens of milliseconds on a busy
// machine), and the thread in accept() waits with it: a burst of new
// connections would stall there, every connection behind it too. Grown once
// before the threads start, the table never grows under load.
#pragma once

#include <cstdint>

namespace tern {

struct DescriptorRoom {
  int64_t soft_limit_before = 0;  // RLIMIT_NOFILE's soft limit on entry (-1: unlimited)
  int64_t soft_limit = 0;         // and after (raised toward `wanted`, never past the hard limit)
  int64_t table_size = 0;         // descriptor slots the table holds now (/proc/self/status FDSize; 0: unknown)
};

// The most descriptor slots grown up front (about 8 bytes each); past them the table grows on demand.
inline constexpr int64_t kMaxReservedDescriptors = int64_t{1} << 20;

// Raises the soft limit on open files to `wanted` where the hard limit allows
// (never lowers it) and grows the descriptor table to hold descriptors up to
// min(wanted, soft limit, kMaxReservedDescriptors) - 1. Failures leave things
// as they were.
DescriptorRoom reserve_descriptors(int64_t wanted);

// The descriptor slots this process's table holds (FDSize in /proc/self/status; 0 where unknown).
int64_t descriptor_table_size();

}  // namespace tern
