"""The fuse pass: what it matches, and that fused IR computes what unfused IR does."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.backends.reference import ReferenceModule
from gdsl.compiler import compile_source
from gdsl.runtime.binding import bind_dims
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted([*(ROOT / "programs").glob("*.gd"), *(ROOT / "programs" / "extra").glob("*.gd")])


def _graph_for(src: str):
    g = random_graph(n=30, e=120, f=6, c=3, seed=11)
    if "input w : edge" in src:
        g.edata["w"] = torch.rand(g.num_edges) + 0.5
    return g


def _module(src: str, g, disable=()):
    prog = gdsl.compile(src)
    dims = bind_dims(prog.compiled.checked, g)
    c = compile_source(src, dims=dims, overrides={"hidden": 8} if "hidden" in src else None, disable=disable)
    torch.manual_seed(0)
    return ReferenceModule(c.module, g), c.module


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_fused_equals_unfused(path):
    src = path.read_text()
    g = _graph_for(src)
    fused, ir = _module(src, g)
    plain, ir0 = _module(src, g, disable=("fuse",))
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in plain.named_parameters()]
    with torch.no_grad():
        for p, q in zip(fused.parameters(), plain.parameters()):
            q.copy_(p)
    fused.eval()
    plain.eval()
    a, b = fused(), plain()
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(a)
    ga = torch.autograd.grad((a * w).sum(), list(fused.parameters()), allow_unused=True)
    gb = torch.autograd.grad((b * w).sum(), list(plain.parameters()), allow_unused=True)
    for x, y in zip(ga, gb):
        if x is None or y is None:
            assert x is None and y is None
        else:
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    assert not any(op.name == "gather" for op in ir.main.ops), "every gather of these programs has a fusable form"


def test_what_fuses_in_the_examples():
    gat = gdsl.compile(ROOT / "programs" / "gat.gd").ir
    assert gat.count("gat_aggregate[slope=0.2") == 2
    assert "edge_softmax" not in gat and "src[" not in gat and "dst[" not in gat
    gcn = gdsl.compile(ROOT / "programs" / "gcn.gd").ir
    assert gcn.count("aggregate[msg=mul, order=sparse_first, order_by=undecided, order_grad=dense_first, "
                     "order_grad_by=undecided, order_memo=true, reduce=sum") == 2
    sage = gdsl.compile(ROOT / "programs" / "sage.gd").ir
    # 256 -> 256 by width; F, C unknown. Layer 1's aggregation of X depends on no param: marked invariant
    assert sage.count("aggregate[msg=copy_src, order=sparse_first") == 2
    assert sage.count("aggregate[invariant=true, msg=copy_src, order=sparse_first") == 1


def test_sddmm_and_sinking():
    src = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[d](h: [din]) -> [d] {
    param W : f32[din, d] = glorot
    param a : f32[d] = glorot
    transform z = h @ W
    sync zs = sum(z)
    scatter s = sigmoid(dot(src.zs, dst.zs)) * exp(dot(src.zs, a))
    scatter m = s * src.zs
    gather g = max(m)
    return g
}
model M { return L[C](X) }
train t { model = M; loss = cross_entropy(Y, mask = train) }
"""
    ir = gdsl.compile(src).ir
    assert "sddmm[op=dot" in ir
    assert "aggregate[msg=mul, reduce=max" in ir
    assert "= dot[stage=scatter] %zs, %a" in ir  # dot(src.zs, a) runs per vertex
    g = _graph_for(src)
    fused, _ = _module(src, g)
    plain, _ = _module(src, g, disable=("fuse",))
    plain.load_state_dict(fused.state_dict())
    fused.eval(), plain.eval()
    torch.testing.assert_close(fused(), plain())
