"""Shared pieces of the strategies: op costs for SpMM, GEMM and collectives,
the walk over a layer stack's SpMMs and GEMMs, and the memory terms."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from gdsl.cost.problem import DENSE_FIRST, SPARSE_FIRST, Layer
from gdsl.cost.rdm import Step, schedule
from gdsl.cost.record import OpCost
from gdsl.cost.symbols import WORD_BYTES, Expr, is_num, smax

CAGNET_Y = "CAGNET §IV-A-4 (Y = H^T (A G): all-reduce of f_{l-1} x f_l)"
# What the ranks run instead of the paper's one all-reduce per layer (helper-34):
SYNC_GRADS = ("gdsl/dist/module.py sync_grads: ONE all-reduce of every parameter gradient per epoch, "
              "over all P ranks (CAGNET §IV-A-4 prices one per layer)")
RDM_FLOPS = "RDM §III-D, Tables II-III (nnz*f FMAs per SpMM, N*f_{l-1}*f_l per GEMM)"


def spmm(step: Step, nnz: Expr, rows: Expr, width: Expr, source: str = RDM_FLOPS) -> OpCost:
    """A local SpMM over ``nnz`` nonzeros and ``rows`` output rows of ``width``.

    Traffic: an index and a value per nonzero, one gathered input row per
    nonzero (no reuse assumed; DistGNN §4.2 on why reuse is poor) and one
    written output row per row: 4 * (2 nnz + nnz w + rows w) bytes.
    """
    return OpCost("spmm", step.phase, step.layer, flops=2 * nnz * width,
                  bytes=WORD_BYTES * (2 * nnz + nnz * width + rows * width),
                  count=step.count, what=step.what, source=source)


def gemm(step: Step, rows: Expr, k: Expr, n: Expr, source: str = RDM_FLOPS) -> OpCost:
    return OpCost("gemm", step.phase, step.layer, flops=2 * rows * k * n,
                  count=step.count, what=step.what, source=source)


def comm(op: str, step_or_layer, words: Expr, messages: Expr, what: str, source: str,
         phase: str | None = None, count: Expr | None = None) -> OpCost:
    if isinstance(step_or_layer, Step):
        s = step_or_layer
        return OpCost(op, phase or s.phase, s.layer, words=words, messages=messages,
                      count=s.count if count is None else count, what=what, source=source)
    ly: Layer = step_or_layer
    return OpCost(op, phase or "backward", ly.index, words=words, messages=messages,
                  count=ly.count if count is None else count, what=what, source=source)


def y_allreduce(ly: Layer, messages: Expr, source: str = CAGNET_Y) -> list[OpCost]:
    """The weight gradient's all-reduce: CAGNET §IV-A-4, alpha lg P + beta f^2,
    of the layer's parameter words (f_{l-1} f_l for a GCN layer); none for a
    layer with no parameter (was: a phantom f x f all-reduce for SGC's and
    APPNP's propagation layers). The words are this layer's share of the
    epoch's one all-reduce: ``one_allreduce`` then charges its messages once."""
    if not ly.has_params:
        return []
    return [comm("allreduce", ly, ly.weight_words, messages,
                 f"the weight gradient Y^{ly.index}", source, phase="backward")]


def one_allreduce(ops: list[OpCost], messages: Expr) -> list[OpCost]:
    """The ranks' gradient all-reduce, priced as they run it.

    CAGNET §IV-A-4 (and §IV-B-4 for 1.5D, over the P/c ranks of a process
    column) prices one all-reduce per layer, alpha lg P + beta f^2 each. The
    ranks instead concatenate every parameter gradient into one buffer and
    all-reduce it once per epoch over all P ranks (gdsl/dist/module.py
    ``sync_grads``; P3's model-parallel W^1 stays out of the buffer). The
    words are the same (the sum of the layers' f^2, kept per layer in the
    ops so each layer's share stays listed); the messages are ``messages``
    (lg P) once per epoch instead of once per layer (was: L lg P, and
    lg(P/c) per layer for 1.5D; helper-34). The messages ride on the op of
    the lowest layer that is counted once (the all-reduce starts after
    layer 1's backward); the others carry 0."""
    ars = [o for o in ops if o.op == "allreduce"]
    if not ars:
        return list(ops)
    once = [o for o in ars if is_num(o.count) and float(o.count) == 1]
    lead = min(once or ars, key=lambda o: o.layer)
    lead_msgs = messages if any(o is lead for o in once) else messages / lead.count
    return [replace(o, messages=lead_msgs if o is lead else 0,
                    what=o.what + " (its share of the epoch's one all-reduce)",
                    source=o.source + "; runtime: " + SYNC_GRADS) if o.op == "allreduce" else o
            for o in ops]


def walk(layers: Sequence[Layer], *,
         on_spmm: Callable[[Step], list[OpCost]],
         gemm_rows: Expr,
         on_layer: Callable[[Layer], list[OpCost]] = lambda ly: [],
         skip: Callable[[Layer], bool] = lambda ly: False,
         input_grad: bool = False) -> list[OpCost]:
    """Ops of a stack whose communication is attached to each SpMM (and to
    each layer, e.g. the Y all-reduce); redistribution steps are ignored."""
    by_index = {ly.index: ly for ly in layers}
    ops: list[OpCost] = []
    for st in schedule(layers, input_grad=input_grad, loss_rows=False):
        if skip(by_index[st.layer]):
            continue
        if st.kind == "spmm":
            ops += on_spmm(st)
        elif st.kind == "gemm":
            ops.append(gemm(st, gemm_rows, st.k, st.width))
    for ly in layers:
        if not skip(ly):
            ops += on_layer(ly)
    return ops


def fmax(layers: Sequence[Layer]) -> Expr:
    """The widest dense matrix of the stack, f_0..f_L."""
    m = layers[0].f_in
    for ly in layers:
        m = smax(m, ly.f_out)
    return m


def spmm_width(layers: Sequence[Layer], input_grad: bool = False) -> Expr:
    """The widest SpMM operand under the layers' orders (what a per-SpMM
    communication buffer must hold)."""
    widths = [st.width for st in schedule(layers, input_grad=input_grad) if st.kind == "spmm"]
    if not widths:   # no SpMM in an epoch (every aggregation invariant, or none): no buffer
        return 0
    m = widths[0]
    for w in widths[1:]:
        m = smax(m, w)
    return m


def grad_width(layers: Sequence[Layer]) -> Expr:
    """The widest gradient the backward holds: G^l for every layer and
    G^l W^T for every layer but the first (no gradient of the features)."""
    m = layers[0].f_out
    for ly in layers:
        m = smax(m, ly.f_out)
        if not ly.first:
            m = smax(m, ly.f_in)
    return m


def activation_terms(layers: Sequence[Layer], n_loc: Expr, features: Expr,
                     skip: Callable[[Layer], bool] = lambda ly: False) -> list[tuple[str, Expr]]:
    """Words per rank kept for the backward, for ``n_loc`` local rows:
    the input features, Z^l and H^l of each layer, the memoised
    T = A^T H^{l-1} of layers that read it back (sparse-first forward,
    dense-first backward: RDM Fig. 3) and the backward's
    working set (G^l and A G^l at the widest layer)."""
    kept = [ly for ly in layers if not skip(ly)]
    acts = sum((ly.count * 2 * n_loc * ly.f_out for ly in kept), 0)
    reads_t = [ly for ly in kept if ly.fwd == SPARSE_FIRST and ly.bwd == DENSE_FIRST and ly.memoize
               and ly.has_params    # T is kept for Y^l = T^T G^l: no Y without a parameter
               and ly.aggregates]   # and no T without an aggregation (helper-34)
    memo = sum((ly.count * n_loc * ly.f_in for ly in reads_t), 0)
    return [("features", n_loc * features), ("activations", acts), ("memoised A^T H", memo),
            ("gradients", 2 * n_loc * grad_width(kept or layers))]


def param_terms(layers: Sequence[Layer], first_layer_rows: Expr | None = None) -> list[tuple[str, Expr]]:
    """Weights, their gradients and two Adam moments: 4 words per parameter."""
    total = 0
    for ly in layers:
        # P3's layer 1_M: a rank holds first_layer_rows of the f_in rows of W^1
        share = 1 if (first_layer_rows is None or not ly.first) else first_layer_rows / ly.f_in
        total += ly.count * 4 * ly.weight_words * share
    return [("parameters", total)]


def graph_terms(nnz: Expr, rows: Expr) -> list[tuple[str, Expr]]:
    """CSR: an index and a value per nonzero, a row pointer per row."""
    return [("graph", 2 * nnz + rows)]
