"""Every partitioning strategy as a function from a :class:`Problem` (and the
strategy's parameters) to a :class:`Cost`, plus the time model.

    replicate                    one rank                         cagnet.py
    rows(partition)              1D, hash or random permutation   cagnet.py   CAGNET §IV-A
    rows_replicated(c)           1.5D                             cagnet.py   CAGNET §IV-B
    grid2d                       2D SUMMA                         cagnet.py   CAGNET §IV-C
    grid3d                       Split-3D                         cagnet.py   CAGNET §IV-D
    features                     P3 push-pull                     p3.py       P3 §3.1-3.2
    redistribute(R_A, config)    RDM                              redistribute.py  RDM §III-IV
    vertex_cut(delay, rho)       Libra + DRPA cd-0 / cd-r / 0c    distgnn.py  DistGNN §5
    edge_cut(S)                  METIS halos                      halo.py

Called with the default (symbolic) Problem they return sympy expressions in
N, E, F, H, C, L, P and the strategy's symbols (c, R_A, rho, S, r); called
with numbers, floats.
"""
from __future__ import annotations

from gdsl.cost.cagnet import grid2d, grid3d, replicate, rows, rows_replicated
from gdsl.cost.distgnn import LIBRA_REPLICATION, random_replication, vertex_cut
from gdsl.cost.halo import edge_cut, hash_halo
from gdsl.cost.p3 import features
from gdsl.cost.problem import OrderConfig, Problem
from gdsl.cost.profile import DEFAULT_PROFILE, PROFILES, SUMMIT_V100_PROFILE, Profile, comm_time, compute_time, evaluate, predict_time
from gdsl.cost.record import Cost, OpCost, PhaseCost
from gdsl.cost.redistribute import redistribute

STRATEGIES = {
    "replicate": replicate,
    "rows": rows,
    "rows_replicated": rows_replicated,
    "grid2d": grid2d,
    "grid3d": grid3d,
    "features": features,
    "redistribute": redistribute,
    "vertex_cut": vertex_cut,
    "edge_cut": edge_cut,
}

__all__ = [
    "STRATEGIES", "replicate", "rows", "rows_replicated", "grid2d", "grid3d", "features",
    "redistribute", "vertex_cut", "edge_cut", "hash_halo", "random_replication", "LIBRA_REPLICATION",
    "Problem", "OrderConfig", "Cost", "OpCost", "PhaseCost", "Profile", "DEFAULT_PROFILE", "SUMMIT_V100_PROFILE", "PROFILES",
    "predict_time", "compute_time", "comm_time", "evaluate",
]
