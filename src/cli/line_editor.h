// Line input for `tern chat` over libedit (BSD licence): emacs key bindings,
// the session's history on the arrow keys, UTF-8 input. A SIGINT that
// arrives while a line is read ends that line (kInterrupted) if the caller's
// handler is installed without SA_RESTART. Input that is not a terminal is
// read line by line without editing. One editor per process, main thread.
//
// Between reads, while the caller works on a line (an answer streams), keys
// typed on the terminal are held as typed: its line discipline is off (no
// echo; Ctrl-C still signals, and discards them), so the next read gets
// them, Ctrl-D included. In the terminal's line mode a Ctrl-D would be an
// end of file that reaches the editor, once it switches modes, as a NUL:
// lost. So that no Ctrl-D is lost in the moment between a read's end and
// the hold either, the line mode the editor returns to has no end-of-file
// character while the editor lives. The terminal's own mode comes back when
// the editor is destroyed, or when SIGTERM, SIGHUP or SIGQUIT ends the
// process.
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
