"""Mutation audit (helper-20): the fuse pass's broadcast attributes and the
Numba backend's generated kernels. Each test compares the numba backend (and
where it matters the reference backend) against hand-written torch, and kills
at least one hand-made mutant (named in its docstring) that the existing
tests let pass."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("numba")

import gdsl  # noqa: E402
from helpers import edges_with, random_graph  # noqa: E402

# z is [heads, dout] and q is [dout]: `src.z * e` and `src.z * dst.q` broadcast
# `trail` (q along dout). With heads == dout == 3 (C = 3) the sizes alone
# would say `lead` (q along heads).
TRAIL = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[dout, heads](h: [din]) -> [heads, dout] {
    param W  : f32[din, heads * dout] = glorot
    param V  : f32[din, dout] = glorot
    transform z0 = h @ W
    transform q = h @ V
    apply z = reshape(z0, [heads, dout])
    MSG
    gather a = sum(m)
    return a
}
model M[heads = 3] { return mean(L[C, heads](X), 0) }
train t { model = M; loss = cross_entropy(Y, mask = train); epochs = 1 }
"""
EDGE_W = "scatter e = src.q * dst.q\n    scatter m = src.z * e"
SDDMM = "scatter m = src.z * dst.q"


def _trail_case(msg: str, backend: str):
    g = random_graph(n=30, e=120, f=5, c=3, seed=3)
    torch.manual_seed(0)
    model = gdsl.compile(TRAIL.replace("MSG", msg)).module(g, backend=backend).eval()
    sd = model.state_dict()
    W, V = sd["L_1.W"], sd["L_1.V"]
    src, dst, n = edges_with(g, self_loops=True)
    z = (g.features @ W).reshape(n, 3, 3)
    q = g.features @ V
    w = q[src] * q[dst] if msg == EDGE_W else q[dst]
    m = z[src] * w[:, None, :]          # trail: q runs along dout, the last axis
    want = torch.zeros_like(z).index_add_(0, dst, m).mean(1)
    return model, want


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_trailing_edge_weight_on_multihead_messages(backend):
    """`src.z * e`, z [heads, dout], e an edge tensor [dout]: a `trail`
    broadcast, even with heads == dout. Kills fuse.py u9 (`_match_aggregate`
    without the `broadcast == "lead"` condition: the mul fused into
    aggregate[mul], which the numba kernels run as one weight per head)."""
    model, want = _trail_case(EDGE_W, backend)
    torch.testing.assert_close(model(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_sddmm_keeps_trailing_broadcast(backend):
    """`src.z * dst.q`, z [heads, dout], q [dout], heads == dout: the sddmm
    keeps the lowering's `trail`. Kills fuse.py u10 (form_sddmm dropping the
    `broadcast` attribute: both backends then re-decide `lead` from the sizes
    and agree with each other, so only hand-written torch tells)."""
    model, want = _trail_case(SDDMM, backend)
    torch.testing.assert_close(model(), want, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# numba kernels against hand-written torch
# --------------------------------------------------------------------------

def _graph():
    """30 vertices; vertex 0 has 40 in-edges, each other row a few (random
    sources), vertex 29 isolated."""
    from gdsl.backends.numba import CSRGraph
    gen = torch.Generator().manual_seed(5)
    src = torch.cat([torch.randint(1, 29, (40,), generator=gen), torch.randint(0, 29, (60,), generator=gen)])
    dst = torch.cat([torch.zeros(40, dtype=torch.int64), torch.randint(1, 29, (60,), generator=gen)])
    return src, dst, 30, CSRGraph.build(src, dst, 30)


def _softmax_by_dst(s, dst, n):
    idx = dst.reshape((-1,) + (1,) * (s.dim() - 1)).expand_as(s)
    mx = s.new_full((n,) + tuple(s.shape[1:]), float("-inf")).scatter_reduce(0, idx, s.detach(), "amax")
    e = torch.exp(s - mx[dst])
    return e / e.new_zeros((n,) + tuple(s.shape[1:])).index_add(0, dst, e)[dst]


def test_edge_softmax_of_widely_spread_float32_scores():
    """Scores 100 apart in float32: exp(s - max) stays finite only if the
    subtracted value is each row's true max. Kills codegen.py n17 (the running
    max taken with `<`: a min) and n19 (the max loop skipping a row's last
    in-edge): both overflow to inf / inf = NaN."""
    from gdsl.backends.numba import edge_softmax
    src, dst, n, g = _graph()
    gen = torch.Generator().manual_seed(9)
    s = (100 * torch.randn(dst.numel(), 2, generator=gen)).requires_grad_()
    got = edge_softmax(g, s)
    want = _softmax_by_dst(s, dst, n)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    gout = torch.randn(dst.numel(), 2, generator=gen)
    (a,) = torch.autograd.grad(got, s, gout)
    (b,) = torch.autograd.grad(want, s, gout)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("slope", [0.05, 1.5])
def test_gat_aggregate_uses_its_slope(slope):
    """gat_aggregate's leaky_relu slope other than GAT's 0.2, forward and
    gradients. Kills codegen.py n20 (the forward's slope fixed at 0.2; every
    other test passes 0.2) and n21 (the backward without the slope)."""
    from gdsl.backends.numba import gat_aggregate
    src, dst, n, g = _graph()
    gen = torch.Generator().manual_seed(4)
    H, D = 2, 3
    el = (2 * torch.randn(n, H, generator=gen, dtype=torch.float64)).requires_grad_()
    er = (2 * torch.randn(n, H, generator=gen, dtype=torch.float64)).requires_grad_()
    z = torch.randn(n, H, D, generator=gen, dtype=torch.float64).requires_grad_()
    got = gat_aggregate(g, el, er, z, slope)
    a = _softmax_by_dst(torch.nn.functional.leaky_relu(el[src] + er[dst], slope), dst, n)
    want = z.new_zeros(z.shape).index_add(0, dst, a.unsqueeze(-1) * z[src])
    torch.testing.assert_close(got, want)
    gout = torch.randn(n, H, D, generator=gen, dtype=torch.float64)
    for x, y in zip(torch.autograd.grad(got, (el, er, z), gout), torch.autograd.grad(want, (el, er, z), gout)):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("msg", ["mul", "add"])
def test_aggregate_edge_weight_with_a_trailing_unit_axis(msg):
    """w [E, 1] against x [N, 3]: one value per edge (the unit axis is
    dropped before matching w's shape as a prefix of x's). Kills ops.py n36
    (_classify without stripping trailing 1s: 'does not broadcast')."""
    from gdsl.backends.numba import aggregate
    src, dst, n, g = _graph()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    w = torch.rand(dst.numel(), 1, generator=gen, dtype=torch.float64) + 0.5
    m = x[src] * w if msg == "mul" else x[src] + w
    want = x.new_zeros(n, 3).index_add(0, dst, m)
    torch.testing.assert_close(aggregate(g, x, w, msg, "sum", "dst"), want)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_aggregate_max_min_propagate_a_nan_message(reduce):
    """A NaN message wins wherever it is in the row, as in torch's amax /
    amin. Kills codegen.py n11 (the kernel's `or (t != t and ...)` dropped: a
    NaN not first in the row lost); before, only a test of the source text
    noticed."""
    from gdsl.backends.numba import aggregate
    src, dst, n, g = _graph()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(n, 2, generator=gen, dtype=torch.float64)
    x[7, 1] = float("nan")
    x[20, 0] = float("nan")
    idx = dst.unsqueeze(1).expand(-1, 2)
    want = x.new_zeros(n, 2).scatter_reduce(0, idx, x[src], "amax" if reduce == "max" else "amin",
                                            include_self=False)
    got = aggregate(g, x, None, "copy_src", reduce, "dst")
    assert torch.isnan(want).any()
    torch.testing.assert_close(got, want, equal_nan=True)
