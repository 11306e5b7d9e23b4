"""What the cost model is asked about: a GCN-like layer stack on a graph, and
the order (sparse-first or dense-first, memoised or not) of each layer.

A layer l computes Z^l = A^T H^{l-1} W^l, H^l = sigma(Z^l) (CAGNET §III-C,
RDM eq. 1-2) with widths f_{l-1} -> f_l. The widths are F, H, ..., H, C for L
layers. With a symbolic L the stack is summarised by three layer kinds,
first (F -> H), middle (H -> H, counted L-2 times) and last (H -> C), which
is exact for L >= 2 whenever a layer's cost does not depend on its
neighbours' orders (all strategies but ``redistribute``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import sympy

from gdsl.cost import symbols as sy
from gdsl.cost.symbols import Expr, is_num

SPARSE_FIRST = "S"  # SpMM then GEMM: (A^T H) W          (RDM §III-B)
DENSE_FIRST = "D"   # GEMM then SpMM: A^T (H W)


@dataclass(frozen=True)
class OrderConfig:
    """One RDM configuration (RDM §III-B..C, Fig. 4, Table IV).

    ``fwd`` gives the forward order of layers 1..L, ``bwd`` the backward
    order of layers L..1: the column order of RDM Table IV ("Forward Pass"
    layer 1, 2 then "Backward Pass" layer 2, 1). ``memoize`` keeps
    T = A^T H^{l-1} from a sparse-first forward for the backward's
    Y^l = T^T G^l (RDM Fig. 3, the dotted reuse edges of Fig. 4); one bool
    for all layers or one per layer 1..L.
    """

    fwd: str
    bwd: str
    memoize: bool | tuple[bool, ...] = True

    def __post_init__(self) -> None:
        if len(self.fwd) != len(self.bwd) or not self.fwd:
            raise ValueError(f"order config needs one fwd and one bwd order per layer, got {self.fwd!r}/{self.bwd!r}")
        if set(self.fwd + self.bwd) - {SPARSE_FIRST, DENSE_FIRST}:
            raise ValueError(f"orders are 'S' (sparse first) or 'D' (dense first), got {self.fwd!r}/{self.bwd!r}")
        if isinstance(self.memoize, tuple) and len(self.memoize) != len(self.fwd):
            raise ValueError("memoize needs one flag per layer")

    @property
    def layers(self) -> int:
        return len(self.fwd)

    def fwd_of(self, layer: int) -> str:
        return self.fwd[layer - 1]

    def bwd_of(self, layer: int) -> str:
        return self.bwd[self.layers - layer]

    def memoize_of(self, layer: int) -> bool:
        return self.memoize if isinstance(self.memoize, bool) else self.memoize[layer - 1]

    @property
    def id(self) -> int:
        """The configuration's ID in RDM Table IV: the four S/D columns read
        in the order backward l2, backward l1, forward l1, forward l2 as a
        binary number with D = 1 (ID 4 = S S S D, ID 10 = D S D S)."""
        return int((self.bwd + self.fwd).replace("S", "0").replace("D", "1"), 2)

    @classmethod
    def from_id(cls, ident: int, layers: int = 2, memoize: bool = True) -> "OrderConfig":
        bits = format(ident, f"0{2 * layers}b").replace("0", "S").replace("1", "D")
        return cls(fwd=bits[layers:], bwd=bits[:layers], memoize=memoize)

    def __str__(self) -> str:
        memo = "" if self.memoize is True else f", memoize={self.memoize}"
        return f"fwd={self.fwd} bwd={self.bwd}{memo}"


@dataclass(frozen=True)
class Layer:
    """One layer kind of the stack; ``count`` > 1 only for symbolic L."""

    index: int            # 1-based; with symbolic L the middle kind is 2 and the last is 3
    f_in: Expr            # f_{l-1}
    f_out: Expr           # f_l
    fwd: str = SPARSE_FIRST
    bwd: str = SPARSE_FIRST
    memoize: bool = True
    count: Expr = 1
    first: bool = False
    last: bool = False
    weights: Expr | None = None   # words of the layer's parameters; None: a GCN layer's W, f_{l-1} f_l
    aggregates: bool = True       # False: a transform only (SGC's / APPNP's Linear): no SpMM, no exchange
    invariant: bool = False       # its aggregation reads no parameter: computed once, kept (see Problem)

    @property
    def weight_words(self) -> Expr:
        """The words of the layer's parameter gradients, all-reduced in the
        backward (CAGNET §IV-A-4's Y, f_{l-1} f_l for a GCN layer)."""
        return self.f_in * self.f_out if self.weights is None else self.weights

    @property
    def has_params(self) -> bool:
        """False for a parameter-free layer (SGC's or APPNP's propagation):
        no GEMM, no weight gradient, no all-reduce."""
        w = self.weights
        return w is None or not (is_num(w) and float(w) == 0)


@dataclass(frozen=True)
class Problem:
    """Sizes of one training problem, symbols by default, numbers to evaluate.

    ``widths`` overrides F, H, C and L with explicit f_0..f_L. ``params``
    gives each layer's parameter words (f_1..f_L's layers, explicit depth
    only): what its weight-gradient all-reduce moves, 0 for a layer with no
    parameter; None prices every layer as a GCN layer, f_{l-1} f_l.

    ``aggregates`` (one bool per layer, explicit depth only): False for a
    layer call with no aggregation (SGC's or APPNP's `Linear`: a transform
    only), which has no SpMM and so no exchange, forward or backward (was:
    one SpMM and its exchanges each way; helper-34). ``invariant`` (one bool
    per layer): the layer's aggregation reads no parameter and no dropout
    (the IR's `invariant` mark, passes/invariant.py: SGC's propagations of
    X): the ranks of an exact plan compute it in the first forward and keep
    it (dist/module.py ``_rank_hoisted``; the approximate vertex cut
    completes it once, ``_invariant_kept``), so an epoch after the first
    runs neither its SpMM nor its exchange, and it has no backward (its
    input's gradient reaches no parameter). Its order is sparse-first with
    T kept, as the order pass makes it (passes/order.py, order_by=invariant).
    None: every layer aggregates, every epoch.
    """

    N: Expr = sy.N
    E: Expr = sy.E
    F: Expr = sy.F
    H: Expr = sy.H
    C: Expr = sy.C
    L: Expr = sy.L
    P: Expr = sy.P
    widths: tuple | None = field(default=None)
    params: tuple | None = field(default=None)
    aggregates: tuple | None = field(default=None)
    invariant: tuple | None = field(default=None)

    def __post_init__(self) -> None:
        # a size given by name ("F", or widths=("F", "H", "C")) is the symbol of that name, as the IR
        # names its dims (was: a raw TypeError deep in the cost formulas; helper-6)
        def sym(v):
            return sympy.Symbol(v) if isinstance(v, str) else v
        for name in ("N", "E", "F", "H", "C", "L", "P"):
            object.__setattr__(self, name, sym(getattr(self, name)))
        if self.widths is not None:
            object.__setattr__(self, "widths", tuple(sym(w) for w in self.widths))
        if self.params is not None:
            object.__setattr__(self, "params", tuple(sym(w) for w in self.params))
            if self.symbolic_depth:
                raise ValueError("per-layer params need a numeric L (or explicit widths)")
            if len(self.params) != len(self.layer_widths()) - 1:
                raise ValueError(f"params gives {len(self.params)} layers, the widths {len(self.layer_widths()) - 1}")
        for name in ("aggregates", "invariant"):
            flags = getattr(self, name)
            if flags is None:
                continue
            object.__setattr__(self, name, tuple(bool(f) for f in flags))
            if self.symbolic_depth:
                raise ValueError(f"per-layer {name} need a numeric L (or explicit widths)")
            if len(flags) != len(self.layer_widths()) - 1:
                raise ValueError(f"{name} gives {len(flags)} layers, the widths {len(self.layer_widths()) - 1}")

    @property
    def symbolic_depth(self) -> bool:
        return self.widths is None and not is_num(self.L)

    def layer_widths(self) -> tuple:
        """f_0..f_L (integer L only)."""
        if self.widths is not None:
            return tuple(self.widths)
        if not is_num(self.L):
            raise ValueError("explicit layer widths need a numeric L")
        n = int(self.L)
        if n < 1:
            raise ValueError(f"L must be at least 1, got {n}")
        return (self.F,) + (self.H,) * (n - 1) + (self.C,)

    @property
    def depth(self) -> Expr:
        return len(self.widths) - 1 if self.widths is not None else self.L

    def values(self) -> dict:
        """The numeric sizes as a substitution map for symbolic costs."""
        out = {}
        for name in ("N", "E", "F", "H", "C", "L", "P"):
            v = getattr(self, name)
            if is_num(v):
                out[getattr(sy, name)] = v
        return out

    def layers(self, orders: "str | OrderConfig | Sequence | None" = None) -> tuple[Layer, ...]:
        out = self._layers(orders)
        if self.params is not None:
            out = tuple(replace(ly, weights=w) for ly, w in zip(out, self.params))
        if self.aggregates is not None:
            out = tuple(ly if a else replace(ly, aggregates=False) for ly, a in zip(out, self.aggregates))
        if self.invariant is not None:
            # the order pass aggregates an invariant input first and keeps T (order_by=invariant), so the
            # backward's Y^l = T^T G^l needs no SpMM
            out = tuple(replace(ly, invariant=True, fwd=SPARSE_FIRST, bwd=DENSE_FIRST, memoize=True)
                        if inv and ly.aggregates else ly for ly, inv in zip(out, self.invariant))
        return out

    def _layers(self, orders: "str | OrderConfig | Sequence | None" = None) -> tuple[Layer, ...]:
        """The layer kinds with their orders.

        ``orders``: None or "sparse_first" (CAGNET's algorithms: SpMM first
        both ways, memoised), "narrow" (per layer, run the SpMM on the
        narrower of f_{l-1}, f_l: RDM §IV-A-1 "if f_l < f_{l-1} the GEMM-first
        strategy leads to fewer operations in SpMM and lower communication"),
        "delay_safe" (narrow, with layer 1 sparse-first: cd-r's choice) or an
        :class:`OrderConfig` (integer L only).
        """
        if self.symbolic_depth:
            kinds = [(1, self.F, self.H, 1, True, False),
                     (2, self.H, self.H, self.L - 2, False, False),
                     (3, self.H, self.C, 1, False, True)]
        else:
            w = self.layer_widths()
            n = len(w) - 1
            kinds = [(i, w[i - 1], w[i], 1, i == 1, i == n) for i in range(1, n + 1)]
        if isinstance(orders, OrderConfig):
            if self.symbolic_depth:
                raise ValueError("an explicit order config needs a numeric L (or explicit widths)")
            if orders.layers != len(kinds):
                raise ValueError(f"order config {orders} has {orders.layers} layers, the problem {len(kinds)}")
            return tuple(Layer(i, a, b, orders.fwd_of(i), orders.bwd_of(i), orders.memoize_of(i), cnt, fi, la)
                         for (i, a, b, cnt, fi, la) in kinds)
        if orders in (None, "sparse_first"):
            return tuple(Layer(i, a, b, SPARSE_FIRST, SPARSE_FIRST, True, cnt, fi, la)
                         for (i, a, b, cnt, fi, la) in kinds)
        if orders == "narrow":
            out = []
            for (i, a, b, cnt, fi, la) in kinds:
                shrinks = _less(b, a)
                fwd = DENSE_FIRST if shrinks else SPARSE_FIRST
                if fi:
                    # No gradient for the input features: with T = A^T H^0 kept
                    # from a sparse-first forward, Y^1 = T^T G^1 needs no SpMM.
                    bwd = DENSE_FIRST if fwd == SPARSE_FIRST else SPARSE_FIRST
                else:
                    bwd = DENSE_FIRST if _less(a, b) else SPARSE_FIRST
                out.append(Layer(i, a, b, fwd, bwd, True, cnt, fi, la))
            return tuple(out)
        if orders == "delay_safe":
            # "narrow", but the first layer (its input, the features, has no
            # parameter behind it) aggregates sparse-first: what the order pass
            # does under DistGNN's cd-r (passes/order.py, order_by=delay)
            return tuple(replace(ly, fwd=SPARSE_FIRST, bwd=DENSE_FIRST, memoize=True) if ly.first else ly
                         for ly in self._layers("narrow"))
        raise ValueError(f"unknown orders {orders!r}: use None, 'sparse_first', 'narrow', 'delay_safe' "
                         "or an OrderConfig")


def _less(a: Expr, b: Expr) -> bool:
    if is_num(a) and is_num(b):
        return float(a) < float(b)
    rel = sympy.simplify(a - b)
    if rel == 0:
        return False
    raise ValueError(f"order 'narrow' cannot compare the symbolic widths {a} and {b}; give numbers")
