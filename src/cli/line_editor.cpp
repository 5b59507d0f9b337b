// LineEditor over libedit's native interface (histedit.h).
#include "cli/line_editor.h"

#include <histedit.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace tern::cli {
namespace {

constexpr int kHistorySize = 1000;

// The terminal's mode before the editor, which the editor's end (or a signal handler) restores, once
// changed: the end-of-file character is off while the editor lives (see the header).
termios g_original{};
volatile std::sig_atomic_t g_changed = 0;

// The signals that end the process by default (SIGINT is the caller's); their dispositions before ours.
constexpr int kEndingSignals[] = {SIGTERM, SIGHUP, SIGQUIT};
struct sigaction g_previous[std::size(kEndingSignals)]{};

void restore_and_end(int sig) {
  if (g_changed) tcsetattr(STDIN_FILENO, TCSANOW, &g_original);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Until the editor's next read takes the terminal: its line discipline off (no line editing, no echo), so
// keys typed meanwhile wait for that read as typed.
void hold_keys() {
  termios line_mode{};
  if (!g_changed || tcgetattr(STDIN_FILENO, &line_mode) != 0 || (line_mode.c_lflag & ICANON) == 0) return;
  termios held = line_mode;
  held.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
  held.c_cc[VMIN] = 1;
  held.c_cc[VTIME] = 0;
  tcsetattr(STDIN_FILENO, TCSANOW, &held);
}

const char* prompt_of(EditLine* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineEditor*>(self)->prompt().c_str();
}

}  // namespace

LineEditor::LineEditor(const char* program, std::string prompt) : prompt_(std::move(prompt)) {
  // A Ctrl-D typed in the terminal's line mode is a plain character, not an end of file: the line mode the
  // editor takes as its own (and returns to after each read) is this one.
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_original) == 0) {
    termios no_eof = g_original;
    no_eof.c_cc[VEOF] = _POSIX_VDISABLE;
    g_changed = 1;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &no_eof) != 0) g_changed = 0;
  }
  // libedit decodes multibyte input by the locale: take the user's, or UTF-8 when it is plain C.
  const char* locale = std::setlocale(LC_CTYPE, "");
  if (locale == nullptr || std::strcmp(locale, "C") == 0 || std::strcmp(locale, "POSIX") == 0) {
    std::setlocale(LC_CTYPE, "C.UTF-8");
  }
  editor_ = el_init(program, stdin, stdout, stderr);
  history_ = history_init();
  HistEvent event;
  history(history_, &event, H_SETSIZE, kHistorySize);
  history(history_, &event, H_SETUNIQUE, 1);
  el_set(editor_, EL_CLIENTDATA, this);
  el_set(editor_, EL_PROMPT, prompt_of);
  el_set(editor_, EL_EDITOR, "emacs");
  el_set(editor_, EL_HIST, history, history_);
  el_source(editor_, nullptr);  // the user's ~/.editrc, if any
  if (g_changed) {
    struct sigaction action {};
    action.sa_handler = restore_and_end;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < std::size(kEndingSignals); ++i) sigaction(kEndingSignals[i], &action, &g_previous[i]);
  }
}

LineEditor::~LineEditor() {
  if (editor_ != nullptr) el_end(editor_);
  if (history_ != nullptr) history_end(history_);
  if (g_changed) {
    tcsetattr(STDIN_FILENO, TCSANOW, &g_original);
    g_changed = 0;
    for (size_t i = 0; i < std::size(kEndingSignals); ++i) sigaction(kEndingSignals[i], &g_previous[i], nullptr);
  }
}

LineEditor::Outcome LineEditor::read_line(std::string& line) {
  int count = 0;
  errno = 0;
  // The editor takes the terminal from the held mode as from its line mode (it adopts only a line mode as
  // its own, and restores that after the read), so nothing typed between reads is lost on the way.
  const char* text = el_gets(editor_, &count);
  hold_keys();
  if (text == nullptr) return count < 0 && errno == EINTR ? Outcome::kInterrupted : Outcome::kEnd;
  line.assign(text, static_cast<size_t>(count));
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return Outcome::kLine;
}

void LineEditor::add_history(const std::string& line) {
  HistEvent event;
  if (!line.empty()) history(history_, &event, H_ENTER, line.c_str());
}

}  // namespace tern::cli
