"""Declaration-level checks: names, graph options, inputs, train and schedule.

Produces a `CheckedProgram`: the declarations indexed by name plus the parsed
`train` and `schedule` blocks as plain config objects. Statement-level rules
(stages, shapes) are checked while lowering (frontend/lower.py), where every
name's domain and shape is known.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from gdsl.diagnostics import Diagnostic, DiagnosticBag, GdslError, Span
from gdsl.frontend import ast

GRAPH_OPTIONS = ("self_loops", "symmetric")
DTYPES = {"f32": "f32", "label": "i64"}
LOSSES = ("cross_entropy", "nll", "mse", "bce")
OPTIMIZERS = {"adam": ("lr", "weight_decay", "beta1", "beta2", "eps"),
              "adamw": ("lr", "weight_decay", "beta1", "beta2", "eps"),
              "sgd": ("lr", "momentum", "weight_decay", "nesterov")}
METRICS = ("accuracy",)
TRAIN_KEYS = ("model", "loss", "optimizer", "epochs", "eval", "batch_size", "fanout")
SCHEDULE_KEYS = ("target", "partition", "order", "delay", "cache", "pipeline")
# the partition hint takes what `gdsl run --partition` takes (dist/part.py parse_spec);
# a tuple's first word is the bare name's default; "int?": bare = the default (redistribute: R_A = P)
PARTITIONS = {"auto": None, "replicate": None, "rows": ("hash", "random", "metis", "block"),
              "rows_replicated": "int", "grid2d": None, "grid3d": None, "features": None,
              "redistribute": "int?", "vertex_cut": ("libra",), "edge_cut": ("metis",)}
ORDERS = ("auto", "sparse_first", "dense_first")


@dataclass
class LossSpec:
    fn: str
    target: str
    mask: str | None
    span: Span


@dataclass
class TrainConfig:
    name: str
    model: str
    model_args: list[ast.Expr]
    model_kwargs: list[ast.Kwarg]
    loss: LossSpec | None
    optimizer: str = "adam"
    optimizer_args: dict[str, float] = field(default_factory=lambda: {"lr": 0.01})
    epochs: int = 200
    eval: list[tuple[str, str | None]] = field(default_factory=list)
    batch_size: int | None = None
    fanout: list[int] | None = None
    span: Span = Span()
    model_span: Span = Span()   # the `model = ...` line (the block's header when it has none)


@dataclass
class CheckedProgram:
    ast: ast.Program
    source: str
    graph_name: str = "G"
    graph_options: dict[str, bool] = field(default_factory=dict)
    inputs: dict[str, ast.InputDecl] = field(default_factory=dict)
    masks: dict[str, Span] = field(default_factory=dict)
    layers: dict[str, ast.LayerDecl] = field(default_factory=dict)
    models: dict[str, ast.ModelDecl] = field(default_factory=dict)
    train: TrainConfig | None = None
    trains: dict[str, ast.TrainDecl] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    order_hints: list[ast.OrderHint] = field(default_factory=list)
    schedule_spans: dict[str, Span] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)   # severity "warning": compiled.warnings


ENDPOINTS = {"src": "source", "dst": "destination"}


MAX_DELAY = 2 ** 31 - 1   # cd-r's r, in epochs (a run refuses any r beyond its epochs)


def _finite(v: float | int) -> bool:
    """A finite float, or an integer within float's range (a 400-digit literal
    is an int here: math.isfinite raised OverflowError on it, an internal error)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _number(e: ast.Expr) -> float | int | None:
    if isinstance(e, ast.Number):
        return e.value
    if isinstance(e, ast.Neg) and isinstance(e.operand, ast.Number):
        return -e.operand.value
    return None


def _callee(e: ast.Expr) -> tuple[str | None, list[ast.Expr], list[ast.Kwarg]]:
    """`name`, `name(args)` or `name[args]` -> (name, args, kwargs)."""
    if isinstance(e, ast.Name):
        return e.id, [], []
    if isinstance(e, (ast.Call, ast.Index)) and isinstance(e.func if isinstance(e, ast.Call) else e.base, ast.Name):
        base = e.func if isinstance(e, ast.Call) else e.base
        return base.id, e.args, e.kwargs
    return None, [], []


class Checker:
    def __init__(self, program: ast.Program, source: str, train_name: str | None = None) -> None:
        self.p = program
        self.out = CheckedProgram(program, source)
        self.diags = DiagnosticBag()
        self.train_name = train_name
        self._defined: dict[str, tuple[str, Span]] = {}
        self._bad_inputs: set[str] = set()
        self._default_names: list[tuple[ast.Name, set[str]]] = []   # (a name in a default, the statics before it)

    def define(self, name: str, kind: str, span: Span) -> None:
        if name in self._defined:
            other_kind, other = self._defined[name]
            article = "an" if other_kind[0] in "aeiou" else "a"
            self.diags.error(span, f"'{name}' is already defined as {article} {other_kind} at line {other.line}")
        else:
            self._defined[name] = (kind, span)

    def run(self) -> CheckedProgram:
        graphs = self.p.of(ast.GraphDecl)
        for g in graphs[1:]:
            self.diags.error(g.span, "only one graph declaration is allowed")
        if graphs:
            g = graphs[0]
            self.out.graph_name = g.name
            for opt, sp in g.options:
                if opt not in GRAPH_OPTIONS:
                    self.diags.error(sp, f"unknown graph option '{opt}' (expected one of {', '.join(GRAPH_OPTIONS)})")
                elif opt in self.out.graph_options:
                    self.diags.error(sp, f"graph option '{opt}' is given twice")
                self.out.graph_options[opt] = True
        self.check_names_and_keywords(self.p)
        for d in self.p.decls:
            match d:
                case ast.InputDecl():
                    self.check_input(d)
                case ast.MaskDecl():
                    for name, sp in d.names:
                        self.define(name, "mask", sp)
                        self.out.masks[name] = sp
                case ast.LayerDecl():
                    self.define(d.name, "layer", d.span)
                    self.out.layers[d.name] = d
                    self.check_static_params(d.static)
                    statics, args = {p.name for p in d.static}, set()
                    for a in d.args:
                        if a.name in args:
                            self.diags.error(a.span, f"tensor argument '{a.name}' of {d.name} is declared twice")
                        elif a.name in statics:
                            self.diags.error(a.span, f"'{a.name}' is both a static and a tensor argument of {d.name}")
                        args.add(a.name)
                case ast.ModelDecl():
                    self.define(d.name, "model", d.span)
                    self.out.models[d.name] = d
                    self.check_static_params(d.static)
                case ast.TrainDecl():
                    if d.name in self.out.trains:
                        self.diags.error(d.span, f"train block '{d.name}' is defined twice")
                    self.out.trains[d.name] = d
                case ast.ScheduleDecl():
                    if self.out.schedule or self.out.order_hints:
                        self.diags.error(d.span, "only one schedule block is allowed")
                    self.check_schedule(d)
        self.check_default_names()
        if not self.p.decls:
            self.diags.error(Span(1, 1, 1, 2, self.p.file), "the program is empty: it declares no model")
        elif not self.out.models:
            self.diags.error(Span(1, 1, 1, 2, self.p.file), "the program declares no model")
        self.pick_train()
        return self.out

    def check_names_and_keywords(self, program: ast.Program) -> None:
        """Over the whole program: `f(k = 1, k = 2)` is an error (Python's rule),
        never "the last wins"; and no declaration, argument, param or local
        may be named `src` or `dst`, which read an edge's endpoints (was: `apply
        src = h * 2` compiled, and `src.h` after it still read the endpoint)."""
        for d in program.decls:
            binds = isinstance(d, (ast.InputDecl, ast.MaskDecl, ast.LayerDecl, ast.ModelDecl))
            for node in _nodes(d):
                if isinstance(node, (ast.Call, ast.Index)):
                    self.check_repeated_keywords(node)
                elif binds and isinstance(node, ast.MaskDecl):
                    for name, span in node.names:
                        self.check_not_an_endpoint(name, span)
                elif binds and isinstance(node, (ast.StageStmt, ast.Assign)):
                    self.check_not_an_endpoint(node.target, node.span)
                elif binds and isinstance(node, (ast.Decl, ast.ParamStmt, ast.StaticParam, ast.LayerArg)):
                    self.check_not_an_endpoint(node.name, node.span)

    def check_not_an_endpoint(self, name: str, span: Span) -> None:
        if name in ENDPOINTS:
            self.diags.error(span, f"'{name}' cannot name a value: {name}.x and {name}.degree read an edge's "
                             f"{ENDPOINTS[name]} vertex")

    def check_repeated_keywords(self, node: ast.Call | ast.Index) -> None:
        callee = node.func if isinstance(node, ast.Call) else node.base
        seen: set[str] = set()
        for k in node.kwargs:
            if k.name not in seen:
                seen.add(k.name)
            elif isinstance(node, ast.Index) and isinstance(callee, ast.Name):
                self.diags.error(k.span, f"static argument '{k.name}' of {callee.id} is given twice")
            elif isinstance(callee, ast.Name):
                self.diags.error(k.span, f"{callee.id} option '{k.name}' is given twice")
            else:
                self.diags.error(k.span, f"keyword argument '{k.name}' is given twice")

    # ---- declarations
    def check_input(self, d: ast.InputDecl) -> None:
        if d.name in self._defined:   # reported once; the first declaration stands (no follow-on errors)
            self.define(d.name, "input", d.span)
            return
        self.define(d.name, "input", d.span)
        if d.domain not in ("vertex", "edge"):
            # at the word (was: the whole declaration; helper-74)
            self.diags.error(d.domain_span if d.domain_span.known else d.span,
                             f"unknown domain '{d.domain}' for input '{d.name}' (expected vertex or edge)")
        if d.type.dtype not in DTYPES:
            self.diags.error(d.type.span, f"unknown element type '{d.type.dtype}' (expected f32 or label)")
        elif d.type.dtype == "label":
            if d.domain != "vertex":
                self.diags.error(d.type.span, "labels are vertex inputs")
                self._bad_inputs.add(d.name)   # reported here; its uses are not reported again
            if not d.type.shape or len(d.type.shape) != 1:
                self.diags.error(d.type.span, "a label input names its class count: label[C]")
        self.out.inputs[d.name] = d

    def check_static_params(self, ps: list[ast.StaticParam]) -> None:
        seen = set()
        for i, p in enumerate(ps):
            if p.name in seen:
                self.diags.error(p.span, f"static argument '{p.name}' is declared twice")
            seen.add(p.name)
            # a default may use the static arguments declared before it (LANGUAGE.md), not
            # itself or later ones (was: reported only by a call that used the default)
            later = {q.name for q in ps[i:]}
            for n in _names(p.default):
                if n.id in later:
                    what = "itself" if n.id == p.name else f"'{n.id}', declared after it"
                    self.diags.error(n.span, f"the default of static argument '{p.name}' refers to {what} "
                                             "(a default may use the static arguments before it)")
                else:
                    self._default_names.append((n, {q.name for q in ps[:i]}))

    def check_default_names(self) -> None:
        """A name in a default that nothing defines is an error where it is
        written, used or not (was: reported only when a call took the default;
        a default every call overrode was never checked). Names of other kinds
        (a layer, an input, E) are reported by lowering where the default is
        taken, with what they are."""
        known = {"N", "E"} | set(self.out.inputs) | set(self.out.masks) | set(self.out.layers) | set(self.out.models)
        for d in self.out.inputs.values():
            known |= {n.id for x in d.type.shape or [] for n in _names(x)}
        for n, before in self._default_names:
            if n.id not in known and n.id not in before:
                self.diags.error(n.span, f"undefined name '{n.id}'")

    # ---- train
    def pick_train(self) -> None:
        trains = self.out.trains
        if not trains:
            if self.train_name is not None:   # was: ignored (exit 0) where a program with train blocks refuses it
                raise GdslError(f"{self.p.file}: no train block named '{self.train_name}' (the program has none)")
            return
        if self.train_name is not None:
            if self.train_name not in trains:   # the caller's choice (--train), not a place in the source
                raise GdslError(f"{self.p.file}: no train block named '{self.train_name}' (have: {', '.join(trains)})")
            decl = trains[self.train_name]
        else:
            decl = next(iter(trains.values()))
        for d in trains.values():  # check all of them, use one
            cfg = self.check_train(d)
            if d is decl:
                self.out.train = cfg

    def check_train(self, d: ast.TrainDecl) -> TrainConfig | None:
        cfg = TrainConfig(d.name, "", [], [], None, span=d.span)
        seen: dict[str, Span] = {}
        for s in d.body:
            if not isinstance(s, ast.Assign):
                self.diags.error(s.span, "a train block holds only 'key = value' lines")
                continue
            if s.target not in TRAIN_KEYS:
                self.diags.error(s.span, f"unknown train setting '{s.target}' (expected one of {', '.join(TRAIN_KEYS)})")
                continue
            if s.target in seen:
                self.diags.error(s.span, f"train setting '{s.target}' is given twice")
                continue
            seen[s.target] = s.span
            if s.target != "eval" and len(s.values) != 1:
                self.diags.error(s.values[1].span, f"'{s.target}' takes one value")
            getattr(self, f"train_{s.target}")(cfg, s.values)
        cfg.model_span = seen.get("model", d.span)
        if "model" not in seen:
            if len(self.out.models) == 1:
                cfg.model = next(iter(self.out.models))
            else:
                self.diags.error(d.span, f"train block '{d.name}' names no model (model = NAME)")
        if "loss" not in seen:
            self.diags.error(d.span, f"train block '{d.name}' names no loss (loss = cross_entropy(Y, mask = train))")
        elif "eval" in seen and cfg.loss is not None and cfg.eval:
            inp = self.out.inputs.get(cfg.loss.target)
            if inp is not None and inp.type.dtype != "label":   # trainer.reports_accuracy (was: dropped silently)
                self.out.warnings.append(Diagnostic(
                    seen["eval"], f"eval is not reported: accuracy compares the predicted class with class labels, "
                                  f"and the loss's target '{cfg.loss.target}' is {inp.type.dtype}, not a label input",
                    "warning"))
        return cfg

    def train_model(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        e = vals[0]
        name, args, kwargs = _callee(e)
        if name is None or isinstance(e, ast.Call):
            self.diags.error(e.span, "model = NAME or NAME[static args]")
            return
        if name not in self.out.models:
            self.diags.error(e.span, f"unknown model '{name}'" + (f" ('{name}' is a layer)" if name in self.out.layers else ""))
            return
        cfg.model, cfg.model_args = name, args
        cfg.model_kwargs = list(kwargs)

    def train_loss(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        e = vals[0]
        name, args, kwargs = _callee(e)
        if name in LOSSES and not isinstance(e, ast.Call):
            self.diags.error(e.span, f"the loss is called with the target input: {name}(Y, mask = train)")
            return
        if not isinstance(e, ast.Call) or name not in LOSSES:   # (was: "unknown loss", not naming it)
            self.diags.error(e.span, f"unknown loss '{name or ast.format_expr(e)}' (expected one of "
                                     f"{', '.join(LOSSES)}, called with the target input)")
            return
        if len(args) != 1 or not isinstance(args[0], ast.Name):
            self.diags.error(e.span, f"{name} takes the target input as its one argument: {name}(Y, mask = train)")
            return
        target = args[0].id
        inp = self.out.inputs.get(target)
        if target in self._bad_inputs:
            pass
        elif inp is None or inp.domain != "vertex":
            self.diags.error(args[0].span, f"loss target '{target}' is not a vertex input")
        elif name in ("cross_entropy", "nll") and inp.type.dtype != "label" and inp.type.dtype in DTYPES:
            self.diags.error(args[0].span, f"{name} needs a label input; '{target}' is {inp.type.dtype}")
        mask = None
        for k in kwargs:
            if k.name != "mask":
                self.diags.error(k.span, f"unknown loss option '{k.name}' (expected mask)")
            else:
                mask = self.mask_ref(k.value)
        cfg.loss = LossSpec(name, target, mask, e.span)

    def mask_ref(self, e: ast.Expr) -> str | None:
        if not isinstance(e, ast.Name) or e.id not in self.out.masks:
            shown = e.id if isinstance(e, ast.Name) else ast.format_expr(e)
            self.diags.error(e.span, f"unknown mask '{shown}'" + (f" (declared: {', '.join(self.out.masks)})" if self.out.masks else ""))
            return None
        return e.id

    def train_optimizer(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        e = vals[0]
        name, args, kwargs = _callee(e)
        if name not in OPTIMIZERS:
            self.diags.error(e.span, f"unknown optimizer '{name or ast.format_expr(e)}' (expected one of {', '.join(OPTIMIZERS)})")
            return
        if args:
            self.diags.error(args[0].span, f"{name} takes named options only, e.g. {name}(lr = 0.01)")
        opts: dict[str, float] = {}
        for k in kwargs:
            v = _number(k.value)
            if k.name not in OPTIMIZERS[name]:
                self.diags.error(k.span, f"unknown {name} option '{k.name}' (expected one of {', '.join(OPTIMIZERS[name])})")
            elif k.name in opts:
                pass  # reported by check_repeated_keywords
            elif v is None:
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be a number")
            elif not _finite(v):
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be a finite number")
            elif k.name in ("lr", "eps") and v <= 0:
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be positive")
            elif v < 0:
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be non-negative, got {v:g}")
            elif k.name in ("beta1", "beta2") and v >= 1:
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be in [0, 1), got {v:g}")
            elif k.name == "nesterov" and v not in (0, 1):
                self.diags.error(k.value.span, f"{name} option 'nesterov' is 0 or 1, got {v:g}")
            else:
                opts[k.name] = v
        if name == "sgd" and opts.get("nesterov") and not opts.get("momentum"):
            at = next(k for k in kwargs if k.name == "nesterov")
            self.diags.error(at.span, "sgd with nesterov = 1 needs a momentum > 0")
        cfg.optimizer, cfg.optimizer_args = name, {"lr": 0.01, **opts}

    def _positive_int(self, e: ast.Expr, what: str) -> int | None:
        v = _number(e)
        if not isinstance(v, int) or v <= 0:
            self.diags.error(e.span, f"{what} must be a positive integer")
            return None
        return v

    def train_epochs(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        v = self._positive_int(vals[0], "epochs")
        if v is not None:
            cfg.epochs = v

    def train_batch_size(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        cfg.batch_size = self._positive_int(vals[0], "batch_size")

    def train_fanout(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        e = vals[0]
        if not isinstance(e, ast.ListExpr) or not e.items:
            self.diags.error(e.span, "fanout is a list of per-layer neighbour counts, e.g. [25, 10]")
            return
        out = [self._positive_int(i, "each fanout") for i in e.items]
        cfg.fanout = [v for v in out if v is not None]

    def train_eval(self, cfg: TrainConfig, vals: list[ast.Expr]) -> None:
        for e in vals:
            name, args, kwargs = _callee(e)
            if name not in METRICS or not isinstance(e, ast.Call):
                what = f"metric '{name}' is called" if name in METRICS else \
                    f"unknown metric '{name or ast.format_expr(e)}'"
                self.diags.error(e.span, f"{what} (expected one of {', '.join(METRICS)}, e.g. accuracy(mask = val))")
                continue
            if args:
                self.diags.error(args[0].span, "accuracy takes only mask = NAME")
            mask = None
            for k in kwargs:
                if k.name != "mask":
                    self.diags.error(k.span, f"unknown metric option '{k.name}' (expected mask)")
                else:
                    mask = self.mask_ref(k.value)
            if (name, mask) in cfg.eval:
                # reported once (was: dropped without a word)
                self.out.warnings.append(Diagnostic(e.span, f"{ast.format_expr(e)} is listed twice in eval; it is "
                                                            "reported once", "warning"))
            cfg.eval.append((name, mask))

    # ---- schedule
    def check_schedule(self, d: ast.ScheduleDecl) -> None:
        seen: set = set()
        for s in d.body:
            if isinstance(s, ast.OrderHint):
                if s.key != "order":
                    self.diags.error(s.span, f"only 'order' takes a per-call hint, not '{s.key}'")
                elif (s.layer, s.occurrence) in seen:
                    self.diags.error(s.span, f"the order of {s.layer}#{s.occurrence} is given twice")
                else:
                    seen.add((s.layer, s.occurrence))
                    v = self._order(s.value, ORDERS[1:])
                    if v is not None:
                        s.spec = v
                        self.out.order_hints.append(s)
                continue
            if not isinstance(s, ast.Assign):
                self.diags.error(s.span, "a schedule block holds only 'key = value' hints")
                continue
            if s.target not in SCHEDULE_KEYS:
                self.diags.error(s.span, f"unknown schedule hint '{s.target}' (expected one of {', '.join(SCHEDULE_KEYS)})")
                continue
            if len(s.values) != 1:
                self.diags.error(s.values[1].span, f"'{s.target}' takes one value")
                continue
            if s.target in seen:
                self.diags.error(s.span, f"schedule hint '{s.target}' is given twice")
                continue
            seen.add(s.target)
            v = getattr(self, f"hint_{s.target}")(s.values[0])
            if v is not None:
                self.out.schedule[s.target] = v
                self.out.schedule_spans[s.target] = s.values[0].span
        sched = self.out.schedule
        part = sched.get("partition", "auto")
        if sched.get("delay", 0) != 0 and part != "auto" and not part.startswith("vertex_cut"):
            self.diags.error(self.out.schedule_spans["delay"],
                             f"delay = {sched['delay']} cannot hold for partition = {part}: a delay applies to "
                             "vertex_cut only (DistGNN cd-r / 0c: the split vertices' remote partial aggregates)")

    def _word(self, e: ast.Expr, allowed, what: str):
        if isinstance(e, ast.Name) and e.id in allowed:
            return e.id
        self.diags.error(e.span, f"bad {what} hint '{ast.format_expr(e)}' (expected one of {', '.join(allowed)})")
        return None

    def hint_target(self, e):
        return self._word(e, ("cpu", "gpu"), "target")

    def hint_order(self, e):
        return self._order(e, ORDERS)

    def _order(self, e: ast.Expr, allowed) -> str | None:
        """`sparse_first`, `dense_first` or either with backward options:
        `dense_first(backward = sparse_first, memoize = false)` -> its canonical text."""
        from gdsl.passes.order import order_value
        name, args, kwargs = _callee(e)
        if not isinstance(e, ast.Call):
            return self._word(e, allowed, "order")
        if name not in ORDERS[1:]:
            self.diags.error(e.span, f"bad order hint '{ast.format_expr(e)}' (expected sparse_first or dense_first, "
                             "optionally with (backward = sparse_first|dense_first, memoize = true|false))")
            return None
        if args:
            self.diags.error(args[0].span, "an order takes only backward = ... and memoize = ...")
            return None
        opts = {"backward": ORDERS[1:], "memoize": ("true", "false")}
        got = {}
        for k in kwargs:
            if k.name not in opts:
                self.diags.error(k.span, f"unknown order option '{k.name}' (expected backward, memoize)")
                return None
            v = self._word(k.value, opts[k.name], k.name)
            if v is None:
                return None
            got[k.name] = v
        bwd, memo = got.get("backward", "auto"), got.get("memoize", "auto")
        if memo == "true" and (name == "dense_first" or bwd == "sparse_first"):
            why = ("a dense-first forward never computes A X" if name == "dense_first"
                   else "a sparse-first backward does not read A X")
            self.diags.error(e.span, f"memoize = true cannot hold: {why} (RDM Fig. 3: only a sparse-first forward "
                             "with a dense-first backward memoises)")
            return None
        if memo != "auto" and bwd == "auto":
            bwd = "dense_first"  # memoising (or not) is a choice of the dense-first backward
        return order_value(name, bwd, memo)

    def hint_partition(self, e):
        name, args, kwargs = _callee(e)
        if name not in PARTITIONS or isinstance(e, ast.Index) or kwargs:
            self.diags.error(e.span, f"unknown partition '{ast.format_expr(e)}' (expected one of {', '.join(PARTITIONS)})")
            return None
        kind = PARTITIONS[name]
        if kind is None:
            if isinstance(e, ast.Call):
                self.diags.error(e.span, f"partition '{name}' takes no arguments")
                return None
            return name
        if len(args) != 1:
            if isinstance(kind, tuple) and not args:
                return f"{name}({kind[0]})"
            if kind == "int?" and isinstance(e, ast.Name):
                return name
            self.diags.error(e.span, f"partition '{name}' takes one argument")
            return None
        if kind in ("int", "int?"):
            v = self._positive_int(args[0], f"{name}'s argument")
            return None if v is None else f"{name}({v})"
        if not isinstance(args[0], ast.Name) or args[0].id not in kind:
            self.diags.error(args[0].span, f"{name} takes one of: {', '.join(kind)}")
            return None
        return f"{name}({args[0].id})"

    def hint_delay(self, e):
        if isinstance(e, ast.Name) and e.id == "none":
            return "none"
        v = _number(e)
        if not isinstance(v, int) or v < 0:
            self.diags.error(e.span, "delay is a non-negative integer number of epochs, or none")
            return None
        if v > MAX_DELAY:   # the cost model's float arithmetic (was: a 400-digit delay, an internal error)
            self.diags.error(e.span, f"delay is at most {MAX_DELAY} epochs")
            return None
        return v

    def _named_options(self, e, name: str, allowed: dict[str, Any]):
        opts = dict(allowed)
        _, args, kwargs = _callee(e)
        if args:
            self.diags.error(args[0].span, f"{name} takes named options only")
        for k in kwargs:
            v = _number(k.value)
            if k.name not in allowed:
                self.diags.error(k.span, f"unknown {name} option '{k.name}' (expected one of {', '.join(allowed)})")
            elif v is None or v < 0 or not _finite(v):
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be a non-negative finite number")
            elif k.name in ("depth", "size", "lifespan") and (not isinstance(v, int) or v < 1):
                self.diags.error(k.value.span, f"{name} option '{k.name}' must be a positive integer")
            else:
                opts[k.name] = v
        return {"kind": name, **opts}

    def hint_cache(self, e):
        name, _, _ = _callee(e)
        if name == "none" and isinstance(e, ast.Name):
            return "none"
        if name != "hec":
            self.diags.error(e.span, "cache is none or hec(size = ..., lifespan = ..., threshold = ..., delay = ...)")
            return None
        return self._named_options(e, "hec", {"size": 1_000_000, "lifespan": 2, "threshold": 2000, "delay": 1})

    def hint_pipeline(self, e):
        name, _, _ = _callee(e)
        if name == "none" and isinstance(e, ast.Name):
            return "none"
        if name != "push_pull":
            self.diags.error(e.span, "pipeline is none or push_pull(depth = 3)")
            return None
        return self._named_options(e, "push_pull", {"depth": 3})


def check(program: ast.Program, source: str, train_name: str | None = None) -> tuple[CheckedProgram, DiagnosticBag]:
    c = Checker(program, source, train_name)
    return c.run(), c.diags


def _nodes(node):
    """Every AST node under `node` (itself first), walking dataclass fields."""
    if isinstance(node, list):
        for n in node:
            yield from _nodes(n)
    elif isinstance(node, ast.Node):
        yield node
        for f in fields(node):
            if f.name != "span":
                yield from _nodes(getattr(node, f.name))


def _names(e) -> list[ast.Name]:
    """The names an expression reads (any node type)."""
    return [n for n in _nodes(e) if isinstance(n, ast.Name)]
