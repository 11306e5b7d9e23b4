"""order: sparse-first or dense-first for each aggregation feeding a `@`.

`(A X) W = A (X W)` when the aggregation is linear in X (RDM §III-B; the
analysis is passes/linearity.py). Dense-first aggregates the narrower
matrix when the layer shrinks the width, which cuts both the sparse work
and, distributed, the words moved: RDM §IV-A-1, "if f_l < f_{l-1} the
GEMM-first strategy leads to fewer operations in SpMM and lower
communication" (gdsl/cost/problem.py's "narrow" rule). A hint decides
where given (`order L#k = ...` for one call, `order = ...` for all); `auto`
decides by width. The choice is printed on the op (`order=`, `order_by=`).

Under a delayed plan (DistGNN cd-r, `ctx.options["delay"]` = r > 0) `auto`
aggregates sparse-first wherever the aggregated input depends on no param
(`order_by=delay`): the input features, dropout of them. The remote partial
aggregates a replica adds are then r or more epochs old only in the dropout
mask they were drawn with, not in the weights: DistGNN aggregates the
features before the layer's transform in every layer (§6.3: aggregation
outputs "N x f, N x h1, N x h2"), so its layer 1 is never stale in W. Dense-
first there makes the remote partials (X W_{e-r}) stale in W_1, which cost
CiteSeer's cd-5 1.5-2.3 points (docs/distributed.md). The price is the
wider exchange (f_0 instead of f_1 words per split row, 1/r of them per
epoch, overlapped) and no backward exchange for that layer (its input needs
no gradient); the cost model prices the same order (`Problem.layers`,
"delay_safe").

Handled form, inside one layer call (scope):
    a  = aggregate[msg=copy_src|mul(w: edge_const), reduce=sum] x [, w]
    a' = mul a, c           (optional: c a vertex constant, e.g. 1/deg of mean)
    t  = matmul a', W       (a, a' read by nothing else)
dense_first rewrites it to  y = matmul x, W;  t = aggregate y [, w] [* c].

The backward is decided too (RDM §III-C, Table III, Fig. 3-4), and recorded
on the aggregation as `order_grad=` (sparse_first: G' = A^T G first, then
dX = G' W^T and dW = X^T G'; dense_first: dX = A^T (G W^T)) and `order_memo=`
(a dense-first backward after a sparse-first forward takes dW = T^T G from
the memoised T = A X; without it, one more SpMM of width min(f_in, f_out)
recomputes A X or A^T G). Decided by the single-process sparse work of the
three choices (nnz x width, RDM's "sparse ops"; `gdsl/cost/rdm.py` counts the
same for a whole epoch), ties to what autograd does by itself (sparse-first
forward -> dense-first backward with T kept; dense-first forward ->
sparse-first backward), then to the smaller memory. So `auto` memoises T
whenever it computes it; `memoize = false` trades the N x f_in words of T for
one more SpMM. A hint may set them:
`order GCNConv#1 = dense_first(backward = dense_first, memoize = false)`.
`linear_groups` lists the forms for the backends, which run a form whose
backward differs from autograd's own as one autograd Function
(gdsl/backends/reference/linear.py).

When the module hoists (`compile_source(hoist=True)`: `gdsl run`, `gdsl
compile` without `--np`, `prog.module(graph, hoist=True)`; single process
only) `auto` aggregates sparse-first wherever the aggregated input is the
same in every step (no param, no dropout: passes/invariant.py;
`order_by=invariant`): A X is then computed once per features tensor and
each epoch runs only (A X) W, and the backward none of it (its input needs no
gradient; SGC's "precompute S^K X", Wu et al. ICML'19 §2). Dense-first would
aggregate X W in every epoch, forward and backward.

Requires: fused IR. Ensures: every handled form carries `order`,
`order_grad`, `order_memo`; dense_first forms are rewritten; widths still symbolic (no data)
stay sparse_first with `order_by=undecided`.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from gdsl.ir.core import Module, Op, Value
from gdsl.passes.base import PassContext
from gdsl.passes.canonicalize import cse
from gdsl.passes.invariant import invariant_values


@dataclass(frozen=True)
class Order:
    name: str = "order"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        hints = module.attrs.get("order_hints", {})
        default = module.attrs.get("schedule", {}).get("order", "auto")
        users = f.uses()
        delay = ctx.options.get("delay", 0)
        delayed = isinstance(delay, int) and delay > 0
        inv = set() if delayed else invariant_values(f)   # values the same in every step
        same = inv if ctx.options.get("hoist") else set()
        only = lambda v, op: users.get(v, []) == [op] and v not in f.results  # noqa: E731
        # an aggregation several transforms read (canonicalize's CSE merged identical calls on one
        # input, `GCNConv[C](X) + GCNConv[C](X)`): each `@` can be reordered to A (X W_i) on its own
        shared = lambda v, op: (len(users.get(v, [])) > 1 and v not in f.results  # noqa: E731
                                and all(u.name == "matmul" and u.operands[0] is v for u in users[v]))
        rewrites: dict[Op, list[Op]] = {}
        drop: set[Op] = set()
        left: dict[Op, int] = {}   # a shared aggregation -> its users not reordered
        for t in f.ops:
            form = self.match(t, only, shared)
            if form is None:
                if t.attrs.get("scope") and (loose := self.match(t, lambda v, op: True)) is not None:
                    # the form, but its `A X` (or scaled A X) is read besides this `@`: it stays in place
                    # whatever the hint (compiler.py refuses a reorder asked of it, naming that reader,
                    # also when another `@` of the call was reordered; was: accepted, helper-5)
                    ctx.options.setdefault("order_other_readers", {}).setdefault(
                        t.attrs["scope"], _other_reader_where(f, users, t, *loose))
                elif t.attrs.get("scope") and (other := _unhandled_sum(t)) is not None:
                    # a sum aggregation before this `@` whose message is not of the handled form
                    # (`src.h + src.h2 / c`, a product CSE shares with another scatter): it stays
                    # sparse-first whatever the hint (compiler.py refuses a reorder asked of it, also
                    # when another aggregation of the call was reordered; was: accepted, helper-26)
                    ctx.options.setdefault("order_unhandled", {}).setdefault(t.attrs["scope"], other)
                continue
            agg, scale = form
            is_shared = shared(agg.result, t)
            scope = t.attrs.get("scope", "")
            hint = hints.get(scope.replace("_", "#")) if scope else None
            if not hint and default != "auto":
                hint = default
            fwd, bwd, memo = parse_order(hint) if hint else ("auto", "auto", "auto")
            if fwd != "auto":
                choice, by = fwd, "hint"
            elif delayed and not needs_grad(f, agg.operands[0]):
                choice, by = "sparse_first", "delay"
            elif agg.operands[0] in same:   # A X computed once (hoist): the epoch runs only (A X) W
                choice, by = "sparse_first", "invariant"
            else:
                choice, by = self.by_width(t, users[agg.result] if is_shared else (t,))
                if choice != "sparse_first" and agg.operands[0] in inv:
                    # a hoisting compile orders this one sparse-first (`invariant`): its ops may sit
                    # elsewhere (compiler.mask_keys keeps the dropout masks those of that compile)
                    ctx.options["order_hoist_dependent"] = True
            bwd_choice, bwd_memo, bwd_by = self.backward(t, choice, bwd, memo, needs_grad(f, agg.operands[0]),
                                                         delayed)
            decided = dict(order=choice, order_by=by, order_grad=bwd_choice, order_grad_by=bwd_by,
                           order_memo=bwd_memo)
            if is_shared:
                # only dense-first is carried out per transform (the aggregation the others read stays
                # as it was, unordered: its one result cannot carry one order per reader)
                left.setdefault(agg, len(users[agg.result]))
                if choice != "dense_first":
                    if scope and (bwd, memo) != ("auto", "auto"):   # a backward option: not carried out
                        ctx.options.setdefault("order_declined", {})[scope] = (
                            "its aggregation is shared with another transform (identical calls on one input "
                            "are merged), and a shared aggregation is only reordered dense-first, one transform "
                            "at a time; use dense_first, or sparse_first without a backward option")
                    continue
                rewrites[t] = self.rewrite(t, agg, None, {**decided, **({"scope": scope} if scope else {})})
                left[agg] -= 1
                if left[agg] == 0:
                    drop.add(agg)
                continue
            agg.attrs.update(decided)
            if choice != "dense_first":
                continue
            rewrites[t] = self.rewrite(t, agg, scale)
            drop.update([agg] + ([scale] if scale is not None else []))
        if rewrites:
            out = []
            for op in f.ops:
                if op in drop:
                    continue
                out.extend(rewrites.get(op, [op]))
            f.ops = out
            cse(f)   # a reordered `h @ W` the layer also computes (`a @ W + h @ W`) runs once
        return module

    @staticmethod
    def match(t: Op, only, shared=lambda v, op: False) -> tuple[Op, Op | None] | None:
        if t.name != "matmul":
            return None
        a = t.operands[0]
        scale = None
        if a.owner is not None and only(a, t) and _is_vertex_scale(a.owner):
            scale, a = a.owner, a.owner.operands[0]
        agg = a.owner
        if agg is None or agg.name != "aggregate" or agg.attrs["reduce"] != "sum" or not (
                only(a, scale or t) or (scale is None and shared(a, t))):
            return None
        if agg.attrs["msg"] == "copy_src":
            return agg, scale
        if agg.attrs["msg"] == "mul":
            w = agg.operands[1]
            if w.owner is not None and w.owner.name == "edge_const" and w.type.shape == ():
                return agg, scale
        return None

    @staticmethod
    def by_width(t: Op, readers=()) -> tuple[str, str]:
        """Dense-first when it aggregates fewer columns: f_out < f_in, or for an
        aggregation several transforms read, the sum of their f_out < f_in."""
        f_in, _ = _widths(t)
        f_out = sympy.Add(*(_widths(u)[1] for u in (readers or (t,))))
        if not (f_in.is_number and f_out.is_number):
            return "sparse_first", "undecided"
        return ("dense_first" if f_out < f_in else "sparse_first"), "width"

    @staticmethod
    def backward(t: Op, fwd: str, bwd: str, memo: str, input_grad: bool,
                 delayed: bool = False) -> tuple[str, bool, str]:
        """(bwd order, memoise, how decided) for the form ending in matmul `t`.

        Sparse work per choice (in nnz x width; RDM Table III, `rdm.schedule`):
        sparse-first f_out; dense-first with T memoised f_in (0 if the input
        needs no gradient); dense-first without f_in (or 0) + min(f_in, f_out).
        Memoising keeps N x f_in more words alive. Under a delayed plan
        (`delayed`) `auto` keeps autograd's own backward (`order_grad_by=delay`):
        the delay pipeline carries the aggregations autograd runs, and a
        chosen backward order runs outside it (the ranks refuse one; was: a
        forward-only hint let the cost pick one, compiled, and every rank
        refused it after partitioning)."""
        if bwd != "auto":
            m = (memo == "true") if memo != "auto" else (fwd == "sparse_first" and bwd == "dense_first")
            return bwd, m, "hint"
        a, b = _widths(t)
        natural = ("dense_first", True) if fwd == "sparse_first" else ("sparse_first", False)
        if delayed:
            return natural[0], natural[1], "delay"
        if not (a.is_number and b.is_number):
            return natural[0], natural[1], "undecided"
        a, b = int(a), int(b)
        g = a if input_grad else 0
        options = {("sparse_first", False): (b, 0), ("dense_first", False): (g + min(a, b), 0)}
        if fwd == "sparse_first":
            options[("dense_first", True)] = (g, a)
        best = min(options, key=lambda k: (options[k][0], k != natural, options[k][1]))
        return best[0], best[1], "cost"

    @staticmethod
    def rewrite(t: Op, agg: Op, scale: Op | None, decided: dict | None = None) -> list[Op]:
        x = agg.operands[0]
        keep = {k: t.attrs[k] for k in ("scope",) if k in t.attrs}
        y = Value(t.result.type, (t.result.hint or "t") + "_dense")
        mm = Op("matmul", [x, t.operands[1]], y, {**keep, "stage": "transform"}, t.span)
        attrs = {**agg.attrs, **(decided or {}), "stage": "gather"}
        if scale is None:
            out_agg = Op("aggregate", [y, *agg.operands[1:]], t.result, {**attrs, **_partial(t)}, agg.span)
            return [mm, out_agg]
        mid = Value(t.result.type, (t.result.hint or "t") + "_agg")
        out_agg = Op("aggregate", [y, *agg.operands[1:]], mid, attrs, agg.span)
        out_scale = Op("mul", [mid, scale.operands[1]], t.result, {**scale.attrs, **_partial(t)}, scale.span)
        return [mm, out_agg, out_scale]


def _other_reader_where(f, users: dict, t: Op, agg: Op, scale: Op | None) -> str:
    """Where the aggregation before `t` (or its per-vertex scale) is read
    besides `t`: "at line L" of that reader, or "as a result"."""
    chain = [(agg.result, scale or t)] + ([(scale.result, t)] if scale is not None else [])
    for v, next_op in chain:
        others = [u for u in users.get(v, []) if u is not next_op]
        if others or v in f.results:
            located = sorted((u for u in others if u.span.line > 0), key=lambda u: u.span.line)
            if not located:
                return "as a result"
            first = located[0]
            if first.name in ("aggregate", "gat_aggregate"):
                # fuse folded the scatter that reads it into the gather, which keeps the gather's line
                # (was: "at line 15", the gather `a2 = sum(m2)`, though line 14's scatter reads it; helper-15)
                return f"by the message of the gather at line {first.span.line}"
            return f"at line {first.span.line}"
    return "elsewhere"


def _widths(t: Op) -> tuple[sympy.Expr, sympy.Expr]:
    """The aggregated widths of the form ending in `t = x @ W`: x's features
    (f_in) and the result's (f_out); leading axes of x ([k, din] @ [din, dout])
    count in both."""
    x, w = t.operands
    lead = sympy.Mul(*x.type.shape[:-1])
    return sympy.Mul(*x.type.shape), lead * sympy.Mul(*w.type.shape[1:])


def _partial(t: Op) -> dict:
    return {"partial": True} if t.attrs.get("partial") else {}


ORDERS = ("sparse_first", "dense_first")


def order_value(fwd: str, bwd: str = "auto", memo: str = "auto") -> str:
    """The canonical text of an order hint: `dense_first` or
    `dense_first(backward = sparse_first, memoize = false)`."""
    kw = [f"backward = {bwd}"] * (bwd != "auto") + [f"memoize = {memo}"] * (memo != "auto")
    return fwd + (f"({', '.join(kw)})" if kw else "")


def parse_order(value: str) -> tuple[str, str, str]:
    """(forward, backward, memoize) of `order_value`'s text; 'auto' where unset."""
    fwd, _, rest = value.partition("(")
    kw = dict(part.split(" = ") for part in rest.rstrip(")").split(", ") if part)
    return fwd.strip(), kw.get("backward", "auto"), kw.get("memoize", "auto")


def needs_grad(f, v: Value) -> bool:
    """Whether value `v` depends on a param (so its gradient is computed)."""
    grad: set[Value] = set()
    for op in f.ops:
        if op.result is None:
            continue
        if op.name == "param" or any(o in grad for o in op.operands):
            grad.add(op.result)
        if op.result is v:
            break
    return v in grad


@dataclass(frozen=True)
class LinearGroup:
    """One ordered form: x -> [aggregate, scale, matmul] (sparse-first) or
    [matmul, aggregate, scale] (dense-first), computing `out` from `x` and
    the param `w`. `ops` in program order; the last one defines `out`."""

    ops: tuple
    agg: Op
    scale: Op | None
    matmul: Op
    x: Value
    w: Value
    out: Value
    fwd: str
    bwd: str
    memo: bool

    @property
    def natural(self) -> bool:
        """What autograd does by itself for this forward order."""
        if self.fwd == "sparse_first":
            return self.bwd == "dense_first" and self.memo
        return self.bwd == "sparse_first"


def _unhandled_sum(t: Op) -> Op | None:
    """The sum aggregation `t = A X @ W` reads directly (or through a
    per-vertex scale), where `Order.match` does not take it: its message is
    not an endpoint tensor times an edge constant."""
    if t.name != "matmul":
        return None
    a = t.operands[0]
    if a.owner is not None and _is_vertex_scale(a.owner):
        a = a.owner.operands[0]
    agg = a.owner
    return agg if agg is not None and agg.name == "aggregate" and agg.attrs.get("reduce") == "sum" else None


def _is_vertex_scale(op: Op, a: Value | None = None) -> bool:
    """`op` is `mul a, c` (any a if None) with c a per-vertex constant (what `Order.match` accepts)."""
    if op.name != "mul" or len(op.operands) != 2 or (a is not None and op.operands[0] is not a):
        return False
    c = op.operands[1].owner
    return c is not None and c.name == "vertex_const" and c.result.type.shape == ()


def linear_groups(module: Module) -> list[LinearGroup]:
    """The forms the order pass decided (aggregations carrying `order_grad`)."""
    f = module.main
    users = f.uses()
    out = []
    for agg in f.ops:
        if agg.name != "aggregate" or "order_grad" not in agg.attrs:
            continue
        fwd = agg.attrs["order"]
        nxt = users.get(agg.result, [])
        # the vertex scale the order pass keeps with the form (mean's 1/deg; `Order.match`),
        # never a factor the program applies to the result (`a @ W * s`), which autograd runs
        scale = nxt[0] if (len(nxt) == 1 and agg.result not in f.results and _is_vertex_scale(nxt[0], agg.result)) else None
        if fwd == "sparse_first":
            tail = scale.result if scale is not None else agg.result
            mm = users[tail][0]
            ops = (agg,) + ((scale,) if scale else ()) + (mm,)
            x, w, res = agg.operands[0], mm.operands[1], mm.result
        else:
            mm = agg.operands[0].owner
            ops = (mm, agg) + ((scale,) if scale else ())
            x, w, res = mm.operands[0], mm.operands[1], ops[-1].result
        out.append(LinearGroup(ops, agg, scale, mm, x, w, res, fwd, agg.attrs["order_grad"], bool(agg.attrs["order_memo"])))
    return out
