// A CPU runner that claims to sample on its device and to overlap steps, for
// the engine's tests of the protocol a GPU runner speaks (Runner::launch,
// collect, feedback rows, device sampling, scored rows). Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "engine/sampler.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/paged_kv_pool.h"
#include "runners/sequence_chunk.h"

namespace tern::testing {

// A CPU runner that claims to sample on its device: the rows the engine
// hands it (StepPlan::samples) are finished here as a device would: the
// row's adjustments applied by phase, then, for greedy rows, the argmax
// (other rows take the argmax too: this checks the plumbing, not a draw).
// With `overlap` it also overlaps steps as a GPU runner does: launch()
// computes the step at once from what the sequences hold then, taking a
// fed chunk's token from its own picks of the step before; collect()
// hands the oldest result out later. With `scores`, it returns every row
// of an all_logits chunk as the CUDA runner does (scores_prompts): their
// argmax for a device_greedy chunk (a greedy sequence's drafts,
// picks_scored_rows), their logits otherwise.
class DeviceSamplingCpuRunner final : public Runner {
 public:
  DeviceSamplingCpuRunner(Ernie45Model& model, int64_t num_blocks, bool overlap = false, bool scores = false)
      : model_(model),
        pool_(model.config().num_layers, model.config().kv_dim(), num_blocks, 16),
        overlap_(overlap),
        scores_(scores) {}

  Status execute(const StepPlan& plan, StepOutput& out) override {
    TERN_RETURN_IF_ERROR(launch(plan));
    return collect(out);
  }

  Status launch(const StepPlan& plan) override {
    if (++launches == fail_launch) return internal_error("launch " + std::to_string(launches) + " failed");
    EXPECT_LT(results_.size(), 2u) << "more than two steps launched and not collected";
    if (!results_.empty()) {
      EXPECT_TRUE(std::all_of(results_.back().tokens.begin(), results_.back().tokens.end(),
                              [](int32_t t) { return t >= 0; }))
          << "a step with host rows was still in flight at the next launch";
    }
    for (const BlockCopy& c : plan.copies) pool_.copy_block(c.src, c.dst);
    std::vector<SequenceChunk> chunks;
    fed_.assign(plan.chunks.size(), 0);
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      const ScheduledChunk& sc = plan.chunks[i];
      if (sc.feedback_row >= 0) {
        EXPECT_TRUE(overlap_) << "a fed chunk without overlap";
        EXPECT_EQ(sc.num_tokens, 1);
        EXPECT_LT(static_cast<size_t>(sc.feedback_row), last_picks_.size());
        if (static_cast<size_t>(sc.feedback_row) >= last_picks_.size() || last_picks_[sc.feedback_row] < 0)
          return internal_error("fed chunk names a row the step before did not pick");
        fed_[i] = last_picks_[static_cast<size_t>(sc.feedback_row)];
        ++fed_chunks;
      }
      chunks.push_back(sequence_chunk(sc, std::span<const int32_t>(&fed_[i], 1)));
    }
    const auto V = static_cast<size_t>(vocab_size());
    size_t rows = 0;
    for (const ScheduledChunk& c : plan.chunks) rows += c.all_logits ? c.num_tokens : c.want_logits ? 1 : 0;
    std::vector<float> all(rows * V);
    TERN_RETURN_IF_ERROR(model_.forward_batch(chunks, pool_, all));
    StepOutput out;
    size_t row = 0, sample = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.all_logits) {
        EXPECT_TRUE(scores_) << "an all_logits chunk for a runner that does not score rows";
        const auto first = all.begin() + static_cast<long>(row * V);
        row += static_cast<size_t>(c.num_tokens);
        if (!c.device_greedy) {
          out.prompt_logits.insert(out.prompt_logits.end(), first, first + c.num_tokens * static_cast<long>(V));
          if (!c.want_logits) continue;
          out.tokens.push_back(-1);
          out.logits.insert(out.logits.end(), first + (c.num_tokens - 1) * static_cast<long>(V),
                            first + c.num_tokens * static_cast<long>(V));
          ++host_rows;
          continue;
        }
        for (int64_t i = 0; i < c.num_tokens; ++i) {
          out.scored_picks.push_back(argmax(std::span<const float>(&*(first + i * static_cast<long>(V)), V)));
          ++scored_picks;
        }
        if (c.want_logits) out.tokens.push_back(out.scored_picks.back());
        continue;
      }
      if (!c.want_logits) continue;
      std::vector<float> logits(all.begin() + static_cast<long>(row * V), all.begin() + static_cast<long>((row + 1) * V));
      ++row;
      const SamplingParams& p = c.seq->request().request.params;
      if (c.device_greedy) {
        out.tokens.push_back(argmax(logits));
        ++argmax_rows;
      } else if (c.device_sample) {
        EXPECT_FALSE(p.logprobs.has_value()) << "a logprobs row went to the device";
        const DeviceSampling& d = plan.samples.at(sample++);
        apply_adjustments(logits, std::span<const LogitAdjust>(plan.adjustments)
                                      .subspan(d.adjust_begin, d.adjust_end - d.adjust_begin));
        out.tokens.push_back(argmax(logits));
        ++sampled_rows;
      } else {
        out.tokens.push_back(-1);
        out.logits.insert(out.logits.end(), logits.begin(), logits.end());
        ++host_rows;
      }
    }
    EXPECT_EQ(sample, plan.samples.size());
    last_picks_ = out.tokens;
    results_.push_back(std::move(out));
    return Status::ok();
  }

  Status collect(StepOutput& out) override {
    if (results_.empty()) return internal_error("collect without a launched step");
    out = std::move(results_.front());
    results_.pop_front();
    return Status::ok();
  }

  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int64_t num_kv_blocks() const override { return pool_.num_blocks(); }
  int64_t block_size() const override { return pool_.block_size(); }
  bool samples_on_device() const override { return true; }
  bool overlaps() const override { return overlap_; }
  bool scores_prompts() const override { return scores_; }
  bool picks_scored_rows() const override { return scores_; }

  int argmax_rows = 0, sampled_rows = 0, host_rows = 0, fed_chunks = 0, scored_picks = 0;
  int launches = 0, fail_launch = -1;  // launch number fail_launch returns an error

 private:
  Ernie45Model& model_;
  PagedKvPool pool_;
  bool overlap_;
  bool scores_;
  std::deque<StepOutput> results_;
  std::vector<int32_t> last_picks_;
  std::vector<int32_t> fed_;
};

}  // namespace tern::testing
