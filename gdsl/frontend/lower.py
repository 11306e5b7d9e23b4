"""Check statements and lower the instantiated model to IR.

The model named by the train block (or the only model) is interpreted with
its static arguments: `repeat` is unrolled, and each distinct layer
instantiation becomes a function called by `main` (the `inline` pass then
gives each call its own params). While building ops this module enforces the
stage rules of LANGUAGE.md and infers symbolic shapes through `ir.ops.infer`;
every violation becomes a located diagnostic, and a statement that failed
binds a poison value so one mistake reports once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from gdsl.diagnostics import DiagnosticBag, Span
from gdsl.frontend import ast
from gdsl.frontend.checker import CheckedProgram
from gdsl.ir.core import Func, Module, Op, Type, Value
from gdsl.ir.ops import (
    BINARY,
    REDUCERS,
    TYPED_BY_ATTR,
    ShapeError,
    StructuralError,
    broadcast_mode,
    fmt_shape,
    infer,
    same_dim,
)
from gdsl.passes.linearity import order_feasible

UNARY_FNS = ("relu", "elu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs")
# every name `builtin` answers (a layer may not take one: it would hide the builtin)
BUILTIN_FNS = UNARY_FNS + ("leaky_relu", "max", "min", "dot", "sum", "mean", "softmax", "log_softmax", "concat",
                           "reshape", "dropout", "edge_softmax", "flatten")
INITS = {"glorot": 0, "zeros": 0, "ones": 0, "normal": 1, "uniform": 1}
INIT_KEYWORDS = {"normal": "std", "uniform": "a"}   # the one argument's name
MAX_UNROLL = 1000
F32_MAX = 3.4028234663852886e38   # the largest finite f32: a larger number in a tensor op is inf there
MAX_DIM = 2 ** 40   # larger than any tensor axis: a typo, caught here, not as an overflow in torch


def _fresh(name: str, taken: str) -> str:
    """`name`, or `name` with a suffix when it is `taken` (a suggestion must not rebind the name it reads)."""
    return name if name != taken else name + "_e"


def _returns_in_repeat(stmts) -> bool:
    """A return somewhere in `stmts`, nested repeats included."""
    return any(isinstance(s, ast.Return) or (isinstance(s, ast.Repeat) and _returns_in_repeat(s.body)) for s in stmts)


class _Bail(Exception):
    """Abandon the current statement (its diagnostic is already recorded)."""


def sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name)


@dataclass
class Binding:
    value: Value | None = None      # a tensor
    static: Any = None              # a sympy expression (static arg / dim)
    sym: Any = None                 # its symbolic stand-in inside a layer (decides broadcasting)
    kind: str = ""                  # arg | input | param | <stage> | local | static
    span: Span = field(default_factory=Span)


@dataclass
class _Scope:
    """Where ops go and what names mean while lowering one body."""

    func: Func
    env: dict[str, Binding]
    in_layer: bool
    scope: str | None = None


def _needs_linearity(spec: str) -> str:
    """An order hint as order_feasible's question: anything but the plain
    sparse-first forward with autograd's backward reassociates `A X W`."""
    from gdsl.passes.order import parse_order
    fwd, bwd, memo = parse_order(spec)
    return "dense_first" if (fwd == "dense_first" or bwd == "sparse_first" or memo == "false") else "sparse_first"


class Lowerer:
    def __init__(self, prog: CheckedProgram, dims: dict[str, int] | None = None,
                 overrides: dict[str, Any] | None = None) -> None:
        self.prog = prog
        self.diags = DiagnosticBag()
        self.dims: dict[str, sympy.Expr] = {k: sympy.Integer(v) for k, v in (dims or {}).items()}
        self._global_dims: frozenset[str] | None = None
        self.overrides = overrides or {}
        self.poison: set[Value] = set()
        self.instances: dict[tuple, Func] = {}
        self.funcs: dict[str, Func] = {}
        self.call_count: dict[str, int] = {}
        self.called_layers: set[str] = set()
        # (layer, call span, its static arg names) of the layer calls being lowered
        self.call_sites: list[tuple[str, Span, dict, dict]] = []
        self.model_sources: dict[str, Any] = {}   # model static arg -> a note: where its value was given   # (layer, call span, static values, their exprs)
        self.cur_stage = "model"
        self.unrolled = 0   # repeat iterations unrolled so far (capped at MAX_UNROLL in all)
        # Feature shapes in terms of a layer's own static args and dims
        # (`[heads, dout]` even when heads = dout = 8): used only to decide
        # how operands broadcast, so the decision never depends on sizes.
        self.symshape: dict[Value, tuple] = {}

    # ---- helpers -----------------------------------------------------------
    def error(self, span: Span, msg: str, needs_data: bool = False, about: ast.Expr | None = None) -> None:
        """Report and bail; `about`: the static expression whose value is wrong, whose
        model arguments set in the train block or by --set get a note there."""
        notes = ()
        if self.call_sites:
            # an error in a layer body: which call gave the values it failed with (was:
            # only the body's line, for a layer that one call of several fails)
            name, where, statics, _ = self.call_sites[-1]
            args = ", ".join(f"{k} = {_fmt(v)}" for k, v in statics.items())
            notes = (self.diags.note(where, f"in this call of {name}" + (f" ({args})" if args else "")),)
        notes += tuple(self._value_sources(about)) if about is not None else ()
        self.diags.error(span, msg, notes, needs_data=needs_data)
        raise _Bail()

    def _value_sources(self, e: ast.Expr) -> list:
        """The notes of the model arguments `e` reads (through the static
        arguments of the one layer call being lowered): where they were set
        (was: only a dimension's error had them; a repeat count or dropout p
        from `--set` did not say so)."""
        names = {n.id for n in _names_in(e)}
        if self.call_sites:
            if len(self.call_sites) != 1:
                return []
            given = self.call_sites[-1][3]
            names = {m.id for n in names if given.get(n) is not None for m in _names_in(given[n])}
        return [self.model_sources[n] for n in sorted(names) if n in self.model_sources]

    def global_dim(self, name: str) -> sympy.Expr:
        return self.dims.get(name, sym(name))

    def emit(self, sc: _Scope, name: str, operands: list[Value], attrs: dict, span: Span, hint: str = "") -> Value:
        if any(v in self.poison for v in operands):
            raise _Bail()
        attrs = dict(attrs)
        if name in BINARY or name == "dot":
            self.decide_broadcast(name, operands, attrs)
        try:
            t = infer(name, [v.type for v in operands], attrs)
        except ShapeError as e:
            decl = operands[1].owner if name == "matmul" and operands[1].owner is not None else None
            # (needs data) only where a size the data binds is involved: a layer's own symbols (an uncalled
            # layer is checked with din, k, ...) are never bound by --data
            data = self._global_dim_names()
            unbound = not isinstance(e, StructuralError) and (
                any(_symbolic(v.type.shape, data) for v in operands) or _symbolic(attrs.get("shape", ()), data))
            if decl is not None and decl.name == "param":
                self.diags.error(span, str(e), (self.diags.note(decl.span, f"{decl.attrs['name']} declared here"),),
                                 needs_data=unbound)
                raise _Bail() from None
            self.error(span, str(e), needs_data=unbound)
        if sc.in_layer and name not in ("param", "input"):
            attrs.setdefault("stage", self.cur_stage)
        if sc.scope:
            attrs["scope"] = sc.scope
        v = Value(t, hint)
        sc.func.ops.append(Op(name, list(operands), v, attrs, span))
        if sc.in_layer and name not in TYPED_BY_ATTR:
            try:
                st = infer(name, [v.type.with_shape(self.symshape.get(v, v.type.shape)) for v in operands], attrs)
                self.symshape[v] = st.shape
            except ShapeError:
                pass  # symbolic shapes disagree where sizes agree: fall back to sizes
        return v

    def decide_broadcast(self, name: str, operands: list[Value], attrs: dict) -> None:
        cut = (lambda s: s[:-1]) if name == "dot" else (lambda s: s)
        concrete = [cut(v.type.shape) for v in operands]
        symbolic = [cut(self.symshape[v]) for v in operands if v in self.symshape]
        mode = None
        if len(symbolic) == 2:
            try:
                mode = broadcast_mode(*symbolic)
            except ShapeError:
                mode = None
        if mode is None:
            try:
                mode = broadcast_mode(*concrete)
            except ShapeError:
                return  # infer reports it
        if mode in ("lead", "trail"):
            attrs["broadcast"] = mode

    # ---- static expressions (shapes, static args, counts) ------------------
    def static(self, e: ast.Expr, env: dict[str, Binding], what: str | None = None, symbolic: bool = False) -> sympy.Expr:
        """Evaluate a static expression; `what` names it in errors (e.g. 'leaky_relu slope')."""
        match e:
            case ast.Number(value=v):
                return sympy.Integer(v) if isinstance(v, int) else sympy.Float(v)
            case ast.Name(id=n):
                b = env.get(n)
                if b is not None and symbolic and b.sym is not None:
                    return b.sym
                if b is not None and b.static is not None:
                    return b.static
                if b is not None and what:
                    self.error(e.span, f"{what} must be a static value (a number, dimension or static argument); "
                               f"'{n}' is a tensor")
                if b is not None:
                    self.error(e.span, f"'{n}' is a tensor; a static value (number or dimension) is needed here")
                if n in self.prog.layers or n in self.prog.models:
                    self.error(e.span, f"'{n}' is a {'layer' if n in self.prog.layers else 'model'}, not a number")
                if n in self.prog.inputs or n in self.prog.masks:   # e.g. GCN[hidden = X] in the train block
                    what_is = "an input tensor" if n in self.prog.inputs else "a mask"
                    self.error(e.span, f"'{n}' is {what_is}; a static value (number or dimension) is needed here")
                if n == "E":
                    self.error(e.span, "E (the edge count) is not a static value: it changes with the graph options")
                return self.global_dim(n) if n in self._global_dim_names() else self.error(e.span, f"undefined name '{n}'")
            case ast.Neg(operand=x):
                return -self.static(x, env, what, symbolic)
            case ast.BinOp(op=o, lhs=l, rhs=r) if o in "+-*/":
                a, b = self.static(l, env, what, symbolic), self.static(r, env, what, symbolic)
                if o == "/" and b == 0:
                    self.error(e.span, "division by zero")
                return {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[o]
        if what:
            self.error(e.span, f"{what} must be a static value (a number, dimension or static argument), "
                       f"got '{ast.format_expr(e)}'")
        self.error(e.span, f"expected a static expression (numbers, dimensions, static arguments), got '{ast.format_expr(e)}'")

    def _global_dim_names(self) -> frozenset[str]:
        """The data's dimension names: N, E, the bound dims and every name in an
        input's shape. Computed once (neither changes while lowering): was
        recomputed per shape, quadratic in the inputs (20000 inputs: minutes)."""
        if self._global_dims is None:
            names = set(self.dims) | {"N", "E"}
            for d in self.prog.inputs.values():
                for x in d.type.shape or []:
                    names |= {n.id for n in _names_in(x)}
            self._global_dims = frozenset(names)
        return self._global_dims

    def static_int(self, e: ast.Expr, env, what: str, lo: int | None = 0) -> int:
        """A static integer >= lo (lo None: any integer, as an axis, whose range
        the op's verifier checks against the tensor's axes)."""
        v = self.static(e, env, what)
        want = "an integer" if lo is None else f"an integer >= {lo}"
        if not v.is_number:
            self.error(e.span, f"{what} must be {want}, got {_fmt(v)}", needs_data=True)
        if not v.is_finite or v != int(v) or (lo is not None and int(v) < lo) or not v.is_Integer:
            got = e.text if isinstance(e, ast.Number) else _fmt(v)   # 1e-400 as written, not its 0.0
            # 0.0 from a literal such as 1e-400 (or a name bound to one) is an underflow, not a whole float
            zero_text = isinstance(e, ast.Number) and not any(c in "123456789" for c in e.text.split("e")[0])
            whole = v.is_finite and float(v).is_integer() and (lo is None or v >= lo) and (float(v) != 0 or zero_text)
            hint = f" (a float; write {int(v)})" if whole else ""   # repeat 2.0 (was: 'got 2.0', no hint)
            self.error(e.span, f"{what} must be {want}, got {got}{hint}", about=e)
        return int(v)

    def static_float(self, e: ast.Expr, env, what: str) -> float:
        v = self.static(e, env, what)
        if not v.is_number:
            self.error(e.span, f"{what} must be a number, got {_fmt(v)}", needs_data=True)
        if not v.is_finite:
            self.error(e.span, f"{what} must be a finite number, got {_fmt(v)}", about=e)
        if abs(float(v)) > F32_MAX:   # was: compiled, then torch's "cannot be converted to type float" (exit 3)
            self.error(e.span, f"{what} must be within f32's range (|x| <= 3.4e38), got {_fmt(v)}", about=e)
        return float(v)

    def const(self, sc: _Scope, value, span: Span, what: str) -> Value:
        """A number in a tensor expression: an f32 constant there (was: 1e400 read as inf, compiled)."""
        x = _num(value)
        if isinstance(x, (int, float)) and not abs(x) <= F32_MAX:
            self.error(span, f"{what} {_fmt(value)} is outside f32's range (|x| <= 3.4e38); the tensors it meets are "
                       "f32")
        return self.emit(sc, "const", [], {"value": x}, span)

    def shape(self, dims: list[ast.Expr], env, symbolic: bool = False) -> tuple:
        out = []
        for d in dims:
            v = self.static(d, env, symbolic=symbolic)
            problem, hint = None, ""
            if v.is_number and (not v.is_Integer or v <= 0):
                whole = v.is_finite and float(v).is_integer()   # 16.0: a float with a whole value
                hint = f" (a float; write {int(v)})" if whole and v > 0 else ""
                problem = f"must be a positive integer, got {_fmt(v)}{hint}"
            elif v.is_number and v > MAX_DIM:   # no tensor has such an axis (was: an overflow deep in torch)
                problem = f"is too large: {v} (at most 2**40)"
            if problem:
                site = self.call_sites[-1] if self.call_sites else None
                if site is not None and isinstance(d, ast.Name) and d.id in site[2]:
                    given = site[3].get(d.id)
                    default = None if given is not None else \
                        next((p.default for p in self.prog.layers[site[0]].static if p.name == d.id), None)
                    computed = given if given is not None else default
                    if hint and computed is not None and not isinstance(computed, (ast.Number, ast.Name)):
                        # computed (Lin[hidden * 2], or a default mid = dout * 2, with hidden = 2.5):
                        # 'write 5' would not be the fix
                        text = ast.format_expr(computed)
                        text = text[1:-1] if isinstance(computed, ast.BinOp) else text   # format_expr's outer ( )
                        text = text if given is not None else f"its default {text}"
                        problem = f"must be a positive integer, got {_fmt(v)} (the value of {text}, a float)"
                    # a static argument of the call being lowered: reported once, at the call, with where a
                    # model argument it reads was set (the train block, --set): the line to change
                    notes = [self.diags.note(d.span, f"'{d.id}' used as a dimension")]
                    if given is not None and len(self.call_sites) == 1:
                        notes += [self.model_sources[n.id] for n in _names_in(given) if n.id in self.model_sources]
                    elif default is not None:   # through the statics the default reads
                        notes += self._value_sources(default)
                    self.diags.error(site[1], f"{site[0]}'s static argument '{d.id}' is used as a dimension and "
                                     f"{problem}", tuple(notes))
                    raise _Bail()
                self.error(d.span, f"dimension {problem}", about=d)
            out.append(sympy.Integer(int(v)) if v.is_number else v)
        return tuple(out)

    # ---- entry -------------------------------------------------------------
    def run(self) -> Module | None:
        main = Func("main", [], [], [])
        env: dict[str, Binding] = {}
        sc = _Scope(main, env, in_layer=False)
        for name, d in self.prog.inputs.items():
            try:
                env[name] = Binding(self.input_value(sc, d), kind="input", span=d.span)
            except _Bail:  # reported; uses of the input stay silent
                pv = Value(Type("vertex"), name)
                self.poison.add(pv)
                env[name] = Binding(pv, kind="poison")
        for name, layer in self.prog.layers.items():
            if name in BUILTIN_FNS:
                self.diags.error(layer.name_at, f"layer '{name}' has the name of a builtin function; rename the layer")
        cfg = self.prog.train
        if cfg is not None and cfg.model:
            model = self.prog.models[cfg.model]
            args, kwargs = cfg.model_args, cfg.model_kwargs
        elif self.prog.models:
            model = next(iter(self.prog.models.values()))
            args, kwargs = [], []
        else:
            return None
        try:
            statics = self.bind_static(model.name, model.static, args, kwargs, {}, model.span, self.overrides)
        except _Bail:
            return None
        self.model_sources = self.model_value_notes(model, args, kwargs, statics)
        inputs = dict(env)
        for k, v in statics.items():
            env[k] = Binding(static=v, kind="static")
        self.cur_stage = "model"
        out = self.body(model.body, sc, is_layer=False, where=model)
        for other in self.prog.models.values():
            if other is not model:
                self.check_unselected(other, inputs)
        for name, layer in self.prog.layers.items():
            if name not in self.called_layers:
                self.check_uncalled(layer)
        if out is None:
            return None
        main.results = [out]
        if cfg is not None and cfg.loss is not None:
            self.lower_loss(sc, out, cfg)
        self.check_order_hints(main)
        m = Module(main, self.funcs)
        m.attrs["graph"] = dict(sorted(self.prog.graph_options.items()))
        if self.dims:
            m.attrs["dims"] = {k: int(v) for k, v in sorted(self.dims.items())}
        if self.prog.schedule:
            m.attrs["schedule"] = dict(sorted(self.prog.schedule.items()))
        if self.prog.order_hints:
            m.attrs["order_hints"] = {f"{h.layer}#{h.occurrence}": h.spec for h in self.prog.order_hints}
        return m

    def model_value_notes(self, model, args: list[ast.Expr], kwargs: list[ast.Kwarg], statics: dict) -> dict:
        """For each model static argument set outside the model (the train block's `model = M[...]`, or
        --set), a note saying where: an error at a use inside the model points there too."""
        notes = {}
        for p, a in zip(model.static, args):
            notes[p.name] = self.diags.note(a.span, f"{p.name} = {_fmt(statics[p.name])} is given here")
        for k in kwargs:
            if k.name in statics:
                notes[k.name] = self.diags.note(k.span, f"{k.name} = {_fmt(statics[k.name])} is given here")
        for p in model.static:
            if p.name in self.overrides:
                # gdsl run/compile --set and gdsl.compile(name=...) both come here
                notes[p.name] = self.diags.note(p.span, f"{p.name} = {_fmt(statics[p.name])} is set outside the "
                                                        f"program (--set {p.name}=... or gdsl.compile({p.name}=...))")
        return notes

    def input_value(self, sc: _Scope, d: ast.InputDecl) -> Value:
        if d.type.dtype == "label":
            classes = self.static(d.type.shape[0], {}) if d.type.shape else sympy.Integer(1)
            t = Type("vertex", "i64", ())
            return self.emit(sc, "input", [], {"name": d.name, "type": t, "classes": classes}, d.span, d.name)
        shape = self.shape(d.type.shape or [], {})
        t = Type(d.domain if d.domain in ("vertex", "edge") else "vertex", "f32", shape)
        return self.emit(sc, "input", [], {"name": d.name, "type": t}, d.span, d.name)

    def check_order_hints(self, main: Func) -> None:
        """An `order` hint must be able to hold: it needs an aggregation that
        feeds a `@`, and dense_first needs that aggregation to be linear."""
        calls = {op.attrs["scope"]: op for op in main.ops if op.name == "call"}
        for h in self.prog.order_hints:
            if h.layer not in self.prog.layers:
                self.diags.error(h.span, f"order hint names unknown layer '{h.layer}'")
            elif not 1 <= h.occurrence <= self.call_count.get(h.layer, 0):
                n = self.call_count.get(h.layer, 0)
                times = f"{n} time{'s' if n != 1 else ''}"
                self.diags.error(h.span, f"order hint for {h.layer}#{h.occurrence}: calls are numbered from #1 "
                                 f"(the model calls {h.layer} {times})" if h.occurrence < 1 else
                                 f"order hint for {h.layer}#{h.occurrence}, but the model calls {h.layer} {times} "
                                 f"(calls count from #1)")
            else:
                call = calls.get(f"{h.layer}_{h.occurrence}")
                if call is not None:
                    ok, why = order_feasible(self.funcs[call.attrs["callee"]], _needs_linearity(h.spec))
                    if not ok:
                        self.diags.error(h.value.span, f"order {h.spec} cannot hold for {h.layer}#{h.occurrence}: {why}")
        order = self.prog.schedule.get("order")
        if order not in (None, "auto"):
            span = self.prog.schedule_spans["order"]
            results = {op.attrs["scope"]: order_feasible(self.funcs[op.attrs["callee"]], _needs_linearity(order))
                       for op in calls.values() if op.attrs["callee"] in self.funcs}
            applicable = {k: r for k, r in results.items() if "no aggregation" not in r[1]}
            if not applicable:
                self.diags.error(span, f"order = {order} cannot hold: no layer call aggregates before a '@ param'")
            for scope, (ok, why) in applicable.items():
                if not ok:
                    self.diags.error(span, f"order = {order} cannot hold for {scope.replace('_', '#')}: {why}")
                    break

    def lower_loss(self, sc: _Scope, out: Value, cfg) -> None:
        spec = cfg.loss
        target = sc.env.get(spec.target)
        if target is None or target.value is None or target.value in self.poison:
            return
        t = target.value
        attrs = {"fn": spec.fn, "mask": spec.mask or "all"}
        if out.type.domain != "vertex":
            where = out.owner.span if out.owner is not None else None
            notes = (self.diags.note(where, "the model's return value"),) if where is not None and where.known else ()
            self.diags.error(spec.span, f"the model returns a {out.type.domain} value; the loss needs a vertex tensor", notes)
            return
        if spec.fn in ("cross_entropy", "nll"):
            classes = t.owner.attrs.get("classes")
            if len(out.type.shape) != 1:
                self.diags.error(spec.span, f"{spec.fn} needs model output [C], got {fmt_shape(out.type.shape)}")
                return
            if classes is not None and not same_dim(out.type.shape[0], classes):
                # `Lin[7](X)` against label[C] holds or fails only when C is bound from the data
                self.diags.error(spec.span, f"model output has {sympy.sstr(out.type.shape[0])} features but "
                                 f"'{spec.target}' has {sympy.sstr(classes)} classes",
                                 needs_data=_symbolic((out.type.shape[0], classes)))
                return
        elif spec.fn == "bce":
            if out.type.shape not in ((), (1,)) and t.type.dtype == "i64":
                self.diags.error(spec.span, f"bce with labels needs model output [] or [1], got {fmt_shape(out.type.shape)}")
                return
            scalar = ((), (1,))
            if t.type.dtype == "f32" and not (tuple(t.type.shape) in scalar and tuple(out.type.shape) in scalar) and (
                    len(t.type.shape) != len(out.type.shape)
                    or not all(same_dim(a, b) for a, b in zip(t.type.shape, out.type.shape))):
                # as mse (was: accepted, then torch's 'Target size ... must be the same as input size')
                self.diags.error(spec.span, f"bce: model output {fmt_shape(out.type.shape)} and target "
                                 f"{fmt_shape(t.type.shape)} differ",
                                 needs_data=_symbolic(tuple(out.type.shape) + tuple(t.type.shape)))
                return
            classes = t.owner.attrs.get("classes") if t.type.dtype == "i64" else None
            if classes is not None and classes.is_number and int(classes) > 2:
                self.diags.error(spec.span, f"bce needs 0/1 labels, but '{spec.target}' has {int(classes)} classes "
                                 "(use cross_entropy)")
                return
        elif spec.fn == "mse" and t.type.dtype != "f32":
            self.diags.error(spec.span, f"mse needs an f32 vertex input as its target; '{spec.target}' holds class labels "
                             "(use cross_entropy, or bce for two classes)")
            return
        elif spec.fn == "mse" and t.type.dtype == "f32":
            if len(t.type.shape) != len(out.type.shape) or not all(same_dim(a, b) for a, b in zip(t.type.shape, out.type.shape)):
                self.diags.error(spec.span, f"mse: model output {fmt_shape(out.type.shape)} and target {fmt_shape(t.type.shape)} differ",
                                 needs_data=_symbolic(tuple(out.type.shape) + tuple(t.type.shape)))
                return
        v = Value(Type("scalar", "f32", ()), "loss")
        sc.func.ops.append(Op("loss", [out, t], v, {**attrs, "keep": True}, spec.span))

    # ---- static arguments --------------------------------------------------
    def bind_static(self, name: str, params: list[ast.StaticParam], args: list[ast.Expr],
                    kwargs: list[ast.Kwarg], env, span: Span, overrides: dict | None = None) -> dict[str, sympy.Expr]:
        """Bind positional/keyword static args (evaluated in `env`), then defaults."""
        names = [p.name for p in params]
        if len(args) > len(params):
            self.error(args[len(params)].span, f"{name} takes {len(params)} static argument{'s' if len(params) != 1 else ''}, got {len(args)}")
        given: dict[str, sympy.Expr] = {}
        for p, a in zip(params, args):
            given[p.name] = self.static(a, env)
        for kw in kwargs:
            k = kw.name
            if k not in names:
                self.error(kw.span, f"{name} has no static argument '{k}'" + (f" (it has: {', '.join(names)})" if names else ""))
            if k in given:
                self.error(kw.span, f"static argument '{k}' of {name} is given twice")
            given[k] = self.static(kw.value, env)
        for k, v in (overrides or {}).items():
            if k not in names:
                self.error(span, f"{name} has no static argument '{k}' to override"
                           + (f" (it has: {', '.join(names)})" if names else " (it has none)"))
            if isinstance(v, bool) or not isinstance(v, (int, float)):   # never sympify a string: it runs code
                raise TypeError(f"static override {k}={v!r}: a number (int or float) is needed")
            given[k] = sympy.Integer(v) if isinstance(v, int) else sympy.Float(v)
        out: dict[str, sympy.Expr] = {}
        own_env = {k: Binding(static=v, kind="static") for k, v in given.items()}
        for p in params:
            if p.name in given:
                out[p.name] = given[p.name]
            elif p.default is not None:
                out[p.name] = self.static(p.default, {**own_env, **{k: Binding(static=v) for k, v in out.items()}})
            else:
                self.error(span, f"{name} needs a value for static argument '{p.name}'")
            own_env[p.name] = Binding(static=out[p.name], kind="static")
        return out

    # ---- bodies ------------------------------------------------------------
    def body(self, stmts: list[ast.Stmt], sc: _Scope, is_layer: bool, where) -> Value | None:
        result = None
        for i, s in enumerate(stmts):
            if result is not None:
                self.diags.error(s.span, "statement after return")
                break
            try:
                result = self.stmt(s, sc, is_layer)
            except _Bail:
                target = getattr(s, "target", None) or getattr(s, "name", None)
                if isinstance(s, ast.Return):
                    return None
                if target:
                    pv = Value(Type("vertex"), target)
                    self.poison.add(pv)
                    sc.env[target] = Binding(pv, kind="poison")
        if result is None and not any(isinstance(s, ast.Return) for s in stmts) and not _returns_in_repeat(stmts):
            # (a return only inside a repeat is reported there, 'return inside repeat', the root cause)
            kind = "layer" if is_layer else "model"
            self.diags.error(where.span, f"{kind} '{where.name}' has no return statement")
        return result

    def stmt(self, s: ast.Stmt, sc: _Scope, is_layer: bool) -> Value | None:
        match s:
            case ast.Return():
                self.cur_stage = "apply" if is_layer else "model"
                return self.expr(s.value, sc)
            case ast.ParamStmt() if is_layer:
                self.param(s, sc)
            case ast.StageStmt() if is_layer:
                self.stage(s, sc)
            case ast.Assign() if not is_layer:
                if len(s.values) != 1:
                    self.error(s.values[1].span, "one value per assignment")
                self.cur_stage = "model"
                first_new = len(sc.func.ops)
                v = self.expr(s.values[0], sc)
                if v.owner in sc.func.ops[first_new:]:
                    v.hint = s.target
                sc.env[s.target] = Binding(v, kind="local", span=s.span)
            case ast.Repeat() if not is_layer:
                n = self.static_int(s.count, sc.env, "repeat count")
                if n > MAX_UNROLL:
                    self.error(s.count.span, f"repeat count {n} is larger than {MAX_UNROLL}")
                # the cap is on the iterations unrolled in all: a nested repeat
                # counts again in each iteration of the one around it
                self.unrolled += n
                if self.unrolled > MAX_UNROLL:
                    self.error(s.count.span, f"the repeats unroll more than {MAX_UNROLL} iterations in all "
                                             "(a nested repeat counts once per outer iteration)")
                for _ in range(n):
                    for inner in s.body:
                        if self.stmt(inner, sc, is_layer) is not None:
                            self.error(inner.span, "return inside repeat (a repeat's body cannot return; "
                                                   "return after the repeat)")
            case ast.ParamStmt():
                self.error(s.span, "params are declared in layers, not models")
            case ast.StageStmt():
                self.error(s.span, f"'{s.stage}' statements belong in a layer; a model calls layers")
            case ast.Assign():
                self.error(s.span, f"a layer statement needs a stage: scatter, gather, transform, sync or apply {s.target} = ...")
            case ast.Repeat():
                self.error(s.span, "repeat is allowed in models only")
            case ast.OrderHint():
                self.error(s.span, "per-call hints belong in the schedule block")
        return None

    def param(self, s: ast.ParamStmt, sc: _Scope) -> None:
        if s.type.dtype != "f32":
            self.error(s.type.span, f"params are f32, not {s.type.dtype}")
        shape = self.shape(s.type.shape or [], sc.env)
        init, init_args = "glorot", []
        if s.init is not None:
            e = s.init
            if isinstance(e, ast.Name):
                init = e.id
            elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
                init = e.func.id
                given = list(e.args)
                for k in e.kwargs:   # normal(std = 0.1), uniform(a = 0.1): torch.nn.init's keyword names
                    if init in INITS and (k.name != INIT_KEYWORDS.get(init) or given):
                        want = INIT_KEYWORDS.get(init)
                        self.error(k.span, f"{init} takes " + (f"one argument: {init}(0.1) or {init}({want} = 0.1)"
                                                               if want else "no arguments"))
                    given.append(k.value)
                init_args = [self.static_float(a, sc.env, f"{init}'s argument") for a in given]
            else:
                self.error(e.span, "an init is a name like glorot or a call like normal(0.1)")
            if init not in INITS:
                self.error(e.span, f"unknown init '{init}' (expected one of glorot, zeros, ones, normal(std), uniform(a))")
            if len(init_args) != INITS[init]:
                self.error(e.span, f"init '{init}' takes {INITS[init]} argument{'s' if INITS[init] != 1 else ''}")
            if init_args and init_args[0] < 0:   # normal(std), uniform(a): U(-a, a)
                what = "std" if init == "normal" else "bound a of U(-a, a)"
                self.error(given[0].span, f"{init}'s {what} must be >= 0, got {init_args[0]:g}")
            if init == "uniform" and init_args and 2 * init_args[0] > F32_MAX:   # torch's uniform_ needs a - (-a) finite
                self.error(given[0].span, f"uniform's bound a of U(-a, a) must be at most 1.7e38 (the interval's "
                           f"width 2a within f32's range), got {init_args[0]:g}")
        prior = sc.env.get(s.name)
        if prior is not None and prior.kind == "param":
            self.error(s.span, f"param '{s.name}' is declared twice")
        if prior is not None and prior.kind in ("arg", "static"):
            what = "tensor argument" if prior.kind == "arg" else "static argument"
            # reported once; the argument keeps the name (no follow-on errors at its uses)
            self.diags.error(s.span, f"param '{s.name}' has the name of the layer's {what} '{s.name}'; rename one")
            return
        attrs = {"name": s.name, "init": init if not init_args else f"{init}({init_args[0]!r})",
                 "type": Type("param", "f32", shape)}
        v = self.emit(sc, "param", [], attrs, s.span, s.name)
        self.symshape[v] = self.shape(s.type.shape or [], sc.env, symbolic=True)
        sc.env[s.name] = Binding(v, kind="param", span=s.span)

    def stage(self, s: ast.StageStmt, sc: _Scope) -> None:
        self.cur_stage = s.stage
        e = s.value
        first_new = len(sc.func.ops)
        if s.stage == "gather":
            v = self.gather(e, sc)
        elif s.stage == "sync":
            v = self.sync(e, sc)
        else:
            if s.stage == "transform":
                self.check_transform_terms(e)
            v = self.expr(e, sc)
            want = "edge" if s.stage == "scatter" else "vertex"
            if v.type.domain != want:
                self.error(e.span, f"{s.stage} must produce a{'n' if want == 'edge' else ''} {want} tensor, "
                           f"got a {v.type.domain} value")
        if v.owner is not None and v.owner in sc.func.ops[first_new:]:
            v.hint = s.target
            if s.stage == "transform":
                v.owner.attrs["partial"] = True
        sc.env[s.target] = Binding(v, kind=s.stage, span=s.span)

    def check_transform_terms(self, e: ast.Expr) -> None:
        """P-TAGS transform: at most one `@ param` product per additive term."""
        def terms(x):
            if isinstance(x, ast.BinOp) and x.op in "+-":
                return terms(x.lhs) + terms(x.rhs)
            return [x]

        def matmuls(x):
            out = []
            if isinstance(x, ast.BinOp):
                out = matmuls(x.lhs) + matmuls(x.rhs)
                if x.op == "@":
                    out.append(x)
            elif isinstance(x, ast.Neg):
                out = matmuls(x.operand)
            elif isinstance(x, ast.Call):
                for a in x.args:
                    out += matmuls(a)
            return out

        for t in terms(e):
            ms = matmuls(t)
            if len(ms) > 1:
                # (the apply: concat(h @ W0, a @ W1) has no terms to split; was not said)
                self.diags.error(ms[-1].span if ms[-1].span.line else t.span,
                                 "a transform term may hold at most one '@ param' product; "
                                 "split it into two terms, or a chain (a @ W1 @ W2) into two transform "
                                 "statements or two layers, or compute it in an apply, which may hold any number")
                raise _Bail()

    def gather(self, e: ast.Expr, sc: _Scope) -> Value:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "edge_softmax":
            self.error(e.span, "edge_softmax is written in a scatter statement (it returns edge values; a gather "
                               "then reduces them)")   # as everywhere else but a scatter (was: the generic message)
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in REDUCERS):
            self.error(e.span, f"gather is r(m) with r one of {', '.join(REDUCERS)} and m an edge tensor")
        r = e.func.id
        if len(e.args) != 1 or not isinstance(e.args[0], ast.Name):
            self.error(e.span, f"gather reduces one edge tensor by name: {r}(m), with m defined by a scatter")
        to = "dst"
        for k in e.kwargs:
            if k.name != "to":
                self.error(k.span, f"unknown gather option '{k.name}' (expected to = src or dst)")
            if not (isinstance(k.value, ast.Name) and k.value.id in ("src", "dst")):
                self.error(k.value.span, "gather direction is to = src or to = dst")
            to = k.value.id
        arg = e.args[0]
        b = self.lookup(arg, sc, allow_vertex=True)
        if b.type.domain != "edge":
            self.error(arg.span, f"gather reduces edge tensors; '{arg.id}' is a {b.type.domain} tensor"
                       + (f" (write scatter {_fresh('m', arg.id)} = src.{arg.id} first)" if b.type.domain == "vertex" else ""))
        return self.emit(sc, "gather", [b], {"reduce": r, "to": to}, e.span)

    def sync(self, e: ast.Expr, sc: _Scope) -> Value:
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "sum"
                and len(e.args) == 1 and not e.kwargs):
            self.error(e.span, "sync is sum(t) of a transform result")
        arg = e.args[0]
        b = sc.env.get(arg.id) if isinstance(arg, ast.Name) else None
        if b is not None and b.value in self.poison:
            raise _Bail()  # its statement failed and said why
        if b is None and isinstance(arg, ast.Name) and not (sc.in_layer and arg.id in self.prog.inputs):
            self.lookup(arg, sc)   # undefined here (or a layer, a mask): says so (was: "'t' is not one")
        if b is None or b.kind != "transform":
            what = f"'{arg.id}'" if isinstance(arg, ast.Name) else "this expression"
            self.error(arg.span, f"sync needs a transform result; {what} is not one")
        return self.emit(sc, "sync", [b.value], {"op": "sum"}, e.span)

    # ---- expressions -------------------------------------------------------
    def lookup(self, n: ast.Name, sc: _Scope, allow_vertex: bool = False) -> Value:
        b = sc.env.get(n.id)
        if b is None and sc.in_layer and n.id in self.prog.inputs:
            decl = self.prog.inputs[n.id]
            saved, self.cur_stage = self.cur_stage, "input"
            try:
                b = sc.env[n.id] = Binding(self.input_value(sc, decl), kind="input", span=decl.span)
            finally:
                self.cur_stage = saved
        if b is None:
            if n.id in self.prog.layers:
                decl = self.prog.layers[n.id]   # its own static and tensor arguments (was: `L[static args](x)`)
                need = [p.name for p in decl.static if p.default is None]
                self.error(n.span, f"layer '{n.id}' must be called: {n.id}{'[' + ', '.join(need) + ']' if need else ''}"
                                   f"({', '.join(a.name for a in decl.args)})")
            if n.id in self.prog.masks:
                self.error(n.span, f"mask '{n.id}' is only used by loss and eval")
            if n.id in ("src", "dst"):
                self.error(n.span, f"'{n.id}' needs a field: {n.id}.x or {n.id}.degree")
            self.error(n.span, f"undefined name '{n.id}'")
        if b.static is not None:
            if not b.static.is_number:
                return self.emit(sc, "const", [], {"value": b.static}, n.span)
            return self.const(sc, b.static, n.span, f"'{n.id}' =")
        v = b.value
        if v in self.poison:
            raise _Bail()
        if v.type.domain == "vertex" and sc.in_layer and self.cur_stage == "scatter" and not allow_vertex:
            self.error(n.span, f"scatter cannot read vertex tensor '{n.id}' directly; write src.{n.id} or dst.{n.id}")
        if v.type.domain == "edge" and self.cur_stage not in ("scatter", "gather"):
            self.error(n.span, f"{self.cur_stage} cannot read edge tensor '{n.id}'; gather it first")
        if v.type.domain == "param" and not sc.in_layer:
            self.error(n.span, "params are read inside layers")
        if v.type.dtype == "i64":
            self.error(n.span, f"'{n.id}' holds labels; only the loss reads it")
        return v

    def expr(self, e: ast.Expr, sc: _Scope) -> Value:
        match e:
            case ast.Number():
                return self.const(sc, e.value, e.span, "the number")
            case ast.Name():
                return self.lookup(e, sc)
            case ast.Neg(operand=x):
                return self.emit(sc, "neg", [self.expr(x, sc)], {}, e.span)
            case ast.BinOp(op="@"):
                a, w = self.operands(e.lhs, e.rhs, sc)
                return self.emit(sc, "matmul", [a, w], {}, e.span)
            case ast.BinOp(op=o):
                a, b = self.operands(e.lhs, e.rhs, sc)
                if o == "/" and _static_value(e.rhs, sc.env) == 0:
                    # as in a static expression (was: compiled, then a NaN loss at epoch 1)
                    self.error(e.span, f"division by zero: '{ast.format_expr(e.rhs)}' is 0 here")
                return self.emit(sc, {"+": "add", "-": "sub", "*": "mul", "/": "div"}[o], [a, b], {}, e.span)
            case ast.Attr():
                return self.endpoint(e, sc)
            case ast.Call():
                return self.call(e, sc)
            case ast.Index(base=ast.Name(id=n)) if n in self.prog.layers:
                # with its own tensor arguments, as for a bare `L` (was `(x)`, also for a layer of two)
                args = ", ".join(a.name for a in self.prog.layers[n].args)
                self.error(e.span, f"layer '{n}' must be called: {ast.format_expr(e)}({args})")
            case ast.ListExpr():
                self.error(e.span, "a list is not a tensor")
            case ast.Index():
                # `x[0]`: brackets pass a layer's static arguments; a tensor is never subscripted
                # (was: "cannot use 'L[C](X)[0]' here"; helper-71)
                self.error(e.span, f"'{ast.format_expr(e)}': a tensor cannot be indexed; brackets pass a layer's "
                                   "static arguments")
        self.error(e.span, f"cannot use '{ast.format_expr(e)}' here")

    def operands(self, lhs: ast.Expr, rhs: ast.Expr, sc: _Scope) -> tuple[Value, Value]:
        """Both sides of a binary op; the right is still checked when the left failed."""
        try:
            a = self.expr(lhs, sc)
        except _Bail:
            self.expr(rhs, sc)
            raise
        return a, self.expr(rhs, sc)

    def endpoint(self, e: ast.Attr, sc: _Scope) -> Value:
        if not (isinstance(e.base, ast.Name) and e.base.id in ("src", "dst")):
            self.error(e.span, f"'{ast.format_expr(e)}': only src.x, dst.x, src.degree and dst.degree have fields")
        side = e.base.id
        if not sc.in_layer or self.cur_stage != "scatter":
            self.error(e.span, f"{side}.{e.attr} is read in a scatter statement only")
        if e.attr == "degree":
            b = sc.env.get("degree")
            # a tensor of the layer named degree (its argument, or a local defined before) shadows the
            # builtin (was: the argument only, so a local was silently not read; helper-74)
            if b is None or b.kind not in ("arg", "scatter", "gather", "transform", "sync", "apply"):
                deg = self.emit(sc, "degree", [], {}, e.span, "degree")
                return self.emit(sc, side, [deg], {}, e.span)
        if not any(e.attr in names for names in (sc.env, self.prog.inputs, self.prog.masks, self.prog.layers)):
            self.error(e.span, f"undefined name '{e.attr}' in {side}.{e.attr} ({side}. reads a vertex tensor "
                               f"of the layer, or {side}.degree)")
        v = self.lookup(ast.Name(e.attr, span=e.span), sc, allow_vertex=True)
        if v.type.domain != "vertex":
            self.error(e.span, f"{side}.{e.attr} needs a vertex tensor; '{e.attr}' is "
                                       f"{'an' if v.type.domain == 'edge' else 'a'} {v.type.domain} value")
        return self.emit(sc, side, [v], {}, e.span)

    def call(self, e: ast.Call, sc: _Scope) -> Value:
        f = e.func
        name = f.base if isinstance(f, ast.Index) else f
        if isinstance(name, ast.Name) and name.id in self.prog.layers and name.id in BUILTIN_FNS:
            raise _Bail   # a layer named like a builtin is reported at its name: no error at each call (helper-74)
        if isinstance(f, ast.Index) and isinstance(f.base, ast.Name) and f.base.id in self.prog.layers:
            return self.layer_call(f.base.id, f.args, f.kwargs, e, sc)
        if isinstance(f, ast.Name) and f.id in self.prog.layers:
            return self.layer_call(f.id, [], [], e, sc)
        model = f.base if isinstance(f, ast.Index) else f
        if isinstance(model, ast.Name) and model.id in self.prog.models:
            self.error(f.span, f"model '{model.id}' cannot be called; call layers from a model")
        if not isinstance(f, ast.Name):
            self.error(f.span, f"'{ast.format_expr(f)}' is not a function or layer")
        return self.builtin(f.id, e, sc)

    def _nargs(self, e: ast.Call, lo: int, hi: int, kw: tuple = ()) -> dict[str, ast.Expr]:
        """Check a builtin call's arguments: lo..hi positional ones; named
        options from `kw`, where option i may also be given as positional
        argument lo + i (dropout(x, 0.5) or dropout(x, p = 0.5), not both)."""
        name = e.func.id
        out = {}
        for k in e.kwargs:
            if k.name not in kw:
                self.error(k.span, f"{name} has no option '{k.name}'" + (
                    f" (options: {', '.join(kw)})" if kw else "; its arguments are positional"))
            if k.name in out:
                self.error(k.span, f"{name} option '{k.name}' is given twice")
            if len(e.args) > lo + kw.index(k.name):
                self.error(k.span, f"{name}'s '{k.name}' is given both positionally and by name")
            out[k.name] = k.value
        if not lo <= len(e.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            named = list(kw[hi - lo:]) if len(e.args) > hi else []   # options not taken positionally
            hint = f" (its options are named: {name}(x, {named[0]} = ...))" if named else ""   # softmax(x, axis = 0)
            self.error(e.span, f"{name} takes {want} argument{'s' if hi != 1 else ''}, got {len(e.args)}{hint}")
        return out

    def builtin(self, name: str, e: ast.Call, sc: _Scope) -> Value:
        s = e.span
        if name in UNARY_FNS:
            self._nargs(e, 1, 1)
            return self.emit(sc, name, [self.expr(e.args[0], sc)], {}, s)
        if name == "leaky_relu":
            kw = self._nargs(e, 1, 2, ("slope",))
            slope_e = e.args[1] if len(e.args) > 1 else kw.get("slope")
            slope = self.static_float(slope_e, sc.env, "leaky_relu slope") if slope_e is not None else 0.01
            return self.emit(sc, "leaky_relu", [self.expr(e.args[0], sc)], {"slope": slope}, s)
        if name in ("max", "min") and len(e.args) == 2:
            self._nargs(e, 2, 2)
            return self.emit(sc, name, [self.expr(e.args[0], sc), self.expr(e.args[1], sc)], {}, s)
        if name == "dot":
            self._nargs(e, 2, 2)
            return self.emit(sc, "dot", [self.expr(e.args[0], sc), self.expr(e.args[1], sc)], {}, s)
        if name in ("sum", "mean"):
            kw = self._nargs(e, 1, 2, ("axis",))
            ax_e = e.args[1] if len(e.args) > 1 else kw.get("axis")
            if ax_e is None:
                where = "a sync" if name == "sum" else "a gather"
                self.error(s, f"{name}(x, axis) reduces a feature axis; to reduce over edges use {name}(m) in {where if name == 'mean' else 'a gather'}")
            axis = self.static_int(ax_e, sc.env, f"{name} axis", lo=None)
            return self.emit(sc, "reduce", [self.expr(e.args[0], sc)], {"fn": name, "axis": axis}, s)
        if name in ("max", "min"):
            self.error(s, f"{name} takes two tensors here; to reduce messages write gather a = {name}(m)")
        if name in ("softmax", "log_softmax"):
            kw = self._nargs(e, 1, 1, ("axis",))
            axis = self.static_int(kw["axis"], sc.env, "axis", lo=None) if "axis" in kw else -1
            return self.emit(sc, name, [self.expr(e.args[0], sc)], {"axis": axis}, s)
        if name == "concat":
            if e.kwargs:   # was: "takes two or more tensors" for concat(a, b, axis = 0)
                self.error(e.kwargs[0].span, f"concat has no option '{e.kwargs[0].name}'; it joins "
                                             "its tensors along the last feature axis")
            if len(e.args) < 2:
                self.error(s, "concat takes two or more tensors")
            return self.emit(sc, "concat", [self.expr(a, sc) for a in e.args], {}, s)
        if name == "flatten":
            self._nargs(e, 1, 1)
            return self.emit(sc, "flatten", [self.expr(e.args[0], sc)], {}, s)
        if name == "reshape":
            self._nargs(e, 2, 2)
            if not isinstance(e.args[1], ast.ListExpr):
                self.error(e.args[1].span, "reshape's shape is a list, e.g. reshape(x, [heads, d])")
            shape = list(self.shape(e.args[1].items, sc.env))
            v = self.emit(sc, "reshape", [self.expr(e.args[0], sc)], {"shape": shape}, s)
            if sc.in_layer:   # the symbolic [heads, dout], so a later broadcast does not decide by sizes
                self.symshape[v] = self.shape(e.args[1].items, sc.env, symbolic=True)
            return v
        if name == "dropout":
            kw = self._nargs(e, 1, 2, ("p",))
            p_e = e.args[1] if len(e.args) > 1 else kw.get("p")
            p = self.static_float(p_e, sc.env, "dropout p") if p_e is not None else 0.5
            if not 0 <= p < 1:
                self.error((p_e or e).span, f"dropout p must be in [0, 1), got {p:g}", about=p_e)
            return self.emit(sc, "dropout", [self.expr(e.args[0], sc)], {"p": p}, s)
        if name == "edge_softmax":
            self._nargs(e, 1, 1)
            if not sc.in_layer or self.cur_stage != "scatter":
                self.error(s, "edge_softmax is written in a scatter statement")
            return self.emit(sc, "edge_softmax", [self.expr(e.args[0], sc)], {}, s)
        self.error(e.func.span, f"unknown function '{name}'")

    # ---- layers ------------------------------------------------------------
    def layer_call(self, name: str, args: list[ast.Expr], kwargs: list[ast.Kwarg], e: ast.Call, sc: _Scope) -> Value:
        if sc.in_layer:
            self.error(e.span, f"layers are called from a model, not from layer bodies ('{name}')")
        layer = self.prog.layers[name]
        statics = self.bind_static(name, layer.static, args, kwargs, sc.env, e.span)
        if e.kwargs:
            self.error(e.kwargs[0].span, f"{name} takes tensors positionally")
        if len(e.args) != len(layer.args):
            self.error(e.span, f"{name} takes {len(layer.args)} tensor argument{'s' if len(layer.args) != 1 else ''}, got {len(e.args)}")
        values = [self.expr(a, sc) for a in e.args]
        env: dict[str, Binding] = {k: Binding(static=v, kind="static", sym=sympy.Dummy(k)) for k, v in statics.items()}
        for decl, v, a in zip(layer.args, values, e.args):
            if v.type.domain != "vertex":
                self.error(a.span, f"{name} takes vertex tensors; argument '{decl.name}' got a {v.type.domain} value")
            self.match_shape(decl, v.type.shape, env, a.span, name)
        key = (name, tuple(sorted((k, sympy.srepr(v)) for k, v in statics.items())),
               tuple(tuple(sympy.srepr(d) for d in v.type.shape) for v in values))
        self.called_layers.add(name)  # a call that failed before here leaves the layer to check_uncalled
        func = self.instances.get(key)
        if func is None:
            exprs = {**{p.name: a for p, a in zip(layer.static, args)}, **{k.name: k.value for k in kwargs}}
            self.call_sites.append((name, e.span, dict(statics), exprs))
            try:
                func = self.lower_layer(layer, statics, env, [v.type for v in values])
            finally:
                self.call_sites.pop()
            self.instances[key] = func
        k = self.call_count.get(name, 0) + 1
        self.call_count[name] = k
        if func is None:
            raise _Bail()
        return self.emit(sc, "call", values, {"callee": func.name, "scope": f"{name}_{k}", "type": func.results[0].type,
                                             "layer": name, "static": {k2: _num(v2) for k2, v2 in statics.items()}}, e.span)

    def match_shape(self, decl: ast.LayerArg, actual: tuple, env: dict, span: Span, layer: str) -> None:
        if len(decl.shape) != len(actual):
            self.error(span, f"{layer} expects '{decl.name}' with shape {_fmt_decl(decl.shape)} "
                       f"({len(decl.shape)} feature {'axis' if len(decl.shape) == 1 else 'axes'}), got {fmt_shape(actual)}")
        for d, a in zip(decl.shape, actual):
            if isinstance(d, ast.Name) and d.id not in env and d.id not in self._global_dim_names():
                env[d.id] = Binding(static=a, kind="static", sym=sympy.Dummy(d.id))
                continue
            want = self.static(d, env)
            if not same_dim(want, a):
                # a size the data binds (`F` against a declared 1433) is checked again when bound (helper-1)
                self.error(span, f"{layer} expects '{decl.name}' with shape "
                           f"{_declared(decl.shape, [self.static(x, env) for x in decl.shape])}, got {fmt_shape(actual)}",
                           needs_data=_symbolic((want, a), self._global_dim_names()))

    def lower_layer(self, layer: ast.LayerDecl, statics: dict, env: dict, arg_types: list[Type]) -> Func | None:
        n = sum(1 for f in self.funcs if f.rsplit("_", 1)[0] == layer.name)
        func = Func(f"{layer.name}_{n}", [], [], [], attrs={"layer": layer.name, "static": {k: _num(v) for k, v in statics.items()}})
        lenv = dict(env)
        for decl, t in zip(layer.args, arg_types):
            v = Value(t, decl.name)
            func.args.append(v)
            lenv[decl.name] = Binding(v, kind="arg", span=decl.span)
            try:
                self.symshape[v] = self.shape(decl.shape, lenv, symbolic=True)
            except _Bail:
                pass
        lsc = _Scope(func, lenv, in_layer=True)
        saved = self.cur_stage
        out = self.body(layer.body, lsc, is_layer=True, where=layer)
        self.cur_stage = saved
        if out is None:
            return None
        try:
            want = self.shape(layer.result, lenv)
        except _Bail:
            return None
        ret = next((s for s in layer.body if isinstance(s, ast.Return)), layer)
        # what it returns, then its shape (was: a param of another shape was told only about its shape,
        # as if a reshape would do; helper-74)
        if out.type.domain != "vertex":   # at the return (was: at the layer's header)
            what = {"param": "a param", "edge": "an edge tensor", "scalar": "a scalar"}.get(out.type.domain)
            self.diags.error(ret.span, f"{layer.name} must return a vertex tensor" + (f", not {what}" if what else ""))
            return None
        if len(want) != len(out.type.shape) or not all(same_dim(a, b) for a, b in zip(want, out.type.shape)):
            self.diags.error(ret.span, f"{layer.name} returns {fmt_shape(out.type.shape)} but declares -> "
                             f"{_declared(layer.result, want)}",
                             needs_data=_symbolic(tuple(want) + tuple(out.type.shape), self._global_dim_names()))
            return None
        func.results = [out]
        self.funcs[func.name] = func
        return func

    def check_unselected(self, model: ast.ModelDecl, inputs: dict) -> None:
        """Check a model the train block does not select (its errors are the
        program's), with symbolic static args where it has no default; what it
        lowers is dropped."""
        env = dict(inputs)
        try:
            for p in model.static:
                val = self.static(p.default, env) if p.default is not None else sym(p.name)
                env[p.name] = Binding(static=val, kind="static")
        except _Bail:
            return
        saved = dict(self.funcs), dict(self.instances), dict(self.call_count)
        self.body(model.body, _Scope(Func(f"check_{model.name}", [], [], []), env, in_layer=False), is_layer=False, where=model)
        self.funcs, self.instances, self.call_count = saved
        self.cur_stage = "model"

    def check_uncalled(self, layer: ast.LayerDecl) -> None:
        """Check a layer no model calls, with symbolic static args and inputs."""
        env: dict[str, Binding] = {}
        try:
            for p in layer.static:
                val = self.static(p.default, env) if p.default is not None else sym(p.name)
                env[p.name] = Binding(static=val, kind="static")
            types = []
            for a in layer.args:
                shape = []
                for d in a.shape:
                    if isinstance(d, ast.Name) and d.id not in env and d.id not in self._global_dim_names():
                        env[d.id] = Binding(static=sym(d.id), kind="static")
                    shape.append(self.static(d, env))
                types.append(Type("vertex", "f32", shape))
        except _Bail:
            return
        saved = dict(self.funcs)
        self.lower_layer(layer, {k: b.static for k, b in env.items()}, env, types)
        self.funcs = saved


def _static_value(e: ast.Expr, env) -> sympy.Expr | None:
    """The value of `e` when it is built from numbers and static names
    (static arguments, dimensions) only; None when it reads a tensor."""
    match e:
        case ast.Number(value=v):
            return sympy.Integer(v) if isinstance(v, int) else sympy.Float(v)
        case ast.Name(id=n):
            b = env.get(n)
            return None if b is None or b.static is None else b.static
        case ast.Neg(operand=x):
            v = _static_value(x, env)
            return None if v is None else -v
        case ast.BinOp(op=o, lhs=l, rhs=r) if o in "+-*/":
            a, b = _static_value(l, env), _static_value(r, env)
            if a is None or b is None or (o == "/" and b == 0):
                return None
            return {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[o]
    return None


def _names_in(e: ast.Expr):
    if isinstance(e, ast.Name):
        yield e
    elif isinstance(e, ast.BinOp):
        yield from _names_in(e.lhs)
        yield from _names_in(e.rhs)
    elif isinstance(e, ast.Neg):
        yield from _names_in(e.operand)


def _fmt_decl(shape: list[ast.Expr]) -> str:
    return "[" + ", ".join(ast.format_expr(d) for d in shape) + "]"


def _declared(shape: list[ast.Expr], value) -> str:
    """A declared shape and its value, `[dout] = [16]` (just `[1433]` when they read alike)."""
    written, worth = _fmt_decl(shape), fmt_shape(value)
    return written if written == worth else f"{written} = {worth}"


def _fmt(v) -> str:
    """A static value for a message: 1.5 rather than sympy's 1.50000000000000,
    16.0 (not 16) for a float that happens to be whole."""
    if isinstance(v, sympy.Basic) and v.is_number:
        x = _num(v)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        x = v
    else:
        return sympy.sstr(v)
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return f"{x:.1f}"
    if isinstance(x, int):   # as written up to 30 digits (was: 1e+20 for 99999999999999999999)
        digits = str(abs(x))   # beyond, 1.00000e+400 (f"{x:g}" raised OverflowError)
        return str(x) if len(digits) <= 30 else f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:6]}e+{len(digits) - 1}"
    return f"{x:g}"


def _num(v):
    if isinstance(v, sympy.Basic) and v.is_number:
        return int(v) if v.is_Integer else float(v)
    return v


def _symbolic(shape, names: set[str] | None = None) -> bool:
    """Whether a shape has a dim that is still a symbol (bound by data); with
    `names`, a symbol of those names (the data's dims) must be in it."""
    return any(isinstance(d, sympy.Basic) and not d.is_number
               and (names is None or any(str(x) in names for x in d.free_symbols)) for d in (shape or ()))


def lower(prog: CheckedProgram, dims: dict[str, int] | None = None, overrides: dict | None = None) -> tuple[Module | None, DiagnosticBag]:
    low = Lowerer(prog, dims, overrides)
    m = low.run()
    return m, low.diags
