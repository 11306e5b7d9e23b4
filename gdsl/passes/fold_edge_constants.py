"""fold-edge-constants: precompute edge values that depend on the graph only.

An edge expression built from `src.degree`, `dst.degree`, vertex constants,
edge inputs and numbers (GCN's `rsqrt(src.degree * dst.degree)`) does not
change during training. This pass turns each maximal such expression into a
single `edge_const[expr=...]` whose sympy expression the backend evaluates
once when the model is bound to a graph. Symbols: `degree` / `out_degree`
for vertex constants; `src_degree`, `dst_degree`, `src_out_degree`,
`dst_out_degree` and edge-input names for edge constants.

A chain of factors is first regrouped, `(x * c1) * c2 -> x * (c1 * c2)`
(`reassociate`), so `src.h * rsqrt(src.degree) * rsqrt(dst.degree)` folds to
one constant, and a sum of such products of one value is factored,
`x * c1 - x * c2 -> x * (c1 - c2)` (`collect`). Division by such a
constant becomes multiplication by its reciprocal, so messages always take
the form `src.x * w`.

Requires: canonicalized IR. Ensures: no scalar-per-edge subexpression made of
graph constants is recomputed per epoch; no `div` by an `edge_const`.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from gdsl.ir.core import Module, Op, Type, Value
from gdsl.passes.base import PassContext
from gdsl.passes.canonicalize import cse

_FN = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "neg": lambda a: -a, "sqrt": sympy.sqrt,
    "rsqrt": lambda a: 1 / sympy.sqrt(a), "exp": sympy.exp, "log": sympy.log, "abs": sympy.Abs,
    "max": sympy.Max, "min": sympy.Min, "relu": lambda a: sympy.Max(a, 0),
}


@dataclass(frozen=True)
class FoldEdgeConstants:
    name: str = "fold-edge-constants"

    def run(self, module: Module, ctx: PassContext) -> Module:
        f = module.main
        while self.reassociate(f) or self.collect(f):
            pass
        const = self.constants(f)
        users = f.uses()
        out: list[Op] = []
        for op in f.ops:
            v = op.result
            foldable = (v in const and v.type.domain == "edge" and v.type.shape == ()
                        and op.name not in ("edge_const",)
                        and (v in f.results or any(u.result not in const for u in users.get(v, []))))
            if not foldable:
                out.append(op)
                continue
            attrs = {k: op.attrs[k] for k in ("scope", "stage") if k in op.attrs}
            nv = Value(v.type, v.hint or "w")
            out.append(Op("edge_const", [], nv, {"expr": const[v], **attrs}, op.span))
            f.replace_all_uses(v, nv)
        f.ops = self.divide_by_multiplying(out)
        cse(f)
        f.dead_code_elim()
        return module

    @classmethod
    def constants(cls, f) -> dict[Value, sympy.Expr]:
        """The sympy expression of every value of `f` that depends on the graph only."""
        const: dict[Value, sympy.Expr] = {}
        for op in f.ops:
            e = cls.expr_of(op, const)
            if e is not None:
                const[op.result] = e
        return const

    @classmethod
    def reassociate(cls, f) -> bool:
        """One round of `(x * c1) * c2 -> x * (c1 * c2)` (and the same with
        `/` on either side, and `c2 * (c1 * x)`; `(-x) * c2 -> x * (-c2)` and `-(x * c) -> x * (-c)`; c1, c2 may
        both be numbers: `x * 0.5 * 2 -> x * (0.5 * 2)`), where x is not a graph
        constant and c1, c2 are per-edge scalar constants or numbers: a
        left-associated chain of edge factors, as in `src.h *
        rsqrt(src.degree) * rsqrt(dst.degree)`, gathers its factors into one
        expression, which the fold below makes one edge constant (so the
        message is `src.x * w`, the form the order pass reorders).  Only
        where the inner product has no other use.  True if it rewrote."""
        const = cls.constants(f)
        users = f.uses()

        def factor(v: Value) -> bool:
            return v in const and v.type.shape == ()

        for i, op in enumerate(f.ops):
            if op.name == "neg" and op.result.type.domain == "edge" and op.result not in const:
                # -(x * c) = x * (-c); -(x / c) = x / (-c)
                a = op.operands[0]
                inner = a.owner
                if (inner is None or inner.name not in ("mul", "div") or a in f.results
                        or len(users.get(a, [])) != 1):
                    continue
                x, c = inner.operands
                if inner.name == "mul" and factor(x) and not factor(c):
                    x, c = c, x
                if not factor(c) or x in const:
                    continue
                attrs = {k: op.attrs[k] for k in ("scope", "stage") if k in op.attrs}
                nc = Value(c.type, "")
                f.ops[i:i + 1] = [Op("neg", [c], nc, attrs, op.span),
                                  Op(inner.name, [x, nc], op.result, op.attrs, op.span)]
                f.dead_code_elim()
                return True
            if op.name not in ("mul", "div") or op.result.type.domain != "edge" or op.result in const:
                continue
            a, c2 = op.operands
            if op.name == "mul" and factor(a) and not factor(c2):
                a, c2 = c2, a
            inner = a.owner
            if (not factor(c2) or inner is None or inner.name not in ("mul", "div", "neg") or a in f.results
                    or len(users.get(a, [])) != 1):
                continue
            attrs = {k: op.attrs[k] for k in ("scope", "stage") if k in op.attrs}
            if inner.name == "neg":
                # (-x) * c2 = x * (-c2); (-x) / c2 = x / (-c2)
                if inner.operands[0] in const:
                    continue
                c = Value(c2.type, "")
                f.ops[i:i + 1] = [Op("neg", [c2], c, attrs, op.span),
                                  Op(op.name, [inner.operands[0], c], op.result, op.attrs, op.span)]
                f.dead_code_elim()
                return True
            x, c1 = inner.operands
            if inner.name == "mul" and factor(x) and not factor(c1):
                x, c1 = c1, x
            if not factor(c1) or x in const:
                continue
            # x*c1*c2 = x*(c1*c2); x*c1/c2 = x*(c1/c2); x/c1*c2 = x*(c2/c1); x/c1/c2 = x/(c1*c2)
            name, l, r, outer = {("mul", "mul"): ("mul", c1, c2, "mul"), ("mul", "div"): ("div", c1, c2, "mul"),
                                 ("div", "mul"): ("div", c2, c1, "mul"),
                                 ("div", "div"): ("mul", c1, c2, "div")}[(inner.name, op.name)]
            etype = c1.type if c1.type.domain == "edge" else c2.type
            c = Value(etype, "")
            f.ops[i:i + 1] = [Op(name, [l, r], c, attrs, op.span),
                              Op(outer, [x, c], op.result, op.attrs, op.span)]
            f.dead_code_elim()
            return True
        return False

    @classmethod
    def collect(cls, f) -> bool:
        """One sum of terms of one value x with per-edge or numeric factors
        becomes `x * k` with k one folded constant: `x * c1 + x / c2 - x` ->
        `x * (c1 + 1/c2 - 1)`, through negations (`(-x) / c2`) and products
        CSE shares between terms (`src.h * 2 - (src.h * 2 - src.h / c)`). The
        sum's linear map {x: coefficient} is computed over its expression DAG
        (memoised, so a shared subexpression costs once); a sum of terms of
        several values is left alone. So a message summed from terms with
        different edge factors, `src.h / dst.degree + src.h * 0.5`, becomes
        `src.x * w`, the form the order pass reorders. One rewrite per call;
        True if it rewrote."""
        const = cls.constants(f)
        number = Type("scalar", "f32", ())
        memo: dict[Value, dict[Value, sympy.Expr]] = {}

        def scalar(c: Value) -> bool:
            return c in const and c.type.shape == ()

        def lin(v: Value) -> dict[Value, sympy.Expr]:
            """v as a sum of coefficient * value (a value that is not a sum,
            product by a constant or negation is its own term)."""
            if v in memo:
                return memo[v]
            op, out = v.owner, None
            if op is not None and v.type.domain == "edge" and v not in const:
                a = op.operands
                if op.name in ("add", "sub") and not any(scalar(x) for x in a):
                    out = dict(lin(a[0]))
                    sign = 1 if op.name == "add" else -1
                    for k, c in lin(a[1]).items():
                        out[k] = out.get(k, 0) + sign * c
                elif op.name == "neg":
                    out = {k: -c for k, c in lin(a[0]).items()}
                elif op.name == "mul" and scalar(a[1]) != scalar(a[0]):
                    x, c = (a[0], a[1]) if scalar(a[1]) else (a[1], a[0])
                    out = {k: const[c] * e for k, e in lin(x).items()}
                elif op.name == "div" and scalar(a[1]) and not scalar(a[0]):
                    out = {k: e / const[a[1]] for k, e in lin(a[0]).items()}
            memo[v] = out if out is not None else {v: sympy.Integer(1)}
            return memo[v]

        for i, op in enumerate(f.ops):
            if op.name not in ("add", "sub") or op.result.type.domain != "edge" or op.result in const:
                continue
            terms = lin(op.result)
            if len(terms) != 1:
                continue
            (x, k), = terms.items()
            if x is op.result or x.type != op.result.type:
                continue
            attrs = {a: op.attrs[a] for a in ("scope", "stage") if a in op.attrs}
            c = Value(Type("edge", "f32", ()) if k.free_symbols else number, "w" if k.free_symbols else "")
            make = (Op("edge_const", [], c, {"expr": k, **attrs}, op.span) if k.free_symbols
                    else Op("const", [], c, {"value": float(k), **attrs}, op.span))
            f.ops[i:i + 1] = [make, Op("mul", [x, c], op.result, op.attrs, op.span)]
            f.dead_code_elim()
            return True
        return False

    @staticmethod
    def divide_by_multiplying(ops: list[Op]) -> list[Op]:
        """`x / w` with a folded edge constant w becomes `x * (1/w)`: one
        message form (multiply by an edge weight) for the backends."""
        out: list[Op] = []
        for op in ops:
            w = op.operands[1] if op.name == "div" else None
            if w is not None and w.owner is not None and w.owner.name == "edge_const":
                inv = Value(w.type, (w.hint or "w") + "_inv")
                out.append(Op("edge_const", [], inv, {**w.owner.attrs, "expr": 1 / w.owner.attrs["expr"]}, w.owner.span))
                op = Op("mul", [op.operands[0], inv], op.result, op.attrs, op.span)
            out.append(op)
        return out

    @staticmethod
    def expr_of(op: Op, const: dict) -> sympy.Expr | None:
        if op.name == "degree":
            return sympy.Symbol("degree")
        if op.name in ("vertex_const", "edge_const"):
            return op.attrs["expr"]
        if op.name == "const":
            v = op.attrs["value"]
            return sympy.nsimplify(v) if isinstance(v, float) else sympy.sympify(v)
        if op.name == "input" and op.result.type.domain == "edge" and op.result.type.shape == ():
            return sympy.Symbol(op.attrs["name"])
        if op.name in ("src", "dst") and op.operands[0] in const:
            e = const[op.operands[0]]
            return e.subs({s: sympy.Symbol(f"{op.name}_{s.name}") for s in e.free_symbols}, simultaneous=True)
        if op.name in _FN and all(v in const for v in op.operands) and op.operands:
            return _FN[op.name](*[const[v] for v in op.operands])
        return None
