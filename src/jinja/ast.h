// Syntax tree of a compiled chat template: expressions (jinja2's nodes.Expr
// family folded into one tagged struct) and statements. Built by the parser,
// walked by the interpreter, immutable in between (so one compiled template
// renders on many threads at once). Depth is bounded by the parser.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/ops.h"
#include "jinja/value.h"

namespace tern::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // args = items
  kTuple,     // args = items
  kDict,      // args = key0, value0, key1, value1, ...
  kGetattr,   // target.name
  kGetitem,   // target[args[0]]
  kSlice,     // args = start, stop, step (each may be null); only inside kGetitem
  kCall,      // target(args, kwargs)
  kFilter,    // target | name(args, kwargs); target is null in `{% filter %}` and `{% set x | f %}`
  kTest,      // target is name(args, kwargs)
  kNot,       // not target
  kNeg,       // -target
  kPos,       // +target
  kBinary,    // args[0] op args[1]
  kConcat,    // args joined with ~
  kCompare,   // target ops[0] args[0] ops[1] args[1] ... (Python chaining)
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  uint32_t line = 0;
  uint32_t column = 0;
  uint32_t depth = 1;  // height of this subtree
  JinjaValue value;
  std::string name;
  BinaryOp op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  ExprPtr target;
  std::vector<ExprPtr> args;
  std::vector<Keyword> kwargs;
};

// Left side of `set`, `for` and `with`: a name, `ns.attr`, or a tuple.
struct Target {
  enum class Kind : uint8_t { kName, kNamespaceAttr, kTuple };
  Kind kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
  uint32_t line = 0;
  uint32_t column = 0;
};

enum class StmtKind : uint8_t {
  kData,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches, else_body
  kFor,       // for target in expr [if filter]: body [else: else_body]
  kSet,       // set target = expr
  kSetBlock,  // set target [| filter]: body
  kMacro,     // macro name(params): body
  kBreak,
  kContinue,
  kWith,         // with assignments: body
  kFilterBlock,  // filter expr (a kFilter chain with a null innermost target): body
  kScope,        // body rendered in place, in the same scope ({% print %})
};

struct IfBranch {
  ExprPtr test;
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  uint32_t line = 0;
  uint32_t column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  Target target;
  std::vector<IfBranch> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
  bool catch_varargs = false;  // the macro body reads `varargs`
  bool catch_kwargs = false;   // the macro body reads `kwargs`
  std::vector<std::pair<Target, ExprPtr>> assignments;
  // Names that start undefined in the scope this statement opens (for body,
  // macro, with, set block, filter block) and in a for's else branch, even
  // when the context has them: jinja2 binds a name to the innermost frame
  // that assigns it before any read (see symbols.h).
  std::vector<std::string> frame_undefined;
  std::vector<std::string> else_undefined;
};

// A parsed template: its body and the top-level names that start undefined.
struct Program {
  Body body;
  std::vector<std::string> root_undefined;
};

}  // namespace tern::jinja
