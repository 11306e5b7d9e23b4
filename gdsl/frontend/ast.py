"""AST of a gdsl program: plain dataclasses, each with its source span."""
from __future__ import annotations

from dataclasses import dataclass, field

from gdsl.diagnostics import Span, NO_SPAN


@dataclass
class Node:
    span: Span = field(default=NO_SPAN, repr=False, compare=False, kw_only=True)


# ---- expressions -----------------------------------------------------------
@dataclass
class Expr(Node):
    pass


@dataclass
class Name(Expr):
    id: str


@dataclass
class Number(Expr):
    value: float | int
    text: str


@dataclass
class BinOp(Expr):
    op: str  # + - * / @
    lhs: Expr
    rhs: Expr


@dataclass
class Neg(Expr):
    operand: Expr


@dataclass
class Attr(Expr):
    """`src.h`, `dst.degree`."""

    base: Expr
    attr: str


@dataclass
class Kwarg(Node):
    name: str
    value: Expr


@dataclass
class Call(Expr):
    """`f(a, k = v)`; `func` may be an `Index` (`GCNConv[16](h)`)."""

    func: Expr
    args: list[Expr]
    kwargs: list[Kwarg]


@dataclass
class Index(Expr):
    """`L[a, k = v]`: static arguments of a layer or model."""

    base: Expr
    args: list[Expr]
    kwargs: list[Kwarg]


@dataclass
class ListExpr(Expr):
    items: list[Expr]


# ---- statements ------------------------------------------------------------
@dataclass
class Stmt(Node):
    pass


@dataclass
class TypeSpec(Node):
    dtype: str
    shape: list[Expr] | None  # None: no brackets (a scalar per row)


@dataclass
class ParamStmt(Stmt):
    name: str
    type: TypeSpec
    init: Expr | None


@dataclass
class StageStmt(Stmt):
    stage: str  # scatter | gather | transform | sync | apply
    target: str
    value: Expr


@dataclass
class Assign(Stmt):
    target: str
    values: list[Expr]


@dataclass
class Repeat(Stmt):
    count: Expr
    body: list[Stmt]


@dataclass
class Return(Stmt):
    value: Expr


@dataclass
class OrderHint(Stmt):
    """`order GCNConv#1 = dense_first` in a schedule block."""

    key: str
    layer: str
    occurrence: int
    value: Expr
    spec: str = ""      # the checked hint's canonical text (passes/order.py's order_value)


# ---- declarations ----------------------------------------------------------
@dataclass
class Decl(Node):
    name: str
    # the name's own span, for an error about the name (unset: the declaration's span)
    name_span: Span = field(default=NO_SPAN, repr=False, compare=False, kw_only=True)

    @property
    def name_at(self) -> Span:
        return self.name_span if self.name_span.known else self.span


@dataclass
class GraphDecl(Decl):
    options: list[tuple[str, Span]]


@dataclass
class InputDecl(Decl):
    domain: str
    type: TypeSpec
    domain_span: Span = field(default=NO_SPAN, repr=False, compare=False, kw_only=True)


@dataclass
class MaskDecl(Node):
    names: list[tuple[str, Span]]


@dataclass
class StaticParam(Node):
    name: str
    default: Expr | None


@dataclass
class LayerArg(Node):
    name: str
    shape: list[Expr]


@dataclass
class LayerDecl(Decl):
    static: list[StaticParam]
    args: list[LayerArg]
    result: list[Expr]
    body: list[Stmt]


@dataclass
class ModelDecl(Decl):
    static: list[StaticParam]
    body: list[Stmt]


@dataclass
class TrainDecl(Decl):
    body: list[Stmt]


@dataclass
class ScheduleDecl(Node):
    body: list[Stmt]


@dataclass
class Program(Node):
    file: str
    decls: list[Node]

    def of(self, kind):
        return [d for d in self.decls if isinstance(d, kind)]


# ---- printing (--emit ast) -------------------------------------------------
def format_expr(e: Expr) -> str:
    """Source-like rendering of an expression, fully parenthesised binops."""
    match e:
        case Name(id=i):
            return i
        case Number(text=t):
            return t
        case BinOp(op=o, lhs=l, rhs=r):
            return f"({_operand(l)} {o} {_operand(r)})"
        case Neg(operand=x):
            # `-(-t)`, not `--t`, which reads as a decrement (was: `- - t` shown as `--t`)
            return f"-({format_expr(x)})" if isinstance(x, Neg) else f"-{format_expr(x)}"
        case Attr(base=b, attr=a):
            return f"{format_expr(b)}.{a}"
        case Call(func=f, args=a, kwargs=k):
            return f"{format_expr(f)}({_args(a, k)})"
        case Index(base=b, args=a, kwargs=k):
            return f"{format_expr(b)}[{_args(a, k)}]"
        case ListExpr(items=items):
            return "[" + ", ".join(format_expr(i) for i in items) + "]"
    raise TypeError(f"not an expression: {e!r}")


def _operand(e: Expr) -> str:
    """A binop's operand: a negation in parentheses too, so `-x @ W` shows as `((-x) @ W)`."""
    return f"({format_expr(e)})" if isinstance(e, Neg) else format_expr(e)


def _args(args, kwargs) -> str:
    parts = [format_expr(a) for a in args] + [f"{k.name} = {format_expr(k.value)}" for k in kwargs]
    return ", ".join(parts)


def _shape(s: list[Expr] | None) -> str:
    return "" if s is None else "[" + ", ".join(format_expr(d) for d in s) + "]"


def dump(prog: Program, with_loc: bool = False) -> str:
    """A stable, indented dump of the AST (one node per line)."""
    out: list[str] = []

    def line(depth: int, text: str, node: Node) -> None:
        loc = f"  # {node.span.line}:{node.span.col}" if with_loc else ""
        out.append("  " * depth + text + loc)

    def stmts(body: list[Stmt], depth: int) -> None:
        for s in body:
            match s:
                case ParamStmt():
                    init = f" = {format_expr(s.init)}" if s.init else ""
                    line(depth, f"Param {s.name} : {s.type.dtype}{_shape(s.type.shape)}{init}", s)
                case StageStmt():
                    line(depth, f"Stage {s.stage} {s.target} = {format_expr(s.value)}", s)
                case Assign():
                    line(depth, f"Assign {s.target} = " + ", ".join(format_expr(v) for v in s.values), s)
                case Repeat():
                    line(depth, f"Repeat {format_expr(s.count)}", s)
                    stmts(s.body, depth + 1)
                case Return():
                    line(depth, f"Return {format_expr(s.value)}", s)
                case OrderHint():
                    line(depth, f"Hint {s.key} {s.layer}#{s.occurrence} = {format_expr(s.value)}", s)

    def static(ps: list[StaticParam]) -> str:
        if not ps:
            return ""
        return "[" + ", ".join(p.name + (f" = {format_expr(p.default)}" if p.default else "") for p in ps) + "]"

    line(0, f"Program {prog.file}", prog)
    for d in prog.decls:
        match d:
            case GraphDecl():
                opts = ", ".join(o for o, _ in d.options)
                line(1, f"Graph {d.name}" + (f" ({opts})" if opts else ""), d)
            case InputDecl():
                line(1, f"Input {d.name} : {d.domain} {d.type.dtype}{_shape(d.type.shape)}", d)
            case MaskDecl():
                line(1, "Mask " + ", ".join(n for n, _ in d.names), d)
            case LayerDecl():
                args = ", ".join(f"{a.name}: {_shape(a.shape)}" for a in d.args)
                line(1, f"Layer {d.name}{static(d.static)}({args}) -> {_shape(d.result)}", d)
                stmts(d.body, 2)
            case ModelDecl():
                line(1, f"Model {d.name}{static(d.static)}", d)
                stmts(d.body, 2)
            case TrainDecl():
                line(1, f"Train {d.name}", d)
                stmts(d.body, 2)
            case ScheduleDecl():
                line(1, "Schedule", d)
                stmts(d.body, 2)
    return "\n".join(out) + "\n"
