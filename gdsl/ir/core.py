"""SSA IR: types, values, ops, functions and the module.

A value has a *domain* (vertex, edge, param, scalar), a dtype and a feature
shape whose dims are sympy expressions (`F`, `C`, `heads*dout`) or ints. The
row dim (N for vertex, E for edge) is implied by the domain and printed first.
Every decision a pass makes is an attribute of an op (STYLE.md): nothing is
hidden in subclasses or flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import sympy

from gdsl.diagnostics import NO_SPAN, Span

DOMAINS = ("vertex", "edge", "param", "scalar")
ROW_DIM = {"vertex": sympy.Symbol("N"), "edge": sympy.Symbol("E")}

Dim = sympy.Expr


def dim(x) -> Dim:
    # already an expression: kept as it is (sympify's cache is not free, and an
    # executor may rebuild a Type inside a forward that torch.compile traces)
    return x if isinstance(x, sympy.Basic) else sympy.sympify(x)


@dataclass(frozen=True)
class Type:
    domain: str
    dtype: str = "f32"  # f32 | i64 | bool
    shape: tuple[Dim, ...] = ()

    def __post_init__(self) -> None:
        assert self.domain in DOMAINS, self.domain
        object.__setattr__(self, "shape", tuple(dim(d) for d in self.shape))

    def with_shape(self, shape) -> "Type":
        return Type(self.domain, self.dtype, tuple(shape))

    def with_domain(self, domain: str) -> "Type":
        return Type(domain, self.dtype, self.shape)

    def full_shape(self) -> tuple[Dim, ...]:
        row = ROW_DIM.get(self.domain)
        return ((row,) if row is not None else ()) + self.shape

    def __str__(self) -> str:
        dims = ", ".join(format_dim(d) for d in self.full_shape())
        return f"{self.domain} {self.dtype}[{dims}]"


def format_dim(d) -> str:
    return sympy.sstr(d, order="lex")


class Value:
    """An SSA value: defined once, by an op or as a function argument."""

    __slots__ = ("type", "hint", "owner")

    def __init__(self, type: Type, hint: str = "", owner: "Op | None" = None) -> None:
        self.type = type
        self.hint = hint
        self.owner = owner

    def __repr__(self) -> str:
        return f"Value({self.hint or '?'}: {self.type})"


@dataclass(eq=False)
class Op:
    """One operation: `result = name[attrs] operands`."""

    name: str
    operands: list[Value]
    result: Value | None
    attrs: dict[str, Any] = field(default_factory=dict)
    span: Span = NO_SPAN

    def __post_init__(self) -> None:
        if self.result is not None:
            self.result.owner = self

    def replace_operand(self, old: Value, new: Value) -> None:
        self.operands = [new if v is old else v for v in self.operands]


@dataclass(eq=False)
class Func:
    name: str
    args: list[Value]
    ops: list[Op]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)

    def walk(self) -> Iterator[Op]:
        yield from self.ops

    def uses(self) -> dict[Value, list[Op]]:
        users: dict[Value, list[Op]] = {}
        for op in self.ops:
            for v in op.operands:
                users.setdefault(v, []).append(op)
        return users

    def replace_all_uses(self, old: Value, new: Value) -> None:
        for op in self.ops:
            op.replace_operand(old, new)
        self.results = [new if v is old else v for v in self.results]

    def _live(self, op: Op, live: set[Value]) -> bool:
        return op.result is None or op.result in live or bool(op.attrs.get("keep"))

    def live_values(self) -> set[Value]:
        """The values the results depend on (and the operands of kept ops)."""
        live = set(self.results)
        for op in reversed(self.ops):
            if self._live(op, live):
                live.update(op.operands)
        return live

    def dead_code_elim(self) -> None:
        """Drop ops whose results are never used (all gdsl ops are pure)."""
        live = self.live_values()
        self.ops = [op for op in self.ops if self._live(op, live)]


@dataclass(eq=False)
class Module:
    """A compiled program: `main` plus (before inlining) layer functions."""

    main: Func
    funcs: dict[str, Func] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    # the dropout masks' op keys (compiler.compile_source, mask_keys), one per dropout in program
    # order, where this compile's op positions differ from those of the compile `gdsl run` executes
    mask_keys: list[int] | None = None
