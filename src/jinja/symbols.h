// jinja2 resolves variables per frame at compile time (jinja2/idtracking.py):
// a frame (the template, a for body, a macro, ...) owns every name it
// mentions, and a name whose first mention in a frame is an assignment,
// with no enclosing frame mentioning it, starts out undefined there, hiding
// the context's value even before the assignment runs. Everything else is
// what a dynamic scope chain gives, so this pass only lists those names.
#pragma once

#include "jinja/ast.h"

namespace tern::jinja {

// Fills Program::root_undefined and Stmt::frame_undefined / else_undefined.
void resolve_frames(Program& program);

}  // namespace tern::jinja
