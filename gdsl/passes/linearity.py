"""Linearity of aggregations, for the operation-order decision (RDM §III-B).

`A(HW) = (AH)W` lets the compiler run an aggregation after the `@ W` that
follows it (dense-first) instead of before (sparse-first) only when the
aggregation is linear in its vertex input: the message is `src.x` times
graph constants (degrees, edge inputs, numbers), possibly summed, and the
reducer is `sum` or `mean`. Max, min and attention (a message scaled by a
learned, data-dependent weight) are not linear.

This module answers, for one function (a layer instance or the inlined
main), which gathers are linear and whether a gather feeds a `@` directly —
the place an `order` hint applies.
"""
from __future__ import annotations

from dataclasses import dataclass

from gdsl.ir.core import Func, Op, Value
from gdsl.passes.fold_edge_constants import FoldEdgeConstants


@dataclass
class Aggregation:
    gather: Op
    linear: bool
    reason: str            # why not linear ("" when linear)
    feeds_matmul: bool     # the gather's result is the left side of a `@`


def _graph_constants(f: Func) -> set[Value]:
    const: dict = {}
    for op in f.ops:
        e = FoldEdgeConstants.expr_of(op, const)
        if e is not None:
            const[op.result] = e
    return set(const)


def _linear_message(v: Value, const: set[Value], side: str) -> tuple[bool, str]:
    op = v.owner
    if op is None:
        return False, "the message is not built from an endpoint"
    if op.name == side:
        return True, ""
    if op.name in ("mul", "div"):
        a, b = op.operands
        if b in const:
            return _linear_message(a, const, side)
        if op.name == "mul" and a in const:
            return _linear_message(b, const, side)
        return False, "the message is scaled by a learned or data-dependent value"
    if op.name in ("add", "sub"):
        la, ra = _linear_message(op.operands[0], const, side)
        lb, rb = _linear_message(op.operands[1], const, side)
        return (la and lb), ra or rb
    if op.name == "neg":
        return _linear_message(op.operands[0], const, side)
    if op.name in ("src", "dst"):   # the other endpoint: not the rows this aggregation moves
        name = op.operands[0].hint or "a tensor"
        into = "dst" if side == "src" else "src"
        return False, f"the message reads {op.name}.{name}; an aggregation into {into} is linear in {side}.x reads only"
    return False, f"the message applies '{op.name}'"


def aggregations(f: Func) -> list[Aggregation]:
    const = _graph_constants(f)
    users = f.uses()
    out = []
    for op in f.ops:
        if op.name != "gather":
            continue
        side = "src" if op.attrs["to"] == "dst" else "dst"
        if op.attrs["reduce"] not in ("sum", "mean"):
            linear, why = False, f"it reduces with {op.attrs['reduce']}"
        else:
            linear, why = _linear_message(op.operands[0], const, side)
        feeds = any(u.name == "matmul" and u.operands[0] is op.result for u in users.get(op.result, []))
        out.append(Aggregation(op, linear, why, feeds))
    return out


def order_feasible(f: Func, order: str) -> tuple[bool, str]:
    """Can `order` (sparse_first | dense_first) hold for layer function `f`?"""
    aggs = [a for a in aggregations(f) if a.feeds_matmul]
    if not aggs:
        return False, "it has no aggregation followed by '@ param' to reorder"
    if order == "sparse_first":
        return True, ""
    bad = [a for a in aggs if not a.linear]
    if bad:
        # which one, when several feed a '@' (was: "its aggregation" for either; helper-67)
        which = f" '{bad[0].gather.result.hint}' (one of {len(aggs)} before a '@ param')" \
            if len(aggs) > 1 and bad[0].gather.result.hint else ""
        return False, f"its aggregation{which} is not linear: {bad[0].reason}"
    return True, ""
