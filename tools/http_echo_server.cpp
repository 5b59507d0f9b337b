// tern_http_echo: the HTTP transport with toy routes and no model, for
// tests/e2e/test_http_transport.py. Routes use only the Beast-free handler API
// (responder.h), as tern's real routes do:
//   POST /echo                      the body back
//   GET  /stream?n=N&delay_ms=D     N SSE events D ms apart, then [DONE]
//   GET  /slow?ms=M                 waits M ms on "engine" events (a ticker
//                                   thread plays the engine's notify), then 200
//   GET  /stats                     cancellations seen, transport counters
//   GET  /health                    200 (an open path under --api-key)
// Prints "listening on <port>" once ready; exits 0 after SIGTERM/SIGINT.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/http/json_escape.h"
#include "server/http/server.h"
#include "server/http/sse.h"

namespace {

using namespace tern::server;
using namespace std::chrono_literals;

// Plays the engine thread: calls every registered notifier every 20 ms.
class FakeEngine {
 public:
  FakeEngine() : thread_([this] { loop(); }) {}
  ~FakeEngine() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  uint64_t add(std::function<void()> notify) {
    std::lock_guard lock(mu_);
    notifiers_[next_id_] = std::move(notify);
    return next_id_++;
  }
  void remove(uint64_t id) {
    std::lock_guard lock(mu_);
    notifiers_.erase(id);
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, 20ms, [this] { return stop_; })) {
      for (auto& [id, notify] : notifiers_) notify();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::function<void()>> notifiers_;
  std::thread thread_;
};

struct Stats {
  std::atomic<uint64_t> slow_cancellations{0};
  std::atomic<uint64_t> stream_cancellations{0};
  std::atomic<int64_t> active{0};
};

struct ActiveGuard {
  explicit ActiveGuard(Stats& s) : stats(s) { stats.active.fetch_add(1); }
  ~ActiveGuard() { stats.active.fetch_sub(1); }
  Stats& stats;
};

int64_t int_param(const HttpRequest& req, std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
  auto v = req.query_param(key);
  if (!v) return fallback;
  char* end = nullptr;
  long long n = std::strtoll(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0') return fallback;
  return std::clamp<int64_t>(n, lo, hi);
}

Router make_router(Stats& stats, FakeEngine& engine, HttpCounters& counters) {
  Router router;
  router.get("/health", [](HttpRequest&, Responder& res) -> Task<> {
    co_await res.respond(200, "application/json", "{\"ok\":true}");
  });

  router.post("/echo", [](HttpRequest& req, Responder& res) -> Task<> {
    std::string type(req.headers.get("content-type").value_or("application/octet-stream"));
    co_await res.respond(200, type, std::move(req.body));
  });

  router.get("/stream", [&stats](HttpRequest& req, Responder& res) -> Task<> {
    ActiveGuard guard(stats);
    int64_t n = int_param(req, "n", 5, 0, 1'000'000);
    auto delay = std::chrono::milliseconds(int_param(req, "delay_ms", 0, 0, 600'000));
    if (!co_await res.begin_stream(200, std::string(kSseContentType))) co_return;
    SseChunkTemplate chunk("{\"i\":", "}");
    for (int64_t i = 0; i < n; ++i) {
      std::string data;
      chunk.append(data, std::to_string(i));
      if (!co_await res.write_chunk(data)) {
        stats.stream_cancellations.fetch_add(1);
        co_return;
      }
      if (delay.count() > 0 && co_await res.wait_event(delay) == Wake::kClientGone) {
        stats.stream_cancellations.fetch_add(1);
        co_return;
      }
    }
    co_await res.write_chunk(kSseDone);
    co_await res.end_stream();
  });

  router.get("/slow", [&stats, &engine](HttpRequest& req, Responder& res) -> Task<> {
    ActiveGuard guard(stats);
    auto total = std::chrono::milliseconds(int_param(req, "ms", 30'000, 0, 3'600'000));
    uint64_t id = engine.add(res.event_notifier());
    struct Unregister {
      FakeEngine& e;
      uint64_t id;
      ~Unregister() { e.remove(id); }
    } unregister{engine, id};
    auto start = std::chrono::steady_clock::now();
    uint64_t events = 0;
    while (std::chrono::steady_clock::now() - start < total) {
      switch (co_await res.wait_event(1s)) {
        case Wake::kClientGone:
          stats.slow_cancellations.fetch_add(1);
          co_return;
        case Wake::kEvent:
          ++events;
          break;
        case Wake::kTimeout:
          break;
      }
    }
    co_await res.respond(200, "application/json", "{\"events\":" + std::to_string(events) + "}");
  });

  router.get("/stats", [&stats, &counters](HttpRequest&, Responder& res) -> Task<> {
    HttpStatsSnapshot s = counters.snapshot();
    std::string out = "{\"slow_cancellations\":" + std::to_string(stats.slow_cancellations.load()) +
                      ",\"stream_cancellations\":" + std::to_string(stats.stream_cancellations.load()) +
                      ",\"active\":" + std::to_string(stats.active.load()) +
                      ",\"client_disconnects\":" + std::to_string(s.client_disconnects) +
                      ",\"connections_open\":" + std::to_string(s.connections_open) +
                      ",\"connections_rejected\":" + std::to_string(s.connections_rejected) +
                      ",\"requests_in_flight\":" + std::to_string(s.requests_in_flight) + ",\"responses\":{";
    for (size_t i = 0; i < s.responses_by_status.size(); ++i) {
      if (i > 0) out += ",";
      out += "\"" + std::to_string(s.responses_by_status[i].first) + "\":" +
             std::to_string(s.responses_by_status[i].second);
    }
    out += "}}";
    co_await res.respond(200, "application/json", std::move(out));
  });
  return router;
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t c = s.find(',');
    if (c != 0) out.emplace_back(s.substr(0, c));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--host H] [--port P] [--io-threads N] [--read-timeout-ms MS] [--idle-timeout-ms MS]\n"
               "  [--write-timeout-ms MS] [--shutdown-timeout-ms MS] [--max-body-bytes B] [--max-header-bytes B]\n"
               "  [--max-connections N] [--api-key KEY] [--allowed-origins A,B|*|'']\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    std::string value = argv[++i];
    auto num = [&] { return std::strtoll(value.c_str(), nullptr, 10); };
    if (flag == "--host") options.host = value;
    else if (flag == "--port") options.port = static_cast<uint16_t>(num());
    else if (flag == "--io-threads") options.io_threads = static_cast<int>(num());
    else if (flag == "--read-timeout-ms") options.read_timeout = std::chrono::milliseconds(num());
    else if (flag == "--idle-timeout-ms") options.idle_timeout = std::chrono::milliseconds(num());
    else if (flag == "--write-timeout-ms") options.write_timeout = std::chrono::milliseconds(num());
    else if (flag == "--shutdown-timeout-ms") options.shutdown_timeout = std::chrono::milliseconds(num());
    else if (flag == "--max-body-bytes") options.max_body_bytes = static_cast<uint64_t>(num());
    else if (flag == "--max-header-bytes") options.max_header_bytes = static_cast<uint32_t>(num());
    else if (flag == "--max-connections") options.max_connections = num();
    else if (flag == "--api-key") options.auth.api_key = value;
    else if (flag == "--allowed-origins") options.cors.allowed_origins = split_commas(value);
    else return usage(argv[0]);
  }

  Stats stats;
  FakeEngine engine;
  auto counters = std::make_shared<HttpCounters>();
  HttpServer server(options, make_router(stats, engine, *counters), counters);
  if (auto st = server.listen(); !st) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("listening on %u\n", static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  server.run();
  std::printf("stopped\n");
  return 0;
}
