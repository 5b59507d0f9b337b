// The registry of live connections, used by graceful shutdown.
#include "server/http/server_context.h"

namespace tern::server {

std::shared_ptr<boost::asio::ssl::context> ServerContext::tls() const {
  std::lock_guard lock(mu_);
  return tls_;
}

void ServerContext::set_tls(std::shared_ptr<boost::asio::ssl::context> tls) {
  std::lock_guard lock(mu_);
  tls_ = std::move(tls);
}

uint64_t ServerContext::add(std::weak_ptr<ConnectionControl> conn) {
  std::lock_guard lock(mu_);
  if (closing_) return 0;
  uint64_t id = next_id_++;
  conns_.emplace(id, std::move(conn));
  return id;
}

void ServerContext::remove(uint64_t id) {
  std::function<void()> drained;
  {
    std::lock_guard lock(mu_);
    conns_.erase(id);
    if (closing_ && conns_.empty()) drained = on_drained_;
  }
  if (drained) drained();
}

std::vector<std::shared_ptr<ConnectionControl>> ServerContext::begin_closing() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  return live();
}

std::vector<std::shared_ptr<ConnectionControl>> ServerContext::live() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<ConnectionControl>> out;
  out.reserve(conns_.size());
  for (auto& [id, weak] : conns_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

bool ServerContext::closing() const {
  std::lock_guard lock(mu_);
  return closing_;
}

size_t ServerContext::size() const {
  std::lock_guard lock(mu_);
  return conns_.size();
}

void ServerContext::set_on_drained(std::function<void()> f) {
  std::lock_guard lock(mu_);
  on_drained_ = std::move(f);
}

}  // namespace tern::server
