// HttpCounters: what the transport counts for /metrics (responses by status,
// connections, in-flight requests, client disconnects). Lock-free atomics,
// written by io threads, read by anyone through snapshot().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace tern::server {

struct HttpStatsSnapshot {
  std::vector<std::pair<int, uint64_t>> responses_by_status;  // ascending status, nonzero counts
  uint64_t requests_total = 0;         // requests read and dispatched
  uint64_t connections_accepted = 0;
  uint64_t connections_rejected = 0;   // over --max-connections (503)
  uint64_t client_disconnects = 0;     // requests whose client went away before the end
  uint64_t tls_handshake_failures = 0;  // HTTPS: bad certificates, plain HTTP, protocol errors
  uint64_t tls_reloads = 0;             // HTTPS: certificate files reloaded (--enable-ssl-refresh)
  int64_t connections_open = 0;
  int64_t requests_in_flight = 0;

  uint64_t responses(int status) const;
};

class HttpCounters {
 public:
  void on_response(int status);
  void on_request_start() { requests_total_.fetch_add(1, kRelaxed); in_flight_.fetch_add(1, kRelaxed); }
  void on_request_end() { in_flight_.fetch_sub(1, kRelaxed); }
  void on_connection_open() { accepted_.fetch_add(1, kRelaxed); open_.fetch_add(1, kRelaxed); }
  void on_connection_close() { open_.fetch_sub(1, kRelaxed); }
  void on_connection_rejected() { rejected_.fetch_add(1, kRelaxed); }
  void on_client_disconnect() { disconnects_.fetch_add(1, kRelaxed); }
  void on_tls_handshake_failure() { tls_failures_.fetch_add(1, kRelaxed); }
  void on_tls_reload() { tls_reloads_.fetch_add(1, kRelaxed); }
  int64_t connections_open() const { return open_.load(kRelaxed); }

  HttpStatsSnapshot snapshot() const;

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  static constexpr int kMinStatus = 100;
  static constexpr int kMaxStatus = 599;
  std::array<std::atomic<uint64_t>, kMaxStatus - kMinStatus + 1> by_status_{};
  std::atomic<uint64_t> requests_total_{0};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> disconnects_{0};
  std::atomic<uint64_t> tls_failures_{0};
  std::atomic<uint64_t> tls_reloads_{0};
  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace tern::server
