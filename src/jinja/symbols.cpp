// The frame analysis of jinja2's idtracking.py (Symbols, RootVisitor,
// FrameSymbolVisitor) reduced to what changes rendering: which names a
// frame initialises as undefined (VAR_LOAD_UNDEFINED).
#include "jinja/symbols.h"

#include <set>
#include <string>

namespace tern::jinja {
namespace {

class Symbols {
 public:
  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  bool find_ref(const std::string& n) const {
    for (const Symbols* s = this; s != nullptr; s = s->parent_) {
      if (s->refs_.count(n) != 0) return true;
    }
    return false;
  }
  void load(const std::string& n) {
    if (!find_ref(n)) refs_.insert(n);
  }
  void store(const std::string& n) {
    stores_.insert(n);
    if (refs_.count(n) != 0) return;
    refs_.insert(n);
    if (parent_ == nullptr || !parent_->find_ref(n)) undefined_.insert(n);
  }
  void param(const std::string& n) {
    stores_.insert(n);
    refs_.insert(n);
    undefined_.erase(n);
  }
  // Symbols::branch_update: names first assigned inside if-branches resolve
  // from outside instead of starting undefined.
  void merge_branches(const std::vector<Symbols>& branches) {
    for (const Symbols& b : branches) {
      refs_.insert(b.refs_.begin(), b.refs_.end());
      stores_.insert(b.stores_.begin(), b.stores_.end());
    }
  }
  std::vector<std::string> undefined() const { return {undefined_.begin(), undefined_.end()}; }

 private:
  const Symbols* parent_;
  std::set<std::string> refs_;
  std::set<std::string> stores_;
  std::set<std::string> undefined_;
};

void visit_expr(const Expr* e, Symbols& s) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) {
    s.load(e->name);
    return;
  }
  visit_expr(e->target.get(), s);
  for (const ExprPtr& a : e->args) visit_expr(a.get(), s);
  for (const Keyword& k : e->kwargs) visit_expr(k.value.get(), s);
}

void visit_target(const Target& t, Symbols& s, bool as_param) {
  switch (t.kind) {
    case Target::Kind::kName:
      if (as_param) {
        s.param(t.name);
      } else {
        s.store(t.name);
      }
      return;
    case Target::Kind::kNamespaceAttr:
      s.load(t.name);
      return;
    case Target::Kind::kTuple:
      for (const Target& item : t.items) visit_target(item, s, as_param);
      return;
  }
}

void visit_body(const Body& body, Symbols& s);

// FrameSymbolVisitor: what a statement mentions at its own frame's level.
void visit_stmt(const Stmt& st, Symbols& s) {
  switch (st.kind) {
    case StmtKind::kData:
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      return;
    case StmtKind::kOutput:
      visit_expr(st.expr.get(), s);
      return;
    case StmtKind::kScope:
      visit_body(st.body, s);
      return;
    case StmtKind::kIf: {
      visit_expr(st.branches[0].test.get(), s);
      std::vector<Symbols> branches;
      branches.push_back(s);
      visit_body(st.branches[0].body, branches.back());
      if (st.branches.size() > 1) {
        Symbols elifs = s;
        for (size_t i = 1; i < st.branches.size(); ++i) {
          visit_expr(st.branches[i].test.get(), elifs);
          std::vector<Symbols> inner{elifs};
          visit_body(st.branches[i].body, inner.back());
          elifs.merge_branches(inner);
        }
        branches.push_back(std::move(elifs));
      }
      branches.push_back(s);
      visit_body(st.else_body, branches.back());
      s.merge_branches(branches);
      return;
    }
    case StmtKind::kFor:
      visit_expr(st.expr.get(), s);
      return;
    case StmtKind::kSet:
      visit_expr(st.expr.get(), s);
      visit_target(st.target, s, false);
      return;
    case StmtKind::kSetBlock:
      visit_target(st.target, s, false);
      return;
    case StmtKind::kMacro:
      s.store(st.name);
      return;
    case StmtKind::kWith:
      for (const auto& [target, value] : st.assignments) visit_expr(value.get(), s);
      return;
    case StmtKind::kFilterBlock:
      visit_expr(st.filter.get(), s);
      return;
  }
}

void visit_body(const Body& body, Symbols& s) {
  for (const StmtPtr& st : body) visit_stmt(*st, s);
}

void resolve_children(const Body& body, const Symbols& frame);

// Analyses the frames a statement opens, once its own frame is complete.
void resolve_stmt(Stmt& st, const Symbols& frame) {
  switch (st.kind) {
    case StmtKind::kIf:
      for (IfBranch& b : st.branches) resolve_children(b.body, frame);
      resolve_children(st.else_body, frame);
      return;
    case StmtKind::kScope:
      resolve_children(st.body, frame);
      return;
    case StmtKind::kFor: {
      Symbols body(&frame);
      body.param("loop");
      visit_target(st.target, body, true);
      visit_body(st.body, body);
      st.frame_undefined = body.undefined();
      resolve_children(st.body, body);
      Symbols otherwise(&frame);
      visit_body(st.else_body, otherwise);
      st.else_undefined = otherwise.undefined();
      resolve_children(st.else_body, otherwise);
      return;
    }
    case StmtKind::kMacro: {
      Symbols m(&frame);
      for (const MacroParam& p : st.params) m.param(p.name);
      if (st.catch_varargs) m.param("varargs");
      if (st.catch_kwargs) m.param("kwargs");
      for (const MacroParam& p : st.params) visit_expr(p.default_value.get(), m);
      visit_body(st.body, m);
      st.frame_undefined = m.undefined();
      resolve_children(st.body, m);
      return;
    }
    case StmtKind::kWith: {
      Symbols w(&frame);
      for (const auto& [target, value] : st.assignments) visit_target(target, w, true);
      visit_body(st.body, w);
      st.frame_undefined = w.undefined();
      resolve_children(st.body, w);
      return;
    }
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      Symbols b(&frame);
      visit_expr(st.filter.get(), b);
      visit_body(st.body, b);
      st.frame_undefined = b.undefined();
      resolve_children(st.body, b);
      return;
    }
    default:
      return;
  }
}

void resolve_children(const Body& body, const Symbols& frame) {
  for (const StmtPtr& st : body) resolve_stmt(*st, frame);
}

}  // namespace

void resolve_frames(Program& program) {
  Symbols root(nullptr);
  visit_body(program.body, root);
  program.root_undefined = root.undefined();
  resolve_children(program.body, root);
}

}  // namespace tern::jinja
