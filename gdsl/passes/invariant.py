"""mark-invariant: the values that are the same in every training step.

A value computed from the graph and the input features alone, through ops
that draw nothing (no `dropout`) and read no `param`, is identical in every
forward of a training run: SGC's propagated features S^K X (Wu et al.,
ICML'19 §2: "S^K X can be precomputed"), a parameter-free smoothing before
the first layer, the aggregation of the inputs of a layer computed
sparse-first. This pass marks each such op `invariant=true`, so the IR dump
shows what a backend may compute once per features tensor instead of once
per epoch (loop-invariant code motion, the loop being the training loop).

The single-process backends do so when asked (`prog.module(graph,
hoist=True)`; `gdsl run` and `gdsl.train` ask): `ReferenceModule` keeps the
marked values that unmarked ops read, keyed on the features tensor's
identity and version counter, and skips the marked ops while they hold
(backends/reference/executor.py, `_hoisted`). Nothing else changes: the
values are the same ones, computed by the same kernels, so the plan stays
exact. The distributed ranks compute every op each epoch (their halo
exchanges are not cached).

Leaves (`input`, `const`, `param`, the folded graph constants) are never
marked: they cost nothing to read; nor is arithmetic on numbers alone.

Requires: nothing (runs on any verified IR; after `order`, so it marks the
ops as they will run). Ensures: `invariant=true` exactly on the non-leaf ops
whose value depends on no `param` and no `dropout`, and on the graph or an
input.
"""
from __future__ import annotations

from dataclasses import dataclass

from gdsl.ir.core import Module, Op
from gdsl.passes.base import PassContext

# leaves that are the same in every step (the folded graph constants, the inputs)
CONSTANT_LEAVES = ("input", "const", "edge_const", "vertex_const", "degree")
# ops whose value changes from step to step: a learned value, a random draw, the loss
_VARYING = ("param", "dropout", "loss", "call")


def invariant_ops(f) -> list[Op]:
    """The non-leaf ops of `f` whose value depends on no param and no dropout."""
    return _invariant(f)[0]


def invariant_values(f) -> set:
    """The values of `f` that are the same in every step (leaves included)."""
    return _invariant(f)[1]


def _invariant(f) -> tuple[list[Op], set]:
    same: set = set()   # values the same in every step
    data: set = set()   # ... that depend on the graph or an input (not numbers alone)
    marked: list[Op] = []
    for op in f.ops:
        if op.result is None or op.name in _VARYING:
            continue
        if op.name in CONSTANT_LEAVES:
            same.add(op.result)
            if op.name != "const":
                data.add(op.result)
        elif op.operands and all(v in same for v in op.operands):
            same.add(op.result)
            if any(v in data for v in op.operands):   # (`1 - alpha` of two numbers is folded at bind)
                data.add(op.result)
                marked.append(op)
    return marked, same


@dataclass(frozen=True)
class MarkInvariant:
    name: str = "mark-invariant"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        for op in f.ops:
            op.attrs.pop("invariant", None)
        for op in invariant_ops(f):
            op.attrs["invariant"] = True
        return module


def kept_invariants(module: Module, groups: list[set[Op]], skipped: set[Op]) -> tuple[set[Op], list] | None:
    """What a module that hoists runs in the first forward only: the ops
    marked `invariant`, less every group in `groups` (ops that run whole: an
    order with a backward other than autograd's) that has an unmarked op
    (the constants it reads aside), and the values to keep (marked ops whose
    result is a module result or read by an unmarked op). None when a kept
    value is one only a group's anchor has (`skipped`: the group's inner
    ops): a group is never split. Torch-free, so the planner prices what the
    ranks keep (planning.rank_hoisted_ops) with the executor's rule
    (backends/reference/executor.py plan_hoist)."""
    f = module.main
    marked = {op for op in f.ops if op.attrs.get("invariant")}
    for g in groups:
        if not all(op in marked or op.name in CONSTANT_LEAVES for op in g):
            marked -= set(g)
    users = f.uses()
    results = {id(v) for v in f.results}
    keep = [op.result for op in f.ops if op in marked and (
        id(op.result) in results or any(u not in marked for u in users.get(op.result, [])))]
    if any(v.owner in skipped for v in keep):
        return None
    return marked, keep
