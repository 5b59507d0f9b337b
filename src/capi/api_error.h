// The C API's errors: a tern_status for every call and the thread's last
// message (tern_last_error), mapped from the engine's Status in one place.
#pragma once

#include <string>

#include "base/status.h"
#include "tern/tern.h"

namespace tern::capi {

// Records `status`'s message as this thread's last error and returns its code.
tern_status fail(const Status& status);
tern_status fail(tern_status code, std::string message);
// Clears this thread's last error and returns TERN_OK.
tern_status succeed();
const char* last_error();

tern_status status_code(ErrorCode code);

}  // namespace tern::capi
