// The engine step and request lifecycle.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include <spdlog/spdlog.h>

namespace tern {
namespace {

double ms_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

}  // namespace

Engine::Engine(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer, const EngineConfig& config)
    : runner_(std::move(runner)),
      tokenizer_(tokenizer),
      config_(config),
      allocator_(static_cast<int32_t>(runner_->num_kv_blocks()), static_cast<int32_t>(runner_->block_size()),
                 config.scheduler.enable_prefix_caching),
      scheduler_(config.scheduler, allocator_),
      overlap_(config.overlap && runner_->overlaps()) {}

Engine::~Engine() {
  if (in_flight_) {  // the device may still write what the step names
    StepOutput ignored;
    (void)runner_->collect(ignored);
  }
  // Sequences hold BlockTables bound to allocator_: end them before it goes.
  requests_.clear();
  retired_.clear();
}

Status Engine::validate(const Request& r) const {
  if (r.id.empty()) return invalid_argument("request id is empty");
  if (requests_.count(r.id)) return invalid_argument("request id '" + r.id + "' is already in use");
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  int64_t len = static_cast<int64_t>(r.prompt.size());
  if (len >= config_.max_model_len) {
    return invalid_argument("This model's maximum context length is " + std::to_string(config_.max_model_len) +
                            " tokens. However, your request has " + std::to_string(len) +
                            " input tokens. Please reduce the length of the input messages.");
  }
  for (int32_t id : r.prompt)
    if (id < 0 || id >= runner_->vocab_size())
      return invalid_argument("token id " + std::to_string(id) + " is out of vocabulary (size " +
                              std::to_string(runner_->vocab_size()) + ")");
  if (r.n < 1 || r.n > 128) return invalid_argument("n must be in [1, 128], got " + std::to_string(r.n));
  TERN_RETURN_IF_ERROR(r.params.validate(runner_->vocab_size(), config_.max_logprobs));
  if (r.params.prompt_logprobs && !runner_->scores_prompts()) {
    return invalid_argument("prompt_logprobs (and echo with logprobs) are computed on the CPU runner only "
                            "(--device cpu); this server's runner does not score prompts");
  }
  int64_t most = std::min(config_.max_model_len, len + r.params.max_tokens);
  int64_t blocks = (most + runner_->block_size() - 1) / runner_->block_size();
  if (blocks > runner_->num_kv_blocks()) {
    return resource_exhausted("the request needs up to " + std::to_string(most) + " tokens of KV cache (" +
                              std::to_string(blocks) + " blocks) but the cache holds " +
                              std::to_string(runner_->num_kv_blocks()) + " blocks; lower max_tokens");
  }
  return Status::ok();
}

Status Engine::add_request(Request request, std::shared_ptr<RequestStream> stream) {
  TERN_RETURN_IF_ERROR(validate(request));
  auto state = std::make_unique<RequestState>();
  state->request = std::move(request);
  state->stream = std::move(stream);
  state->eos_ids = config_.eos_ids;
  state->stop_ids = config_.eos_ids;
  for (int32_t id : state->request.params.stop_token_ids) state->stop_ids.push_back(id);
  for (int i = 0; i < state->request.n; ++i) {
    state->sequences.push_back(
        std::make_unique<Sequence>(*state, i, BlockTable(allocator_, state->request.cache_salt), tokenizer_));
  }
  // With n > 1 only the first sequence computes the prompt; the rest fork from it.
  scheduler_.add_waiting(state->sequences[0].get());
  stats_.prompt_tokens_total += static_cast<int64_t>(state->request.prompt.size());
  std::string id = state->request.id;
  requests_.emplace(std::move(id), std::move(state));
  return Status::ok();
}

void Engine::finish_sequence(Sequence& seq, FinishReason reason) {
  if (!seq.finish_reason()) seq.finish(reason);
  scheduler_.remove(&seq);
  seq.blocks().release();
  switch (*seq.finish_reason()) {
    case FinishReason::kStop: ++stats_.finished_stop; break;
    case FinishReason::kLength: ++stats_.finished_length; break;
    case FinishReason::kAbort: ++stats_.finished_abort; break;
    case FinishReason::kError: ++stats_.finished_error; break;
  }
}

void Engine::abort_request(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestState& state = *it->second;
  for (auto& seq : state.sequences)
    if (seq->status != SequenceStatus::kFinished) finish_sequence(*seq, FinishReason::kAbort);
  if (state.touched) {
    std::erase(touched_, &state);
    state.touched = false;
  }
  publish(state);
}

void Engine::abort_all(FinishReason reason, const Status& error) {
  std::vector<RequestState*> states;
  for (auto& [id, state] : requests_) states.push_back(state.get());
  for (RequestState* state : states) {
    state->error = error;
    for (auto& seq : state->sequences)
      if (seq->status != SequenceStatus::kFinished) finish_sequence(*seq, reason);
    publish(*state);
  }
}

// One step: schedule, run, append the picked tokens, publish. With overlap
// the step is launched first and the step before it (in flight since the
// last call) is collected while it runs; this step then stays in flight,
// unless some row's logits come to the host, which must be collected now.
void Engine::step() {
  auto start = std::chrono::steady_clock::now();
  propose_drafts();
  StepPlan plan = scheduler_.schedule();
  if (!drafted_.empty()) settle_drafts(plan);
  if (plan.empty()) {
    if (in_flight_) complete_in_flight();
    return;
  }
  prepare(plan, start);
  if (!overlap_) {
    const Status st = runner_->execute(plan, output_);
    launched(plan);
    complete(plan, st);
  } else {
    const Status st = runner_->launch(plan);
    const bool blocks_next = launched(plan) && st.is_ok();  // bookkept even when it failed, as complete undoes it
    if (in_flight_) {
      complete_in_flight();
      if (st.is_ok()) ++stats_.num_overlapped_steps;
    }
    if (!st.is_ok()) {
      complete(plan, st);
    } else if (!plan.all_picked_by_runner() || blocks_next) {
      complete(plan, runner_->collect(output_));
    } else {
      in_flight_ = std::move(plan);
    }
  }
  ++stats_.num_steps;
  stats_.last_step_ms = ms_between(start, std::chrono::steady_clock::now());
  const StepPlan& shown = in_flight_ ? *in_flight_ : plan;
  stats_.last_step_tokens = shown.num_tokens();
  stats_.last_step_seqs = static_cast<int64_t>(shown.chunks.size());
  if (spdlog::should_log(spdlog::level::debug)) log_step(shown);
}

// One line per step at --log-level debug: the batch's make-up and the
// engine thread's time in step() (with overlap, mostly the wait for the
// step before this one).
void Engine::log_step(const StepPlan& plan) const {
  int64_t prompt_chunks = 0, prompt_tokens = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.num_tokens == 1 && c.seq->num_output_tokens() > 0) continue;
    ++prompt_chunks;
    prompt_tokens += c.num_tokens;
  }
  spdlog::debug("step {}: {} tokens, {} decodes, {} prompt chunks of {} tokens, {} running, {} waiting, {:.2f} ms",
                stats_.num_steps, plan.num_tokens(), static_cast<int64_t>(plan.chunks.size()) - prompt_chunks,
                prompt_chunks, prompt_tokens, scheduler_.num_running(), scheduler_.num_waiting(),
                stats_.last_step_ms);
}

// How each row is picked: the runner's argmax, the runner's sampler (its
// parameters planned here, which draws the row's key) or the host; and
// where a chunk's token is still on the device.
void Engine::prepare(StepPlan& plan, SteadyTime now) {
  const bool device_sampling = runner_->samples_on_device();
  for (ScheduledChunk& c : plan.chunks) {
    Sequence& seq = *c.seq;
    RequestState& r = seq.request();
    if (!r.first_scheduled) r.first_scheduled = now;
    if (seq.pending_feedable()) c.feedback_row = seq.pending_row();  // the chunk is that one token
    if (wants_prompt_logits(seq) || c.num_drafts > 0) {
      c.all_logits = true;
      c.start_pos = seq.num_computed();
    }
    // A chunk with drafts: the runner may pick every row of a plain greedy sequence.
    if (c.num_drafts > 0) {
      c.device_greedy = runner_->picks_scored_rows() && device_greedy_ok(seq);
      continue;
    }
    // A scored chunk's rows all go to the host, where its pick is made too.
    if (!c.want_logits || r.request.params.max_tokens == 0 || c.all_logits) continue;
    c.device_greedy = device_greedy_ok(seq);
    if (c.device_greedy || !device_sampling || !device_sample_ok(seq)) continue;
    c.device_sample = true;
    SamplingContext ctx{seq.prompt(), seq.output(), r.stop_ids};
    plan.samples.push_back(
        seq.sampler().plan_device(ctx, static_cast<size_t>(runner_->vocab_size()), plan.adjustments));
  }
}

// The plan's tokens count as computed from launch on; the runner's picks
// are pending until the step is collected. Returns whether some sequence
// can go on only once the host has its new token (Feed::kBlocked): then
// the step is collected at once rather than left in flight, so that
// sequence is in the next step too.
bool Engine::launched(const StepPlan& plan) {
  int32_t row = 0;
  bool blocked = false;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = *c.seq;
    seq.set_num_computed(seq.num_computed() + c.num_tokens);
    ++seq.request().in_flight;
    if (!c.want_logits) continue;
    // A chunk with drafts is collected before the next step is planned: its picks are never fed.
    if ((c.device_greedy || c.device_sample) && c.num_drafts == 0) {
      if (seq.draft_pause > 0) --seq.draft_pause;
      const Feed f = overlap_ ? feed_of(seq) : Feed::kBlocked;
      blocked = blocked || f == Feed::kBlocked;
      seq.push_pending(row, f == Feed::kYes);
    }
    ++row;
  }
  return blocked;
}

// Whether the next step may compute the token just picked for `seq` before
// the host has seen it: yes when planning that step needs only the number
// of the sequence's tokens, not their values (no penalties; min_tokens
// already met); kLast when the token is its last by length (nothing to
// feed); kBlocked otherwise.
Engine::Feed Engine::feed_of(const Sequence& seq) const {
  const SamplingParams& p = seq.request().request.params;
  const int64_t ahead = seq.num_pending() + 1;  // tokens picked but not appended, with the new one
  if (seq.num_output_tokens() + ahead >= p.max_tokens || seq.num_tokens() + ahead >= config_.max_model_len) {
    return Feed::kLast;
  }
  // Its next step may carry drafts after the token, unless a lookup found none lately.
  if (may_draft() && seq.draft_pause == 0) return Feed::kBlocked;
  const bool by_count = seq.num_output_tokens() >= p.min_tokens && p.repetition_penalty == 1.0 &&
                        p.presence_penalty == 0.0 && p.frequency_penalty == 0.0;
  return by_count ? Feed::kYes : Feed::kBlocked;
}

void Engine::complete_in_flight() {
  StepPlan plan = std::move(*in_flight_);
  in_flight_.reset();
  complete(plan, runner_->collect(output_));
}

// The step's results (or its error) into the sequences, then the news out.
void Engine::complete(const StepPlan& plan, const Status& status) {
  take_drafts(plan);
  if (status.is_ok()) {
    postprocess(plan);
  } else {
    fail_plan(plan, status);
  }
  for (const ScheduledChunk& c : plan.chunks) --c.seq->request().in_flight;
  for (RequestState* r : touched_) {
    r->touched = false;
    publish(*r);  // may retire *r
  }
  touched_.clear();
  std::erase_if(retired_, [](const std::unique_ptr<RequestState>& r) { return r->in_flight == 0; });
}

// Plain greedy (no penalties, bias, logprobs or min_tokens, a single sample)
// needs only the argmax, which a GPU runner computes without shipping logits.
bool Engine::device_greedy_ok(const Sequence& seq) {
  const Request& r = seq.request().request;
  const SamplingParams& p = r.params;
  return r.n == 1 && p.greedy() && p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 &&
         p.frequency_penalty == 0.0 && p.logit_bias.empty() && !p.logprobs &&
         seq.num_output_tokens() >= p.min_tokens;
}

// Anything but logprobs and the first step of an n > 1 request (whose row
// seeds the siblings' first tokens) can be sampled by the runner.
bool Engine::device_sample_ok(const Sequence& seq) {
  const Request& r = seq.request().request;
  return !r.params.logprobs && !(r.n > 1 && !seq.request().forked);
}

// The first sequence of a request with prompt_logprobs whose prompt is not
// scored yet: its chunk's rows all come back.
bool Engine::wants_prompt_logits(const Sequence& seq) {
  const RequestState& r = seq.request();
  return r.request.params.prompt_logprobs && seq.index() == 0 &&
         static_cast<int64_t>(r.prompt_logprobs.size()) + 1 < seq.num_prompt_tokens();
}

// Row i of an all_logits chunk scores the token after position start_pos + i;
// rows past the prompt, or already scored before a preemption, are skipped.
void Engine::score_prompt(const ScheduledChunk& c, std::span<const float> rows) {
  Sequence& seq = *c.seq;
  RequestState& r = seq.request();
  const size_t vocab = static_cast<size_t>(runner_->vocab_size());
  const int top = *r.request.params.prompt_logprobs;
  for (int64_t i = 0; i < c.num_tokens; ++i) {
    const int64_t next = c.start_pos + i + 1;
    if (next >= seq.num_prompt_tokens()) break;
    if (next != static_cast<int64_t>(r.prompt_logprobs.size()) + 1) continue;
    r.prompt_logprobs.push_back(score_token(rows.subspan(static_cast<size_t>(i) * vocab, vocab),
                                            seq.prompt()[static_cast<size_t>(next)], top));
  }
  mark_touched(r);
}

void Engine::postprocess(const StepPlan& plan) {
  const size_t vocab = static_cast<size_t>(runner_->vocab_size());
  size_t want = 0, row = 0, prompt_row = 0, pick_row = 0;
  for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
    const ScheduledChunk& c = plan.chunks[ci];
    Sequence& seq = *c.seq;
    if (c.num_drafts > 0) {  // every row picked by the runner, or scored with the last also a host row
      const size_t rows = static_cast<size_t>(c.num_tokens);
      ++want;
      RowsToVerify v;
      if (c.device_greedy) {
        v.picks = std::span<const int32_t>(output_.scored_picks).subspan(pick_row, rows);
        pick_row += rows;
      } else {
        v.logits = std::span<const float>(output_.prompt_logits).subspan(prompt_row * vocab, rows * vocab);
        prompt_row += rows;
        ++row;
      }
      if (seq.status != SequenceStatus::kFinished) verify_drafts(seq, step_drafts_[ci], v);
      continue;
    }
    if (c.all_logits) {
      const size_t rows = static_cast<size_t>(c.num_tokens);
      if (seq.status != SequenceStatus::kFinished) {
        score_prompt(c, std::span<const float>(output_.prompt_logits).subspan(prompt_row * vocab, rows * vocab));
      }
      prompt_row += rows;
    }
    const int32_t picked = c.want_logits ? output_.tokens[want++] : -1;
    if (c.want_logits && (c.device_greedy || c.device_sample)) seq.pop_pending();
    // Ended (a stop in the step before, an abort) while this step ran: its
    // token is dropped. A preempted sequence still takes it.
    if (seq.status == SequenceStatus::kFinished) {
      row += picked < 0 && c.want_logits ? 1 : 0;
      continue;
    }
    publish_computed_blocks(seq);
    if (!c.want_logits) continue;
    RequestState& r = seq.request();
    if (r.request.params.max_tokens == 0) {  // the prompt alone (its logprobs): nothing to sample
      row += picked < 0 ? 1 : 0;
      for (auto& s : r.sequences)
        if (s->status != SequenceStatus::kFinished) finish_sequence(*s, FinishReason::kLength);
      mark_touched(r);
      continue;
    }
    if (picked >= 0) {
      append_picked(seq, picked);
      continue;
    }
    std::span<const float> logits(output_.logits.data() + row * vocab, vocab);
    ++row;
    if (r.request.n > 1 && !r.forked) fork_siblings(seq, logits);
    sample_into(seq, logits);
  }
}

// Speculative decoding (engine/speculation.h).

// Steps of a sequence that may overlap after a lookup that found nothing, before the next lookup.
constexpr int64_t kDraftPauseSteps = 4;

bool Engine::may_draft() const {
  return config_.speculative.enabled() && scheduler_.num_running() <= config_.speculative.max_seqs;
}

// Drafts for each decoding sequence whose last tokens occurred before, as
// many as fit its max_tokens and the model's length with one token more
// (every draft accepted, the last row adds its own).
void Engine::propose_drafts() {
  drafted_.clear();
  if (!may_draft()) return;
  const SpeculativeConfig& spec = config_.speculative;
  for (Sequence* seq : scheduler_.running_sequences()) {
    if (seq->num_pending() > 0 || seq->num_uncomputed() != 1 || seq->num_output_tokens() == 0) continue;
    const SamplingParams& p = seq->request().request.params;
    const int64_t room =
        std::min(p.max_tokens - seq->num_output_tokens(), config_.max_model_len - seq->num_tokens()) - 1;
    if (seq->draft_limit == 0) seq->draft_limit = spec.num_tokens;
    const std::vector<int32_t> drafts =
        propose_ngram_drafts(seq->tokens(), spec, std::min(seq->draft_limit, room));
    if (drafts.empty()) {
      // Nothing repeats here: the sequence's next few steps may overlap as without speculation.
      seq->draft_pause = kDraftPauseSteps;
      continue;
    }
    seq->add_drafts(drafts);
    drafted_.push_back(seq);
  }
}

// A drafted sequence's chunk starts at its last real token; a step whose
// budget cut it keeps the drafts it holds, and a sequence left out of the
// step (budget, preemption) gives its drafts up.
void Engine::settle_drafts(StepPlan& plan) {
  for (Sequence* seq : drafted_) {
    const auto c = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                                [seq](const ScheduledChunk& chunk) { return chunk.seq == seq; });
    const int64_t kept = c == plan.chunks.end() ? 0 : std::min(seq->num_drafts(), c->num_tokens - 1);
    seq->drop_drafts(seq->num_drafts() - kept);
    if (c == plan.chunks.end()) continue;
    c->num_drafts = kept;
    c->want_logits = true;
    stats_.spec_drafts += kept > 0 ? 1 : 0;
    stats_.spec_draft_tokens += kept;
  }
  drafted_.clear();
}

// Before a step's results are read (or its failure handled): the drafts
// leave the sequences' tokens, kept per chunk for verify_drafts.
void Engine::take_drafts(const StepPlan& plan) {
  if (!config_.speculative.enabled()) return;
  step_drafts_.resize(plan.chunks.size());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    step_drafts_[i].clear();
    if (plan.chunks[i].num_drafts > 0) step_drafts_[i] = plan.chunks[i].seq->take_drafts();
  }
}

// Row i of the chunk holds the logits after the last real token and the
// first i drafts. Each row is sampled as a step without drafts would sample
// it (penalties, seeds and stop rules as usual); draft i stays while it
// equals the token row i gave, and its K/V, computed in the step, with it.
void Engine::verify_drafts(Sequence& seq, std::span<const int32_t> drafts, const RowsToVerify& rows) {
  const size_t vocab = static_cast<size_t>(runner_->vocab_size());
  const auto n = static_cast<int64_t>(drafts.size());
  seq.set_num_computed(seq.num_computed() - n);  // the last real token's K/V alone is known good yet
  publish_computed_blocks(seq);
  int64_t accepted = 0;
  for (int64_t i = 0; i <= n; ++i) {
    if (rows.picks.empty()) {
      sample_into(seq, rows.logits.subspan(static_cast<size_t>(i) * vocab, vocab));
    } else {
      append_picked(seq, rows.picks[static_cast<size_t>(i)]);
    }
    if (seq.status == SequenceStatus::kFinished || i == n || seq.tokens().back() != drafts[static_cast<size_t>(i)]) {
      break;
    }
    seq.set_num_computed(seq.num_computed() + 1);
    ++accepted;
  }
  stats_.spec_accepted_tokens += accepted;
  // Each draft costs its row's compute, kept or not: after a step that rejected one, the next verifies at most
  // twice the drafts this one kept (at least one); after one that kept all, up to twice as many as it had.
  seq.draft_limit = std::min<int64_t>(config_.speculative.num_tokens,
                                      accepted < n ? std::max<int64_t>(1, 2 * accepted)
                                                   : std::max(seq.draft_limit, 2 * n));
  if (seq.status != SequenceStatus::kFinished) seq.blocks().truncate(seq.num_computed());
}

void Engine::fork_siblings(Sequence& first, std::span<const float> row) {
  RequestState& r = first.request();
  r.forked = true;
  for (size_t i = 1; i < r.sequences.size(); ++i) {
    Sequence& sib = *r.sequences[i];
    sib.copy_prefill_from(first);
    scheduler_.add_running(&sib);
    sample_into(sib, row);
  }
}

void Engine::sample_into(Sequence& seq, std::span<const float> row) {
  RequestState& r = seq.request();
  row_scratch_.assign(row.begin(), row.end());
  SamplingContext ctx{seq.prompt(), seq.output(), r.stop_ids};
  append_token(seq, seq.sampler().sample(row_scratch_, ctx));
}

// A token the runner picked: no logprob to report.
void Engine::append_picked(Sequence& seq, int32_t token) {
  SampleResult s;
  s.token = token;
  s.logprob = std::numeric_limits<float>::quiet_NaN();
  append_token(seq, s);
}

// The full blocks among the sequence's computed tokens to the prefix cache.
void Engine::publish_computed_blocks(Sequence& seq) {
  if (!config_.scheduler.enable_prefix_caching) return;
  const int64_t known = std::min(seq.num_computed(), seq.num_tokens());
  seq.blocks().register_full_blocks(std::span<const int32_t>(seq.tokens()).first(static_cast<size_t>(known)));
}

void Engine::append_token(Sequence& seq, const SampleResult& sample) {
  RequestState& r = seq.request();
  auto finish = seq.append(sample, config_.max_model_len);
  ++stats_.generation_tokens_total;
  if (!r.first_token) r.first_token = std::chrono::steady_clock::now();
  if (finish) finish_sequence(seq, *finish);
  mark_touched(r);
}

void Engine::mark_touched(RequestState& r) {
  if (r.touched) return;
  r.touched = true;
  touched_.push_back(&r);
}

void Engine::fail_plan(const StepPlan& plan, const Status& error) {
  for (const ScheduledChunk& c : plan.chunks) {
    RequestState& r = c.seq->request();
    if (r.finished()) continue;  // ended and published already
    r.error = error;
    for (auto& seq : r.sequences)
      if (seq->status != SequenceStatus::kFinished) finish_sequence(*seq, FinishReason::kError);
    mark_touched(r);
  }
}

void Engine::publish(RequestState& state) {
  auto now = std::chrono::steady_clock::now();
  RequestOutput out;
  out.num_prompt_tokens = static_cast<int64_t>(state.request.prompt.size());
  out.num_cached_tokens = state.num_cached_tokens;
  if (state.request.params.prompt_logprobs && !state.prompt_logprobs_sent &&
      static_cast<int64_t>(state.prompt_logprobs.size()) + 1 >= out.num_prompt_tokens) {
    out.prompt_logprobs = std::move(state.prompt_logprobs);
    state.prompt_logprobs_sent = true;
  }
  out.queue_ms = state.first_scheduled ? ms_between(state.request.arrival, *state.first_scheduled) : 0;
  out.ttft_ms = state.first_token ? ms_between(state.request.arrival, *state.first_token) : 0;
  out.elapsed_ms = ms_between(state.request.arrival, now);
  for (auto& seq : state.sequences) {
    out.num_output_tokens += seq->num_output_tokens();
    SequenceOutput so;
    seq->take_output(so);
    if (!so.token_ids.empty() || !so.text.empty() || so.finish) out.sequences.push_back(std::move(so));
  }
  out.finished = state.finished();
  out.error = state.error;
  if (state.stream) state.stream->push(std::move(out));
  if (!state.finished()) return;
  // Frees the sequences (their blocks are back already), or, while a
  // launched step still names them, keeps them until it is collected.
  auto it = requests_.find(state.request.id);
  if (it == requests_.end()) return;
  if (state.in_flight > 0) retired_.push_back(std::move(it->second));
  requests_.erase(it);
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.num_total_blocks = allocator_.num_blocks();
  s.num_free_blocks = allocator_.num_available();
  s.kv_cache_usage = allocator_.usage();
  s.num_preemptions = scheduler_.num_preemptions();
  s.prefix_cache_queries = allocator_.prefix_cache_queries();
  s.prefix_cache_hits = allocator_.prefix_cache_hits();
  return s;
}

}  // namespace tern
