"""edge_cut: vertices partitioned (METIS), each rank pulls the rows of its halo
(the remote in-neighbours of its vertices) before each SpMM and returns the
halo's partial gradients in the backward. The halo size S (vertices per
rank) is a symbol, measured from the partition when there is one;
``hash_halo`` estimates it for a random hash partition (an upper bound for
METIS, which exists to make it smaller)."""
from __future__ import annotations

from gdsl.cost import symbols as sy
from gdsl.cost.build import (activation_terms, comm, graph_terms, one_allreduce, param_terms, spmm, spmm_width, walk,
                             y_allreduce)
from gdsl.cost.problem import Problem
from gdsl.cost.rdm import Step
from gdsl.cost.record import Cost, OpCost
from gdsl.cost.symbols import Expr, lg, power

SYMBOLIC = Problem()


def hash_halo(N: Expr = sy.N, E: Expr = sy.E, P: Expr = sy.P) -> Expr:
    """Expected halo vertices per rank under a random hash partition: a vertex
    owned elsewhere (N - N/P of them) is in a rank's halo if one of its
    E/N (average) out-edges lands there: (N - N/P)(1 - (1 - 1/P)^(E/N))."""
    return (N - N / P) * (1 - power(1 - 1 / P, E / N))


def halo_ops(layers, N: Expr, E: Expr, P: Expr, halo: Expr, *, skip=lambda ly: False) -> list[OpCost]:
    """Data-parallel layers over a vertex partition with a halo exchange per SpMM."""

    def on_spmm(st: Step) -> list[OpCost]:
        back = st.phase == "backward"
        return [comm("halo_exchange", st, halo * st.width, P - 1,
                     ("send the halo's partial sums of " if back else "pull the halo rows of ") + st.what,
                     "edge cut: S halo rows of the SpMM's width per rank; alltoallv with up to P-1 peers"),
                spmm(st, E / P, N / P, st.width)]

    return walk(layers, on_spmm=on_spmm, gemm_rows=N / P, skip=skip,
                on_layer=lambda ly: y_allreduce(ly, lg(P)))


def edge_cut(problem: Problem = SYMBOLIC, halo: Expr = sy.S, *, orders=None, exchange: str = "alltoallv") -> Cost:
    """A METIS vertex partition, S halo rows per rank.

    ``exchange``: how the ranks move the halo, `gdsl run --halo`, which the
    ranks apply to edge_cut (run as rows(metis)) as to rows(hash):
    "alltoallv" (the default) moves the S halo rows, S w words per SpMM;
    "bcast" (gdsl/dist/functions.py HaloExchange, mode bcast) allgathers every
    rank's whole block and reduce-scatters the backward's partials, CAGNET's
    (P-1)/P N w per SpMM whatever S is, as rows(halo=bcast) is priced (was:
    S w under --halo bcast too; helper-37)."""
    if exchange not in ("alltoallv", "bcast"):
        raise ValueError(f"edge_cut exchange is 'alltoallv' or 'bcast', got {exchange!r}")
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    layers = pb.layers(orders)
    if exchange == "bcast":
        def on_spmm(st: Step) -> list[OpCost]:
            return [comm("bcast", st, (P - 1) / P * N * st.width, P - 1,
                         f"allgather every rank's block of the {st.what} input (--halo bcast)",
                         "runtime --halo bcast (dist/functions.py HaloExchange): allgatherv of the blocks, "
                         "reduce_scatter backward; CAGNET §IV-A-1: (P-1)/P beta n f"),
                    spmm(st, E / P, N / P, st.width)]
        ops = walk(layers, on_spmm=on_spmm, gemm_rows=N / P, on_layer=lambda ly: y_allreduce(ly, lg(P)))
        buffers = ("buffers", N / P * spmm_width(layers))   # as rows(halo=bcast) prices it
    else:
        ops = halo_ops(layers, N, E, P, halo)
        buffers = ("halo buffer", halo * spmm_width(layers))
    ops = one_allreduce(ops, lg(P))   # one per epoch (sync_grads)
    mem = (graph_terms(E / P, N / P) + activation_terms(layers, N / P, layers[0].f_in)
           + param_terms(layers) + [buffers])
    params = (("S", halo),) + ((("halo", "bcast"),) if exchange == "bcast" else ())
    return Cost("edge_cut", params, tuple(ops), tuple(mem))
