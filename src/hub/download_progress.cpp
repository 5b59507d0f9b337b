// The download progress bar and log lines.
#include "hub/download_progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tern::hub {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr auto kLogAtLeastEvery = std::chrono::seconds(15);

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
}

DownloadProgress::DownloadProgress(std::string file, int64_t total, int64_t start, bool terminal)
    : file_(std::move(file)), total_(total), start_(start), terminal_(terminal),
      began_(std::chrono::steady_clock::now()), last_draw_(began_) {
  if (!terminal_) {
    if (start_ > 0) {
      spdlog::info("hub: {}: resuming at {} of {} MB", file_, megabytes(start_), megabytes(total_));
    } else {
      spdlog::info("hub: {}: downloading {} MB", file_, megabytes(total_));
    }
  }
}

double DownloadProgress::speed(std::chrono::steady_clock::time_point now, int64_t bytes) const {
  double seconds = std::chrono::duration<double>(now - began_).count();
  return seconds > 0 ? static_cast<double>(bytes - start_) / seconds : 0.0;
}

std::string DownloadProgress::bar_line(const std::string& file, int64_t bytes, int64_t total, double bytes_per_second,
                                       int width) {
  double fraction = total > 0 ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
  if (fraction > 1) fraction = 1;
  int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), ' ');
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s %3d%% [%s] %s/%s MB  %.1f MB/s", file.c_str(),
                static_cast<int>(fraction * 100), bar.c_str(), megabytes(bytes).c_str(), megabytes(total).c_str(),
                bytes_per_second / 1e6);
  return buf;
}

void DownloadProgress::update(int64_t bytes) {
  auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (drawn_ && now - last_draw_ < kRedrawEvery) return;
    last_draw_ = now;
    drawn_ = true;
    std::fprintf(stderr, "\r%s\033[K", bar_line(file_, bytes, total_, speed(now, bytes), 30).c_str());
    std::fflush(stderr);
    return;
  }
  int tenth = total_ > 0 ? static_cast<int>(bytes * 10 / total_) : 10;
  if (tenth == last_tenth_ && now - last_draw_ < kLogAtLeastEvery) return;
  if (tenth == last_tenth_ || tenth < 10) {
    spdlog::info("hub: {}: {}% ({} of {} MB, {:.1f} MB/s)", file_, total_ > 0 ? bytes * 100 / total_ : 100,
                 megabytes(bytes), megabytes(total_), speed(now, bytes) / 1e6);
  }
  last_tenth_ = tenth;
  last_draw_ = now;
}

void DownloadProgress::finish(int64_t bytes) {
  auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    std::fprintf(stderr, "\r%s\033[K\n", bar_line(file_, bytes, total_, speed(now, bytes), 30).c_str());
    std::fflush(stderr);
  }
  spdlog::info("hub: {}: {} MB in {:.1f} s", file_, megabytes(bytes - start_),
               std::chrono::duration<double>(now - began_).count());
}

}  // namespace tern::hub
