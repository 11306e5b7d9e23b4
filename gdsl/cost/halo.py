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


def edge_cut(problem: Problem = SYMBOLIC, halo: Expr = sy.S, *, orders=None) -> Cost:
    pb = problem
    layers = pb.layers(orders)
    ops = one_allreduce(halo_ops(layers, pb.N, pb.E, pb.P, halo), lg(pb.P))   # one per epoch (sync_grads)
    mem = (graph_terms(pb.E / pb.P, pb.N / pb.P) + activation_terms(layers, pb.N / pb.P, layers[0].f_in)
           + param_terms(layers) + [("halo buffer", halo * spmm_width(layers))])
    return Cost("edge_cut", (("S", halo),), tuple(ops), tuple(mem))
