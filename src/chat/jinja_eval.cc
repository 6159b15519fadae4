// chat/jinja_eval.cc: the tree-walking evaluator. Scopes follow Jinja: a for-loop iteration
// and a macro call open a scope (so `set` inside a loop does not leak; namespace() objects are
// how templates carry state out), `if` does not.
#include "chat/jinja_eval.h"

#include <ctime>

#include "chat/jinja_builtins.h"

namespace kvw::jinja {
namespace {

// Bounds against hostile templates from untrusted model files: both far above what a chat
// template needs (a 1000-message conversation with a 10-deep macro chain).
constexpr int64_t kMaxLoopIterations = 10'000'000;
constexpr int kMaxMacroDepth = 64;
constexpr int64_t kMaxRangeSize = 1 << 16;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const ValueDict& globals, ItemStarts* item_starts) : item_starts_(item_starts) {
    scopes_.push_back(globals);
  }
  // Only namespaces are mutable, so every reference cycle (`set ns.me = ns`) runs through one:
  // emptying them frees the cycles the shared_ptrs alone would leak.
  ~Renderer() {
    for (Value& ns : namespaces_) ns.entries().items.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  Result<std::string> run(const NodeList& program) {
    std::string out;
    root_ = &out;
    auto flow = exec_list(program, &out);
    if (!flow.ok()) return flow.error();
    return out;
  }

 private:
  Result<Flow> exec_list(const NodeList& nodes, std::string* out);
  Result<Flow> exec(const Node& n, std::string* out);
  Result<Flow> exec_for(const Node& n, std::string* out);
  void note_item_start(const Value& item, size_t at) {
    const void* id = item.dict_identity();
    if (id == nullptr) return;
    auto it = item_starts_->index.find(id);
    if (it != item_starts_->index.end()) item_starts_->starts[it->second] = (int64_t)at;
  }
  Status exec_set(const Node& n, Value v);
  Result<Value> eval(const Expr& e);
  Result<Value> eval_binary(const Expr& e);
  Result<Value> eval_call(const Expr& e);
  Result<CallArgs> eval_args(const Expr& e, size_t first);
  Result<Value> call_global(const Expr& e, const std::string& name, const CallArgs& args);
  Result<Value> call_macro(const Expr& e, const Node& def, const CallArgs& args);

  Value lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > base_;) {
      if (const Value* v = scopes_[i].find(name)) return *v;
    }
    if (base_ > 0) {
      if (const Value* v = scopes_[0].find(name)) return *v;
    }
    return Value::undefined("'" + name + "' is undefined");
  }
  static Error error_at(const Expr& e, const std::string& what) {
    return Error{"chat template " + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " +
                 what};
  }
  static Error error_at(const Node& n, const std::string& what) {
    return Error{"chat template line " + std::to_string(n.line) + ": " + what};
  }

  std::vector<ValueDict> scopes_;  // [0]: globals and top-level sets; then loop/macro scopes
  size_t base_ = 0;                // a macro sees scopes_[0] and scopes_[base_..] only
  ValueList namespaces_;           // every namespace() this render created
  int64_t iterations_ = 0;
  int macro_depth_ = 0;
  ItemStarts* item_starts_ = nullptr;  // null: not traced
  const std::string* root_ = nullptr;  // the top-level output
};

Result<Flow> Renderer::exec_list(const NodeList& nodes, std::string* out) {
  for (const NodePtr& n : nodes) {
    auto flow = exec(*n, out);
    if (!flow.ok() || flow.value() != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Flow> Renderer::exec(const Node& n, std::string* out) {
  switch (n.kind) {
    case NodeKind::kText:
      *out += n.text;
      return Flow::kNormal;
    case NodeKind::kOutput: {
      auto v = eval(*n.expr);
      if (!v.ok()) return v.error();
      *out += v->str();
      if (out->size() > kMaxBuiltBytes * 4) return error_at(n, "rendered prompt exceeds 64 MiB");
      return Flow::kNormal;
    }
    case NodeKind::kIf:
      for (const auto& [cond, body] : n.branches) {
        auto c = eval(*cond);
        if (!c.ok()) return c.error();
        if (c->truthy()) return exec_list(body, out);
      }
      return exec_list(n.else_body, out);
    case NodeKind::kFor:
      return exec_for(n, out);
    case NodeKind::kSet: {
      auto v = eval(*n.expr);
      if (!v.ok()) return v.error();
      KVW_RETURN_IF_ERROR(exec_set(n, std::move(v.value())));
      return Flow::kNormal;
    }
    case NodeKind::kSetBlock: {
      std::string captured;
      auto flow = exec_list(n.body, &captured);
      if (!flow.ok()) return flow;
      KVW_RETURN_IF_ERROR(exec_set(n, Value::string(std::move(captured))));
      return Flow::kNormal;
    }
    case NodeKind::kMacro:
      scopes_.back().set(n.text, Value::macro(&n));
      return Flow::kNormal;
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Status Renderer::exec_set(const Node& n, Value v) {
  if (!n.attr.empty()) {
    Value target = lookup(n.targets[0]);
    if (!target.is_dict() || !target.entries().is_namespace)
      return error_at(n, "cannot set attribute '" + n.attr + "' on '" + n.targets[0] + "' (" +
                             target.type_name() + "): only namespace() objects can be changed");
    target.entries().set(n.attr, std::move(v));
    return {};
  }
  if (n.targets.size() == 1) {
    scopes_.back().set(n.targets[0], std::move(v));
    return {};
  }
  auto items = iterate(v);
  if (!items.ok()) return error_at(n, items.message());
  if (items->size() != n.targets.size())
    return error_at(n, "cannot unpack " + std::to_string(items->size()) + " values into " +
                           std::to_string(n.targets.size()) + " names");
  for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back().set(n.targets[i], (*items)[i]);
  return {};
}

Result<Flow> Renderer::exec_for(const Node& n, std::string* out) {
  auto seq = eval(*n.expr);
  if (!seq.ok()) return seq.error();
  auto all = iterate(seq.value());
  if (!all.ok()) return error_at(*n.expr, all.message());
  auto bind = [&](ValueDict& scope, const Value& item) -> Status {
    if (n.targets.size() == 1) {
      scope.set(n.targets[0], item);
      return {};
    }
    auto parts = iterate(item);
    if (!parts.ok() || parts->size() != n.targets.size())
      return error_at(
          n, "cannot unpack loop item into " + std::to_string(n.targets.size()) + " names");
    for (size_t i = 0; i < n.targets.size(); ++i) scope.set(n.targets[i], (*parts)[i]);
    return {};
  };
  ValueList items;
  if (n.filter) {  // `for x in xs if cond`: loop.* counts only the kept items
    for (const Value& item : all.value()) {
      scopes_.emplace_back();
      Status bound = bind(scopes_.back(), item);
      auto keep = bound.ok() ? eval(*n.filter) : Result<Value>(Error{bound.message()});
      scopes_.pop_back();
      if (!keep.ok()) return keep.error();
      if (keep->truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all.value());
  }
  if (items.empty()) return exec_list(n.else_body, out);
  const int64_t length = (int64_t)items.size();
  for (int64_t i = 0; i < length; ++i) {
    if (++iterations_ > kMaxLoopIterations)
      return error_at(n, "template exceeds the loop iteration budget");
    ValueDict loop;
    loop.items = {
        {"index", Value::integer(i + 1)},
        {"index0", Value::integer(i)},
        {"revindex", Value::integer(length - i)},
        {"revindex0", Value::integer(length - i - 1)},
        {"first", Value::boolean(i == 0)},
        {"last", Value::boolean(i == length - 1)},
        {"length", Value::integer(length)},
        {"previtem", i > 0 ? items[(size_t)i - 1] : Value::undefined("there is no previous item")},
        {"nextitem",
         i + 1 < length ? items[(size_t)i + 1] : Value::undefined("there is no next item")}};
    scopes_.emplace_back();
    scopes_.back().set("loop", Value::dict(std::move(loop)));
    if (item_starts_ != nullptr && out == root_) note_item_start(items[(size_t)i], out->size());
    Status bound = bind(scopes_.back(), items[(size_t)i]);
    auto flow = bound.ok() ? exec_list(n.body, out) : Result<Flow>(Error{bound.message()});
    scopes_.pop_back();
    if (!flow.ok()) return flow;
    if (flow.value() == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Result<Value> Renderer::eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const ExprPtr& a : e.args) {
        auto v = eval(*a);
        if (!v.ok()) return v;
        items.push_back(std::move(v.value()));
      }
      return e.kind == ExprKind::kTuple ? Value::tuple(std::move(items))
                                        : Value::list(std::move(items));
    }
    case ExprKind::kDict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        auto k = eval(*e.args[i]);
        if (!k.ok()) return k;
        auto v = eval(*e.args[i + 1]);
        if (!v.ok()) return v;
        d.set(k->str(), std::move(v.value()));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kAttr: {
      auto obj = eval(*e.args[0]);
      if (!obj.ok()) return obj;
      if (obj->is_undefined()) return error_at(e, obj->as_string());
      return get_attribute(obj.value(), e.name);
    }
    case ExprKind::kIndex: {
      auto obj = eval(*e.args[0]);
      if (!obj.ok()) return obj;
      if (obj->is_undefined()) return error_at(e, obj->as_string());
      auto key = eval(*e.args[1]);
      if (!key.ok()) return key;
      return subscript(obj.value(), key.value());
    }
    case ExprKind::kSlice: {
      auto obj = eval(*e.args[0]);
      if (!obj.ok()) return obj;
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.args[(size_t)i + 1]) continue;
        auto p = eval(*e.args[(size_t)i + 1]);
        if (!p.ok()) return p;
        parts[i] = std::move(p.value());
      }
      auto r = slice(obj.value(), &parts[0], &parts[1], &parts[2]);
      if (!r.ok()) return error_at(e, r.message());
      return r;
    }
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
    case ExprKind::kTest: {
      auto subject = eval(*e.args[0]);
      if (!subject.ok()) return subject;
      auto args = eval_args(e, 1);
      if (!args.ok()) return args.error();
      if (e.kind == ExprKind::kFilter) {
        auto r = apply_filter(e.name, subject.value(), args.value());
        if (!r.ok()) return error_at(e, r.message());
        return r;
      }
      auto r = apply_test(e.name, subject.value(), args.value());
      if (!r.ok()) return error_at(e, r.message());
      return Value::boolean(r.value() != e.negated);
    }
    case ExprKind::kUnary: {
      auto a = eval(*e.args[0]);
      if (!a.ok()) return a;
      auto r = unary_op(e.name, a.value());
      if (!r.ok()) return error_at(e, r.message());
      return r;
    }
    case ExprKind::kBinary:
      return eval_binary(e);
    case ExprKind::kCond: {
      auto c = eval(*e.args[1]);
      if (!c.ok()) return c;
      if (c->truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined");
    }
  }
  return error_at(e, "unknown expression");
}

Result<Value> Renderer::eval_binary(const Expr& e) {
  auto a = eval(*e.args[0]);
  if (!a.ok()) return a;
  // and/or short-circuit and return an operand, as in Python.
  if (e.name == "and" && !a->truthy()) return a;
  if (e.name == "or" && a->truthy()) return a;
  auto b = eval(*e.args[1]);
  if (!b.ok()) return b;
  if (e.name == "and" || e.name == "or") return b;
  auto r = binary_op(e.name, a.value(), b.value());
  if (!r.ok()) return error_at(e, r.message());
  return r;
}

Result<CallArgs> Renderer::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    auto v = eval(*e.args[i]);
    if (!v.ok()) return v.error();
    args.args.push_back(std::move(v.value()));
  }
  for (const auto& [k, x] : e.kwargs) {
    auto v = eval(*x);
    if (!v.ok()) return v.error();
    args.kwargs.emplace_back(k, std::move(v.value()));
  }
  return args;
}

Result<Value> Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  auto args = eval_args(e, 1);
  if (!args.ok()) return args.error();
  if (callee.kind == ExprKind::kAttr) {  // obj.method(...)
    auto obj = eval(*callee.args[0]);
    if (!obj.ok()) return obj;
    if (obj->is_undefined()) return error_at(callee, obj->as_string());
    const Value member = get_attribute(obj.value(), callee.name);
    if (member.kind() == ValueKind::kMacro) return call_macro(e, *member.macro_def(), args.value());
    auto r = call_method(obj.value(), callee.name, args.value());
    if (!r.ok()) return error_at(callee, r.message());
    return r;
  }
  if (callee.kind == ExprKind::kName) {
    const Value v = lookup(callee.name);
    if (v.kind() == ValueKind::kMacro) return call_macro(e, *v.macro_def(), args.value());
    if (v.is_undefined()) return call_global(e, callee.name, args.value());
    return error_at(callee, "'" + callee.name + "' (" + v.type_name() + ") is not callable");
  }
  auto v = eval(callee);
  if (!v.ok()) return v;
  if (v->kind() == ValueKind::kMacro) return call_macro(e, *v->macro_def(), args.value());
  return error_at(callee, std::string(v->type_name()) + " is not callable");
}

// The functions Hugging Face's chat-template environment provides; strftime_now formats the
// render's time (kNowGlobal) in UTC, so a caller can pin it.
Result<Value> Renderer::call_global(const Expr& e, const std::string& name, const CallArgs& args) {
  if (name == "raise_exception") {
    const Value* msg = args.get(0, "message");
    return Error{msg ? msg->str() : std::string("raise_exception() called")};
  }
  if (name == "namespace" || name == "dict") {
    ValueDict d;
    d.is_namespace = name == "namespace";
    for (const Value& a : args.args) {  // namespace(existing_dict) copies it
      if (!a.is_dict()) return error_at(e, name + "() positional argument must be a dict");
      for (const auto& [k, v] : a.entries().items) d.set(k, v);
    }
    for (const auto& [k, v] : args.kwargs) d.set(k, v);
    Value made = Value::dict(std::move(d));
    if (name == "namespace") namespaces_.push_back(made);
    return made;
  }
  if (name == "strftime_now") {
    const Value* fmt = args.get(0, "format");
    if (fmt == nullptr || !fmt->is_string() || fmt->str().size() > 64)
      return error_at(e, "strftime_now() takes a format string of at most 64 characters");
    const Value* now = scopes_[0].find(kNowGlobal);
    const std::time_t t = now != nullptr && now->is_int() ? (std::time_t)now->as_int() : 0;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
    return Value::string(std::string(buf, n));
  }
  if (name == "range") {
    int64_t bounds[3] = {0, 0, 1};
    if (args.args.empty() || args.args.size() > 3)
      return error_at(e, "range() takes 1 to 3 integers");
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (!args.args[i].is_int()) return error_at(e, "range() arguments must be integers");
    }
    if (args.args.size() == 1) {
      bounds[1] = args.args[0].as_int();
    } else {
      for (size_t i = 0; i < args.args.size(); ++i) bounds[i] = args.args[i].as_int();
    }
    if (bounds[2] == 0) return error_at(e, "range() step must not be zero");
    const int64_t span = bounds[2] > 0 ? bounds[1] - bounds[0] : bounds[0] - bounds[1];
    const int64_t step = bounds[2] > 0 ? bounds[2] : -bounds[2];
    const int64_t count = span <= 0 ? 0 : (span + step - 1) / step;
    if (count > kMaxRangeSize)
      return error_at(e, "range() too large: " + std::to_string(count) + " items");
    ValueList out;
    out.reserve((size_t)count);
    for (int64_t i = 0; i < count; ++i) out.push_back(Value::integer(bounds[0] + i * bounds[2]));
    return Value::list(std::move(out));
  }
  return error_at(e, "'" + name + "' is undefined or not a function");
}

Result<Value> Renderer::call_macro(const Expr& e, const Node& def, const CallArgs& args) {
  if (macro_depth_ >= kMaxMacroDepth) return error_at(e, "macro calls nested too deep");
  if (args.args.size() > def.targets.size())
    return error_at(
        e, "macro '" + def.text + "' takes " + std::to_string(def.targets.size()) + " arguments");
  const size_t saved_base = base_;
  scopes_.emplace_back();
  base_ = scopes_.size() - 1;
  ++macro_depth_;
  Status status;
  for (size_t i = 0; i < def.targets.size() && status.ok(); ++i) {
    const Value* given = args.get(i, def.targets[i]);
    if (given) {
      scopes_.back().set(def.targets[i], *given);
    } else if (def.defaults[i]) {
      auto d = eval(*def.defaults[i]);
      if (!d.ok())
        status = d.error();
      else
        scopes_.back().set(def.targets[i], std::move(d.value()));
    } else {
      scopes_.back().set(def.targets[i],
                         Value::undefined("parameter '" + def.targets[i] + "' was not provided"));
    }
  }
  std::string out;
  if (status.ok()) {
    auto flow = exec_list(def.body, &out);
    if (!flow.ok()) status = flow.error();
  }
  --macro_depth_;
  scopes_.resize(base_);
  base_ = saved_base;
  if (!status.ok()) return Error{status.message()};
  return Value::string(std::move(out));
}

}  // namespace

Result<std::string> render_template(const NodeList& program, const ValueDict& globals) {
  return Renderer(globals, nullptr).run(program);
}

Result<std::string> render_template(const NodeList& program, const ValueDict& globals,
                                    ItemStarts* item_starts) {
  return Renderer(globals, item_starts).run(program);
}

}  // namespace kvw::jinja
