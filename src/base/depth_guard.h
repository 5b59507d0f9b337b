// DepthGuard: counts one level of nesting for as long as it lives, so a
// recursive parser or interpreter can bound its depth (and fail with an
// error, not a stack overflow) on hostile input.
#pragma once

#include <cstdint>

namespace tern {

class DepthGuard {
 public:
  explicit DepthGuard(uint32_t& depth) : depth_(depth) { ++depth_; }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  uint32_t& depth_;
};

}  // namespace tern
