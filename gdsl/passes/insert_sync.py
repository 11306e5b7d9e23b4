"""insert-sync: complete every partial transform result before it is read.

P-TAGS (P3 §3.5): a `transform` may be computed on a slice of the contracting
dim, so its result is partial until a `sync` sums it. Users may leave the
`sync` out; this pass inserts `sync[op=sum, inserted=true]` where a partial
value is read by anything but a sync.

Requires: no `call` ops (run after inline).
Ensures: every use of an op marked `partial` is a `sync`.
"""
from __future__ import annotations

from dataclasses import dataclass

from gdsl.ir.core import Module, Op, Value
from gdsl.passes.base import PassContext


@dataclass(frozen=True)
class InsertSync:
    name: str = "insert-sync"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        users = f.uses()
        out: list[Op] = []
        for op in f.ops:
            out.append(op)
            if not op.attrs.get("partial"):
                continue
            readers = [u for u in users.get(op.result, []) if u.name != "sync"]
            returned = op.result in f.results
            if not readers and not returned:
                continue
            v = Value(op.result.type, (op.result.hint or "t") + "_sync")
            attrs = {"op": "sum", "inserted": True, "stage": "sync"}
            if "scope" in op.attrs:
                attrs["scope"] = op.attrs["scope"]
            out.append(Op("sync", [op.result], v, attrs, op.span))
            for u in readers:
                u.replace_operand(op.result, v)
            if returned:
                f.results = [v if r is op.result else r for r in f.results]
        f.ops = out
        return module
