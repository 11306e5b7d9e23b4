"""The trainer's bookkeeping: the summary of a run, the metrics, the optimizer
defaults and the seed (mutation audit: none of these was pinned exactly)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.runtime.trainer import EpochStats, TrainResult, _summarise, accuracy, make_optimizer
from helpers import random_graph

ROOT = Path(gdsl.__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()


def test_summary_picks_the_earliest_best_val_epoch():
    """final: the last epoch, the mean epoch time, and the best epoch by val_acc, the earliest of a tie."""
    accs = [0.5, 0.8, 0.8, 0.6]
    r = TrainResult(epochs=[EpochStats(i + 1, 1.0 / (i + 1), {"val_acc": a, "test_acc": a / 2}, 0.1 * (i + 1))
                            for i, a in enumerate(accs)])
    _summarise(r)
    assert r.final["epoch"] == 4 and r.final["loss"] == 0.25 and r.final["val_acc"] == 0.6
    assert r.final["mean_epoch_time"] == pytest.approx(0.25)
    # the first epoch (kernel loading, compiling) apart from the mean of the others
    assert r.final["first_epoch_time"] == pytest.approx(0.1) and r.final["later_epoch_time"] == pytest.approx(0.3)
    assert r.final["best_val_epoch"] == 2
    assert r.final["best_val/val_acc"] == 0.8 and r.final["best_val/test_acc"] == 0.4


def test_summary_without_val_has_no_best():
    r = TrainResult(epochs=[EpochStats(1, 2.0, {"test_acc": 0.5}, 0.2)])
    _summarise(r)
    assert r.final == {"epoch": 1, "loss": 2.0, "test_acc": 0.5, "mean_epoch_time": 0.2}


def test_accuracy_argmax_and_binary_sign():
    out = torch.tensor([[0.1, 0.9], [2.0, -1.0], [0.0, 3.0], [5.0, 4.0]])
    labels = torch.tensor([1, 0, 0, 0])
    assert accuracy(out, labels, None) == 0.75
    assert accuracy(out, labels, torch.tensor([False, False, True, True])) == 0.5
    # bce: class 1 where the single logit is > 0 (0 itself is class 0)
    logit = torch.tensor([-1.0, 2.0, 0.0, 0.5, -0.3])
    assert accuracy(logit, torch.tensor([0, 1, 0, 1, 0]), None, binary=True) == 1.0
    assert accuracy(logit.reshape(-1, 1), torch.tensor([1, 0, 1, 0, 1]), None, binary=True) == 0.0


def test_optimizer_defaults_are_torchs():
    p = [torch.nn.Parameter(torch.zeros(3))]
    adam = make_optimizer("adam", {"lr": 0.01}, p)
    # gdsl's own (runtime/optim.py, whose steps tests/test_optim.py compares with torch.optim's)
    assert type(adam).__name__ == "Adam" and adam.param_groups[0]["betas"] == (0.9, 0.999)
    adamw = make_optimizer("adamw", {"lr": 0.01, "beta2": 0.98}, p)
    assert type(adamw).__name__ == "AdamW" and adamw.param_groups[0]["betas"] == (0.9, 0.98)
    assert adamw.param_groups[0]["weight_decay"] == torch.optim.AdamW([torch.zeros(1)]).defaults["weight_decay"]
    sgd = make_optimizer("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": 1.0}, p)
    assert sgd.param_groups[0]["nesterov"] is True and sgd.param_groups[0]["momentum"] == 0.9


def test_seed_decides_the_initial_params():
    """train(seed=s) draws the params after torch.manual_seed(s): without dropout, the first epoch's loss is
    the loss of a module built after torch.manual_seed(s), and another seed gives another loss."""
    g = random_graph(n=20, e=60, f=5, c=3)
    prog = gdsl.compile(GCN.replace("model GCN[hidden = 16, p = 0.5]", "model GCN[hidden = 16, p = 0.0]"))
    first = {s: gdsl.train(prog, g, backend="reference", epochs=1, seed=s).epochs[0].loss for s in (1, 2)}
    torch.manual_seed(2)
    m = prog.module(g, backend="reference")
    m.train()
    assert first[2] == pytest.approx(float(m.loss(m()).detach()), rel=1e-6)
    assert first[1] != pytest.approx(first[2], rel=1e-4)


def test_nonfinite_loss_stops_training():
    """An infinite loss (not only NaN) raises Diverged at that epoch, with the epochs before it kept."""
    from gdsl.runtime.trainer import Diverged
    g = random_graph(n=20, e=60, f=5, c=3)
    g.features = g.features * 1e30   # mse of outputs ~1e30: the squares overflow float32 to inf
    src = GCN.replace("loss      = cross_entropy(Y, mask = train)", "loss      = mse(X, mask = train)").replace(
        "return GCNConv[C](h)", "return GCNConv[F](h)")
    src = src.replace("    eval      = accuracy(mask = val), accuracy(mask = test)\n", "")   # accuracy of an f32 target
    with pytest.raises(Diverged, match=r"epoch 1: the loss is inf before any optimizer step") as e:
        gdsl.train(gdsl.compile(src), g, backend="reference", epochs=2)
    assert e.value.result.epochs == [] and e.value.result.steps == 0


ZERO_IN = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test
layer GCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    return t
}
model GCN { return GCNConv[C](X) }
train t {
    model = GCN
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.000001)
    epochs = 5
    eval = accuracy(mask = val)
}
"""


def zero_in_degree_graph():
    """Vertex 0 has no in-edge, so the edge 0 -> 1 weighs rsqrt(0) = inf and vertex 1's aggregate is inf;
    vertex 1 is outside the loss's mask: the loss is finite, W's gradient is inf * 0 = nan (helper-70)."""
    src, dst = torch.tensor([0, 1, 2, 2, 3, 3, 4]), torch.tensor([1, 2, 1, 3, 2, 4, 3])
    x = torch.from_numpy(__import__("numpy").random.default_rng(0).standard_normal((5, 3)).astype("float32"))
    m = lambda *i: torch.tensor([k in i for k in range(5)])   # noqa: E731
    return gdsl.Graph.from_edges(src, dst, 5, features=x, labels=torch.tensor([0, 1, 0, 1, 0]),
                                 train_mask=m(2, 3, 4), val_mask=m(1), test_mask=m(0))


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_a_nonfinite_gradient_under_a_finite_loss_stops_before_its_step(backend):
    """(was: the step made W NaN; the run printed accuracies of NaN logits, saved them and exited 0, and a
    longer run said "the loss is nan; training diverged (try a smaller lr)" at epoch 2)"""
    if backend == "numba":
        pytest.importorskip("numba")
    from gdsl.runtime.trainer import Diverged
    with pytest.raises(Diverged, match=r"^epoch 1: the gradient of GCNConv_1\.W is nan though the loss is finite "
                                       r"\(0\.8940\): the forward pass makes an inf or nan") as e:
        gdsl.train(gdsl.compile(ZERO_IN), zero_in_degree_graph(), backend=backend, epochs=3)
    assert e.value.result.epochs == [] and e.value.result.steps == 0
    assert torch.isfinite(e.value.result.model.GCNConv_1.W).all()   # the step was not taken


def test_the_summary_line_gives_the_first_epoch_apart():
    from gdsl.runtime.trainer import epoch_time_text
    assert epoch_time_text(0.1328, 0.3791, 0.0096) == "mean epoch 132.8 ms (first 379.1 ms, later 9.6 ms)"
    assert epoch_time_text(0.3305) == "mean epoch 330.5 ms"   # one epoch: nothing to split


def test_counts_summed_over_ranks_give_the_accuracy_one_process_gives():
    """Ranks sum correct counts and totals; `share` turns them into the
    float32 mean `accuracy` computes (was: the float64 quotient, off in the
    8th digit: 0.7559999891519547 against 0.7559999823570251; helper-5)."""
    from gdsl.runtime.trainer import correct_count, share
    gen = torch.Generator().manual_seed(0)
    for n in (1, 3, 7, 500, 1000, 1708):
        labels = torch.randint(0, 3, (n,), generator=gen)
        out = torch.randn(n, 3, generator=gen)
        c = correct_count(out, labels, None)
        assert share(c, n) == accuracy(out, labels, None)
        half = torch.arange(n) % 2 == 0   # two "ranks"
        assert share(correct_count(out, labels, half) + correct_count(out, labels, ~half), n) == accuracy(out, labels, None)
    assert share(378, 500) == 0.7559999823570251
    assert math.isnan(share(0, 0))
