// libcurl behind HttpClient.
#include "hub/http_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <mutex>

namespace tern::hub {
namespace {

constexpr long kConnectTimeoutSeconds = 15;
constexpr long kStallSeconds = 60;          // a transfer slower than 1 byte/s for this long is cut
constexpr long kSmallRequestTimeoutSeconds = 60;
constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
  void add(const std::string& line) { list = curl_slist_append(list, line.c_str()); }
};

// Status lines reset the headers; the last response's status is kept.
struct Transfer {
  HttpResponse response;
  size_t max_body = 0;
  bool body_too_large = false;
  // Downloads only.
  int fd = -1;
  int64_t offset = 0;
  int64_t file_size = 0;
  bool body_started = false;
  bool write_failed = false;
  const std::function<void(int64_t)>* on_bytes = nullptr;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    size_t space = line.find(' ');
    std::string code = space == std::string_view::npos ? "" : std::string(line.substr(space + 1, 3));
    t->response.status = std::atol(code.c_str());
  }
  add_header_line(line, t->response.headers);
  return size * count;
}

size_t on_body_in_memory(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  if (t->response.body.size() + n > t->max_body) {
    t->body_too_large = true;
    return 0;  // aborts the transfer
  }
  t->response.body.append(data, n);
  return n;
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

size_t on_body_to_file(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * count;
  const long status = t->response.status;
  if (status < 200 || status >= 300) {  // an error page: keep a little of it for the message
    size_t room = kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, t->response.body.size());
    t->response.body.append(data, std::min(n, room));
    return n;
  }
  if (!t->body_started) {
    t->body_started = true;
    // 200 to a Range request: the whole file comes again.
    int64_t start = status == 206 ? t->offset : 0;
    if (::ftruncate(t->fd, start) != 0 || ::lseek(t->fd, start, SEEK_SET) < 0) {
      t->write_failed = true;
      return 0;
    }
    t->file_size = start;
  }
  if (!write_all(t->fd, data, n)) {
    t->write_failed = true;
    return 0;
  }
  t->file_size += static_cast<int64_t>(n);
  if (t->on_bytes != nullptr && *t->on_bytes) (*t->on_bytes)(t->file_size);
  return n;
}

void set_common(CURL* curl, const std::string& url, HeaderList& headers, const std::string& token, Transfer& t,
                char* error_buffer) {
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "tern (huggingface_hub-compatible downloader)");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutSeconds);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  // The hub's sizes are those of the bytes on disk: no compression.
  headers.add("Accept-Encoding: identity");
  if (!token.empty()) headers.add("Authorization: Bearer " + token);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);
}

Result<HttpResponse> finish(CURL* curl, CURLcode code, Transfer& t, const std::string& url, const char* error_buffer) {
  char* effective = nullptr;
  curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &effective);
  t.response.url = effective != nullptr ? effective : url;
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status != 0) t.response.status = status;
  if (t.body_too_large) return out_of_range(url + ": the answer is larger than expected");
  if (t.write_failed) return io_error("cannot write the download to disk: " + std::string(std::strerror(errno)));
  if (code != CURLE_OK) {
    std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
    return io_error(url + ": " + detail);
  }
  return std::move(t.response);
}

}  // namespace

std::string url_encode(std::string_view text, bool keep_slash) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += c;
    } else {
      out += '%';
      out += kDigits[u >> 4];
      out += kDigits[u & 15];
    }
  }
  return out;
}

HttpClient::HttpClient() {
  init_curl_once();
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

Result<HttpResponse> HttpClient::head(const std::string& url, const std::string& token) {
  auto* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) return internal_error("libcurl could not start");
  Transfer t;
  HeaderList headers;
  char error_buffer[CURL_ERROR_SIZE] = {};
  set_common(curl, url, headers, token, t, error_buffer);
  curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, kSmallRequestTimeoutSeconds);
  CURLcode code = curl_easy_perform(curl);
  return finish(curl, code, t, url, error_buffer);
}

Result<HttpResponse> HttpClient::get(const std::string& url, const std::string& token, size_t max_bytes) {
  auto* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) return internal_error("libcurl could not start");
  Transfer t;
  t.max_body = max_bytes;
  HeaderList headers;
  char error_buffer[CURL_ERROR_SIZE] = {};
  set_common(curl, url, headers, token, t, error_buffer);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, kSmallRequestTimeoutSeconds);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body_in_memory);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  CURLcode code = curl_easy_perform(curl);
  return finish(curl, code, t, url, error_buffer);
}

Result<HttpResponse> HttpClient::download(const std::string& url, const std::string& token, const std::string& path,
                                          int64_t offset, const std::function<void(int64_t)>& on_bytes) {
  auto* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) return internal_error("libcurl could not start");
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open " + path + " for writing: " + std::strerror(errno));
  Transfer t;
  t.fd = fd;
  t.offset = offset;
  t.file_size = offset;
  t.on_bytes = &on_bytes;
  HeaderList headers;
  char error_buffer[CURL_ERROR_SIZE] = {};
  set_common(curl, url, headers, token, t, error_buffer);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body_to_file);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  std::string range = std::to_string(offset) + "-";
  if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  CURLcode code = curl_easy_perform(curl);
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  auto result = finish(curl, code, t, url, error_buffer);
  if (result.is_ok() && !synced) return io_error("cannot write " + path + " to disk");
  return result;
}

}  // namespace tern::hub
