"""The IR dump: one op per line, SSA names from source names, sorted attrs.

    %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m

Deterministic: names are assigned in program order (`%h`, `%h_1`, ...),
attributes are sorted, sympy expressions use one canonical printer, and
source locations appear only with `print_loc`.
"""
from __future__ import annotations

from typing import Any

import sympy

from gdsl.ir.core import Func, Module, Op, Type, Value, format_dim

# Attributes carried for the backends that the dump shows in other ways.
_HIDDEN = {"type", "scope", "keep"}


def format_attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, sympy.Basic):
        return sympy.sstr(v, order="lex")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={format_attr(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, Type):
        return str(v)
    s = str(v)
    if s == "" or any(c in s for c in " ,=[]{}#\"") :
        return '"' + s.replace('"', '\\"') + '"'
    return s


class _Namer:
    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.next: dict[str, int] = {}   # hint -> the suffix to try next (names are only added: O(1) each)
        self.tmp = 0

    def __call__(self, v: Value) -> str:
        if v in self.names:
            return self.names[v]
        if v.hint:
            base = v.hint.replace(".", "_")
            k = self.next.get(base, 0)
            name = f"{base}_{k}" if k else base
            while name in self.used:
                k += 1
                name = f"{base}_{k}"
            self.next[base] = k
        else:
            while str(self.tmp) in self.used:
                self.tmp += 1
            name = str(self.tmp)
            self.tmp += 1
        self.used.add(name)
        self.names[v] = "%" + name
        return self.names[v]


def print_op(op: Op, name: _Namer, print_loc: bool) -> str:
    attrs = {k: v for k, v in op.attrs.items() if k not in _HIDDEN}
    if op.name == "call":
        attrs["type"] = None  # the result type is printed already
        attrs.pop("type")
    text = op.name
    if attrs:
        text += "[" + ", ".join(f"{k}={format_attr(attrs[k])}" for k in sorted(attrs)) + "]"
    if op.operands:
        text += " " + ", ".join(name(v) for v in op.operands)
    if op.result is not None:
        text = f"{name(op.result)} : {op.result.type} = " + text
    if print_loc and op.span.known:
        text += f"  # {op.span}"
    return text


def print_func(f: Func, print_loc: bool = False) -> str:
    name = _Namer()
    args = ", ".join(f"{name(a)} : {a.type}" for a in f.args)
    head = f"func @{f.name}({args})"
    if f.attrs:
        head += " attrs " + format_attr(f.attrs)
    lines = [head + " {"]
    scope = None
    for op in f.ops:
        s = op.attrs.get("scope")
        if s != scope and s is not None:
            lines.append(f"  # {s}")
        scope = s
        lines.append("  " + print_op(op, name, print_loc))
    lines.append("  return " + ", ".join(name(v) for v in f.results))
    lines.append("}")
    return "\n".join(lines)


def print_module(m: Module, print_loc: bool = False) -> str:
    parts = []
    if m.attrs:
        parts.append("module attrs " + format_attr(m.attrs))
    for f in m.funcs.values():
        parts.append(print_func(f, print_loc))
    parts.append(print_func(m.main, print_loc))
    return "\n\n".join(parts) + "\n"


__all__ = ["print_module", "print_func", "format_attr", "format_dim"]
