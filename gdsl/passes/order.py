"""order: sparse-first or dense-first for each aggregation feeding a `@`.

`(A X) W = A (X W)` when the aggregation is linear in X (RDM §III-B; the
analysis is passes/linearity.py). Dense-first aggregates the narrower
matrix when the layer shrinks the width, which cuts both the sparse work
and, distributed, the words moved: RDM §IV-A-1, "if f_l < f_{l-1} the
GEMM-first strategy leads to fewer operations in SpMM and lower
communication" (gdsl/cost/problem.py's "narrow" rule). A hint decides
where given (`order L#k = ...` for one call, `order = ...` for all); `auto`
decides by width. The choice is printed on the op (`order=`, `order_by=`).

Handled form, inside one layer call (scope):
    a  = aggregate[msg=copy_src|mul(w: edge_const), reduce=sum] x [, w]
    a' = mul a, c           (optional: c a vertex constant, e.g. 1/deg of mean)
    t  = matmul a', W       (a, a' read by nothing else)
dense_first rewrites it to  y = matmul x, W;  t = aggregate y [, w] [* c].

Requires: fused IR. Ensures: every handled form carries `order`; dense_first
forms are rewritten; widths still symbolic (no data) stay sparse_first with
`order_by=undecided`.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from gdsl.ir.core import Module, Op, Value
from gdsl.passes.base import PassContext


@dataclass(frozen=True)
class Order:
    name: str = "order"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        hints = module.attrs.get("order_hints", {})
        default = module.attrs.get("schedule", {}).get("order", "auto")
        users = f.uses()
        only = lambda v, op: users.get(v, []) == [op] and v not in f.results  # noqa: E731
        rewrites: dict[Op, list[Op]] = {}
        drop: set[Op] = set()
        for t in f.ops:
            form = self.match(t, only)
            if form is None:
                continue
            agg, scale = form
            scope = t.attrs.get("scope", "")
            hint = hints.get(scope.replace("_", "#")) if scope else None
            choice, by = (hint, "hint") if hint else ((default, "hint") if default != "auto" else self.by_width(t))
            agg.attrs.update(order=choice, order_by=by)
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
        return module

    @staticmethod
    def match(t: Op, only) -> tuple[Op, Op | None] | None:
        if t.name != "matmul":
            return None
        a = t.operands[0]
        scale = None
        if a.owner is not None and a.owner.name == "mul" and only(a, t):
            x, c = a.owner.operands
            if c.owner is not None and c.owner.name == "vertex_const":
                scale, a = a.owner, x
        agg = a.owner
        if agg is None or agg.name != "aggregate" or agg.attrs["reduce"] != "sum" or not only(a, scale or t):
            return None
        if agg.attrs["msg"] == "copy_src":
            return agg, scale
        if agg.attrs["msg"] == "mul":
            w = agg.operands[1]
            if w.owner is not None and w.owner.name == "edge_const" and w.type.shape == ():
                return agg, scale
        return None

    @staticmethod
    def by_width(t: Op) -> tuple[str, str]:
        x, w = t.operands
        f_in = sympy.Mul(*x.type.shape)
        f_out = sympy.Mul(*w.type.shape[1:]) if len(w.type.shape) > 1 else sympy.Integer(1)
        if not (f_in.is_number and f_out.is_number):
            return "sparse_first", "undecided"
        return ("dense_first" if f_out < f_in else "sparse_first"), "width"

    @staticmethod
    def rewrite(t: Op, agg: Op, scale: Op | None) -> list[Op]:
        x = agg.operands[0]
        keep = {k: t.attrs[k] for k in ("scope",) if k in t.attrs}
        y = Value(t.result.type, (t.result.hint or "t") + "_dense")
        mm = Op("matmul", [x, t.operands[1]], y, {**keep, "stage": "transform"}, t.span)
        attrs = {**agg.attrs, "stage": "gather"}
        if scale is None:
            out_agg = Op("aggregate", [y, *agg.operands[1:]], t.result, {**attrs, **_partial(t)}, agg.span)
            return [mm, out_agg]
        mid = Value(t.result.type, (t.result.hint or "t") + "_agg")
        out_agg = Op("aggregate", [y, *agg.operands[1:]], mid, attrs, agg.span)
        out_scale = Op("mul", [mid, scale.operands[1]], t.result, {**scale.attrs, **_partial(t)}, scale.span)
        return [mm, out_agg, out_scale]


def _partial(t: Op) -> dict:
    return {"partial": True} if t.attrs.get("partial") else {}
