"""The ``Cost`` record: per-op costs of one strategy, summed per phase and epoch.

Units, all per rank and per epoch:
  flops     floating-point operations (2 per FMA; RDM counts FMAs, so its
            "ops" are flops / 2)
  bytes     memory traffic of the SpMMs (timed at the SpMM rate, bytes/s)
  words     words received by one rank (4-byte words; the beta term of the
            alpha-beta model, CAGNET §III-A)
  messages  messages one rank starts or waits on (the alpha term)
  memory    words resident on one rank at peak
Fields hold sympy expressions, or floats when the cost was built from numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import sympy

from gdsl.cost import symbols as sy
from gdsl.cost.symbols import Expr

@dataclass(frozen=True)
class OpCost:
    """The cost of one op of the plan (counted ``count`` times)."""

    op: str                 # spmm, gemm, bcast, allreduce, alltoall, halo_exchange, ...
    phase: str              # forward | backward
    layer: int
    flops: Expr = 0
    bytes: Expr = 0
    words: Expr = 0
    messages: Expr = 0
    count: Expr = 1
    what: str = ""
    source: str = ""
    overlapped: bool = False  # communication hidden behind computation (cd-r's delayed exchange)

    @property
    def kind(self) -> str:
        return {"spmm": "sparse", "gemm": "dense"}.get(self.op, "comm")


@dataclass(frozen=True)
class PhaseCost:
    """Sums over the ops of one phase (or of the epoch)."""

    sparse_flops: Expr = 0
    dense_flops: Expr = 0
    sparse_bytes: Expr = 0
    words: Expr = 0
    messages: Expr = 0

    @property
    def flops(self) -> Expr:
        return self.sparse_flops + self.dense_flops

    def __add__(self, other: "PhaseCost") -> "PhaseCost":
        return PhaseCost(*(a + b for a, b in zip(self._t(), other._t())))

    def _t(self):
        return (self.sparse_flops, self.dense_flops, self.sparse_bytes, self.words, self.messages)


@dataclass(frozen=True)
class Cost:
    """Flops, words, messages and memory of one strategy for a layer stack."""

    strategy: str
    params: tuple = ()                      # (("c", 2), ...)
    ops: tuple[OpCost, ...] = ()
    memory_terms: tuple = ()                # (("graph", expr), ...) words per rank
    exact: bool = True                      # False: changes the numbers trained (cd-r, 0c)
    overlap: bool = False                   # some communication overlaps computation (cd-r: ops marked overlapped)
    ranks: Expr = sy.P                      # ranks that work (replicate uses 1)
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        if not self.params:
            return self.strategy
        return f"{self.strategy}({', '.join(f'{k}={_fmt(v)}' for k, v in self.params)})"

    @property
    def memory(self) -> Expr:
        return sum((v for _, v in self.memory_terms), 0)

    def phase(self, phase: str) -> PhaseCost:
        ops = [o for o in self.ops if o.phase == phase]
        return PhaseCost(
            sum((o.flops * o.count for o in ops if o.kind == "sparse"), 0),
            sum((o.flops * o.count for o in ops if o.kind == "dense"), 0),
            sum((o.bytes * o.count for o in ops), 0),
            sum((o.words * o.count for o in ops), 0),
            sum((o.messages * o.count for o in ops), 0),
        )

    @property
    def forward(self) -> PhaseCost:
        return self.phase("forward")

    @property
    def backward(self) -> PhaseCost:
        return self.phase("backward")

    @property
    def epoch(self) -> PhaseCost:
        return self.forward + self.backward

    @property
    def flops(self) -> Expr:
        return self.epoch.flops

    @property
    def words(self) -> Expr:
        return self.epoch.words

    @property
    def messages(self) -> Expr:
        return self.epoch.messages

    def subs(self, values: dict) -> "Cost":
        """Substitute numbers (or expressions) for symbols everywhere."""
        vals = _keys(values)
        ops = tuple(replace(o, **{k: _subs(getattr(o, k), vals) for k in ("flops", "bytes", "words", "messages", "count")})
                    for o in self.ops)
        mem = tuple((k, _subs(v, vals)) for k, v in self.memory_terms)
        return replace(self, ops=ops, memory_terms=mem, ranks=_subs(self.ranks, vals),
                       params=tuple((k, _subs(v, vals)) for k, v in self.params))

    def describe(self) -> str:
        """One line per op: phase, layer, op, flops, words, messages, source."""
        lines = [f"{self.name}: {'exact' if self.exact else 'approximate'}"]
        for o in self.ops:
            cnt = "" if o.count == 1 else f" x{_fmt(o.count)}"
            lines.append(f"  {'fwd' if o.phase == 'forward' else 'bwd'} l{o.layer}{cnt} {o.op:<14} flops={_fmt(o.flops)} "
                         f"words={_fmt(o.words)} msgs={_fmt(o.messages)}  # {o.what} [{o.source}]")
        for k, v in self.memory_terms:
            lines.append(f"  memory {k} = {_fmt(v)}")
        return "\n".join(lines)


def _keys(values: dict) -> dict:
    out = {}
    for k, v in values.items():
        if isinstance(k, str):
            k = sy.SYMBOLS.get(k, sympy.Symbol(k))
        out[k] = v
    return out


def _subs(e: Expr, values: dict) -> Expr:
    if not isinstance(e, sympy.Basic):
        return e  # a plain number, or a label such as partition="hash"
    e = sympy.sympify(e).subs(values)
    return float(e) if e.is_number else e


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
