"""The symbols of the cost model and the arithmetic helpers that work on both
sympy expressions and plain numbers.

Symbols are plain ``sympy.Symbol``s with no assumptions, named as the IR
names its dims (``gdsl.ir.core`` uses ``Symbol("N")`` and ``Symbol("E")``),
so expressions built from IR shapes compose with these without translation.

Every cost function in ``gdsl.cost`` computes with ``+ - * /`` and the
helpers below only, so the same code gives a sympy expression when called with
symbols and a float when called with numbers (the chooser relies on that to
stay fast).
"""
from __future__ import annotations

import math
from numbers import Number
from typing import Any

import sympy

Expr = Any  # a sympy expression or a plain number

# Problem size (CAGNET Table I; RDM Table I).
N = sympy.Symbol("N")          # vertices (rows of A)
E = sympy.Symbol("E")          # nonzeros of A = edges including self loops (CAGNET §III-A: nnz(A))
F = sympy.Symbol("F")          # input feature width (RDM f_in)
H = sympy.Symbol("H")          # hidden width (RDM f_h)
C = sympy.Symbol("C")          # classes = output width (RDM f_out)
L = sympy.Symbol("L")          # layers

# Machine and strategy parameters.
P = sympy.Symbol("P")          # ranks
c = sympy.Symbol("c")          # 1.5D replication factor (CAGNET §IV-B)
R_A = sympy.Symbol("R_A")      # replicas of A (RDM §III-E)
rho = sympy.Symbol("rho")      # vertex-cut replication factor (DistGNN §5.1, Table 4)
S = sympy.Symbol("S")          # halo vertices per rank of an edge cut (measured from the partition)
r = sympy.Symbol("r")          # DistGNN cd-r delay in epochs (§5.3)

# alpha-beta model (CAGNET §III-A) and kernel rates (gdsl ARCHITECTURE "Cost model").
alpha = sympy.Symbol("alpha")              # seconds per message
beta = sympy.Symbol("beta")                # seconds per word (1 word = 4 bytes)
gamma_spmm = sympy.Symbol("gamma_spmm")    # SpMM memory traffic rate, bytes/s
gamma_gemm = sympy.Symbol("gamma_gemm")    # GEMM rate, flop/s

# RDM Table IV is written in the three widths of a 2-layer GCN.
f_in = sympy.Symbol("f_in")
f_h = sympy.Symbol("f_h")
f_out = sympy.Symbol("f_out")

WORD_BYTES = 4  # f32 features, int32 indices: every word in the model is 4 bytes

SYMBOLS = {s.name: s for s in (N, E, F, H, C, L, P, c, R_A, rho, S, r, alpha, beta,
                               gamma_spmm, gamma_gemm, f_in, f_h, f_out)}


def is_num(x: Expr) -> bool:
    """True for a plain number or a sympy number (no free symbols)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, Number):
        return True
    return isinstance(x, sympy.Basic) and x.is_number


def num(x: Expr) -> float:
    """A plain float from a number or a sympy number."""
    return float(x)


def smin(a: Expr, b: Expr) -> Expr:
    """min for numbers, ``sympy.Min`` for expressions (RDM Table III's min)."""
    if is_num(a) and is_num(b):
        return min(a, b)
    return sympy.Min(a, b)


def smax(a: Expr, b: Expr) -> Expr:
    if is_num(a) and is_num(b):
        return max(a, b)
    return sympy.Max(a, b)


class Lg(sympy.Function):
    """ceil(log2), kept as one symbol-like call so expressions print ``lg(P)``;
    a number substituted for its argument gives an integer (see ``lg``)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sympy.Integer(_ceil_log2(float(x)))
        return None

    def _sympystr(self, printer) -> str:
        return f"lg({printer._print(self.args[0])})"

    def _eval_rewrite_as_log(self, x, **kwargs):
        return sympy.ceiling(sympy.log(x, 2))


def _ceil_log2(x: float) -> int:
    """ceil(log2 x) for x >= 1 (0 for x <= 1), exact at powers of two."""
    if x <= 1:
        return 0
    k = math.ceil(math.log2(x))
    # guard the float log2 at the boundaries: 2**(k-1) < x <= 2**k
    while k > 0 and 2.0 ** (k - 1) >= x:
        k -= 1
    while 2.0 ** k < x:
        k += 1
    return k


def lg(x: Expr) -> Expr:
    """The ``lg`` of CAGNET's latency terms (§III-A: a collective over P ranks
    takes lg P rounds of messages, e.g. §IV-A-4's all-reduce alpha lg P): a
    count of messages, so ceil(log2 x), an integer for any number of ranks
    (was log2: 2.58 messages for a 6-rank all-reduce). Equal to log2 at
    powers of two; lg(1) = 0."""
    if is_num(x):
        return _ceil_log2(num(x))
    return Lg(x)


def root(x: Expr, k: int) -> Expr:
    """The k-th root: sqrt(P) for 2D, P^(1/3) for 3D grids (CAGNET §IV-C, §IV-D)."""
    if is_num(x):
        v = num(x) ** (1.0 / k)
        return float(round(v)) if abs(v - round(v)) < 1e-9 else v
    return x ** sympy.Rational(1, k)


def power(x: Expr, y: Expr) -> Expr:
    if is_num(x) and is_num(y):
        return num(x) ** num(y)
    return sympy.Pow(x, y)
