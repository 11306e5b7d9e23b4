"""From a compiled program to the cost model's question, and its answer.

The cost model (gdsl/cost) reasons about a GCN-like stack of layers with
widths f_0 -> f_1 -> ... -> f_L. A program gives them: f_0 is the width of
the first layer call's input and f_l the width of the l-th call's output
(feature shapes flattened), in call order after `repeat` is unrolled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from gdsl.cost import choose
from gdsl.cost.choose import Choice
from gdsl.cost.problem import Problem
from gdsl.cost.profile import Profile, load_profile
from gdsl.diagnostics import GdslError
from gdsl.ir.core import Module


def layer_widths(lowered: Module) -> list:
    """f_0..f_L from the calls of the lowered (not yet inlined) module."""
    calls = [op for op in lowered.main.ops if op.name == "call"]
    if not calls:
        raise GdslError("the model calls no layer: nothing to plan")
    width = lambda t: sympy.Mul(*t.shape) if t.shape else sympy.Integer(1)  # noqa: E731
    return [width(calls[0].operands[0].type)] + [width(op.result.type) for op in calls]


@dataclass
class Plan:
    problem: Problem
    choice: Choice | None       # None when the sizes are symbolic
    widths: list
    profile: Profile | None = None   # the machine profile the choice was priced on


def measure_partitions(src, dst, num_nodes: int, P: int, seed: int = 0) -> tuple[dict, dict]:
    """The graph statistics the vertex_cut and edge_cut costs need, measured
    on real partitions of this graph (issue: "a partition's replication
    factor or halo count when computed"): Libra's replication factor rho
    (DistGNN §5.1) and the largest METIS halo S per rank (the edge-cut
    exchange waits for the slowest rank); METIS is skipped without pymetis.
    Returns ({"rho": .., "halo": ..}, {name: how it was measured})."""
    import numpy as np

    from gdsl.graph import partition as gp
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    out, how = {}, {}
    if P > 1 and src.size:
        ep = gp.libra(src, dst, num_nodes, P, seed=seed)
        verts, _ = gp.replicas(src, dst, ep, num_nodes, P)
        out["rho"] = gp.replication_factor(verts, num_nodes)
        how["rho"] = f"measured (Libra vertex cut of this graph at P={P})"
        try:
            owner = gp.edge_cut_metis(src, dst, num_nodes, P, seed=seed)
            kind = "METIS edge cut"
        except GdslError:
            owner, kind = gp.rows_hash(num_nodes, P), "hash partition (pymetis not installed)"
        out["halo"] = float(max(h.size for h in gp.halo(src, dst, owner, P)))
        how["halo"] = f"measured (largest halo per rank, {kind} of this graph at P={P})"
    return out, how


def plan(lowered: Module, dims: dict[str, int], P: int, memory_per_rank: float | None = None,
         allow_approximate: bool = False, profile: Profile | None = None, graph=None) -> Plan:
    """The cost model's choice for P ranks, priced on `profile` (default:
    load_profile(), i.e. the calibrated profile when there is one). With
    `graph` (edges as the program sees them: its graph options applied) the
    replication factor and halo size are measured on real partitions
    (`measure_partitions`) instead of estimated."""
    widths = layer_widths(lowered)
    numeric = all(sympy.sympify(w).is_number for w in widths) and "N" in dims and "E" in dims
    if not numeric:
        pb = Problem(P=P, widths=tuple(widths))
        return Plan(pb, None, widths)
    pb = Problem(N=dims["N"], E=dims["E"], P=P, widths=tuple(int(w) for w in widths))
    profile = load_profile() if profile is None else profile
    stats, how = ({}, {}) if graph is None else measure_partitions(graph.src, graph.dst, graph.num_nodes, P)
    return Plan(pb, choose(pb, memory_per_rank, allow_approximate=allow_approximate, profile=profile,
                           measured=how, **stats), widths, profile)


def parse_bytes(text: str) -> float:
    units = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = units.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult != 1 else t) * mult
    except ValueError:
        raise GdslError(f"--mem-per-rank: cannot read '{text}' (e.g. 4G, 512M)") from None
    if not math.isfinite(v) or v <= 0:
        raise GdslError(f"--mem-per-rank must be positive, got '{text}'")
    return v
