#include "base/thread_name.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace tern {

void name_this_thread(const std::string& name) {
#if defined(__linux__)
  const std::string cut = name.substr(0, 15);
  prctl(PR_SET_NAME, cut.c_str(), 0, 0, 0);
#else
  (void)name;
#endif
}

}  // namespace tern
