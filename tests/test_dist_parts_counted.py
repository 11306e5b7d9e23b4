"""Every vertex's loss and metrics are counted by exactly one rank, on every
plan, on a graph where vertex_cut really splits vertices (the hypothesis
test of tests/test_dist_parts.py draws small graphs on which its 40
examples may never split one: a vertex cut counting every replica passed it)."""
from __future__ import annotations

import numpy as np
import pytest

from gdsl.dist.part import build_parts, parse_spec
from gdsl.graph.synthetic import rmat_graph


@pytest.mark.parametrize("plan,P", [("vertex_cut", 2), ("vertex_cut", 4), ("rows(hash)", 3), ("features", 3),
                                    ("redistribute", 2), ("rows_replicated(2)", 4), ("replicate", 3)])
def test_each_vertex_counted_once(plan, P):
    g = rmat_graph(300, 6)
    parts = build_parts(parse_spec(plan), g, P)
    if plan == "vertex_cut":
        assert parts[0].meta["replication_factor"] > 1.05          # vertices really are split here
    counted = np.concatenate([p.owned_rows[p.counted] for p in parts])
    assert sorted(counted.tolist()) == list(range(g.num_nodes))


def test_vertex_cut_counts_a_vertex_at_its_root():
    """The counting replica is the root of the split-vertex tree (the rank
    its leaves send to: nothing in any rank's send_idx points at it)."""
    g = rmat_graph(300, 6)
    parts = build_parts(parse_spec("vertex_cut"), g, 4)
    for p in parts:
        leaves = np.zeros(p.n_local, bool)
        for idx in p.send_idx:
            leaves[idx] = True
        assert np.array_equal(p.counted, ~leaves)
