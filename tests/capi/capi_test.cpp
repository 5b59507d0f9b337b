// The C API (include/tern/tern.h) as a program that embeds it sees it: linked
// against the shared libtern only. Behaviour against the HF goldens of the
// tiny model (tokens, chat template, greedy continuations), batching and
// threads, callbacks, cancellation and lifetimes, and every error path: each
// returns its code and a message naming what was wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tern/tern.h"

namespace {

const std::string kModel = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";

const nlohmann::json& golden() {
  static const nlohmann::json parsed = [] {
    std::ifstream in(kModel + "/golden.json");
    return nlohmann::json::parse(in);
  }();
  return parsed;
}

// The exact kernels: the suite checks greedy tokens against transformers'
// on the tiny random model, whose margins are below bf16 rounding (the
// default set, fast, rounds activations to bf16 where the CPU has AVX512_BF16).
tern_model_options cpu_options() {
  tern_model_options o = tern_model_options_default();
  o.device = "cpu";
  o.kv_cache_bytes = 32 << 20;
  o.cpu_kernels = "optimized";
  return o;
}

// One model for the whole suite: loading is cheap but the engine threads are not free.
class CApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tern_model_options o = cpu_options();
    ASSERT_EQ(tern_model_load(kModel.c_str(), &o, &model_), TERN_OK) << tern_last_error();
  }
  static void TearDownTestSuite() {
    tern_model_free(model_);
    model_ = nullptr;
  }
  static tern_model* model_;
};
tern_model* CApi::model_ = nullptr;

struct Collected {
  std::vector<std::vector<int32_t>> tokens;  // per sample
  std::vector<std::string> text;
  std::vector<tern_finish_reason> finish;
  std::vector<float> logprobs;  // sample 0's
  std::vector<int32_t> top_ids;
  tern_usage usage{};
  tern_status status = TERN_OK;
  std::string error;
  int num_outputs = 0;
  bool finished = false;

  void add(const tern_output& o) {
    const size_t i = static_cast<size_t>(o.index);
    if (tokens.size() <= i) {
      tokens.resize(i + 1);
      text.resize(i + 1);
      finish.resize(i + 1, TERN_FINISH_NONE);
    }
    tokens[i].insert(tokens[i].end(), o.token_ids, o.token_ids + o.num_tokens);
    text[i].append(o.text, o.text_length);
    EXPECT_EQ(std::strlen(o.text), o.text_length);
    if (o.finish_reason != TERN_FINISH_NONE) finish[i] = o.finish_reason;
    if (i == 0 && o.logprobs != nullptr) {
      logprobs.insert(logprobs.end(), o.logprobs, o.logprobs + o.num_tokens);
      if (o.top_token_ids != nullptr) {
        top_ids.insert(top_ids.end(), o.top_token_ids, o.top_token_ids + o.num_tokens * o.num_top_logprobs);
      }
    }
    usage = o.usage;
    status = o.status;
    error = o.error;
    ++num_outputs;
    finished = o.request_finished != 0;
  }
};

// Pulls every output of `request` and frees it.
Collected pull_all(tern_request* request) {
  Collected c;
  for (;;) {
    const tern_output* o = nullptr;
    tern_status s = tern_request_next(request, 30000, &o);
    EXPECT_EQ(s, TERN_OK) << tern_last_error();
    if (s != TERN_OK || o == nullptr) break;
    c.add(*o);
    if (c.finished) break;
  }
  tern_request_free(request);
  return c;
}

tern_sampling_params greedy(int64_t max_tokens) {
  tern_sampling_params p = tern_sampling_params_default(nullptr);
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = 1;
  return p;
}

Collected run(tern_model* model, const std::vector<int32_t>& prompt, const tern_sampling_params& params) {
  tern_request* request = nullptr;
  tern_status s = tern_submit(model, prompt.data(), prompt.size(), &params, nullptr, nullptr, &request);
  EXPECT_EQ(s, TERN_OK) << tern_last_error();
  if (s != TERN_OK) return {};
  return pull_all(request);
}

TEST(CApiVersion, VersionAndAbiMatchTheHeader) {
  EXPECT_EQ(tern_abi_version(), TERN_ABI_VERSION);
  EXPECT_STREQ(tern_version(), "0.1.0");
  EXPECT_STREQ(tern_status_name(TERN_ERR_OUT_OF_RANGE), "out of range");
}

TEST_F(CApi, TokenizeAndDetokenizeMatchTheGoldens) {
  for (const auto& t : golden()["tokenizer"]) {
    const std::string text = t["text"];
    int32_t* ids = nullptr;
    size_t n = 0;
    ASSERT_EQ(tern_tokenize(model_, text.data(), text.size(), 1, &ids, &n), TERN_OK) << tern_last_error();
    std::vector<int32_t> got(ids, ids + n);
    tern_free(ids);
    EXPECT_EQ(got, t["ids"].get<std::vector<int32_t>>()) << text;
    char* decoded = nullptr;
    size_t length = 0;
    ASSERT_EQ(tern_detokenize(model_, got.data(), got.size(), 1, &decoded, &length), TERN_OK);
    EXPECT_EQ(std::string(decoded, length), t["decoded_skip"].get<std::string>());
    tern_free(decoded);
  }
}

TEST_F(CApi, ChatTemplateMatchesTransformers) {
  for (const auto& c : golden()["chat"]) {
    std::vector<std::string> roles, contents;
    for (const auto& m : c["messages"]) {
      roles.push_back(m["role"]);
      contents.push_back(m["content"]);
    }
    std::vector<tern_chat_message> messages;
    for (size_t i = 0; i < roles.size(); ++i) messages.push_back({roles[i].c_str(), contents[i].c_str()});
    char* text = nullptr;
    ASSERT_EQ(tern_apply_chat_template(model_, messages.data(), messages.size(), c["add_generation_prompt"] ? 1 : 0,
                                       nullptr, &text),
              TERN_OK)
        << tern_last_error();
    EXPECT_EQ(std::string(text), c["rendered"].get<std::string>());
    int32_t* ids = nullptr;
    size_t n = 0;
    ASSERT_EQ(tern_tokenize(model_, text, std::strlen(text), 0, &ids, &n), TERN_OK);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + n), c["ids"].get<std::vector<int32_t>>());
    tern_free(ids);
    tern_free(text);
  }
}

TEST_F(CApi, GreedyTokensMatchTransformers) {
  for (const auto& p : golden()["prompts"]) {
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    Collected c = run(model_, p["ids"].get<std::vector<int32_t>>(), greedy(static_cast<int64_t>(want.size())));
    ASSERT_EQ(c.tokens.size(), 1u);
    EXPECT_EQ(c.tokens[0], want) << p["name"];
    EXPECT_EQ(c.finish[0], TERN_FINISH_LENGTH);
    EXPECT_EQ(c.usage.prompt_tokens, static_cast<int64_t>(p["ids"].size()));
    EXPECT_EQ(c.usage.completion_tokens, static_cast<int64_t>(want.size()));
    EXPECT_TRUE(c.finished);
  }
}

TEST_F(CApi, ManyRequestsAtOnceEqualOneAtATime) {
  const auto prompts = golden()["prompts"];
  std::vector<tern_request*> requests;
  const tern_sampling_params params = greedy(12);
  for (const auto& p : prompts) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    tern_request* r = nullptr;
    ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, nullptr, nullptr, &r), TERN_OK);
    requests.push_back(r);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Collected c = pull_all(requests[i]);
    const auto want = prompts[i]["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(c.tokens[0], std::vector<int32_t>(want.begin(), want.begin() + 12)) << prompts[i]["name"];
  }
}

TEST_F(CApi, RequestsFromManyThreadsRunTogether) {
  const auto p = golden()["prompts"][1];
  const auto ids = p["ids"].get<std::vector<int32_t>>();
  const auto want = p["greedy"].get<std::vector<int32_t>>();
  std::vector<std::thread> threads;
  std::atomic<int> matching{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      Collected c = run(model_, ids, greedy(static_cast<int64_t>(want.size())));
      if (!c.tokens.empty() && c.tokens[0] == want) ++matching;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(matching.load(), 8);
}

struct CallbackSink {
  std::mutex mu;
  std::condition_variable cv;
  Collected collected;
  std::thread::id thread;
  tern_request* request = nullptr;
  bool cancel_on_first = false;
  bool free_on_finish = false;

  static void on_output(const tern_output* o, void* user) {
    auto* sink = static_cast<CallbackSink*>(user);
    std::lock_guard<std::mutex> lock(sink->mu);
    sink->thread = std::this_thread::get_id();
    sink->collected.add(*o);
    if (sink->cancel_on_first && o->num_tokens > 0) {
      EXPECT_EQ(tern_request_cancel(sink->request), TERN_OK);
    }
    if (o->request_finished) {
      if (sink->free_on_finish) tern_request_free(sink->request);
      sink->cv.notify_all();
    }
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return collected.finished; }));
  }
};

TEST_F(CApi, CallbacksDeliverEveryOutputInOrderOffTheCallingThread) {
  const auto p = golden()["prompts"][0];
  const auto ids = p["ids"].get<std::vector<int32_t>>();
  const auto want = p["greedy"].get<std::vector<int32_t>>();
  CallbackSink sink;
  const tern_sampling_params params = greedy(static_cast<int64_t>(want.size()));
  {
    std::lock_guard<std::mutex> lock(sink.mu);
    ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, &CallbackSink::on_output, &sink, &sink.request),
              TERN_OK);
  }
  sink.wait();
  EXPECT_EQ(sink.collected.tokens[0], want);
  EXPECT_NE(sink.thread, std::this_thread::get_id());
  const tern_output* o = nullptr;
  EXPECT_EQ(tern_request_next(sink.request, 0, &o), TERN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tern_last_error()).find("callback"), std::string::npos);
  tern_request_free(sink.request);
}

TEST_F(CApi, ACallbackMayFreeItsOwnRequest) {
  const auto ids = golden()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  CallbackSink sink;
  sink.free_on_finish = true;
  const tern_sampling_params params = greedy(4);
  {
    std::lock_guard<std::mutex> lock(sink.mu);
    ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, &CallbackSink::on_output, &sink, &sink.request),
              TERN_OK);
  }
  sink.wait();
  EXPECT_EQ(sink.collected.tokens[0].size(), 4u);
}

TEST_F(CApi, CancelEndsARunningRequestWithAbort) {
  const auto ids = golden()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  tern_sampling_params params = greedy(0);  // the whole context: it cannot end before the cancel
  tern_request* r = nullptr;
  ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, nullptr, nullptr, &r), TERN_OK);
  const tern_output* o = nullptr;
  ASSERT_EQ(tern_request_next(r, 30000, &o), TERN_OK);
  ASSERT_NE(o, nullptr);
  ASSERT_EQ(tern_request_cancel(r), TERN_OK);
  Collected c = pull_all(r);
  EXPECT_EQ(c.finish[0], TERN_FINISH_ABORT);
  EXPECT_LT(c.usage.completion_tokens, 4000);
}

TEST_F(CApi, CancelFromTheCallbackAndFreeOfARunningRequest) {
  const auto ids = golden()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  CallbackSink sink;
  sink.cancel_on_first = true;
  const tern_sampling_params params = greedy(0);
  {
    std::lock_guard<std::mutex> lock(sink.mu);
    ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, &CallbackSink::on_output, &sink, &sink.request),
              TERN_OK);
  }
  sink.wait();
  EXPECT_EQ(sink.collected.finish[0], TERN_FINISH_ABORT);
  tern_request_free(sink.request);

  // Freed while running: cancelled, no callback afterwards, nothing leaks (ASan run).
  tern_request* r = nullptr;
  ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, nullptr, nullptr, &r), TERN_OK);
  tern_request_free(r);
}

TEST_F(CApi, PullTimesOutWithoutAnOutputAndEndsWithFinished) {
  const auto ids = golden()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  const tern_sampling_params params = greedy(2);
  tern_request* r = nullptr;
  ASSERT_EQ(tern_submit(model_, ids.data(), ids.size(), &params, nullptr, nullptr, &r), TERN_OK);
  const tern_output* o = nullptr;
  bool done = false;
  while (!done) {
    ASSERT_EQ(tern_request_next(r, 0, &o), TERN_OK);  // never waits: NULL until there is news
    if (o != nullptr) done = o->request_finished != 0;
  }
  EXPECT_EQ(tern_request_next(r, 0, &o), TERN_ERR_FINISHED);
  EXPECT_EQ(o, nullptr);
  EXPECT_NE(std::string(tern_last_error()).find("finished"), std::string::npos);
  tern_request_free(r);
}

TEST_F(CApi, SamplingFieldsAreHonoured) {
  const auto p = golden()["prompts"][1];
  const auto ids = p["ids"].get<std::vector<int32_t>>();
  const auto want = p["greedy"].get<std::vector<int32_t>>();

  // n samples, seeded: the same seed repeats, each sample has its tokens.
  tern_sampling_params sampled = tern_sampling_params_default(model_);
  sampled.n = 3;
  sampled.max_tokens = 8;
  sampled.has_seed = 1;
  sampled.seed = 1234;
  sampled.temperature = 1.5;
  sampled.ignore_eos = 1;
  Collected a = run(model_, ids, sampled), b = run(model_, ids, sampled);
  ASSERT_EQ(a.tokens.size(), 3u);
  EXPECT_EQ(a.tokens, b.tokens);
  for (const auto& t : a.tokens) EXPECT_EQ(t.size(), 8u);
  EXPECT_EQ(a.usage.completion_tokens, 24);

  // logprobs: one per token, the top ones most likely first, and greedy picks the top one.
  tern_sampling_params lp = greedy(5);
  lp.logprobs = 3;
  Collected l = run(model_, ids, lp);
  ASSERT_EQ(l.logprobs.size(), 5u);
  ASSERT_EQ(l.top_ids.size(), 15u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LE(l.logprobs[i], 0.0f);
    EXPECT_EQ(l.top_ids[i * 3], l.tokens[0][i]);
  }

  // A stop token id ends the sample at it; logit_bias forbids a token.
  tern_sampling_params st = greedy(20);
  st.ignore_eos = 0;
  const int32_t stop_id = want[2];
  st.stop_token_ids = &stop_id;
  st.num_stop_token_ids = 1;
  Collected s = run(model_, ids, st);
  EXPECT_EQ(s.finish[0], TERN_FINISH_STOP);
  EXPECT_EQ(s.tokens[0].back(), stop_id);

  tern_sampling_params bias = greedy(1);
  const int32_t banned = want[0];
  const double minus = -100.0;
  bias.logit_bias_ids = &banned;
  bias.logit_bias_values = &minus;
  bias.num_logit_bias = 1;
  Collected bi = run(model_, ids, bias);
  EXPECT_NE(bi.tokens[0][0], banned);

  // A stop string ends the text before it.
  Collected full = run(model_, ids, greedy(20));
  const std::string text = full.text[0];
  ASSERT_GT(text.size(), 4u);
  const std::string stop_text = text.substr(text.size() / 2, 2);
  const char* stops[] = {stop_text.c_str()};
  tern_sampling_params ss = greedy(20);
  ss.stop = stops;
  ss.num_stop = 1;
  Collected sc = run(model_, ids, ss);
  EXPECT_EQ(sc.finish[0], TERN_FINISH_STOP);
  EXPECT_EQ(sc.text[0], text.substr(0, text.find(stop_text)));
}

TEST(CApiDefaults, TheDefaultKernelSetIsFast) {
  EXPECT_STREQ(tern_model_options_default().cpu_kernels, "auto");
}

TEST(CApiDefaults, SamplingDefaultsComeFromGenerationConfig) {
  tern_sampling_params plain = tern_sampling_params_default(nullptr);
  EXPECT_EQ(plain.temperature, 1.0);
  EXPECT_EQ(plain.max_tokens, 16);
  EXPECT_EQ(plain.n, 1);
  EXPECT_EQ(plain.logprobs, -1);
  tern_model_options o = cpu_options();
  tern_model* model = nullptr;
  ASSERT_EQ(tern_model_load(kModel.c_str(), &o, &model), TERN_OK);
  tern_sampling_params d = tern_sampling_params_default(model);
  EXPECT_DOUBLE_EQ(d.temperature, 0.8);  // ernie-tiny's generation_config.json
  EXPECT_DOUBLE_EQ(d.top_p, 0.8);
  tern_model_info info{};
  ASSERT_EQ(tern_model_get_info(model, &info), TERN_OK);
  EXPECT_STREQ(info.device, "cpu");
  EXPECT_GT(info.vocab_size, 1000);
  EXPECT_GT(info.max_model_len, 0);
  tern_model_free(model);
}

TEST(CApiLifetime, AModelFreedBeforeItsRequestsCancelsThem) {
  tern_model_options o = cpu_options();
  tern_model* model = nullptr;
  ASSERT_EQ(tern_model_load(kModel.c_str(), &o, &model), TERN_OK);
  const auto ids = golden()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  const tern_sampling_params params = greedy(0);
  tern_request* r = nullptr;
  ASSERT_EQ(tern_submit(model, ids.data(), ids.size(), &params, nullptr, nullptr, &r), TERN_OK);
  tern_model_free(model);
  Collected c = pull_all(r);  // the engine lives until this request goes
  EXPECT_EQ(c.finish[0], TERN_FINISH_ABORT);
}

TEST(CApiLifetime, GgufModelsLoadThroughTheSameCall) {
  tern_model_options o = cpu_options();
  tern_model* model = nullptr;
  ASSERT_EQ(tern_model_load(TERN_CAPI_GGUF, &o, &model), TERN_OK) << tern_last_error();
  const auto p = golden()["prompts"][1];
  const std::string text = p["text"];
  int32_t* ids = nullptr;
  size_t n = 0;
  ASSERT_EQ(tern_tokenize(model, text.data(), text.size(), 1, &ids, &n), TERN_OK);
  std::vector<int32_t> prompt(ids, ids + n);
  tern_free(ids);
  EXPECT_EQ(prompt, p["ids"].get<std::vector<int32_t>>());
  const auto want = p["greedy"].get<std::vector<int32_t>>();
  Collected c = run(model, prompt, greedy(static_cast<int64_t>(want.size())));
  EXPECT_EQ(c.tokens[0], want);
  tern_model_free(model);
}

// ---- error paths: each returns its code and a message that names the problem ----

void expect_error(tern_status got, tern_status want, const std::string& mentions) {
  EXPECT_EQ(got, want) << tern_status_name(got) << ": " << tern_last_error();
  const std::string message = tern_last_error();
  EXPECT_FALSE(message.empty());
  EXPECT_NE(message.find(mentions), std::string::npos) << "'" << message << "' should mention '" << mentions << "'";
}

TEST(CApiErrors, LoadErrors) {
  tern_model* model = reinterpret_cast<tern_model*>(0x1);
  tern_model_options o = cpu_options();
  expect_error(tern_model_load(nullptr, &o, &model), TERN_ERR_INVALID_ARGUMENT, "path");
  EXPECT_EQ(model, nullptr);
  expect_error(tern_model_load(kModel.c_str(), &o, nullptr), TERN_ERR_INVALID_ARGUMENT, "model");
  expect_error(tern_model_load("", &o, &model), TERN_ERR_INVALID_ARGUMENT, "empty");
  expect_error(tern_model_load("/nonexistent/model", &o, &model), TERN_ERR_NOT_FOUND, "/nonexistent/model");

  struct Bad {
    const char* field;
    void (*apply)(tern_model_options&);
  };
  const Bad bad[] = {
      {"device", [](tern_model_options& x) { x.device = "tpu"; }},
      {"threads", [](tern_model_options& x) { x.threads = -1; }},
      {"kv_cache_bytes", [](tern_model_options& x) { x.kv_cache_bytes = -5; }},
      {"gpu_memory_utilization", [](tern_model_options& x) { x.gpu_memory_utilization = 1.5; }},
      {"max_num_seqs", [](tern_model_options& x) { x.max_num_seqs = -2; }},
      {"max_num_batched_tokens", [](tern_model_options& x) { x.max_num_batched_tokens = -2; }},
      {"max_model_len", [](tern_model_options& x) { x.max_model_len = -2; }},
      {"block_size", [](tern_model_options& x) { x.block_size = 4096; }},
      {"enable_prefix_caching", [](tern_model_options& x) { x.enable_prefix_caching = 7; }},
      {"async_scheduling", [](tern_model_options& x) { x.async_scheduling = -1; }},
      {"enforce_eager", [](tern_model_options& x) { x.enforce_eager = 2; }},
      {"decode_kernel", [](tern_model_options& x) { x.decode_kernel = 2; }},
      {"cpu-kernels", [](tern_model_options& x) { x.cpu_kernels = "fastest"; }},
      {"max_queued_requests", [](tern_model_options& x) { x.max_queued_requests = -1; }},
      {"q9", [](tern_model_options& x) { x.quantization = "q9"; }},
      {"ngram", [](tern_model_options& x) { x.speculative_config = R"({"method": "eagle"})"; }},
      {"gpu-memory-utilization", [](tern_model_options& x) { x.gpu_memory_utilization = 0.5; }},
      {"max-model-len", [](tern_model_options& x) { x.max_model_len = 1 << 20; }},
  };
  for (const Bad& b : bad) {
    tern_model_options x = cpu_options();
    b.apply(x);
    tern_status s = tern_model_load(kModel.c_str(), &x, &model);
    EXPECT_NE(s, TERN_OK) << b.field;
    EXPECT_EQ(model, nullptr);
    EXPECT_NE(std::string(tern_last_error()).find(b.field), std::string::npos)
        << b.field << ": " << tern_last_error();
  }
  tern_model_options x = cpu_options();
  x.chat_template = "{% if %}";
  expect_error(tern_model_load(kModel.c_str(), &x, &model), TERN_ERR_PARSE, "chat template");
  expect_error(tern_set_log_level(nullptr), TERN_ERR_INVALID_ARGUMENT, "level");
  expect_error(tern_set_log_level("loud"), TERN_ERR_INVALID_ARGUMENT, "loud");
  EXPECT_EQ(tern_set_log_level("warn"), TERN_OK);
  EXPECT_STREQ(tern_last_error(), "");
}

TEST_F(CApi, TokenAndTemplateErrors) {
  int32_t* ids = nullptr;
  size_t n = 0;
  char* text = nullptr;
  size_t length = 0;
  expect_error(tern_tokenize(nullptr, "a", 1, 1, &ids, &n), TERN_ERR_INVALID_ARGUMENT, "model");
  expect_error(tern_tokenize(model_, nullptr, 3, 1, &ids, &n), TERN_ERR_INVALID_ARGUMENT, "text");
  expect_error(tern_tokenize(model_, "a", 1, 1, nullptr, &n), TERN_ERR_INVALID_ARGUMENT, "ids");
  expect_error(tern_tokenize(model_, "a", 1, 1, &ids, nullptr), TERN_ERR_INVALID_ARGUMENT, "num_ids");
  const int32_t bad_ids[] = {5, -1};
  expect_error(tern_detokenize(nullptr, bad_ids, 1, 1, &text, &length), TERN_ERR_INVALID_ARGUMENT, "model");
  expect_error(tern_detokenize(model_, nullptr, 2, 1, &text, &length), TERN_ERR_INVALID_ARGUMENT, "ids");
  expect_error(tern_detokenize(model_, bad_ids, 2, 1, &text, &length), TERN_ERR_INVALID_ARGUMENT, "ids[1]");
  expect_error(tern_detokenize(model_, bad_ids, 1, 1, nullptr, &length), TERN_ERR_INVALID_ARGUMENT, "text");
  EXPECT_EQ(text, nullptr);

  const tern_chat_message ok[] = {{"user", "hi"}};
  const tern_chat_message no_role[] = {{nullptr, "hi"}};
  const tern_chat_message no_content[] = {{"user", nullptr}};
  expect_error(tern_apply_chat_template(nullptr, ok, 1, 1, nullptr, &text), TERN_ERR_INVALID_ARGUMENT, "model");
  expect_error(tern_apply_chat_template(model_, nullptr, 1, 1, nullptr, &text), TERN_ERR_INVALID_ARGUMENT,
               "messages");
  expect_error(tern_apply_chat_template(model_, ok, 0, 1, nullptr, &text), TERN_ERR_INVALID_ARGUMENT, "messages");
  expect_error(tern_apply_chat_template(model_, ok, 1, 1, nullptr, nullptr), TERN_ERR_INVALID_ARGUMENT, "text");
  expect_error(tern_apply_chat_template(model_, no_role, 1, 1, nullptr, &text), TERN_ERR_INVALID_ARGUMENT,
               "messages[0].role");
  expect_error(tern_apply_chat_template(model_, no_content, 1, 1, nullptr, &text), TERN_ERR_INVALID_ARGUMENT,
               "content");
  expect_error(tern_apply_chat_template(model_, ok, 1, 1, "[1]", &text), TERN_ERR_INVALID_ARGUMENT,
               "template_kwargs_json");
  expect_error(tern_apply_chat_template(model_, ok, 1, 1, "{not json", &text), TERN_ERR_INVALID_ARGUMENT,
               "template_kwargs_json");
  tern_model_info info{};
  expect_error(tern_model_get_info(nullptr, &info), TERN_ERR_INVALID_ARGUMENT, "model");
  expect_error(tern_model_get_info(model_, nullptr), TERN_ERR_INVALID_ARGUMENT, "info");
}

TEST_F(CApi, SubmitErrorsNameTheField) {
  tern_model_info info{};
  ASSERT_EQ(tern_model_get_info(model_, &info), TERN_OK);
  const int32_t prompt[] = {5, 6, 7};
  tern_request* r = reinterpret_cast<tern_request*>(0x1);
  const tern_sampling_params good = greedy(4);
  expect_error(tern_submit(nullptr, prompt, 3, &good, nullptr, nullptr, &r), TERN_ERR_INVALID_ARGUMENT, "model");
  EXPECT_EQ(r, nullptr);
  expect_error(tern_submit(model_, prompt, 3, &good, nullptr, nullptr, nullptr), TERN_ERR_INVALID_ARGUMENT,
               "request");
  expect_error(tern_submit(model_, nullptr, 3, &good, nullptr, nullptr, &r), TERN_ERR_INVALID_ARGUMENT,
               "prompt_ids");
  expect_error(tern_submit(model_, prompt, 0, &good, nullptr, nullptr, &r), TERN_ERR_INVALID_ARGUMENT, "empty");
  const int32_t outside[] = {5, info.vocab_size};
  expect_error(tern_submit(model_, outside, 2, &good, nullptr, nullptr, &r), TERN_ERR_INVALID_ARGUMENT,
               "prompt_ids[1]");
  std::vector<int32_t> too_long(static_cast<size_t>(info.max_model_len), 5);
  expect_error(tern_submit(model_, too_long.data(), too_long.size(), &good, nullptr, nullptr, &r),
               TERN_ERR_OUT_OF_RANGE, "context length");

  struct Bad {
    const char* mentions;
    void (*apply)(tern_sampling_params&);
  };
  static const char* const kNullStop[] = {nullptr};
  static const char* const kSeventeen[17] = {"a", "b", "c", "d", "e", "f", "g", "h", "i",
                                             "j", "k", "l", "m", "n", "o", "p", "q"};
  static const int32_t kNegative[] = {-3};
  static const int32_t kHugeId[] = {1 << 30};
  static const double kBias[] = {1.0};
  const Bad bad[] = {
      {"n must be", [](tern_sampling_params& p) { p.n = 0; }},
      {"n must be", [](tern_sampling_params& p) { p.n = 129; }},
      {"max_tokens", [](tern_sampling_params& p) { p.max_tokens = -1; }},
      {"max_tokens", [](tern_sampling_params& p) { p.max_tokens = 1 << 30; }},
      {"temperature", [](tern_sampling_params& p) { p.temperature = -1; }},
      {"top_p", [](tern_sampling_params& p) { p.top_p = 0; }},
      {"top_k", [](tern_sampling_params& p) { p.top_k = -5; }},
      {"min_p", [](tern_sampling_params& p) { p.min_p = 2; }},
      {"repetition_penalty", [](tern_sampling_params& p) { p.repetition_penalty = 0; }},
      {"presence_penalty", [](tern_sampling_params& p) { p.presence_penalty = 3; }},
      {"frequency_penalty", [](tern_sampling_params& p) { p.frequency_penalty = -3; }},
      {"min_tokens", [](tern_sampling_params& p) { p.min_tokens = -1; }},
      {"logprobs", [](tern_sampling_params& p) { p.logprobs = 21; }},
      {"logprobs", [](tern_sampling_params& p) { p.logprobs = -2; }},
      {"stop", [](tern_sampling_params& p) { p.num_stop = 2; }},
      {"stop[0]", [](tern_sampling_params& p) { p.stop = kNullStop, p.num_stop = 1; }},
      {"stop", [](tern_sampling_params& p) { p.stop = kSeventeen, p.num_stop = 17; }},
      {"stop_token_ids", [](tern_sampling_params& p) { p.num_stop_token_ids = 1; }},
      {"stop_token_ids", [](tern_sampling_params& p) { p.stop_token_ids = kNegative, p.num_stop_token_ids = 1; }},
      {"logit_bias", [](tern_sampling_params& p) { p.num_logit_bias = 1; }},
      {"logit_bias", [](tern_sampling_params& p) {
         p.logit_bias_ids = kHugeId, p.logit_bias_values = kBias, p.num_logit_bias = 1;
       }},
  };
  for (const Bad& b : bad) {
    tern_sampling_params p = greedy(4);
    b.apply(p);
    tern_status s = tern_submit(model_, prompt, 3, &p, nullptr, nullptr, &r);
    EXPECT_NE(s, TERN_OK) << b.mentions;
    EXPECT_EQ(r, nullptr);
    EXPECT_NE(std::string(tern_last_error()).find(b.mentions), std::string::npos)
        << b.mentions << ": " << tern_last_error();
  }

  const tern_output* o = nullptr;
  expect_error(tern_request_next(nullptr, 0, &o), TERN_ERR_INVALID_ARGUMENT, "request");
  expect_error(tern_request_next(reinterpret_cast<tern_request*>(0x1), 0, nullptr), TERN_ERR_INVALID_ARGUMENT,
               "output");
  expect_error(tern_request_cancel(nullptr), TERN_ERR_INVALID_ARGUMENT, "request");
  tern_request_free(nullptr);
  tern_model_free(nullptr);
  tern_free(nullptr);
}

TEST(CApiErrors, AFullQueueIsResourceExhausted) {
  tern_model_options o = cpu_options();
  o.max_queued_requests = 1;
  tern_model* model = nullptr;
  ASSERT_EQ(tern_model_load(kModel.c_str(), &o, &model), TERN_OK);
  const int32_t prompt[] = {5, 6, 7};
  const tern_sampling_params params = greedy(0);
  tern_request* first = nullptr;
  tern_request* second = nullptr;
  ASSERT_EQ(tern_submit(model, prompt, 3, &params, nullptr, nullptr, &first), TERN_OK);
  expect_error(tern_submit(model, prompt, 3, &params, nullptr, nullptr, &second), TERN_ERR_RESOURCE_EXHAUSTED,
               "queue");
  tern_request_free(first);
  tern_model_free(model);
}

}  // namespace
