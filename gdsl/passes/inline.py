"""inline: replace each `call` of a layer function with a copy of its body.

Requires: the module as lowered (layer functions + `call` ops in main).
Ensures: `main` has no `call` ops and `funcs` is empty; each call got its own
params, named `<Layer>_<k>.<param>` (k counts calls of that layer in source
order after `repeat` is unrolled, from 1); every copied op carries the call's
`scope`; inputs read inside a layer are shared with main's inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from gdsl.ir.core import Module, Op, Value
from gdsl.passes.base import PassContext


@dataclass(frozen=True)
class Inline:
    name: str = "inline"

    def run(self, module: Module, ctx: PassContext) -> Module:
        main = module.main
        inputs = {op.attrs["name"]: op.result for op in main.ops if op.name == "input"}
        new_ops: list[Op] = []
        subst: dict[Value, Value] = {}   # a call's result -> its callee's, applied as the ops come (SSA order)
        for op in main.ops:
            if subst and any(v in subst for v in op.operands):
                op.operands = [subst.get(v, v) for v in op.operands]
            if op.name != "call":
                new_ops.append(op)
                continue
            callee = module.funcs[op.attrs["callee"]]
            scope = op.attrs["scope"]
            vmap: dict[Value, Value] = dict(zip(callee.args, op.operands))
            for inner in callee.ops:
                if inner.name == "input" and inner.attrs["name"] in inputs:
                    vmap[inner.result] = inputs[inner.attrs["name"]]
                    continue
                attrs = dict(inner.attrs, scope=scope)
                if inner.name == "param":
                    attrs["name"] = f"{scope}.{inner.attrs['name']}"
                res = Value(inner.result.type, inner.result.hint)
                vmap[inner.result] = res
                if inner.name == "input":
                    attrs.pop("scope")
                    inputs[inner.attrs["name"]] = res
                    new_ops.insert(0, Op(inner.name, [], res, attrs, inner.span))
                    continue
                new_ops.append(Op(inner.name, [vmap[v] for v in inner.operands], res, attrs, inner.span))
            subst[op.result] = vmap[callee.results[0]]   # (was: a walk of every op per call, O(calls x ops))
        main.ops = new_ops
        main.results = [subst.get(v, v) for v in main.results]
        module.funcs = {}
        return module
