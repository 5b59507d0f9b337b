// Python operator semantics on JinjaValue, as jinja2 evaluates them:
// str() and repr(), ==, ordering, `in`, arithmetic (with Python's floor
// division and modulo), iteration and len(). Errors are Python's TypeError
// and ZeroDivisionError messages, returned as Status.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "jinja/value.h"

namespace tern::jinja {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };

// The message of the error raised by using an undefined value.
std::string undefined_message(const JinjaValue& v);

// str(v) as `{{ v }}` prints it; undefined prints as "".
std::string to_str(const JinjaValue& v);
std::string repr(const JinjaValue& v);

bool py_equal(const JinjaValue& a, const JinjaValue& b);
// Ordering (<0, 0, >0) or a TypeError naming `op` ("<", ">=", ...).
Result<int> py_compare(const JinjaValue& a, const JinjaValue& b, std::string_view op);
// `item in container`.
Result<bool> py_contains(const JinjaValue& container, const JinjaValue& item);

// Results larger than `max_size` bytes (strings) or max_size / 32 items
// (lists) are refused.
Result<JinjaValue> binary_op(BinaryOp op, const JinjaValue& a, const JinjaValue& b, size_t max_size);
Result<JinjaValue> negate(const JinjaValue& v);
Result<JinjaValue> unary_plus(const JinjaValue& v);

// What `for x in v` visits: list items, dict keys, string characters;
// nothing for undefined.
Result<std::vector<JinjaValue>> iterate(const JinjaValue& v);
// len(v); undefined has length 0.
Result<int64_t> py_len(const JinjaValue& v);

// Python `str % args` for %s %r %d %i %f %x and %%.
Result<std::string> percent_format(const std::string& fmt, const JinjaValue& args, size_t max_size);

}  // namespace tern::jinja
