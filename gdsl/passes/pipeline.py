"""The pass pipeline: one ordered list of named stages (Toy / Triton style).

`--emit STAGE`, `--print-ir-after=PASS`, `--print-ir-after-all` and
`--dump-dir` all come from this list. The pass manager verifies the IR after
every pass; a pass that breaks it is an internal error naming the pass and
the passes before it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gdsl.ir.core import Module
from gdsl.ir.printer import print_module
from gdsl.ir.verifier import VerifyError, verify
from gdsl.passes.base import PassContext
from gdsl.passes.canonicalize import Canonicalize
from gdsl.passes.fold_edge_constants import FoldEdgeConstants
from gdsl.passes.fuse import Fuse
from gdsl.passes.order import Order
from gdsl.passes.partition import Partition
from gdsl.passes.inline import Inline
from gdsl.passes.invariant import MarkInvariant
from gdsl.passes.insert_sync import InsertSync

# Order matters:
#  inline first: the later passes see one flat function with per-call params;
#  insert-sync before canonicalize: it needs the `partial` marks as lowered;
#  canonicalize before fold-edge-constants: `mean` becomes a vertex constant
#  that folding can then combine with other graph constants;
#  fuse after folding: it matches messages in their folded form (`src.x * w`);
#  order after fuse: it reorders whole `aggregate` ops against the `@` after them;
#  mark-invariant after order: it marks the ops as they will run;
#  partition last: it records the plan chosen for the program as ordered.
PASSES = [Inline(), InsertSync(), Canonicalize(), FoldEdgeConstants(), Fuse(), Order(), MarkInvariant(), Partition()]

DESCRIPTIONS = {
    "lower": "AST -> IR: check stages and shapes, instantiate the model, unroll repeat",
    "inline": "inline layer calls; each call gets its own params (Layer_k.W)",
    "insert-sync": "insert sync[op=sum] where a partial transform result is read",
    "canonicalize": "mean -> sum * 1/deg, CSE, dead-code removal",
    "fold-edge-constants": "precompute graph-only edge expressions as edge_const",
    "fuse": "scatter/gather patterns -> aggregate, sddmm, gat_aggregate kernels",
    "order": "sparse-first or dense-first per linear aggregation feeding '@' (hint, else by width)",
    "mark-invariant": "mark values that depend on no param or dropout (computed once per features tensor)",
    "partition": "record the distributed plan the cost model chose (with --np)",
}


class InternalCompilerError(Exception):
    def __init__(self, message: str, ir: str) -> None:
        super().__init__(message)
        self.ir = ir


@dataclass
class PassManager:
    passes: list = field(default_factory=lambda: list(PASSES))
    after_each: Callable[[str, Module], None] | None = None

    def run(self, module: Module, ctx: PassContext, stop_after: str | None = None) -> Module:
        done = ["lower"]
        self._verify(module, done)
        for p in self.passes:
            if stop_after == done[-1]:
                break
            try:
                module = p.run(module, ctx)
            except Exception as e:  # a pass crash is our bug, not the user's
                raise InternalCompilerError(f"pass '{p.name}' failed (after {', '.join(done)}): {e!r}",
                                            print_module(module)) from e
            done.append(p.name)
            self._verify(module, done)
            if self.after_each:
                self.after_each(p.name, module)
        return module

    @staticmethod
    def _verify(module: Module, done: list[str]) -> None:
        try:
            verify(module)
        except VerifyError as e:
            raise InternalCompilerError(f"IR verification failed after pass '{done[-1]}' "
                                        f"(passes run: {', '.join(done)}): {e}", print_module(module)) from None


def pass_names() -> list[str]:
    return ["lower"] + [p.name for p in PASSES]
