"""The reference executor's own numerics (mutation audit: not pinned)."""
from __future__ import annotations

import math

import torch

from gdsl.backends.reference.executor import init_param


def test_glorot_bound():
    """glorot is U(-a, a) with a = sqrt(6 / (fan_in + fan_out)), fan_out = prod(shape[1:])
    (PyG's convention; torch.nn.init.xavier_uniform_'s bound for a matrix)."""
    for shape in ((60, 40), (30, 4, 10), (50,)):
        torch.manual_seed(0)
        w = init_param(shape, "glorot")
        fan_in = shape[0]
        fan_out = math.prod(shape[1:]) if len(shape) > 1 else fan_in
        a = math.sqrt(6.0 / (fan_in + fan_out))
        assert w.shape == shape
        assert w.abs().max() <= a
        assert w.abs().max() > 0.9 * a   # thousands of U(-a, a) draws (50 for [50]: > 0.9a with p ~ 1 - 0.9**50)
    torch.manual_seed(0)
    ref = torch.nn.init.xavier_uniform_(torch.empty(60, 40))
    torch.manual_seed(0)
    torch.testing.assert_close(init_param((60, 40), "glorot"), ref)


def test_other_inits():
    torch.manual_seed(0)
    assert torch.equal(init_param((3, 2), "zeros"), torch.zeros(3, 2))
    assert torch.equal(init_param((3,), "ones"), torch.ones(3))
    u = init_param((4000,), "uniform(0.25)")
    assert u.abs().max() <= 0.25 and u.abs().max() > 0.24
    n = init_param((20000,), "normal(0.1)")
    assert abs(n.std().item() - 0.1) < 0.005 and abs(n.mean().item()) < 0.005


def _gcn_module(loss: str):
    from pathlib import Path

    import gdsl
    from helpers import random_graph
    gcn = (Path(gdsl.__file__).resolve().parent.parent / "programs" / "gcn.gd").read_text()
    g = random_graph(n=20, e=60, f=5, c=3)
    torch.manual_seed(0)
    src = gcn.replace("loss      = cross_entropy(Y, mask = train)", f"loss      = {loss}(Y, mask = train)")
    return g, gdsl.compile(src).module(g, backend="reference")


def test_nll_loss_is_not_cross_entropy():
    """nll takes the output as log-probabilities: -mean(out[v, y_v]) over the mask, no softmax of its own."""
    g, m = _gcn_module("nll")
    out = torch.randn(g.num_nodes, 3)
    mask = g.masks["train"]
    want = -out[mask].gather(1, g.labels[mask][:, None]).mean()
    torch.testing.assert_close(m.loss(out), want)
    _, ce = _gcn_module("cross_entropy")
    torch.testing.assert_close(ce.loss(out), torch.nn.functional.cross_entropy(out[mask], g.labels[mask]))


def test_a_label_equal_to_the_class_count_is_refused_at_the_loss():
    """A label edited in place to C (one past the last class) is the loss's GdslError naming it, not
    torch's IndexError."""
    import pytest

    from gdsl.diagnostics import GdslError
    g, m = _gcn_module("cross_entropy")
    m.graph.labels[4] = 3   # the module shares the labels tensor
    with pytest.raises(GdslError, match=r"label 3 of vertex 4 is not a class id 0\.\.2"):
        m.loss(m())


def test_dropout_is_x_times_the_rand_mask_over_one_minus_p_bit_for_bit():
    """The reference's dropout (float 0/1 mask for a float32 CPU tensor autograd will not save, bools
    otherwise, the scale in place) is x * (torch.rand(x.shape, generator=seeded) >= p) / (1 - p) bit for
    bit, forward and x's gradient, in float32 and float64."""
    import gdsl
    from helpers import random_graph
    src = ("graph G\ninput X : vertex f32[F]\ninput Y : vertex label[C]\nmask train\n"
           "model M { return dropout(X, 0.3) }\n")
    g = random_graph(n=50, e=100, f=7, c=3)
    m = gdsl.compile(src).module(g, backend="reference").train()
    op = next(o for o in m.ir.main.ops if o.name == "dropout")
    for dtype in (torch.float32, torch.float64):
        for grad in (False, True):
            x = (torch.randn(50, 7, dtype=dtype) * 3).requires_grad_(grad)   # negatives: the sign of 0 too
            m.begin_forward(())
            keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(m.mask_seed(op))) >= 0.3
            want = x.detach() * keep / (1 - 0.3)
            got = m.dropout(op, x)
            assert got.dtype == dtype and 0 < int(keep.sum()) < keep.numel()
            assert torch.equal(got.detach(), want) and torch.equal(got.detach().signbit(), want.signbit())
            if grad:
                got.sum().backward()
                assert torch.equal(x.grad, (torch.ones_like(want) * keep) / (1 - 0.3))
