"""RDM's model of a GCN layer stack: operation order, memoisation and the
redistributions they imply (Kurt et al., "Communication Optimization for
Distributed Execution of GNNs", §III-B..E and §IV, Tables II-IV and VI).

``schedule`` walks the layers forward then backward and lists every SpMM,
GEMM and redistribution the chosen orders need, tracking whether each dense
matrix is sliced by rows (R: what a GEMM with a replicated W needs) or by
columns (C: what an SpMM with a replicated A needs), RDM §III-A, Fig. 2 and
§III-D. The rules, each from the paper:

* forward sparse-first: SpMM on H^{l-1} (width f_{l-1}), then redistribute
  T = A^T H^{l-1} C->R for the GEMM; Z^l ends row-sliced (Table II, Fig. 5a);
* forward dense-first: GEMM, then redistribute H^{l-1} W^l R->C (width f_l)
  for the SpMM; Z^l ends column-sliced (Table II, Fig. 5b);
* two consecutive layers with the same order need one more redistribution
  of H^l (width f_l) (§IV-A-3); the input features H^0 are loaded in whichever
  slicing layer 1 needs;
* the loss needs rows: a column-sliced H^L is redistributed (§IV-A-1, "the
  cost of the last redistribution");
* backward sparse-first: SpMM A G^l (width f_l), redistribute it C->R, then
  the GEMMs G^{l-1} = (A G^l) W^T and Y^l = H^T (A G^l) (Table III);
* backward dense-first: GEMM G^l W^T, redistribute R->C (width f_{l-1}),
  SpMM; Y^l = T^T G^l uses the memoised T if the forward was sparse-first,
  otherwise one more SpMM of width min(f_{l-1}, f_l) and two redistributions
  of that width (Table III "N.M." rows, Fig. 3).

Table IV counts communication in units of (P-1)/P * N words and sparse ops
in units of nnz FMAs; ``table_iv`` returns exactly those two columns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from gdsl.cost import symbols as sy
from gdsl.cost.problem import DENSE_FIRST, SPARSE_FIRST, Layer, OrderConfig, Problem
from gdsl.cost.symbols import Expr, smin

ROWS, COLS = "R", "C"


@dataclass(frozen=True)
class Step:
    """One operation of the schedule.

    spmm: ``width`` is the dense operand's width (nnz * width FMAs).
    gemm: flops are 2 * rows * ``k`` * ``width``.
    redistribute: all-to-all of an N x ``width`` matrix between row and
    column slicing (RDM §III-D: (P-1)/P * N * width words in all).
    """

    kind: str
    phase: str
    layer: int
    width: Expr
    k: Expr = 0
    count: Expr = 1
    what: str = ""


def schedule(layers: Sequence[Layer], *, input_grad: bool = True,
             loss_rows: bool = True) -> list[Step]:
    """Every SpMM, GEMM and redistribution of one training epoch.

    ``input_grad``: compute G^0 (the gradient of the input features), as RDM
    Table III-IV do for every layer; a compiler drops it (nothing reads it).
    Redistributions are listed only for an explicit layer list (count 1 each).
    """
    track = all(ly.count == 1 for ly in layers)
    steps: list[Step] = []

    def add(kind, phase, ly, width, what, k=0):
        if kind == "redistribute" and not track:
            return
        steps.append(Step(kind, phase, ly.index, width, k, ly.count, what))

    cur = None  # slicing of the current dense matrix; H^0 comes as needed
    memo: dict[int, bool] = {}
    for ly in layers:
        a, b, i = ly.f_in, ly.f_out, ly.index
        w = ly.has_params   # a parameter-free layer (SGC's propagation) has no GEMM and no Y
        if not ly.aggregates or ly.invariant:
            # No SpMM in this epoch (helper-34): a layer with no aggregation (SGC's / APPNP's Linear)
            # is a row-local transform, and an invariant aggregation (`Problem(invariant=...)`) was
            # computed by the first forward and kept, row-sliced (dist/module.py _rank_hoisted). The
            # GEMM needs rows (RDM §III-A, Fig. 2). Was: one SpMM and its exchanges for both.
            if cur == COLS and not ly.invariant:
                add("redistribute", "forward", ly, a, f"H^{i-1} cols->rows (no aggregation)")
            if w:
                add("gemm", "forward", ly, b, f"Z^{i} = " + (f"T^{i} W^{i} (T^{i} kept)" if ly.invariant
                                                               else f"H^{i-1} W^{i}"), k=a)
            cur, memo[i] = ROWS, True
            continue
        if ly.fwd == SPARSE_FIRST:
            if cur == ROWS:
                add("redistribute", "forward", ly, a, f"H^{i-1} rows->cols (consecutive sparse-first layers)")
            add("spmm", "forward", ly, a, f"T^{i} = A^T H^{i-1}")
            add("redistribute", "forward", ly, a, f"T^{i} cols->rows")
            if w:
                add("gemm", "forward", ly, b, f"Z^{i} = T^{i} W^{i}", k=a)
            cur, memo[i] = ROWS, ly.memoize
        else:
            if cur == COLS:
                add("redistribute", "forward", ly, a, f"H^{i-1} cols->rows (consecutive dense-first layers)")
            if w:
                add("gemm", "forward", ly, b, f"H^{i-1} W^{i}", k=a)
            add("redistribute", "forward", ly, b, f"H^{i-1} W^{i} rows->cols")
            add("spmm", "forward", ly, b, f"Z^{i} = A^T (H^{i-1} W^{i})")
            cur, memo[i] = COLS, False
    if cur == COLS and loss_rows:
        add("redistribute", "forward", layers[-1], layers[-1].f_out, "H^L cols->rows for the loss")
    cur = ROWS  # the loss gradient G^L is row-sliced
    for ly in reversed(layers):
        a, b, i = ly.f_in, ly.f_out, ly.index
        w = ly.has_params
        # G^{i-1} is needed when a layer below has parameters (autograd computes no gradient
        # that reaches no parameter: SGC's propagation layers, under its Linear, have none)
        need_g = input_grad or any(lo.has_params for lo in layers if lo.index < i)
        if ly.invariant:
            need_g = False   # its input reads no parameter: no gradient of it reaches one
        if not (w or need_g):
            continue
        if not ly.aggregates or ly.invariant:
            # row-local: Y^l = H^{l-1}^T G^l (or T^T G^l from the kept T) and G^{l-1} = G^l W^T, no SpMM
            if cur == COLS:
                add("redistribute", "backward", ly, b, f"G^{i} cols->rows (no aggregation)")
            if w:
                add("gemm", "backward", ly, b, f"Y^{i} = " + ("T^T" if ly.invariant else f"H^{i-1}^T") + f" G^{i}",
                    k=a)
            if need_g and w:
                add("gemm", "backward", ly, a, f"G^{i-1} = G^{i} W^{i}^T", k=b)
            cur = ROWS
            continue
        if ly.bwd == SPARSE_FIRST:
            if cur == ROWS:
                add("redistribute", "backward", ly, b, f"G^{i} rows->cols")
            add("spmm", "backward", ly, b, f"A G^{i}")
            add("redistribute", "backward", ly, b, f"A G^{i} cols->rows")
            if w:
                add("gemm", "backward", ly, b, f"Y^{i} = H^{i-1}^T (A G^{i})", k=a)
            if need_g and w:
                add("gemm", "backward", ly, a, f"G^{i-1} = (A G^{i}) W^{i}^T", k=b)
            cur = ROWS
        else:
            if cur == COLS:
                add("redistribute", "backward", ly, b, f"G^{i} cols->rows")
            if need_g:
                if w:
                    add("gemm", "backward", ly, a, f"G^{i} W^{i}^T", k=b)
                add("redistribute", "backward", ly, a, f"G^{i} W^{i}^T rows->cols")
                add("spmm", "backward", ly, a, f"G^{i-1} = A (G^{i} W^{i}^T)")
            if w and not memo.get(i, False):
                m = smin(a, b)
                add("spmm", "backward", ly, m, f"recompute A^T H^{i-1} or A G^{i} for Y^{i} (not memoised)")
                add("redistribute", "backward", ly, m, "its input to cols")
                add("redistribute", "backward", ly, m, "its output to rows")
            if w:
                add("gemm", "backward", ly, b, f"Y^{i} = (A^T H^{i-1})^T G^{i}", k=a)
            cur = COLS
    return steps


def units(steps: Iterable[Step]) -> tuple[Expr, Expr]:
    """(communication, sparse ops) in RDM Table IV's units: the sum of the
    redistributed widths and the sum of the SpMM widths."""
    comm = sum((s.width * s.count for s in steps if s.kind == "redistribute"), 0)
    sparse = sum((s.width * s.count for s in steps if s.kind == "spmm"), 0)
    return comm, sparse


def configurations(layers: int = 2, memoize: Sequence[bool] = (True,)) -> list[OrderConfig]:
    """All 2^(2L) order configurations (RDM §IV-B: 16 for 2 layers), by Table IV ID."""
    out = []
    for m in memoize:
        out += [OrderConfig.from_id(i, layers, memoize=m) for i in range(4 ** layers)]
    return out


def config_units(widths: Sequence[Expr], config: OrderConfig, *, input_grad: bool = True) -> tuple[Expr, Expr]:
    """Table IV's two columns for any layer widths f_0..f_L and configuration."""
    layers = Problem(widths=tuple(widths)).layers(config)
    return units(schedule(layers, input_grad=input_grad))


def table_iv(fi: Expr = sy.f_in, fh: Expr = sy.f_h, fo: Expr = sy.f_out) -> dict[int, tuple[Expr, Expr]]:
    """RDM Table IV: ID -> (communication, sparse ops) for a 2-layer GCN.

    Reproduces the printed table exactly except three entries that break
    the paper's own rules (see docs/cost-model.md, "RDM Table IV errata"):
    ID 13 communication (printed without the f_in of the layer-1 dense-first
    backward, the same entry as ID 9), ID 15 communication (printed 3 f_out,
    the rules give 2 f_out) and ID 15 sparse ops (printed 4 f_h + 3 f_out,
    the rules give f_in + 2 f_h + f_out, plus the two min terms).
    """
    return {cfg.id: config_units((fi, fh, fo), cfg) for cfg in configurations(2)}


def pareto(points: dict, keys=lambda v: v) -> list:
    """The IDs whose values are not dominated (<= in every coordinate and <
    in one) by another's: RDM §IV-B "Pareto optimal configurations in terms
    of communication and sparse operations" (Table VI)."""
    vals = {k: tuple(float(x) for x in keys(v)) for k, v in points.items()}
    out = []
    for k, v in vals.items():
        dominated = any(all(o <= x for o, x in zip(w, v)) and any(o < x for o, x in zip(w, v))
                        for j, w in vals.items() if j != k)
        if not dominated:
            out.append(k)
    return sorted(out)


def table_vi(fi: int, fh: int, fo: int) -> list[int]:
    """RDM Table VI: the Pareto-optimal Table IV IDs for one (f_in, f_h, f_out)."""
    table = table_iv()
    sub = {sy.f_in: fi, sy.f_h: fh, sy.f_out: fo}
    return pareto({i: (comm.subs(sub), sparse.subs(sub)) for i, (comm, sparse) in table.items()})


def volume(widths: Sequence[Expr], config: OrderConfig, N: Expr = sy.N, P: Expr = sy.P,
           R_A: Expr = sy.R_A, *, input_grad: bool = True) -> Expr:
    """Total words moved per epoch by RDM with R_A replicas of A (§III-E, §IV-A-4):
    every redistribution moves (R_A-1)/R_A * N * width (it stays inside a
    group of R_A ranks) and every SpMM broadcasts its input (P/R_A - 1) * N * width
    (Table II, "Comm. (R_A < P)"). R_A = P gives Table IV's (P-1)/P * N units;
    R_A = 1 with all orders sparse-first gives CAGNET's 1D broadcasts.
    Backward SpMMs are charged like forward ones: Table III's "(R_A < P)" rows
    do not reduce to its own R_A = P rows (docs/cost-model.md)."""
    comm, sparse = config_units(widths, config, input_grad=input_grad)
    return (R_A - 1) / R_A * N * comm + (P / R_A - 1) * N * sparse


def forward_choice(f_prev: Expr, f_next: Expr) -> str:
    """RDM §IV-A-1 for one layer's forward: dense-first when the layer shrinks
    the width (f_l < f_{l-1}), sparse-first otherwise."""
    return DENSE_FIRST if float(f_next) < float(f_prev) else SPARSE_FIRST


__all__ = ["Step", "schedule", "units", "configurations", "config_units", "table_iv",
           "pareto", "table_vi", "volume", "forward_choice", "OrderConfig"]
