"""redistribute(R_A): RDM's communication-free SpMM and GEMM with all-to-all
redistributions between them (RDM §III-A, §III-D, §III-E, §IV-A).

The P ranks form a P/R_A x R_A grid: A is cut into P/R_A row panels, each
held by the R_A ranks of one grid row (R_A replicas of A in all; R_A = P
replicates A everywhere, R_A = 1 is CAGNET's 1D). A dense matrix is either
row-sliced (N/P rows per rank, for the GEMM with a replicated W) or tiled
N R_A/P x f/R_A (for the SpMM). Per rank:
  redistribution of width w: (R_A-1)/R_A * N w / P words, R_A - 1 messages
      (RDM §IV-A-4: "(R_A-1)/R_A * N * f" in all, inside each group of R_A)
  SpMM of width w: broadcast of the input within its column group,
      (P/R_A - 1) * N w / P words, P/R_A - 1 messages (§III-E "(P/R_A - 1)|B|")
The order configuration decides which SpMMs and redistributions happen
(``rdm.schedule``). The weight gradient's all-reduce (CAGNET §IV-A-4) is
added; RDM's tables leave it out.
"""
from __future__ import annotations

from gdsl.cost import symbols as sy
from gdsl.cost.build import (activation_terms, comm, gemm, graph_terms, one_allreduce, param_terms, spmm, spmm_width,
                             y_allreduce)
from gdsl.cost.problem import OrderConfig, Problem
from gdsl.cost.rdm import schedule
from gdsl.cost.record import Cost, OpCost
from gdsl.cost.symbols import Expr, is_num, lg


def redistribute(problem: Problem, R_A: Expr = sy.R_A, *, config: OrderConfig | None = None,
                 input_grad: bool = False) -> Cost:
    """``config`` defaults to sparse-first everywhere (RDM Table IV ID 0).
    ``input_grad``: also compute G^0 as RDM's tables do (default: no)."""
    pb = problem
    if pb.symbolic_depth:
        raise ValueError("redistribute needs a numeric L (its redistributions depend on each layer's neighbours)")
    N, E, P = pb.N, pb.E, pb.P
    if is_num(R_A) and is_num(P) and (float(P) % float(R_A) != 0 or float(R_A) < 1):
        raise ValueError(f"R_A must divide P: R_A={R_A}, P={P}")
    n = len(pb.layer_widths()) - 1
    config = config or OrderConfig("S" * n, "S" * n)
    layers = pb.layers(config)
    ops: list[OpCost] = []
    for st in schedule(layers, input_grad=input_grad):
        if st.kind == "redistribute":
            ops.append(comm("alltoall", st, (R_A - 1) / R_A * N * st.width / P, R_A - 1, st.what,
                            "RDM §III-D, §IV-A-4: (R_A-1)/R_A N f in all"))
        elif st.kind == "spmm":
            if not (is_num(R_A) and is_num(P) and float(R_A) == float(P)):
                # R_A = P: A everywhere, no broadcast (was listed as a 0-word, 0-message op, which
                # `gdsl compile --np` printed on the aggregation as "fwd bcast 0 words")
                ops.append(comm("bcast", st, (P / R_A - 1) * N * st.width / P, P / R_A - 1,
                                f"the {st.what} input within its column group",
                                "RDM §III-E: (P/R_A - 1)|B| in all"))
            ops.append(spmm(st, E * R_A / P, N * R_A / P, st.width / R_A))
        else:
            ops.append(gemm(st, N / P, st.k, st.width))
    for ly in layers:
        ops += y_allreduce(ly, lg(P))
    ops = one_allreduce(ops, lg(P))   # the ranks' one gradient all-reduce per epoch (sync_grads)
    fm = spmm_width(layers, input_grad)
    mem = (graph_terms(E * R_A / P, N * R_A / P) + activation_terms(layers, N / P, layers[0].f_in) + param_terms(layers)
           + [("buffers", N * fm / R_A + 2 * N * fm / P)])  # a column slice for the SpMM, all-to-all send+recv
    orders = f"{config.fwd}/{config.bwd}" + ("" if config.memoize is True else ",recompute")
    params = (("R_A", R_A), ("orders", orders)) + ((("id", config.id),) if n == 2 else ())
    return Cost("redistribute", params, tuple(ops), tuple(mem),
                notes=(f"orders {config}",))
