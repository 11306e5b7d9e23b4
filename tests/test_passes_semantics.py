"""Pass rewrites that must keep the program's meaning, against plain torch
(mutation audit: cases no existing test exercised)."""
from __future__ import annotations

import torch

import gdsl
from helpers import random_graph

DENSE = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Dense[d](h: [din]) -> [d] {
    param W : f32[din, d] = glorot
    transform t = h @ W
    sync      s = sum(t)
    apply     out = {APPLY}
    return out
}

model M {
    return Dense[3](X)
}

train t {
    loss = cross_entropy(Y, mask = train)
}
"""


def test_two_identical_dropouts_draw_two_masks():
    """CSE never merges dropouts: `dropout(s, 0.5) - dropout(s, 0.5)` is not 0 in training (two masks),
    and is 0 in eval (both the identity)."""
    g = random_graph(n=30, e=60, f=4, c=3)
    torch.manual_seed(0)
    m = gdsl.compile(DENSE.replace("{APPLY}", "dropout(s, 0.5) - dropout(s, 0.5)")).module(g, backend="reference")
    assert sum(op.name == "dropout" for op in m.ir.main.ops) == 2
    out = m.train()()
    s = (g.features @ m.Dense_1.W).detach()
    # each entry is 2s (kept, dropped), -2s, or 0 (both kept or both dropped)
    assert (out != 0).float().mean() > 0.3
    assert torch.all((out == 0) | torch.isclose(out.abs(), 2 * s.abs()))
    assert torch.equal(m.eval()(), torch.zeros_like(out))


def _agg_attrs(prog, g):
    mod = prog.bind(g).module
    return [op.attrs for op in mod.main.ops if op.name == "aggregate" and "order" in op.attrs]


def test_backward_of_a_hinted_sparse_first_layer_on_the_features():
    """`order GCNConv#1 = sparse_first` on F = 40 > 16 features that need no gradient: the dense-first
    backward reading the memoised A X costs no SpMM at all (dX is not needed), so the cost model picks it
    (was not pinned: counting an input gradient for X made sparse_first, 16 columns, look cheaper)."""
    from pathlib import Path
    gcn = (Path(gdsl.__file__).resolve().parent.parent / "programs" / "gcn.gd").read_text()
    g = random_graph(n=30, e=80, f=40, c=3)
    prog = gdsl.compile(gcn + "\nschedule {\n    order GCNConv#1 = sparse_first\n}\n")
    first = _agg_attrs(prog, g)[0]
    assert (first["order"], first["order_by"]) == ("sparse_first", "hint")
    assert (first["order_grad"], first["order_memo"], first["order_grad_by"]) == ("dense_first", True, "cost")


LEAD = """graph G
input X : vertex f32[8]

layer L[dout](h: [k, din]) -> [k, dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    apply     out = s
    return out
}

model M {
    return flatten(L[6](reshape(X, [2, 4])))
}
"""


def test_width_rule_counts_the_leading_axes():
    """x [2, 4] @ W [4, 6]: the aggregation carries 2 x 4 = 8 columns sparse-first and 2 x 6 = 12
    dense-first, so auto stays sparse-first (was not pinned: comparing 6 < 8 reordered it)."""
    g = random_graph(n=20, e=50, f=8, c=2)
    (attrs,) = _agg_attrs(gdsl.compile(LEAD), g)
    assert (attrs["order"], attrs["order_by"]) == ("sparse_first", "width")
    (attrs,) = _agg_attrs(gdsl.compile(LEAD.replace("L[6]", "L[3]").replace("[k, dout] {", "[k, dout] {")), g)
    assert (attrs["order"], attrs["order_by"]) == ("dense_first", "width")   # 2 x 3 = 6 < 8


DIFF = """graph G
input X : vertex f32[F]

layer D[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    sync      z = sum(t)
    scatter   m = {MSG}
    gather    a = sum(m)
    apply     out = a
    return out
}

model M {
    return D[3](X)
}
"""


def test_edge_difference_keeps_its_sign():
    """`dst.z - src.z` (and `src.z - dst.z`) fused into one sddmm keeps operand order: sub is not
    commutative (dot, add and mul may swap their sides)."""
    g = random_graph(n=25, e=70, f=4, c=2)
    for msg, sign in (("dst.z - src.z", 1.0), ("src.z - dst.z", -1.0)):
        torch.manual_seed(0)
        m = gdsl.compile(DIFF.replace("{MSG}", msg)).module(g, backend="reference").eval()
        z = (g.features @ m.D_1.W).detach()
        want = torch.zeros_like(z).index_add(0, g.dst, sign * (z[g.dst] - z[g.src]))
        torch.testing.assert_close(m(), want)


GAT1 = """graph G
input X : vertex f32[F]

layer Att[dout, heads = 2](h: [din]) -> [heads, dout] {
    param W  : f32[din, heads, dout] = glorot
    param al : f32[heads, dout] = glorot
    param ar : f32[heads, dout] = glorot
    transform z = h @ W
    sync      zs = sum(z)
    scatter   s = {SCORE}
    scatter   alpha = edge_softmax(s)
    scatter   m = alpha * src.zs
    gather    a = sum(m)
    apply     out = a
    return out
}

model M {
    return flatten(Att[3](X))
}
"""


def _attention(g, W, al, ar, slope):
    n, (din, heads, dout) = g.num_nodes, W.shape
    z = (g.features @ W.reshape(din, -1)).reshape(n, heads, dout)
    e = (z * al).sum(-1)[g.src] + (z * ar).sum(-1)[g.dst]
    e = torch.nn.functional.leaky_relu(e, slope) if slope is not None else e
    mx = torch.full((n, heads), -float("inf")).scatter_reduce(0, g.dst[:, None].expand(-1, heads), e, "amax")
    p = torch.exp(e - mx[g.dst])
    alpha = p / torch.zeros(n, heads).index_add(0, g.dst, p)[g.dst]
    return torch.zeros(n, heads, dout).index_add(0, g.dst, alpha[:, :, None] * z[g.src]).reshape(n, -1)


def test_attention_without_leaky_relu_is_fused_with_slope_one():
    """GAT's pattern without the leaky_relu (fused into gat_aggregate, whose slope 1 is the identity) scores
    by the plain sum el + er; with leaky_relu(.., 0.3) by that slope."""
    g = random_graph(n=25, e=90, f=5, c=2)
    for score, slope in (("dot(src.zs, al) + dot(dst.zs, ar)", None),
                         ("leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.3)", 0.3)):
        torch.manual_seed(1)
        m = gdsl.compile(GAT1.replace("{SCORE}", score)).module(g, backend="reference").eval()
        assert any(op.name == "gat_aggregate" for op in m.ir.main.ops)
        p = dict(m.named_parameters())
        want = _attention(g, p["Att_1.W"], p["Att_1.al"], p["Att_1.ar"], slope)
        torch.testing.assert_close(m(), want.detach(), rtol=1e-5, atol=1e-5)


EDGE_SUB = """graph G
input X : vertex f32[F]
input w : edge f32

layer E(h: [din]) -> [din] {
    scatter   m = {MSG}
    gather    a = sum(m)
    apply     out = a
    return out
}

model M {
    return E(X)
}
"""


def test_edge_weight_minus_source_keeps_its_sign():
    """`w - src.h` (an edge input minus the source's features) is not `src.h - w`: only add and mul
    messages may swap their operands when fused into an aggregate."""
    g = random_graph(n=20, e=60, f=3, c=2)
    g.edata["w"] = torch.linspace(-1.0, 2.0, g.num_edges)
    x, w = g.features, g.edata["w"][:, None]
    for msg, m_e in (("w - src.h", w - x[g.src]), ("src.h - w", x[g.src] - w), ("w * src.h", w * x[g.src])):
        out = gdsl.compile(EDGE_SUB.replace("{MSG}", msg)).module(g, backend="reference")()
        torch.testing.assert_close(out, torch.zeros_like(x).index_add(0, g.dst, m_e), msg=msg)
