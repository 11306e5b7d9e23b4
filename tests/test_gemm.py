"""Dense products with a narrow output in the column-major weight layout
(gdsl/backends/gemm.py): the same numbers as torch.tensordot to float32
rounding, the layout taken exactly where the rule says, and every backend
path that multiplies by a param (the reference executor, the order pass's
linear groups, numba's fused linear) exact with it forced on."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.backends import gemm
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()


def _grads(fn, x, w, g):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = fn(x, w)
    y.backward(g)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("xs,ws", [((1024, 1024), (1024, 7)), ((1024, 1024), (1024, 1, 7)),
                                   ((512, 2, 1024), (1024, 3)), ((2048, 600), (600, 2, 4))],
                         ids=["2d", "heads", "leading-axes", "heads-8"])
def test_narrow_products_take_the_column_major_layout(xs, ws):
    torch.manual_seed(0)
    x, w = torch.randn(xs), torch.randn(ws)
    out_shape = xs[:-1] + ws[1:]
    g = torch.randn(out_shape)
    y, dx, dw = _grads(gemm.matmul, x, w, g)
    y0, dx0, dw0 = _grads(lambda a, b: torch.tensordot(a, b, dims=1), x, w, g)
    assert y.shape == y0.shape == out_shape and dw.shape == w.shape and dx.shape == x.shape
    torch.testing.assert_close(y, y0, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dx, dx0, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dw, dw0, rtol=1e-5, atol=1e-3)
    # the layout was taken: W's gradient is (G^T x)^T bit for bit (autograd's column-major mm backward)
    din, dout = ws[0], int(torch.tensor(ws[1:]).prod())
    x2, g2 = x.reshape(-1, din), g.reshape(-1, dout)
    assert torch.equal(dw.reshape(din, dout), (g2.t() @ x2).t())
    assert torch.equal(y.reshape(-1, dout), x2 @ w.reshape(din, dout).t().contiguous().t())


@pytest.mark.parametrize("xs,ws", [((1024, 1024), (1024, 16)), ((100, 64), (64, 7)), ((1024, 1024), (1024, 4, 4))],
                         ids=["wide", "small", "heads-16"])
def test_other_products_are_tensordot_bit_for_bit(xs, ws):
    torch.manual_seed(1)
    x, w = torch.randn(xs), torch.randn(ws)
    g = torch.randn(xs[:-1] + ws[1:])
    for a, b in zip(_grads(gemm.matmul, x, w, g), _grads(lambda a, b: torch.tensordot(a, b, dims=1), x, w, g)):
        assert torch.equal(a, b)


def test_the_rule():
    assert gemm.narrow(2708, 1433, 7) and gemm.narrow(1 << 20, 1, 1) and gemm.narrow(100_000, 128, 15)
    assert not gemm.narrow(2708, 1433, 16)       # 16 columns and more: as before
    assert not gemm.narrow(2708, 64, 7)          # gat.gd's last layer on Cora: as before
    assert not gemm.narrow(2708, 16, 7)          # gcn.gd's
    assert not gemm.narrow(1 << 20, 1, 0)


def test_function_forms_match_torch():
    torch.manual_seed(2)
    x, w, g = torch.randn(1500, 700), torch.randn(700, 5), torch.randn(1500, 5)
    assert gemm.narrow(1500, 700, 5)
    torch.testing.assert_close(gemm.mm(x, w), x @ w, rtol=1e-5, atol=1e-4)
    out = torch.empty(1500, 5)
    assert gemm.mm(x, w, out=out) is out
    torch.testing.assert_close(out, x @ w, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gemm.addmm_(out, x, w), 2 * (x @ w), rtol=1e-5, atol=1e-4)
    assert torch.equal(gemm.wgrad(x, g), (g.t() @ x).t())
    torch.testing.assert_close(gemm.wgrad(x, g), x.t() @ g, rtol=1e-5, atol=1e-3)
    xs, gs = x[:100, :100], g[:100]
    assert torch.equal(gemm.wgrad(xs, gs), xs.t() @ gs)          # not narrow: x^T g as before


def _forward_backward(src, g, backend, **kw):
    prog = gdsl.compile(src, **kw)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = prog.module(g, backend=backend)
        model.eval()
        out = model()
        w = torch.randn_like(out, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((out * w).sum(), list(model.parameters()))
    return out.detach(), grads


ORDERS = {
    "autograd": "",
    # the order pass's own backward (backends/reference/linear.py OrderedLinear): each way it takes W's gradient
    "sparse-first-bwd": "\nschedule {\n    order GCNConv#1 = dense_first(backward = sparse_first)\n"
                        "    order GCNConv#2 = dense_first(backward = sparse_first)\n}\n",
    "memo": "\nschedule {\n    order GCNConv#1 = sparse_first(backward = dense_first, memoize = true)\n"
            "    order GCNConv#2 = sparse_first(backward = dense_first, memoize = true)\n}\n",
    "recompute": "\nschedule {\n    order GCNConv#1 = sparse_first(backward = dense_first, memoize = false)\n"
                 "    order GCNConv#2 = sparse_first(backward = dense_first, memoize = false)\n}\n",
}


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_modules_are_exact_with_the_layout_forced(monkeypatch, backend, order):
    """gemm.BIG = 1 sends every product narrower than 16 columns (this GCN's:
    hidden 7, 3 classes) through the column-major layout: the same outputs
    and gradients as the default (row-major here: the graph is small)."""
    if backend == "numba":
        pytest.importorskip("numba")
    g = random_graph(n=40, e=200, f=12, c=3, seed=2)
    src = GCN + ORDERS[order]
    out0, grads0 = _forward_backward(src, g, backend, hidden=7)
    taken = []
    real = gemm._colmajor
    monkeypatch.setattr(gemm, "BIG", 1)
    monkeypatch.setattr(gemm, "_colmajor", lambda w: taken.append(w.shape) or real(w))
    out1, grads1 = _forward_backward(src, g, backend, hidden=7)
    assert taken, "the column-major layout was never taken"
    torch.testing.assert_close(out1, out0, rtol=1e-5, atol=1e-6)
    assert len(grads1) == len(grads0)
    for a, b in zip(grads1, grads0):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_sgc_on_cora_takes_the_layout_and_matches_numba():
    """programs/extra/sgc.gd on Cora: the 1433 -> 7 product is narrow at the
    default rule; reference and numba agree."""
    pytest.importorskip("numba")
    g = gdsl.load_graph("cora")
    src = (ROOT / "programs" / "extra" / "sgc.gd").read_text()
    taken = []
    real = gemm._colmajor
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gemm, "_colmajor", lambda w: taken.append(tuple(w.shape)) or real(w))
        out_r, grads_r = _forward_backward(src, g, "reference")
    assert (1433, 7) in taken
    out_n, grads_n = _forward_backward(src, g, "numba")
    torch.testing.assert_close(out_n, out_r, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads_n, grads_r):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["gcn.gd", "gat.gd", "sage.gd"])
def test_the_example_programs_on_cora_keep_the_row_major_products(monkeypatch, name):
    """Their narrow last layers read small inputs ([2708, 16], [2708, 64],
    [2708, 256]): no product changes layout, so their trained numbers (the
    accuracy gates of tests/test_accuracy.py) are those of before."""
    asked, real = [], gemm.narrow
    monkeypatch.setattr(gemm, "narrow", lambda *shape: asked.append((shape, real(*shape))) or asked[-1][1])
    _forward_backward((ROOT / "programs" / name).read_text(), gdsl.load_graph("cora"), "reference")
    assert asked and not [shape for shape, taken in asked if taken]


def test_products_off_the_cpu_keep_the_row_major_form(monkeypatch):
    """The layouts were measured on the CPU only: elsewhere (here the meta
    device, standing in for a GPU) nothing changes."""
    taken = []
    monkeypatch.setattr(gemm, "_colmajor", lambda w: taken.append(w.shape))
    x, w, g = (torch.empty(s, device="meta") for s in ((4096, 1024), (1024, 7), (4096, 7)))
    assert gemm.matmul(x, w).shape == (4096, 7) and gemm.mm(x, w).shape == (4096, 7)
    assert gemm.wgrad(x, g).is_contiguous() and taken == []
