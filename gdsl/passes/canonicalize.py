"""canonicalize: one spelling per computation, then CSE and dead-code removal.

- `gather[reduce=mean]` becomes `gather[reduce=sum]` times a precomputed
  `vertex_const[expr=1/Max(1, degree)]` (mean of no messages is 0, as in
  PyG and DGL); with `to=src` the out-degree is used.
- identical pure ops are merged (never `dropout` or `param`);
- ops whose results are unused are dropped, except vertex f32 `input`s: the
  first of them binds the graph's features (runtime/binding.py), so their
  declaration order must survive even when one is unused.

Requires: no `call` ops. Ensures: no `gather[reduce=mean]`.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from gdsl.ir.core import Module, Op, Value
from gdsl.ir.printer import format_attr
from gdsl.passes.base import PassContext

_IMPURE = ("dropout", "param", "loss", "input")
_NOT_IDENTITY = ("scope", "stage")  # `partial` is: a partial result is not the complete one


@dataclass(frozen=True)
class Canonicalize:
    name: str = "canonicalize"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        out: list[Op] = []
        for op in f.ops:
            if op.name == "gather" and op.attrs["reduce"] == "mean":
                deg = "degree" if op.attrs["to"] == "dst" else "out_degree"
                attrs = {k: v for k, v in op.attrs.items() if k in ("scope", "stage")}
                inv = Value(op.result.type.with_shape(()), "inv_" + deg)
                out.append(Op("vertex_const", [], inv, {"expr": 1 / sympy.Max(1, sympy.Symbol(deg)), **attrs}, op.span))
                summed = Value(op.result.type, op.result.hint + "_sum" if op.result.hint else "")
                out.append(Op("gather", op.operands, summed, {**op.attrs, "reduce": "sum"}, op.span))
                out.append(Op("mul", [summed, inv], op.result, attrs, op.span))
                continue
            if op.name == "input" and op.result.type.domain == "vertex" and op.result.type.dtype == "f32":
                op.attrs["keep"] = True
            out.append(op)
        f.ops = out
        cse(f)
        f.dead_code_elim()
        return module


def cse(f) -> None:
    """Merge ops with equal name, operands and attributes (pure ops only).
    One pass in op order (SSA: a value's uses follow its op), substituting as
    it goes: linear in the ops (was: a walk of every op per merge, 96 s to
    compile `repeat 1000`)."""
    seen: dict[tuple, Value] = {}
    subst: dict[Value, Value] = {}
    kept: list[Op] = []
    for op in f.ops:
        if subst and any(v in subst for v in op.operands):
            op.operands = [subst.get(v, v) for v in op.operands]
        if op.name in _IMPURE or op.result is None:
            kept.append(op)
            continue
        key = (op.name, tuple(id(v) for v in op.operands),
               tuple(sorted((k, format_attr(v)) for k, v in op.attrs.items() if k not in _NOT_IDENTITY)))
        if key in seen:
            subst[op.result] = seen[key]
            continue
        seen[key] = op.result
        kept.append(op)
    f.ops = kept
    f.results = [subst.get(v, v) for v in f.results]
