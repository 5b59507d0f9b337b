// LineEditor over libedit's native interface (histedit.h).
#include "cli/line_editor.h"

#include <histedit.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstring>

namespace tern::cli {
namespace {

constexpr int kHistorySize = 1000;

const char* prompt_of(EditLine* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineEditor*>(self)->prompt().c_str();
}

}  // namespace

LineEditor::LineEditor(const char* program, std::string prompt) : prompt_(std::move(prompt)) {
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
}

LineEditor::~LineEditor() {
  if (editor_ != nullptr) el_end(editor_);
  if (history_ != nullptr) history_end(history_);
}

LineEditor::Outcome LineEditor::read_line(std::string& line) {
  int count = 0;
  errno = 0;
  const char* text = el_gets(editor_, &count);
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
