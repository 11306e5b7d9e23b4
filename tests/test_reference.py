"""The reference backend against hand-written torch models (forward and grads)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gdsl
from helpers import edges_with, gat_conv, gcn_conv, random_graph, sage_conv

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"


def _params(model):
    return dict(model.named_parameters())


def _compare(model, manual, graph):
    model.eval()
    out = model()
    ref = manual(graph.features)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # gradients of every param through an arbitrary scalar
    w = torch.randn_like(ref)
    g1 = torch.autograd.grad((out * w).sum(), list(model.parameters()))
    g2 = torch.autograd.grad((ref * w).sum(), list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("seed", [0, 1])
def test_gcn_matches_handwritten(seed):
    g = random_graph(seed=seed)
    torch.manual_seed(seed)
    model = gdsl.compile(PROGRAMS / "gcn.gd").module(g, backend="reference")
    p = _params(model)
    assert list(p) == ["GCNConv_1.W", "GCNConv_1.b", "GCNConv_2.W", "GCNConv_2.b"]
    assert p["GCNConv_1.W"].shape == (12, 16) and p["GCNConv_2.W"].shape == (16, 4)
    src, dst, n = edges_with(g, self_loops=True, symmetric=True)

    def manual(x):
        h = torch.relu(gcn_conv(x, p["GCNConv_1.W"], p["GCNConv_1.b"], src, dst, n))
        return gcn_conv(h, p["GCNConv_2.W"], p["GCNConv_2.b"], src, dst, n)

    _compare(model, manual, g)


def test_sage_matches_handwritten():
    g = random_graph(seed=3)
    model = gdsl.compile(PROGRAMS / "sage.gd", hidden=8).module(g, backend="reference")
    p = _params(model)
    assert len(p) == 9  # SAGE[layers = 3]: three layers of Ws, Wn, b
    src, dst, n = g.src, g.dst, g.num_nodes

    def manual(x):
        h = x
        for k in (1, 2):
            h = torch.relu(sage_conv(h, p[f"SAGEConv_{k}.Ws"], p[f"SAGEConv_{k}.Wn"], p[f"SAGEConv_{k}.b"], src, dst, n))
        return sage_conv(h, p["SAGEConv_3.Ws"], p["SAGEConv_3.Wn"], p["SAGEConv_3.b"], src, dst, n)

    _compare(model, manual, g)


def test_gat_matches_handwritten():
    g = random_graph(seed=5)
    model = gdsl.compile(PROGRAMS / "gat.gd").module(g, backend="reference")
    p = _params(model)
    assert p["GATConv_1.W"].shape == (12, 8, 8) and p["GATConv_2.W"].shape == (64, 1, 4)
    src, dst, n = edges_with(g, self_loops=True)

    def manual(x):
        h = gat_conv(x, *(p[f"GATConv_1.{k}"] for k in ("W", "al", "ar", "b")), src, dst, n)
        h = torch.nn.functional.elu(h).reshape(n, -1)
        out = gat_conv(h, *(p[f"GATConv_2.{k}"] for k in ("W", "al", "ar", "b")), src, dst, n)
        return out.mean(1)

    _compare(model, manual, g)


def test_sparse_fast_path_equals_index_path():
    """The executor's CSR matmul for gather(sum) of src(x) * w equals index_add."""
    g = random_graph(seed=7)
    model = gdsl.compile(PROGRAMS / "gcn.gd").module(g, backend="reference")
    assert model._spmm, "the GCN aggregation should take the sparse path"
    model.eval()
    fast = model()
    model._spmm = {}
    torch.testing.assert_close(model(), fast, rtol=1e-5, atol=1e-6)


def test_features_argument_and_training_mode():
    g = random_graph(seed=2)
    model = gdsl.compile(PROGRAMS / "gcn.gd").module(g, backend="reference")
    model.eval()
    a = model(g.features)
    b = model(torch.zeros_like(g.features))
    assert not torch.allclose(a, b)
    assert torch.equal(model(), a)
    model.train()
    torch.manual_seed(0)
    c = model()
    torch.manual_seed(1)
    d = model()
    assert not torch.equal(c, d), "dropout is active in training mode"


def test_isolated_vertices_and_empty_graph():
    g = random_graph(seed=4, isolated=5)
    model = gdsl.compile(PROGRAMS / "sage.gd", hidden=8, layers=2).module(g, backend="reference")
    model.eval()
    out = model()
    assert torch.isfinite(out).all()
    empty = gdsl.Graph.from_edges([], [], 6, features=torch.randn(6, 3), labels=torch.tensor([0, 1, 0, 1, 0, 1]),
                                  train_mask=torch.ones(6, dtype=torch.bool))
    m2 = gdsl.compile(PROGRAMS / "sage.gd", hidden=4, layers=2).module(empty, backend="reference")
    m2.eval()
    assert torch.isfinite(m2()).all()
    m3 = gdsl.compile(PROGRAMS / "gat.gd").module(empty, backend="reference")  # self loops only
    m3.eval()
    assert torch.isfinite(m3()).all()


def test_broadcast_mode_does_not_depend_on_equal_sizes():
    """A [dout] bias on a [heads, dout] value adds along dout even when heads == dout."""
    src = (Path(__file__).parent / "filecheck" / "passes" / "broadcast_symbolic.gd").read_text()
    g = random_graph(seed=1, c=3)
    model = gdsl.compile(src).module(g, backend="reference")  # heads = dout = C = 3
    p = _params(model)
    with torch.no_grad():
        p["L_1.b"].copy_(torch.tensor([1.0, 2.0, 3.0]))
        p["L_1.W"].zero_()
    model.eval()
    # with W = 0 every message is 0, so out = mean over heads of the bias row
    torch.testing.assert_close(model(), torch.tensor([1.0, 2.0, 3.0]).expand(g.num_nodes, 3))


MAX_MIN = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L(h: [d]) -> [d] {
    scatter m = src.h
    gather  a = REDUCE(m)
    return a
}
model M { return L(X) }
train t { model = M; loss = cross_entropy(Y, mask = train); epochs = 1 }
"""


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_of_zero_and_ties_keep_the_whole_gradient(backend, reduce):
    """Vertex 3 takes the max (min) of x0 = 0 and x1 = -1 (+1): all of the
    gradient goes to x0 (was: half of it, lost to torch's zero start);
    vertex 4 takes it of two equal values x0 and x2: half each; vertex 5,
    with no in-edge, is 0."""
    if backend == "numba":
        pytest.importorskip("numba")
    sign = 1.0 if reduce == "max" else -1.0
    x = torch.tensor([[0.0, 2.0], [-sign, 1.0], [0.0, 2.0], [5.0, 5.0], [5.0, 5.0], [5.0, 5.0]])
    g = gdsl.Graph.from_edges([0, 1, 0, 2], [3, 3, 4, 4], 6, features=x, labels=[0, 1, 0, 1, 0, 1],
                              train_mask=[True] * 6)
    m = gdsl.compile(MAX_MIN.replace("REDUCE", reduce)).module(g, backend=backend)
    xin = x.clone().requires_grad_()
    out = m(xin)
    assert out[5].tolist() == [0.0, 0.0]
    gout = torch.zeros_like(out)
    gout[3, 0] = gout[4, 0] = 1.0
    out.backward(gout)
    assert xin.grad[:, 0].tolist() == [1.5, 0.0, 0.5, 0.0, 0.0, 0.0]


PARAM_ARITH = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer A[dout, heads = 2](h: [din]) -> [dout] {
    param W  : f32[din, heads, dout] = glorot
    param al : f32[heads, dout] = glorot
    param B  : f32[dout, dout] = glorot
    param s  : f32[dout] = glorot
    transform z = h @ W
    scatter   s1 = dot(src.z, al * 2)
    scatter   e = edge_softmax(s1)
    scatter   m = e * src.z
    gather    o = sum(m)
    apply     out = mean(o, 0) * (1 + s) + sum(B + s, 0)
    return out
}
model M { return A[C](X) }
train t { model = M; loss = cross_entropy(Y, mask = train); epochs = 1 }
"""


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_arithmetic_between_params_and_numbers(backend):
    """`1 + s`, `al * 2`, `B + s` (params and constants only) have no row axis.
    Was: a [1, ...] row axis, so the model output came out [1, N, C] or an
    internal error (index out of range, size mismatch)."""
    g = random_graph(seed=2, c=3)
    torch.manual_seed(0)
    ref = gdsl.compile(PARAM_ARITH).module(g, backend="reference").eval()
    m = gdsl.compile(PARAM_ARITH).module(g, backend=backend).eval()
    m.load_state_dict(ref.state_dict())
    assert m().shape == (g.num_nodes, 3)
    torch.testing.assert_close(m(), ref())
    m().sum().backward()
    assert all(q.grad is not None for q in m.parameters())


RESHAPE = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer H[dout, heads](h: [din]) -> [heads, dout] {
    param W  : f32[din, heads * dout] = glorot
    param bd : f32[dout] = zeros
    transform z = h @ W
    apply r = reshape(z, [heads, dout])
    apply out = r + bd
    return out
}
model M[heads = 3] { return mean(H[C, heads](X), 0) }
train t { model = M; loss = cross_entropy(Y, mask = train); epochs = 1 }
"""


@pytest.mark.parametrize("heads", [3, 4])
def test_reshape_keeps_symbolic_dims_for_broadcast(heads):
    """A [dout] bias on reshape(z, [heads, dout]) adds along dout whatever the
    sizes. Was: the reshape's dims were the sizes, so heads == dout (3 == C)
    aligned the bias per head instead."""
    g = random_graph(seed=1, c=3)
    model = gdsl.compile(RESHAPE, heads=heads).module(g, backend="reference")
    add = next(op for op in model.ir.main.ops if op.name == "add" and op.operands[0].owner.name == "reshape")
    assert add.attrs["broadcast"] == "trail"
