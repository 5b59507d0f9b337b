// Python operator semantics for the Jinja engine (see ops.h). Integer
// arithmetic is 64-bit and overflow is an error (Python would grow the int).
#include "jinja/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/text.h"

namespace tern::jinja {
namespace {

constexpr int kMaxPrintDepth = 512;
// repr() stops growing past this; the caller's output limit then fails the
// render. Values shared many times (through namespaces) could otherwise
// print exponentially much.
constexpr size_t kMaxReprBytes = 64u << 20;

// Namespaces being printed, so a namespace that contains itself prints as
// Python does ("<Namespace {...}>") instead of recursing.
using Active = std::vector<const void*>;

std::string quote_type(const JinjaValue& v) { return "'" + std::string(v.type_name()) + "'"; }

Status type_error(std::string m) { return invalid_argument(std::move(m)); }

Status undefined_error(const JinjaValue& v) { return invalid_argument(undefined_message(v)); }

void repr_into(std::string& out, const JinjaValue& v, int depth, Active& active);

void str_into(std::string& out, const JinjaValue& v, int depth, Active& active) {
  switch (v.kind()) {
    case JinjaValue::Kind::kUndefined:
      return;
    case JinjaValue::Kind::kString:
      out += v.as_string();
      return;
    default:
      repr_into(out, v, depth, active);
  }
}

void repr_into(std::string& out, const JinjaValue& v, int depth, Active& active) {
  if (depth > kMaxPrintDepth || out.size() > kMaxReprBytes) {
    out += "...";
    return;
  }
  switch (v.kind()) {
    case JinjaValue::Kind::kUndefined:
      out += "Undefined";
      return;
    case JinjaValue::Kind::kNone:
      out += "None";
      return;
    case JinjaValue::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case JinjaValue::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case JinjaValue::Kind::kFloat:
      out += py_float_repr(v.as_float());
      return;
    case JinjaValue::Kind::kString:
      out += py_repr_string(v.as_string());
      return;
    case JinjaValue::Kind::kList: {
      const JinjaList& l = v.as_list();
      if (l.is_iterator) {
        out += "<generator object>";
        return;
      }
      out += l.is_tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        repr_into(out, l.items[i], depth + 1, active);
      }
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      return;
    }
    case JinjaValue::Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, depth + 1, active);
        out += ": ";
        repr_into(out, val, depth + 1, active);
      }
      out += '}';
      return;
    }
    case JinjaValue::Kind::kNamespace: {
      const void* self = v.shared().get();
      if (std::find(active.begin(), active.end(), self) != active.end()) {
        out += "<Namespace {...}>";
        return;
      }
      active.push_back(self);
      out += "<Namespace ";
      repr_into(out, JinjaValue::dict(v.namespace_attrs()), depth + 1, active);
      out += '>';
      active.pop_back();
      return;
    }
    case JinjaValue::Kind::kCallable:
      out += "<function>";
      return;
  }
}

bool equal_at(const JinjaValue& a, const JinjaValue& b, int depth) {
  if (depth > kMaxPrintDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case JinjaValue::Kind::kUndefined:
    case JinjaValue::Kind::kNone:
      return true;
    case JinjaValue::Kind::kString:
      return a.as_string() == b.as_string();
    case JinjaValue::Kind::kList: {
      const JinjaList& x = a.as_list();
      const JinjaList& y = b.as_list();
      if (x.is_iterator || y.is_iterator) return a.shared() == b.shared();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal_at(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case JinjaValue::Kind::kDict: {
      const JinjaDict& x = a.as_dict();
      const JinjaDict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const JinjaValue* other = y.find(k);
        if (other == nullptr || !equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.shared() == b.shared();
  }
}

Result<int> compare_at(const JinjaValue& a, const JinjaValue& b, std::string_view op, int depth) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    double x = a.as_float();
    double y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);  // NaN compares as "equal" for every op but ==
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // byte order == code point order in UTF-8
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple && !a.as_list().is_iterator &&
      !b.as_list().is_iterator && depth < kMaxPrintDepth) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return type_error("'" + std::string(op) + "' not supported between instances of " + quote_type(a) + " and " +
                    quote_type(b));
}

Result<JinjaValue> repeat(const JinjaValue& seq, int64_t n, size_t max_size) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > max_size / s.size())
      return out_of_range("string repetition too large");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return JinjaValue::string(std::move(out));
  }
  const JinjaList& l = seq.as_list();
  if (!l.items.empty() && static_cast<uint64_t>(n) > max_size / 32 / l.items.size())
    return out_of_range("list repetition too large");
  std::vector<JinjaValue> items;
  items.reserve(l.items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
  return JinjaValue::list(std::move(items), l.is_tuple);
}

// CPython's float_divmod.
void float_divmod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0.0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
  }
  return "?";
}

Result<JinjaValue> int_op(BinaryOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) return out_of_range("integer overflow");
      return JinjaValue::integer(r);
    case BinaryOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) return out_of_range("integer overflow");
      return JinjaValue::integer(r);
    case BinaryOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) return out_of_range("integer overflow");
      return JinjaValue::integer(r);
    case BinaryOp::kDiv:
      if (y == 0) return invalid_argument("division by zero");
      return JinjaValue::number(static_cast<double>(x) / static_cast<double>(y));
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0)
        return invalid_argument(op == BinaryOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        if (op == BinaryOp::kMod) return JinjaValue::integer(0);
        return out_of_range("integer overflow");
      }
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return JinjaValue::integer(op == BinaryOp::kMod ? m : q);
    }
    case BinaryOp::kPow: {
      if (y < 0) {
        if (x == 0) return invalid_argument("0.0 cannot be raised to a negative power");
        return JinjaValue::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t result = 1;
      int64_t base = x;
      int64_t e = y;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(result, base, &result)) return out_of_range("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return out_of_range("integer overflow");
      }
      return JinjaValue::integer(result);
    }
  }
  return internal_error("bad operator");
}

Result<JinjaValue> float_op(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::kAdd:
      return JinjaValue::number(x + y);
    case BinaryOp::kSub:
      return JinjaValue::number(x - y);
    case BinaryOp::kMul:
      return JinjaValue::number(x * y);
    case BinaryOp::kDiv:
      if (y == 0.0) return invalid_argument("float division by zero");
      return JinjaValue::number(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0.0) return invalid_argument(op == BinaryOp::kMod ? "float modulo" : "float floor division by zero");
      double fd = 0;
      double m = 0;
      float_divmod(x, y, &fd, &m);
      return JinjaValue::number(op == BinaryOp::kMod ? m : fd);
    }
    case BinaryOp::kPow:
      if (x == 0.0 && y < 0) return invalid_argument("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) return unsupported("complex results of ** are not supported");
      return JinjaValue::number(std::pow(x, y));
  }
  return internal_error("bad operator");
}

}  // namespace

std::string undefined_message(const JinjaValue& v) {
  const std::string& hint = v.as_string();
  return hint.empty() ? "value is undefined" : hint;
}

std::string to_str(const JinjaValue& v) {
  std::string out;
  Active active;
  str_into(out, v, 0, active);
  return out;
}

std::string repr(const JinjaValue& v) {
  std::string out;
  Active active;
  repr_into(out, v, 0, active);
  return out;
}

bool py_equal(const JinjaValue& a, const JinjaValue& b) { return equal_at(a, b, 0); }

Result<int> py_compare(const JinjaValue& a, const JinjaValue& b, std::string_view op) {
  return compare_at(a, b, op, 0);
}

Result<bool> py_contains(const JinjaValue& container, const JinjaValue& item) {
  switch (container.kind()) {
    case JinjaValue::Kind::kUndefined:
      return false;
    case JinjaValue::Kind::kString:
      if (!item.is_string()) {
        if (item.is_undefined()) return undefined_error(item);
        return type_error("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case JinjaValue::Kind::kList:
      for (const JinjaValue& x : container.as_list().items) {
        if (py_equal(x, item)) return true;
      }
      return false;
    case JinjaValue::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      return type_error("argument of type " + quote_type(container) + " is not iterable");
  }
}

Result<JinjaValue> binary_op(BinaryOp op, const JinjaValue& a, const JinjaValue& b, size_t max_size) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_integral() && b.is_integral()) return int_op(op, a.as_int(), b.as_int());
  if (a.is_number() && b.is_number()) return float_op(op, a.as_float(), b.as_float());
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_size) return out_of_range("string too large");
      return JinjaValue::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple && !a.as_list().is_iterator &&
        !b.as_list().is_iterator) {
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      if (x.size() + y.size() > max_size / 32) return out_of_range("list too large");
      std::vector<JinjaValue> items;
      items.reserve(x.size() + y.size());
      items.insert(items.end(), x.begin(), x.end());
      items.insert(items.end(), y.begin(), y.end());
      return JinjaValue::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string()) {
      return type_error("can only concatenate str (not \"" + std::string(b.type_name()) + "\") to str");
    }
    if (a.is_list()) {
      return type_error("can only concatenate " + std::string(a.type_name()) + " (not \"" + std::string(b.type_name()) +
                        "\") to " + std::string(a.type_name()));
    }
  }
  if (op == BinaryOp::kMul) {
    auto repeatable = [](const JinjaValue& v) { return v.is_string() || (v.is_list() && !v.as_list().is_iterator); };
    if (repeatable(a) && b.is_integral()) return repeat(a, b.as_int(), max_size);
    if (repeatable(b) && a.is_integral()) return repeat(b, a.as_int(), max_size);
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    auto s = percent_format(a.as_string(), b, max_size);
    if (!s.is_ok()) return s.status();
    return JinjaValue::string(std::move(s).value());
  }
  return type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": " + quote_type(a) + " and " +
                    quote_type(b));
}

Result<JinjaValue> negate(const JinjaValue& v) {
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return out_of_range("integer overflow");
    return JinjaValue::integer(-v.as_int());
  }
  if (v.is_float()) return JinjaValue::number(-v.as_float());
  return type_error("bad operand type for unary -: " + quote_type(v));
}

Result<JinjaValue> unary_plus(const JinjaValue& v) {
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_integral()) return JinjaValue::integer(v.as_int());
  if (v.is_float()) return v;
  return type_error("bad operand type for unary +: " + quote_type(v));
}

Result<std::vector<JinjaValue>> iterate(const JinjaValue& v) {
  switch (v.kind()) {
    case JinjaValue::Kind::kUndefined:
      return std::vector<JinjaValue>{};
    case JinjaValue::Kind::kList:
      return v.as_list().items;
    case JinjaValue::Kind::kDict: {
      std::vector<JinjaValue> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& kv : v.as_dict().items()) keys.push_back(kv.first);
      return keys;
    }
    case JinjaValue::Kind::kString: {
      std::vector<JinjaValue> chars;
      for (char32_t c : decode_utf8(v.as_string())) {
        std::string s;
        append_utf8(s, c);
        chars.push_back(JinjaValue::string(std::move(s)));
      }
      return chars;
    }
    default:
      return type_error(quote_type(v) + " object is not iterable");
  }
}

Result<int64_t> py_len(const JinjaValue& v) {
  switch (v.kind()) {
    case JinjaValue::Kind::kUndefined:
      return int64_t{0};
    case JinjaValue::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.as_string()));
    case JinjaValue::Kind::kList:
      if (v.as_list().is_iterator) return type_error("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.as_list().items.size());
    case JinjaValue::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().size());
    default:
      return type_error("object of type " + quote_type(v) + " has no len()");
  }
}

Result<std::string> percent_format(const std::string& fmt, const JinjaValue& args, size_t max_size) {
  std::vector<JinjaValue> values;
  if (args.is_list() && args.as_list().is_tuple) {
    values = args.as_list().items;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (out.size() > max_size) return out_of_range("formatted string too large");
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string_view("-+ 0#").find(fmt[j]) != std::string_view::npos) spec += fmt[j++];
    while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9' && spec.size() < 8) spec += fmt[j++];
    if (j < fmt.size() && fmt[j] == '.') {
      spec += fmt[j++];
      while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9' && spec.size() < 12) spec += fmt[j++];
    }
    if (j >= fmt.size()) return invalid_argument("incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) return type_error("not enough arguments for format string");
    const JinjaValue& v = values[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? to_str(v) : repr(v);
      if (spec == "%") {
        out += text;
      } else {
        // Width and precision count characters; pad by hand for UTF-8.
        bool left = spec.find('-') != std::string::npos;
        size_t dot = spec.find('.');
        size_t w_begin = spec.find_first_of("123456789");
        long width = (w_begin != std::string::npos && (dot == std::string::npos || w_begin < dot))
                         ? std::atol(spec.c_str() + w_begin)
                         : 0;
        std::u32string cps = decode_utf8(text);
        if (dot != std::string::npos) {
          size_t prec = static_cast<size_t>(std::atol(spec.c_str() + dot + 1));
          if (cps.size() > prec) cps.resize(prec);
        }
        std::string body = encode_utf8(cps);
        std::string pad(width > static_cast<long>(cps.size()) ? static_cast<size_t>(width) - cps.size() : 0, ' ');
        out += left ? body + pad : pad + body;
      }
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number())
        return type_error("%" + std::string(1, conv) + " format: a real number is required, not " +
                          std::string(v.type_name()));
      long long n = v.is_float() ? static_cast<long long>(std::trunc(v.as_float())) : v.as_int();
      std::string s = spec + "ll" + (conv == 'i' ? 'd' : conv);
      std::snprintf(buf, sizeof(buf), s.c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
      if (!v.is_number()) return type_error("must be real number, not " + std::string(v.type_name()));
      std::string s = spec + conv;
      std::snprintf(buf, sizeof(buf), s.c_str(), v.as_float());
      out += buf;
    } else {
      return unsupported(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < values.size()) return type_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace tern::jinja
