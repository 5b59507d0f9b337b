// Names the calling thread as `top -H`, ps, perf, gdb and /proc show it
// (Linux keeps 15 bytes; longer names are cut there). Elsewhere: nothing.
#pragma once

#include <string>

namespace tern {

void name_this_thread(const std::string& name);

}  // namespace tern
