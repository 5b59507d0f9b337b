// SHA-256 of a file (OpenSSL's libcrypto), to check LFS blobs against their
// ETag, which the hub sets to the content's sha256.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace tern::hub {

// Lower-case hex digest of the file's bytes; kIo when it cannot be read.
Result<std::string> sha256_file(const std::string& path);

// Lower-case hex digest of `bytes`.
std::string sha256_hex(std::string_view bytes);

}  // namespace tern::hub
