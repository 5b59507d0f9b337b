// Progress of one file's download: a bar redrawn in place on a terminal
// (stderr), or a plain log line at every tenth of the file and at least
// every 15 seconds when stderr is a log.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tern::hub {

class DownloadProgress {
 public:
  // `start` bytes were already there (a resumed download).
  DownloadProgress(std::string file, int64_t total, int64_t start, bool terminal);

  void update(int64_t bytes);
  // Ends the bar's line on a terminal, and logs the file's time and speed.
  void finish(int64_t bytes);

  // The bar line, for tests: "model.safetensors  45% [#########           ] 325.2/721.1 MB  52.0 MB/s".
  static std::string bar_line(const std::string& file, int64_t bytes, int64_t total, double bytes_per_second,
                              int width);

 private:
  double speed(std::chrono::steady_clock::time_point now, int64_t bytes) const;

  std::string file_;
  int64_t total_;
  int64_t start_;
  bool terminal_;
  std::chrono::steady_clock::time_point began_;
  std::chrono::steady_clock::time_point last_draw_;
  int last_tenth_ = -1;
  bool drawn_ = false;
};

// True when stderr is a terminal that can redraw a line (not TERM=dumb).
bool stderr_is_terminal();

}  // namespace tern::hub
