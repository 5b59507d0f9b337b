// Task<T>: the coroutine type of HTTP handlers and of everything they await.
// It is boost::asio::awaitable<T>, named here so that route code includes this
// light header (about 1 s of compile time) instead of Asio or Beast.
#pragma once

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>
// (g++ 12, C++20).
#include <utility>

#include <boost/asio/awaitable.hpp>

namespace tern::server {

template <typename T = void>
using Task = boost::asio::awaitable<T>;

}  // namespace tern::server
