"""The Numba backend reads a constant edge weight in CSR slot order
(ops.permute_edge_data), one order per aggregation direction. One weight
aggregated both to dst and to src must get each direction's order
(NumbaModule._wperm is keyed by (weight, direction)); no program of the
suite aggregates a constant weight both ways, so a cache keyed by the
weight alone went unnoticed."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("numba")

import gdsl  # noqa: E402
from helpers import random_graph  # noqa: E402

BOTH_WAYS = """
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Both[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m_in = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m_in)
    scatter m_out = dst.h * rsqrt(src.degree * dst.degree)
    gather  b = sum(m_out, to = src)
    transform t = (a + 2 * b) @ W
    return t
}

model M { return Both[C](relu(Both[8](X))) }

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
    epochs = 3
}
"""


def test_a_constant_edge_weight_aggregated_both_ways_matches_the_reference():
    g = random_graph(n=40, e=200, f=6, c=3, seed=5)
    prog = gdsl.compile(BOTH_WAYS)
    ref = prog.module(g, backend="reference")
    nb = prog.module(g, backend="numba")
    nb.load_state_dict(ref.state_dict())
    plan = nb.kernel_plan()
    assert len(plan) == 4 and all(k.startswith("numba aggregate") for _, k in plan)   # the fused mul kernels
    ref.eval()
    nb.eval()
    out_ref, out_nb = ref(), nb()
    torch.testing.assert_close(out_nb, out_ref, rtol=1e-5, atol=1e-5)
    # and the gradients (the backward reads the reverse order of each direction)
    ref.train()
    nb.train()
    ref.zero_grad()
    nb.zero_grad()
    ref.loss(ref()).backward()
    nb.loss(nb()).backward()
    for (name, p), (_, q) in zip(ref.named_parameters(), nb.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
