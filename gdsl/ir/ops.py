"""The op set and its typing rules.

`infer(name, operand_types, attrs)` is the single source of truth for an op's
result type: the lowering uses it to build ops and the verifier re-runs it to
check them. A rule that fails raises `ShapeError` with a user-readable message.
"""
from __future__ import annotations

import sympy

from gdsl.ir.core import Type, format_dim


class ShapeError(Exception):
    pass


class StructuralError(ShapeError):
    """A shape error no binding of the dims can fix (the wrong domain, rank or
    operand kind): reported at once, not set aside until data is given."""


UNARY = ("relu", "elu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "leaky_relu")
BINARY = ("add", "sub", "mul", "div", "max", "min")
REDUCERS = ("sum", "mean", "max", "min")
# Element-wise ops that map a sum to a sum (used by the linearity analysis).
LINEAR_UNARY = ("neg",)


def same_dim(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def fmt_shape(shape) -> str:
    return "[" + ", ".join(format_dim(d) for d in shape) + "]"


def join_domain(domains: list[str]) -> str:
    ds = set(domains)
    if {"vertex", "edge"} <= ds:
        raise StructuralError("mixes a vertex tensor and an edge tensor")
    for d in ("vertex", "edge", "param"):
        if d in ds:
            return d
    return "scalar"


def broadcast_mode(a: tuple, b: tuple) -> str:
    """How two feature shapes broadcast (LANGUAGE.md; docs/language.md):

    - `same`: equal shapes;
    - `scalar`: one side has no feature axis (one value per row);
    - `lead`: the shorter shape is an exact prefix of the longer one and is
      padded with trailing axes: `[heads]` against `[heads, dout]` (GAT);
    - `trail`: numpy's rule, aligned at the last axis, dims of 1 stretch.

    Raises ShapeError when none applies. The lowering decides the mode on
    symbolic shapes (`heads` vs `dout` even when both are 8) and records it
    as the op's `broadcast` attribute, so equal sizes never flip the choice.
    """
    if len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b)):
        return "same"
    if not a or not b:
        return "scalar"
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if len(short) < len(long) and all(same_dim(x, y) for x, y in zip(short, long)):
        return "lead"
    _trailing(a, b)
    return "trail"


def broadcast(a: tuple, b: tuple, mode: str | None = None) -> tuple:
    """The broadcast feature shape of `a` and `b` (in `mode`, else the default)."""
    mode = mode or broadcast_mode(a, b)
    if mode == "same":
        if len(a) != len(b) or not all(same_dim(x, y) for x, y in zip(a, b)):
            raise ShapeError(f"shapes {fmt_shape(a)} and {fmt_shape(b)} differ")
        return tuple(a)
    if mode == "scalar":
        if a and b:
            raise ShapeError(f"neither {fmt_shape(a)} nor {fmt_shape(b)} is one value per row")
        return tuple(a or b)
    if mode == "lead":
        short, long = (a, b) if len(a) < len(b) else (b, a)
        if not all(same_dim(x, y) for x, y in zip(short, long)):
            raise ShapeError(f"{fmt_shape(short)} is not a leading part of {fmt_shape(long)}")
        return tuple(long)
    return _trailing(a, b)


def _trailing(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if same_dim(x, y) or same_dim(y, 1):
            out.append(x)
        elif same_dim(x, 1):
            out.append(y)
        else:
            raise ShapeError(f"cannot broadcast shapes {fmt_shape(a)} and {fmt_shape(b)}")
    return tuple(out)


def _axis(attrs, rank: int, name: str) -> int:
    ax = attrs.get("axis", -1)
    if not -rank <= ax < rank:
        raise StructuralError(f"{name}: axis {ax} out of range for {rank} feature {'axis' if rank == 1 else 'axes'}")
    return ax % rank


def infer(name: str, ts: list[Type], attrs: dict) -> Type:
    """Result type of op `name` over operand types `ts`."""
    if name in UNARY or name in ("dropout", "sync", "softmax", "log_softmax"):
        t = ts[0]
        if name in ("softmax", "log_softmax"):
            if not t.shape:
                raise StructuralError(f"{name} needs at least one feature axis")
            _axis(attrs, len(t.shape), name)
        return t
    if name in BINARY:
        a, b = ts
        return Type(join_domain([a.domain, b.domain]), "f32", broadcast(a.shape, b.shape, attrs.get("broadcast")))
    if name == "matmul":
        x, w = ts
        if w.domain != "param":
            raise StructuralError("the right side of '@' must be a param")
        if not x.shape or not w.shape:
            raise StructuralError("'@' needs a feature axis on both sides")
        if not same_dim(x.shape[-1], w.shape[0]):
            raise ShapeError(f"shape mismatch in '@': left side has {format_dim(x.shape[-1])} features "
                             f"but the param has {format_dim(w.shape[0])} rows")
        return Type(x.domain, "f32", x.shape[:-1] + w.shape[1:])
    if name == "dot":
        a, b = ts
        if not a.shape or not b.shape:
            raise StructuralError("dot needs a feature axis on both sides")
        if not same_dim(a.shape[-1], b.shape[-1]):
            raise ShapeError(f"dot: last axes differ ({format_dim(a.shape[-1])} vs {format_dim(b.shape[-1])})")
        return Type(join_domain([a.domain, b.domain]), "f32", broadcast(a.shape[:-1], b.shape[:-1], attrs.get("broadcast")))
    if name == "reduce":
        t = ts[0]
        if not t.shape:
            raise StructuralError(f"{attrs['fn']}: no feature axis to reduce")
        ax = _axis(attrs, len(t.shape), attrs["fn"])
        return t.with_shape(t.shape[:ax] + t.shape[ax + 1:])
    if name == "concat":
        dom = join_domain([t.domain for t in ts])
        base = ts[0].shape
        if any(not t.shape for t in ts):
            # was: "shapes [] and [5] differ outside the last axis" ([] has none)
            raise StructuralError("concat: a value with no feature axis (shape []) has no last axis to join along; "
                                  "reshape it to [1] first")
        for t in ts[1:]:
            if len(t.shape) != len(base) or not all(same_dim(x, y) for x, y in zip(t.shape[:-1], base[:-1])) or not base:
                raise ShapeError(f"concat: shapes {fmt_shape(base)} and {fmt_shape(t.shape)} differ outside the last axis")
        return Type(dom, "f32", base[:-1] + (sum((t.shape[-1] for t in ts), sympy.Integer(0)),))
    if name == "flatten":
        t = ts[0]
        return t.with_shape((sympy.Mul(*t.shape) if t.shape else sympy.Integer(1),))
    if name == "reshape":
        t = ts[0]
        new = tuple(sympy.sympify(d) for d in attrs["shape"])
        if not same_dim(sympy.Mul(*t.shape), sympy.Mul(*new)):
            raise ShapeError(f"reshape: cannot reshape {fmt_shape(t.shape)} into {fmt_shape(new)}")
        return t.with_shape(new)
    if name in ("src", "dst"):
        t = ts[0]
        if t.domain != "vertex":
            raise StructuralError(f"{name}.x needs a vertex tensor, got a {t.domain} value")
        return t.with_domain("edge")
    if name == "gather":
        t = ts[0]
        if t.domain != "edge":
            raise StructuralError(f"gather reduces edge tensors, got a {t.domain} value")
        if attrs["reduce"] not in REDUCERS:
            raise StructuralError(f"unknown reducer '{attrs['reduce']}'")
        return t.with_domain("vertex")
    if name == "edge_softmax":
        t = ts[0]
        if t.domain != "edge":
            raise StructuralError("edge_softmax normalises an edge tensor")
        return t
    if name == "aggregate":
        return _infer_aggregate(ts, attrs)
    if name == "sddmm":
        a, b = ts
        if a.domain != "vertex" or b.domain != "vertex":
            raise StructuralError("sddmm reads two vertex tensors")
        if attrs["op"] == "dot":
            if not a.shape or not b.shape or not same_dim(a.shape[-1], b.shape[-1]):
                raise ShapeError("sddmm dot: last axes differ")
            return Type("edge", "f32", broadcast(a.shape[:-1], b.shape[:-1], attrs.get("broadcast")))
        return Type("edge", "f32", broadcast(a.shape, b.shape, attrs.get("broadcast")))
    if name == "gat_aggregate":
        el, er, z = ts
        if not (el.shape == er.shape and len(z.shape) == len(el.shape) + 1
                and all(same_dim(x, y) for x, y in zip(el.shape, z.shape))):
            raise ShapeError(f"gat_aggregate: scores {fmt_shape(el.shape)} do not lead {fmt_shape(z.shape)}")
        return z.with_domain("vertex")
    if name in ("degree", "vertex_const"):
        return Type("vertex", "f32", ())
    if name == "edge_const":
        return Type("edge", "f32", ())
    if name == "const":
        return Type("scalar", "f32", ())
    if name in ("param", "input", "call"):
        return attrs["type"]
    if name == "loss":
        return Type("scalar", "f32", ())
    raise StructuralError(f"unknown op '{name}'")


MESSAGES = ("copy_src", "copy_edge", "add", "sub", "mul", "div")


def _infer_aggregate(ts: list[Type], attrs: dict) -> Type:
    """aggregate[msg, reduce, to]: DistGNN's aggregation primitive (§4.1),
    gather(reduce) of messages `x[endpoint] msg w[e]`."""
    msg = attrs["msg"]
    if msg not in MESSAGES or attrs["reduce"] not in ("sum", "max", "min"):
        raise StructuralError(f"aggregate: unknown message {msg} or reducer {attrs['reduce']}")
    if msg == "copy_edge":
        (w,) = ts
        if w.domain != "edge":
            raise StructuralError("aggregate copy_edge reads an edge tensor")
        return w.with_domain("vertex")
    x = ts[0]
    if x.domain != "vertex":
        raise StructuralError("aggregate reads a vertex tensor at the endpoint")
    if msg == "copy_src":
        return x
    w = ts[1]
    if w.domain != "edge":
        raise StructuralError("aggregate's second operand is an edge tensor")
    return Type("vertex", "f32", broadcast(x.shape, w.shape, attrs.get("broadcast")))


# Ops whose type is given by an attribute rather than computed.
TYPED_BY_ATTR = ("param", "input", "call")
ALL_OPS = UNARY + BINARY + (
    "dropout", "sync", "softmax", "log_softmax", "matmul", "dot", "reduce", "concat", "flatten",
    "reshape", "src", "dst", "gather", "edge_softmax", "degree", "vertex_const", "edge_const",
    "const", "param", "input", "call", "loss", "aggregate", "sddmm", "gat_aggregate",
)
