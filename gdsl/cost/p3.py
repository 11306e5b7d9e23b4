"""features: P3's push-pull parallelism (Gandhi & Iyer, OSDI'21, §3.1-3.2),
full-batch.

The input features are split by columns, F/P per rank (§3.1); the graph
structure is replicated ("P3 can simply replicate the entire graph
structure", §3.1). Layer 1 runs model-parallel (layer 1_M, §3.2.2): each rank
aggregates its F/P feature columns over all N vertices and multiplies by its
F/P rows of W^1, giving a partial activation of every vertex; the owner of
each vertex (hash partition) pulls and sums the P partials (step 3: a
reduce-scatter, (P-1)/P N H words per rank). The rest of the forward and the
backward down to layer 1_D run data-parallel on the hash partition (a halo
exchange per SpMM, see ``halo``); at layer 1_D the error gradient is pushed
to all ranks (step 7: an all-gather, (P-1)/P N H words) and each rank
finishes the backward of its W^1 rows locally, with no all-reduce for W^1.
Layer 1's other params (its bias, applied after the sync to the owner's rows)
are data-parallel: the ranks all-reduce their gradient with the others'
(dist/module.py sync_grads leaves out only the weight of layer 1's product).
"""
from __future__ import annotations

from gdsl.cost.build import activation_terms, comm, gemm, graph_terms, one_allreduce, param_terms, spmm, spmm_width
from gdsl.cost.halo import halo_ops, hash_halo
from gdsl.cost.problem import SPARSE_FIRST, Problem
from gdsl.cost.rdm import Step
from gdsl.cost.record import Cost, OpCost
from gdsl.cost.symbols import Expr, is_num, lg

SYMBOLIC = Problem()
P3 = "P3 §3.2.2"


def features(problem: Problem = SYMBOLIC, halo: Expr | None = None, *, orders=None,
             first: str = SPARSE_FIRST) -> Cost:
    """``halo``: halo vertices per rank of the hash partition used by the
    data-parallel layers (default: ``hash_halo``). ``first``: layer 1_M's
    order, "S" aggregates the F/P feature columns then multiplies (P3's
    partial activations), "D" multiplies first and aggregates at width H."""
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    halo = hash_halo(N, E, P) if halo is None else halo
    layers = pb.layers(orders)
    l1 = layers[0]
    a, b = l1.f_in / P, l1.f_out  # this rank's feature columns, hidden width
    ops: list[OpCost] = []
    fw = Step("spmm", "forward", 1, a if first == SPARSE_FIRST else b, what="partial A^T H^0_p W^1_p")
    if first == SPARSE_FIRST:
        ops += [spmm(fw, E, N, a, P3 + " step 2: aggregate own feature columns over all vertices"),
                gemm(Step("gemm", "forward", 1, b, what="(A^T H^0_p) W^1_p"), N, a, b)]
    else:
        ops += [gemm(Step("gemm", "forward", 1, b, what="H^0_p W^1_p"), N, a, b),
                spmm(fw, E, N, b, P3 + " step 2, dense first")]
    ops.append(comm("reduce_scatter", fw, (P - 1) / P * N * b, P - 1,
                    "owners pull and sum the partial activations of their vertices", P3 + " step 3"))
    back = []   # layer 1's backward: only for its W^1_p gradient (nothing below it)
    bw = Step("spmm", "backward", 1, b, what="G^1 pushed to all ranks")
    back.append(comm("allgather", bw, (P - 1) / P * N * b, P - 1,
                     "push the error gradient of layer 1_D to every rank", P3 + " step 7"))
    if first == SPARSE_FIRST:  # Y^1_p = (A^T H^0_p)^T G^1 from the kept aggregate
        back.append(gemm(Step("gemm", "backward", 1, b, what="Y^1_p = T_p^T G^1"), N, a, b))
    else:                      # Y^1_p = H^0_p^T (A G^1)
        back += [spmm(Step("spmm", "backward", 1, b, what="A G^1"), E, N, b, P3 + " step 8"),
                 gemm(Step("gemm", "backward", 1, b, what="Y^1_p = H^0_p^T (A G^1)"), N, a, b)]
    if not l1.has_params:   # SGC's first propagation: no W^1, so no GEMM and no backward (helper-32;
        # was: a phantom F/P x F GEMM each way and the G^1 push, 251 ms of sgc.gd's 253 ms at P = 4)
        ops, back = [o for o in ops if o.op != "gemm"], []
    if not l1.aggregates:   # layer 1 a transform only (APPNP's Linear): H^0_p W^1_p and its Y, no SpMM
        ops, back = [o for o in ops if o.op != "spmm"], [o for o in back if o.op != "spmm"]   # (helper-34)
    ops += back
    if l1.weights is not None and l1.has_params:   # `Problem(params=...)`: layer 1's words beyond the F x H weight W^1
        rest_words = l1.weights - l1.f_in * l1.f_out
        if not (is_num(rest_words) and float(rest_words) <= 0):   # (was: left out; 16 words for gcn.gd's b^1)
            ops.append(comm("allreduce", l1, rest_words, lg(P), "the gradient of layer 1's data-parallel params "
                            "(those after the sync: the bias)", "CAGNET §IV-A-4 (P3's layers 1_D and up)",
                            phase="backward"))
    ops += halo_ops(layers, N, E, P, halo, skip=lambda ly: ly.first)
    # layer 1's bias and the layers >= 2's params go in the ranks' one all-reduce per epoch, over
    # all P ranks (sync_grads, W^1 left out): lg P messages once (was: lg P per layer; helper-34)
    ops = one_allreduce(ops, lg(P))
    rest = layers[1:]
    mem = graph_terms(E, N) + [
        ("features", N * a),
        ("layer 1_M", N * b + (N * a if first == SPARSE_FIRST else 0)),  # partials (then G^1) + kept aggregate
    ]
    mem += [(k, v) for k, v in activation_terms(layers, N / P, 0, skip=lambda ly: ly.first)
            if k != "features"] if rest else []
    mem += [("layer 1_D", 2 * N / P * b)]
    mem += param_terms(layers, first_layer_rows=a)
    mem += [("halo buffer", halo * spmm_width(layers[1:]) if rest else 0)]
    notes = (f"halo vertices per rank of the data-parallel layers: {halo}",) if rest else ()
    return Cost("features", (), tuple(ops), tuple(mem), notes=notes)
