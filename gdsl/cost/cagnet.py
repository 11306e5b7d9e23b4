"""The CAGNET family (Tripathy, Yelick, Buluç, SC20, §IV): replicate (one
rank), rows (1D), rows_replicated(c) (1.5D), grid2d (2D SUMMA) and grid3d
(Split-3D-SpMM). Per-equation alpha-beta costs are the paper's; the widths
each term is charged at (f^{l-1} or f^l) are spelled out where the paper
writes one "f" for both.

rows and rows_replicated accept any order (their communication is attached
to each SpMM, of whatever width the order gives it); CAGNET's own algorithms
are orders=None (sparse-first both ways, A G^l reused for Y^l). grid2d and
grid3d are CAGNET's algorithms only.
"""
from __future__ import annotations

from gdsl.cost import symbols as sy
from gdsl.cost.build import (activation_terms, comm, fmax, gemm, graph_terms, one_allreduce, param_terms,
                             spmm, spmm_width, walk, y_allreduce)
from gdsl.cost.problem import Problem
from gdsl.cost.rdm import Step
from gdsl.cost.record import Cost, OpCost
from gdsl.cost.symbols import Expr, is_num, lg, root

SYMBOLIC = Problem()


def replicate(problem: Problem = SYMBOLIC, *, orders=None) -> Cost:
    """The whole graph and model on one rank: no communication (the P = 1
    case of every algorithm below). The other P-1 ranks idle."""
    pb = problem
    layers = pb.layers(orders)
    ops = walk(layers, on_spmm=lambda st: [spmm(st, pb.E, pb.N, st.width)], gemm_rows=pb.N)
    mem = graph_terms(pb.E, pb.N) + activation_terms(layers, pb.N, layers[0].f_in) + param_terms(layers)
    return Cost("replicate", (), tuple(ops), tuple(mem), ranks=1)


def rows(problem: Problem = SYMBOLIC, *, partition: str = "hash", orders=None, exchange: str = "alltoallv",
         halo: Expr | None = None) -> Cost:
    """1D block rows (CAGNET §IV-A, Algorithm 1).

    Vertices are hash-partitioned or randomly permuted first (CAGNET §IV-A-6
    compares METIS with its "random block row distribution"), so each rank
    holds N/P rows and about E/P nonzeros.

    ``exchange``: how each SpMM gets the dense rows its local edges read.
    "bcast" is CAGNET's Algorithm 1 (what `gdsl run --halo bcast` runs): the
    dense input is broadcast block by block, T_comm = alpha (P-1) + (P-1)/P
    beta n f (§IV-A-1, eq. 1 and 3). "alltoallv" (the default, what the ranks
    run by default, `--halo alltoallv`: gdsl/dist/functions.py HaloExchange)
    moves only the halo rows, the remote in-neighbours of a rank's vertices:
    S w words per SpMM with up to P-1 peers, the edge cut's exchange
    (halo.py) on the hash partition's halo. ``halo``: S, the largest halo per
    rank (measured from the partition when there is one; default the
    expected halo of a random hash partition, ``hash_halo``). Was: priced as
    the broadcast whatever the ranks ran, (P-1)/P N w per SpMM, 7.4x the
    halo's words for gcn.gd on Cora at P = 4 (helper-34).

    The weight gradient: CAGNET §IV-A-4's alpha lg P + beta f^2 per layer;
    the ranks run one all-reduce of all the gradients per epoch, lg P
    messages once (``one_allreduce``).
    """
    from gdsl.cost.halo import hash_halo   # halo.py imports build.py, as this module does
    if partition not in ("hash", "random"):
        raise ValueError(f"rows partition is 'hash' or 'random', got {partition!r}")
    if exchange not in ("alltoallv", "bcast"):
        raise ValueError(f"rows exchange is 'alltoallv' or 'bcast', got {exchange!r}")
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    layers = pb.layers(orders)
    S = hash_halo(N, E, P) if halo is None else halo

    def on_spmm(st: Step) -> list[OpCost]:
        if exchange == "bcast":
            c = comm("bcast", st, (P - 1) / P * N * st.width, P - 1,
                     f"broadcast the {st.what} input, block by block",
                     "CAGNET §IV-A-1: alpha (P-1) + (P-1)/P beta n f")
        else:
            back = st.phase == "backward"
            c = comm("halo_exchange", st, S * st.width, P - 1,
                     ("send the halo's partial sums of " if back else "pull the halo rows of ") + st.what,
                     "runtime --halo alltoallv (dist/functions.py HaloExchange): S halo rows of the SpMM's "
                     "width per rank, alltoallv with up to P-1 peers; CAGNET §IV-A-1 broadcasts all (P-1)/P n f")
        return [c, spmm(st, E / P, N / P, st.width)]

    ops = walk(layers, on_spmm=on_spmm, gemm_rows=N / P,
               on_layer=lambda ly: y_allreduce(ly, lg(P)))
    ops = one_allreduce(ops, lg(P))
    # one broadcast block at a time (Algorithm 1), or the halo rows (alltoallv: the rank's rows with
    # its halo appended, dist/module.py _ext)
    buffers = N / P if exchange == "bcast" else S
    mem = (graph_terms(E / P, N / P) + activation_terms(layers, N / P, layers[0].f_in) + param_terms(layers)
           + [("buffers", buffers * spmm_width(layers))])
    params = (("partition", partition),) + ((("halo", "bcast"),) if exchange == "bcast" else ())
    notes = () if exchange == "bcast" else (f"halo vertices per rank: {S}",)
    return Cost("rows", params, tuple(ops), tuple(mem), notes=notes)


def rows_replicated(problem: Problem = SYMBOLIC, c: Expr = sy.c, *, orders=None) -> Cost:
    """1.5D block rows on a P/c x c grid, A and H replicated c times (CAGNET §IV-B,
    Algorithm 2). Per SpMM: alpha (P/c^2) lg(P/c^2) + beta (n f/c + n f c/P)
    (§IV-B-1, -3); Y: alpha lg(P/c) + beta f^2 (§IV-B-4). Each process row
    holds a block row of N c/P rows; the c processes of a row split its
    SpMM work and all compute the GEMM (Algorithm 2 line 9)."""
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    layers = pb.layers(orders)
    stages = _stages(P, c)

    def on_spmm(st: Step) -> list[OpCost]:
        return [comm("bcast+allreduce", st, N * st.width / c + N * st.width * c / P, stages * lg(stages),
                     f"broadcast the {st.what} input within process columns, all-reduce within rows",
                     "CAGNET §IV-B-1: alpha (P/c^2) lg(P/c^2) + beta (nf/c + nfc/P)"),
                spmm(st, E / P, N * c / P, st.width)]

    ops = walk(layers, on_spmm=on_spmm, gemm_rows=N * c / P,
               on_layer=lambda ly: y_allreduce(ly, lg(P / c), "CAGNET §IV-B-4: alpha lg(P/c) + beta f^2"))
    # CAGNET §IV-B-4 all-reduces each layer's Y over the P/c ranks of a process column, lg(P/c)
    # messages; the ranks all-reduce every gradient once per epoch over all P ranks (sync_grads on
    # the world communicator): lg P messages once (was: L lg(P/c); helper-34)
    ops = one_allreduce(ops, lg(P))
    # Buffers: the stage blocks of the rank's process column, `stages` blocks of N c/P rows (N/c rows
    # when c*c | P), all received before the SpMM (gdsl/dist/functions.py BlockBcast concatenates them;
    # Algorithm 2 line 6 holds one at a time), and the N c/P-row partial sums of line 8's all-reduce.
    # Was 2 N c/P w: one stage block, P/c^2 times too few rows for the blocks actually held.
    # A and H stay at CAGNET §IV-B's M_proc^1.5D: N c/P rows, nnz c/P nonzeros per rank.
    mem = (graph_terms(E * c / P, N * c / P) + activation_terms(layers, N * c / P, layers[0].f_in) + param_terms(layers)
           + [("buffers", (stages + 1) * N * c / P * spmm_width(layers))])
    return Cost("rows_replicated", (("c", c),), tuple(ops), tuple(mem))


def _stages(P: Expr, c: Expr) -> Expr:
    """Broadcast stages of the busiest process column (CAGNET §IV-B, Algorithm 2
    line 3: s = p/c^2). With c | P but c*c not dividing P, the P/c block rows
    do not split evenly over the c columns; CAGNET's implementation "assigns
    more stages to the last process column": P/c - (c-1) floor(P/c^2) stages
    there, and the column that waits longest sets the epoch's message count
    (was P/c^2, a fractional count such as 1.5 at P = 24, c = 4)."""
    if is_num(P) and is_num(c) and float(P) % float(c) == 0 and float(c) >= 1:
        blocks, cc = int(P) // int(c), int(c)
        return blocks - (cc - 1) * (blocks // cc)
    return P / c ** 2


def _cagnet_only(orders) -> None:
    if orders not in (None, "sparse_first"):
        raise ValueError("grid2d and grid3d are modelled for CAGNET's order only (sparse-first both ways)")


def _no_gemm_without_params(ops: list[OpCost], layers) -> list[OpCost]:
    """A parameter-free layer multiplies by no W: its GEMMs go (eq. 4's f^2 is
    already its 0 parameter words)."""
    by = {ly.index: ly for ly in layers}
    return [o for o in ops if o.op != "gemm" or by[o.layer].has_params]


def _backward(ly, layers, g_ops: list[OpCost], y_ops: list[OpCost]) -> list[OpCost]:
    """A layer's backward on the 2D/3D grids: eq. 3 (G^{l-1}, from A G^l) when the layer or
    one below it has a parameter, eq. 4 (Y^l's dense SUMMA) only when it has one: a
    parameter-free layer (SGC's propagation) has no Y, and none of its backward when no layer
    below has a parameter, as rdm.schedule prices 1D/1.5D (helper-32; was: a phantom eq. 4
    SUMMA per propagation layer and SGC's whole backward)."""
    need_g = ly.has_params or any(lo.has_params for lo in layers if lo.index < ly.index)
    return (g_ops if need_g else []) + (y_ops if ly.has_params else [])


def grid2d(problem: Problem = SYMBOLIC, *, orders=None) -> Cost:
    """Block 2D on a sqrt(P) x sqrt(P) grid (CAGNET §IV-C, Algorithm 3), per layer:
      eq. 1  SUMMA SpMM + partial SUMMA: alpha 2 sqrt(P) + beta (nnz/sqrt(P) + 2 n f/sqrt(P))
      eq. 2  all-gather of H^l:          alpha lg P + beta n f/sqrt(P)
      eq. 3  as eq. 1 plus the all-gather of sigma'(Z^{l-1}):
                                          alpha (2 sqrt(P) + lg P) + beta (nnz/sqrt(P) + 3 n f/sqrt(P))
      eq. 4  2D dense SUMMA + all-gather: alpha (sqrt(P) + lg P) + beta (2 n f/sqrt(P) + f^2)
    summing to §IV-C-5's L(alpha (5 sqrt(P) + 3 lg P) + beta (8 n f/sqrt(P) + 2 nnz/sqrt(P) + f^2)).
    Eq. 2 and the sigma' all-gather are counted in every layer, as the
    paper's total does (they vanish for an element-wise sigma)."""
    _cagnet_only(orders)
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    q = root(P, 2)
    layers = pb.layers(orders)
    ops: list[OpCost] = []
    for ly in layers:
        a, b, i = ly.f_in, ly.f_out, ly.index
        fw = Step("spmm", "forward", i, a, count=ly.count, what=f"T^{i} = A^T H^{i-1}")
        bw = Step("spmm", "backward", i, b, count=ly.count, what=f"A G^{i}")
        ops += [
            comm("summa", fw, E / q + 2 * N * a / q, 2 * q, "SUMMA SpMM + partial SUMMA of T",
                 "CAGNET §IV-C-1: alpha 2 sqrt(P) + beta (nnz/sqrt(P) + 2nf/sqrt(P))"),
            spmm(fw, E / q, N, a / q),
            gemm(Step("gemm", "forward", i, b, count=ly.count, what=f"Z^{i} = T W^{i}"), N / P, a, b),
            comm("allgather", fw, N * b / q, lg(P), f"H^{i} along the process row",
                 "CAGNET §IV-C-2: alpha lg P + beta nf/sqrt(P)"),
        ] + _backward(ly, layers, [
            comm("summa", bw, E / q + 2 * N * b / q + N * a / q, 2 * q + lg(P),
                 "SUMMA SpMM + partial SUMMA + all-gather of sigma'(Z^{l-1})",
                 "CAGNET §IV-C-3: alpha (2 sqrt(P) + lg P) + beta (nnz/sqrt(P) + 3nf/sqrt(P))"),
            spmm(bw, E / q, N, b / q),
            gemm(Step("gemm", "backward", i, a, count=ly.count, what=f"G^{i-1} = (A G^{i}) W^T"), N / P, b, a),
        ], [
            comm("summa", bw, N * a / q + N * b / q + ly.weight_words, q + lg(P), "2D dense SUMMA for Y + all-gather",
                 "CAGNET §IV-C-4: alpha (sqrt(P) + lg P) + beta (2nf/sqrt(P) + f^2)"),
            gemm(Step("gemm", "backward", i, b, count=ly.count, what=f"Y^{i} = H^T (A G^{i})"), N / P, a, b),
        ])
    ops = _no_gemm_without_params(ops, layers)
    mem = (graph_terms(E / P, N / q) + activation_terms(layers, N / P, layers[0].f_in) + param_terms(layers)
           + [("buffers", 2 * E / P + 2 * N * fmax(layers) / P)])  # one SUMMA stage of A and of H
    return Cost("grid2d", (), tuple(ops), tuple(mem))


def grid3d(problem: Problem = SYMBOLIC, *, orders=None) -> Cost:
    """Split-3D-SpMM on a P^(1/3) cube (CAGNET §IV-D), per layer:
      eq. 1  full + partial Split-3D-SpMM: 2 alpha (P^(1/3) + lg P) + beta (nnz/P^(2/3) + 4 n f/P^(2/3))
      eq. 2  all-gather:                   alpha lg P + beta n f/P^(2/3)
      eq. 3  as eq. 1 plus all-gather:     alpha (2 P^(1/3) + 3 lg P) + beta (nnz/P^(2/3) + 5 n f/P^(2/3))
      eq. 4  3D dense SUMMA + all-gather:  alpha 2 lg P + beta (2 n f/P^(2/3) + f^2)
    (§IV-D-5 totals L(alpha 4 P^(1/3) + beta (2 nnz/P^(2/3) + 12 n f/P^(2/3))),
    dropping the lg P and f^2 terms.) Memory: the activations of the layer in
    flight are replicated P^(1/3) times (§IV-D, M_total^3D)."""
    _cagnet_only(orders)
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    q = root(P, 3)
    q2 = q * q
    layers = pb.layers(orders)
    ops: list[OpCost] = []
    for ly in layers:
        a, b, i = ly.f_in, ly.f_out, ly.index
        fw = Step("spmm", "forward", i, a, count=ly.count, what=f"T^{i} = A^T H^{i-1}")
        bw = Step("spmm", "backward", i, b, count=ly.count, what=f"A G^{i}")
        ops += [
            comm("split3d", fw, E / q2 + 3 * N * a / q2 + N * b / q2, 2 * (q + lg(P)),
                 "Split-3D SpMM (H^{l-1} bcast, fiber reduce-scatter) + partial 3D GEMM",
                 "CAGNET §IV-D-1: 2 alpha (P^(1/3) + lg P) + beta (nnz/P^(2/3) + 4nf/P^(2/3))"),
            spmm(fw, E / q2, N / q, a / q),
            gemm(Step("gemm", "forward", i, b, count=ly.count, what=f"Z^{i} = T W^{i}"), N / P, a, b),
            comm("allgather", fw, N * b / q2, lg(P), f"H^{i} within a layer",
                 "CAGNET §IV-D-2: alpha lg P + beta nf/P^(2/3)"),
        ] + _backward(ly, layers, [
            comm("split3d", bw, E / q2 + 3 * N * b / q2 + 2 * N * a / q2, 2 * q + 3 * lg(P),
                 "Split-3D SpMM + partial 3D GEMM + all-gather of sigma'(Z^{l-1})",
                 "CAGNET §IV-D-3: alpha (2P^(1/3) + 3 lg P) + beta (nnz/P^(2/3) + 5nf/P^(2/3))"),
            spmm(bw, E / q2, N / q, b / q),
            gemm(Step("gemm", "backward", i, a, count=ly.count, what=f"G^{i-1} = (A G^{i}) W^T"), N / P, b, a),
        ], [
            comm("summa3d", bw, N * a / q2 + N * b / q2 + ly.weight_words, 2 * lg(P), "3D dense SUMMA for Y + all-gather",
                 "CAGNET §IV-D-4: alpha 2 lg P + beta (2nf/P^(2/3) + f^2)"),
            gemm(Step("gemm", "backward", i, b, count=ly.count, what=f"Y^{i} = H^T (A G^{i})"), N / P, a, b),
        ])
    ops = _no_gemm_without_params(ops, layers)
    mem = (graph_terms(E / P, N / q2) + activation_terms(layers, N / P, layers[0].f_in) + param_terms(layers)
           + [("3D replication", (q - 1) * N * fmax(layers) / P)])  # P^(1/3) n f^max / P in all
    return Cost("grid3d", (), tuple(ops), tuple(mem))
