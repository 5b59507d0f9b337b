// A Responder that records what a handler answers, and a way to run a handler
// coroutine to completion without sockets; shared by the server's unit tests
// (the pattern for testing routes) and its fuzzers. Waiting for an event
// answers that the client is gone, so a streaming handler ends.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/request.h"
#include "server/http/responder.h"

namespace tern::server {

class RecordingResponder final : public Responder {
 public:
  Task<bool> respond(int s, std::string type, std::string b, std::vector<HttpHeader> extra) override {
    ++responses;
    if (started_) co_return false;
    started_ = true;
    status = s;
    content_type = std::move(type);
    body = std::move(b);
    headers = std::move(extra);
    co_return true;
  }
  Task<bool> begin_stream(int s, std::string type, std::vector<HttpHeader> extra) override {
    co_return co_await respond(s, std::move(type), "", std::move(extra));
  }
  Task<bool> write_chunk(std::string_view data) override {
    body += data;
    co_return true;
  }
  Task<bool> end_stream() override { co_return true; }
  bool client_gone() const override { return false; }
  bool started() const override { return started_; }
  std::function<void()> event_notifier() override { return [] {}; }
  Task<Wake> wait_event(std::chrono::milliseconds) override { co_return Wake::kClientGone; }

  // A header of the answer (its own, then the common ones), "<absent>" if none.
  std::string header(std::string_view name) const {
    for (const auto* list : {&headers, &common_headers()}) {
      for (const auto& h : *list) {
        if (iequals(h.name, name)) return h.value;
      }
    }
    return "<absent>";
  }

  int status = 0;
  int responses = 0;  // calls of respond/begin_stream: a handler must make exactly one
  std::string content_type, body;
  std::vector<HttpHeader> headers;

 private:
  bool started_ = false;
};

// Runs `make()`'s coroutine on a private io_context until it finishes.
template <typename F>
void run_to_completion(F make) {
  boost::asio::io_context ioc;
  boost::asio::co_spawn(ioc, make(), boost::asio::detached);
  ioc.run();
}

}  // namespace tern::server
