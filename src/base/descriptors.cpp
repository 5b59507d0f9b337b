#include "base/descriptors.h"

#include <algorithm>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace tern {

int64_t descriptor_table_size() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("FDSize:", 0) == 0) return std::stoll(line.substr(7));
  }
  return 0;
}

DescriptorRoom reserve_descriptors(int64_t wanted) {
  DescriptorRoom room;
#if defined(__linux__)
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return room;
  const auto as_count = [](rlim_t v) { return v == RLIM_INFINITY ? int64_t{-1} : static_cast<int64_t>(v); };
  room.soft_limit_before = as_count(lim.rlim_cur);
  if (lim.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(lim.rlim_cur) < wanted) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(wanted)
                                                    : std::min(lim.rlim_max, static_cast<rlim_t>(wanted));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  room.soft_limit = as_count(lim.rlim_cur);
  const int64_t top = (lim.rlim_cur == RLIM_INFINITY ? wanted : std::min<int64_t>(wanted, as_count(lim.rlim_cur))) - 1;
  // A duplicate at the highest descriptor makes the kernel grow the table to hold it; closing it
  // leaves the table as grown (tables never shrink).
  const int base = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (base >= 0) {
    if (top > base) {
      const int high = fcntl(base, F_DUPFD_CLOEXEC, static_cast<int>(std::min(top, kMaxReservedDescriptors - 1)));
      if (high >= 0) close(high);
    }
    close(base);
  }
#endif
  room.table_size = descriptor_table_size();
  return room;
}

}  // namespace tern
