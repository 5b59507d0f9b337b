// One tern_output and the memory it points into. The engine's RequestOutput
// (news about all n samples at once) becomes one record per sample that has
// news; the last record of the request's last event is marked finished.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tern/tern.h"

namespace tern::capi {

class OutputRecord {
 public:
  // The tern_output over this record's memory; valid while the record lives and is not moved.
  const tern_output* view();

  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  bool has_logprobs = false;
  std::vector<float> logprobs;
  int32_t num_top = 0;
  std::vector<int32_t> top_ids;  // num_tokens * num_top
  std::vector<float> top_logprobs;
  tern_finish_reason finish = TERN_FINISH_NONE;
  std::string stop_reason;
  tern_usage usage{};
  bool request_finished = false;
  tern_status status = TERN_OK;
  std::string error;

 private:
  tern_output view_{};
};

// The records of one engine event, in sample order. `num_top` is the request's logprobs (0 when none).
std::vector<OutputRecord> split_output(const RequestOutput& event, int32_t num_top);

}  // namespace tern::capi
