// Line input for `tern chat` over libedit (BSD licence): emacs key bindings,
// the session's history on the arrow keys, UTF-8 input. A SIGINT that
// arrives while a line is read ends that line (kInterrupted) if the caller's
// handler is installed without SA_RESTART. Input that is not a terminal is
// read line by line without editing. One editor per process, main thread.
#pragma once

#include <string>

struct editline;
struct history;

namespace tern::cli {

class LineEditor {
 public:
  enum class Outcome { kLine, kInterrupted, kEnd };

  LineEditor(const char* program, std::string prompt);
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  // A line without its newline; kEnd at end of input (Ctrl-D on an empty line).
  Outcome read_line(std::string& line);
  void add_history(const std::string& line);

  const std::string& prompt() const { return prompt_; }

 private:
  std::string prompt_;
  editline* editor_ = nullptr;
  history* history_ = nullptr;
};

}  // namespace tern::cli
