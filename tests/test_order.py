"""The order pass: dense-first where a layer shrinks the width or a hint says so,
and the same numbers either way (an exact plan)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gdsl
from filecheck_runner import run_gdsl
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()
SAGE = (ROOT / "programs" / "sage.gd").read_text()


def _with(src: str, schedule: str) -> str:
    return src + f"\nschedule {{\n{schedule}\n}}\n"


def test_width_decides_when_data_is_bound():
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gcn.gd"), "--data", "cora"])
    assert code == 0, err
    assert out.count("order=dense_first, order_by=width") == 2     # 1433 -> 16 and 16 -> 7 both shrink
    assert "%t_dense : vertex f32[N, 16] = matmul" in out          # X @ W first, then aggregate 16 columns


def test_undecided_without_data():
    ir = gdsl.compile(ROOT / "programs" / "gcn.gd").ir
    assert ir.count("order=sparse_first, order_by=undecided") == 2


@pytest.mark.parametrize("src,scopes", [(GCN, ("GCNConv#1", "GCNConv#2")), (SAGE, ("SAGEConv#1", "SAGEConv#2", "SAGEConv#3"))])
def test_every_order_gives_the_same_numbers(src, scopes):
    g = random_graph(n=40, e=200, f=12, c=3, seed=2)
    outs = []
    for order in ("sparse_first", "dense_first"):
        hinted = _with(src, "\n".join(f"    order {s} = {order}" for s in scopes))
        prog = gdsl.compile(hinted, hidden=8) if "SAGE" in src else gdsl.compile(hinted)
        ir = prog.bind(g).module
        assert sum(op.attrs.get("order") == order for op in ir.main.ops) == len(scopes)
        torch.manual_seed(0)
        model = prog.module(g)
        if outs:
            model.load_state_dict(outs[0][0].state_dict())
        model.eval()
        out = model()
        w = torch.randn_like(out, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((out * w).sum(), list(model.parameters()))
        outs.append((model, out, grads))
    (_, a, ga), (_, b, gb) = outs
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_global_hint_applies_to_every_call():
    g = random_graph(n=20, e=60, f=5, c=3)
    ir = gdsl.compile(_with(GCN, "    order = sparse_first")).bind(g).module
    assert [op.attrs.get("order_by") for op in ir.main.ops if op.name == "aggregate"] == ["hint", "hint"]
