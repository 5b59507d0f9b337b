// HttpCounters snapshot.
#include "server/http/counters.h"

namespace tern::server {

uint64_t HttpStatsSnapshot::responses(int status) const {
  for (const auto& [s, n] : responses_by_status) {
    if (s == status) return n;
  }
  return 0;
}

void HttpCounters::on_response(int status) {
  if (status < kMinStatus || status > kMaxStatus) status = 500;
  by_status_[static_cast<size_t>(status - kMinStatus)].fetch_add(1, kRelaxed);
}

HttpStatsSnapshot HttpCounters::snapshot() const {
  HttpStatsSnapshot s;
  for (size_t i = 0; i < by_status_.size(); ++i) {
    uint64_t n = by_status_[i].load(kRelaxed);
    if (n != 0) s.responses_by_status.emplace_back(static_cast<int>(i) + kMinStatus, n);
  }
  s.requests_total = requests_total_.load(kRelaxed);
  s.connections_accepted = accepted_.load(kRelaxed);
  s.connections_rejected = rejected_.load(kRelaxed);
  s.client_disconnects = disconnects_.load(kRelaxed);
  s.tls_handshake_failures = tls_failures_.load(kRelaxed);
  s.tls_reloads = tls_reloads_.load(kRelaxed);
  s.connections_open = open_.load(kRelaxed);
  s.requests_in_flight = in_flight_.load(kRelaxed);
  return s;
}

}  // namespace tern::server
