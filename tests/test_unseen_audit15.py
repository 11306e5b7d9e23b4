"""helper-15's unseen-program audit: models written to LANGUAGE.md that are not
in programs/extra (GCNII, JKNet, EdgeConv, MixHop, TAGConv, ChebNet, DAGNN,
ARMA, SIGN, two towers, hop attention, ...) were compared with hand-written
torch on Cora (all agreed); these tests keep what the audit found wrong."""
from __future__ import annotations

import math

import pytest
import torch
from test_programs import bound, check, dense_adj, gcn_norm, small_graph

import gdsl
from gdsl.diagnostics import CompileError

HEAD = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}
"""
TAIL = "\ntrain t { model = M; loss = cross_entropy(Y, mask = train) }\n"


@pytest.mark.parametrize("body, line_col, message", [
    # a torch habit (torch.cat(..., dim=)): was "concat takes two or more tensors", given two
    ("model M { h = concat(X, X, axis = 0)\n return L[C](h) }", "10:28",
     "concat has no option 'axis'; it joins its tensors along the last feature axis"),
    ("model M { h = concat(X, X, dim = -1)\n return L[C](h) }", "10:28", "concat has no option 'dim'"),
    ("model M { h = concat(X)\n return L[C](h) }", "10:15", "concat takes two or more tensors"),
])
def test_concat_messages(body, line_col, message):
    with pytest.raises(CompileError) as ei:
        gdsl.compile(HEAD + body + TAIL)
    assert f"<input>:{line_col}: error: {message}" in str(ei.value)


def test_two_products_in_a_transform_concat_point_to_apply():
    """MixHop's concat(h @ W0, a1 @ W1) in a transform has no terms to split:
    the message now says an apply may hold it (was: only "split it into two terms")."""
    body = """layer Mix[d](h: [din]) -> [2 * d] {
    param W0 : f32[din, d] = glorot
    param W1 : f32[din, d] = glorot
    scatter   m = src.h
    gather    a = sum(m)
    transform t = concat(h @ W0, a @ W1)
    return t
}
model M { return L[C](Mix[4](X)) }
"""
    with pytest.raises(CompileError) as ei:
        gdsl.compile(HEAD + body + TAIL)
    assert "<input>:15:34: error: a transform term may hold at most one '@ param' product" in str(ei.value)
    assert "or compute it in an apply, which may hold any number" in str(ei.value)
    # ... and in an apply it compiles
    prog = gdsl.compile(HEAD + body.replace("transform t", "apply     t") + TAIL)
    assert "concat" in str(prog.ir)


# ---------------------------------------------------------------- the programs added to programs/extra

def test_gcnii_matches_torch():
    g = small_graph()
    model, P = bound("gcnii.gd", g)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        h0 = torch.relu(g.features @ P["Linear_1.W"] + P["Linear_1.b"])
        h = h0
        for k in range(1, 9):
            beta = float(f"{math.log(0.5 / k + 1):.4f}")   # as written in the program
            s = 0.9 * (A @ h) + 0.1 * h0
            h = torch.relu((1 - beta) * s + beta * (s @ P[f"GCNIIConv_{k}.W"]))
        check(model, h @ P["Linear_2.W"] + P["Linear_2.b"])


def test_dagnn_matches_torch():
    g = small_graph()
    model, P = bound("dagnn.gd", g)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        h = torch.relu(g.features @ P["Linear_1.W"] + P["Linear_1.b"]) @ P["Linear_2.W"] + P["Linear_2.b"]
        hs = [h]
        for _ in range(4):
            hs.append(A @ hs[-1])
        check(model, sum(torch.sigmoid(x @ P["Adapt_1.s"])[:, None] * x for x in hs))


def test_mixhop_matches_torch():
    g = small_graph()
    model, P = bound("mixhop.gd", g)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        h = g.features
        for k in (1, 2):
            a1 = A @ h
            h = torch.relu(torch.cat([h @ P[f"MixHop_{k}.W0"], a1 @ P[f"MixHop_{k}.W1"], A @ a1 @ P[f"MixHop_{k}.W2"]], 1))
        check(model, h @ P["Linear_1.W"] + P["Linear_1.b"])


@pytest.mark.parametrize("body, message", [
    # was `L[C](x)`: the layer's own tensor arguments, as for a bare `L` (helper-12)
    ("model M { return L[C] }", "layer 'L' must be called: L[C](h)"),
    ("model M { return L[C](P[2]) }", "layer 'P' must be called: P[2](h, h0)"),
])
def test_a_layer_with_static_args_but_no_call(body, message):
    two = "layer P[k](h: [d], h0: [d]) -> [d] {\n    apply o = h + k * h0\n    return o\n}\n"
    with pytest.raises(CompileError) as ei:
        gdsl.compile(HEAD + two + body + TAIL)
    assert f"error: {message}" in str(ei.value)
