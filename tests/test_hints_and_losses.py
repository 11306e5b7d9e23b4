"""Order hints that cannot hold, loss/target checks, N and E as static values."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import gdsl
from filecheck_runner import run_gdsl
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent


def _compile_err(tmp_path, text: str) -> str:
    p = tmp_path / "p.gd"
    p.write_text(text)
    code, _, err = run_gdsl(["compile", str(p)])
    assert code == 1, err
    assert "Traceback" not in err
    return err


def test_global_dense_first_on_gat_is_refused(tmp_path):
    src = (ROOT / "programs" / "gat.gd").read_text().replace("order     = auto", "order     = dense_first")
    err = _compile_err(tmp_path, src)
    assert "p.gd:39:17: error: order = dense_first cannot hold: no layer call aggregates before a '@ param'" in err


def test_dense_first_on_max_aggregation_is_refused(tmp_path):
    src = (ROOT / "programs" / "extra" / "sage_max.gd").read_text() + "schedule {\n    order SAGEPool#1 = dense_first\n}\n"
    err = _compile_err(tmp_path, src)
    assert "order dense_first cannot hold for SAGEPool#1: its aggregation is not linear: it reduces with max" in err


def test_dense_first_on_attention_weighted_sum_is_refused(tmp_path):
    src = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer Att[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param a : f32[din] = glorot
    scatter s = edge_softmax(dot(src.h, a))
    scatter m = s * src.h
    gather  g = sum(m)
    transform t = g @ W
    return t
}
model M { return Att[C](X) }
train t { model = M; loss = cross_entropy(Y, mask = train) }
schedule { order Att#1 = dense_first }
"""
    err = _compile_err(tmp_path, src)
    assert "p.gd:16:26: error: order dense_first cannot hold for Att#1: its aggregation is not linear: " \
           "the message is scaled by a learned or data-dependent value" in err
    ok = src.replace("dense_first", "sparse_first")
    (tmp_path / "ok.gd").write_text(ok)
    assert run_gdsl(["compile", str(tmp_path / "ok.gd")])[0] == 0
    # two aggregations before a '@': the message names the one that is not linear (helper-67)
    two = src.replace("    gather  g = sum(m)\n    transform t = g @ W\n",
                      "    scatter e = src.h\n    gather  g = sum(e)\n    gather  hi = max(e)\n"
                      "    transform t = g @ W + hi @ W\n")
    assert two != src
    err = _compile_err(tmp_path, two)
    assert "error: order dense_first cannot hold for Att#1: its aggregation 'hi' (one of 2 before a '@ param') " \
           "is not linear: it reduces with max" in err, err


def test_linear_hints_compile_and_are_recorded():
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "extra" / "gcn_schedule.gd")])
    assert code == 0, err
    assert "order_hints={GCNConv#1=dense_first, GCNConv#2=sparse_first}" in out


def test_mse_with_label_target_is_a_compile_error(tmp_path):
    src = (ROOT / "programs" / "gcn.gd").read_text().replace("cross_entropy(Y", "mse(Y")
    err = _compile_err(tmp_path, src)
    assert "p.gd:27:17: error: mse needs an f32 vertex input as its target; 'Y' holds class labels" in err


def test_edge_count_is_not_a_static_value(tmp_path):
    src = (ROOT / "programs" / "gcn.gd").read_text().replace("GCNConv[hidden](h)", "GCNConv[E](h)")
    err = _compile_err(tmp_path, src)
    assert "error: E (the edge count) is not a static value" in err


def test_N_binds_from_the_graph_and_E_stays_symbolic():
    g = random_graph(n=20, e=40, f=3, c=2)
    bound = gdsl.compile(ROOT / "programs" / "gcn.gd").bind(g)
    assert bound.module.attrs["dims"] == {"C": 2, "F": 3, "N": 20}


def test_bce_accuracy_uses_the_sign_of_one_logit():
    from gdsl.runtime.trainer import accuracy

    out = torch.tensor([[2.0], [-1.0], [0.5]])
    assert accuracy(out, torch.tensor([1, 0, 0]), None, binary=True) == pytest.approx(2 / 3)
    assert accuracy(out, torch.tensor([0, 0, 0]), None) == 1.0   # one class of cross_entropy: argmax is class 0


def test_cross_entropy_over_one_class_is_argmax_and_warns():
    """One label in the data (C = 1): the accuracy is the argmax's (every
    vertex right), not bce's sign rule, and the loss, 0 for any output, is
    named as training nothing."""
    from gdsl.runtime.trainer import train

    g = random_graph(c=1)
    with pytest.warns(UserWarning, match="cross_entropy over a single class .* do not train"):
        res = train(gdsl.compile(ROOT / "programs" / "gcn.gd"), g, backend="reference", epochs=2)
    assert res.epochs[-1].metrics == {"train_acc": 1.0, "val_acc": 1.0, "test_acc": 1.0}
    assert res.epochs[-1].loss == 0.0


def test_dense_first_on_a_message_of_the_other_endpoint_says_why(tmp_path):
    src = (ROOT / "programs" / "gcn.gd").read_text().replace(
        "scatter   m = src.h * rsqrt(src.degree * dst.degree)", "scatter   m = src.h - dst.h")
    err = _compile_err(tmp_path, src + "schedule {\n    order GCNConv#1 = dense_first\n}\n")
    assert ("order dense_first cannot hold for GCNConv#1: its aggregation is not linear: the message reads dst.h; "
            "an aggregation into dst is linear in src.x reads only") in err


AUTOENCODER = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
input B : vertex label[2]
mask train, val
layer Conv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = src.h
    gather a = mean(m)
    transform t = a @ W
    return t
}
model M[out = F] { return Conv[out](relu(Conv[8](X))) }
train t {
    model = M
    loss = bce(TARGET, mask = train)
    epochs = 2
    eval = accuracy(mask = val)
}
"""


@pytest.mark.parametrize("target,acc", [("X", False), ("B", True)])
def test_accuracy_only_when_the_loss_targets_the_labels(target, acc):
    """bce of float targets (an autoencoder of X) reports no accuracy (was:
    the argmax of F outputs against the C-class labels, a meaningless 0.0);
    bce of a label[2] input does (the sign of the one logit)."""
    g = random_graph(n=30, e=90, f=4, c=2)
    g.ndata["B"] = g.labels
    src = AUTOENCODER.replace("TARGET", target).replace("[out = F]", "[out = F]" if target == "X" else "[out = 1]")
    if acc:
        prog = gdsl.compile(src)
    else:   # the eval line that reports nothing is a compile warning
        with pytest.warns(gdsl.GdslWarning, match="eval is not reported: .* the loss's target 'X' is f32"):
            prog = gdsl.compile(src)
    r = gdsl.train(prog, g, backend="reference", epochs=2)
    assert all(bool(e.metrics) == acc for e in r.epochs)
    if acc:
        assert set(r.epochs[-1].metrics) == {"train_acc", "val_acc"}


BCE_2D = """graph G
input X : vertex f32[F]
input P : vertex f32[2, 3]
layer L(h: [din]) -> [2, 3] {
    param W : f32[din, 2, 3] = glorot
    transform t = h @ W
    return t
}
model M { return L(X) }
train t { model = M; loss = bce(P); epochs = 2 }
"""


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_bce_of_a_float_target_is_the_mean_over_its_elements(backend):
    """bce against an f32 target of the output's shape (here [2, 3]) is
    torch's mean over all elements. Was: the output was flattened to [N, 6]
    and the target not: torch's 'Target size ... must be the same'."""
    g = random_graph(n=12, e=30, f=4, c=2)
    g.ndata["P"] = torch.rand(12, 2, 3)
    torch.manual_seed(0)
    m = gdsl.compile(BCE_2D).module(g, backend=backend)
    out = m()
    torch.testing.assert_close(m.loss(out), torch.nn.functional.binary_cross_entropy_with_logits(out, g.ndata["P"]))
    r = gdsl.train(gdsl.compile(BCE_2D), g, backend=backend, epochs=2)
    assert r.epochs[1].loss < r.epochs[0].loss


@pytest.mark.parametrize("hint", ["rows", "rows(hash)", "rows(block)", "rows(metis)", "redistribute",
                                  "redistribute(2)", "rows_replicated(2)", "vertex_cut", "edge_cut", "features"])
def test_partition_hint_takes_what_the_partition_flag_takes(hint):
    """The schedule's `partition` names the plan `gdsl run --partition` would.
    Was: rows(block) and a bare redistribute (R_A = P) ran from the flag but
    were compile errors as hints."""
    from gdsl.dist.part import parse_spec
    text = (ROOT / "programs" / "gcn.gd").read_text() + f"\nschedule {{\n    partition = {hint}\n}}\n"
    recorded = gdsl.compile(text).checked.schedule["partition"]
    a, b = parse_spec(recorded), parse_spec(hint)
    assert (a.strategy, a.arg) == (b.strategy, b.arg)


def test_a_loss_over_every_vertex_reports_its_accuracy():
    """`loss = cross_entropy(Y)` (no mask) and no eval: the accuracy over the
    loss's rows, every vertex, as `all_acc` (was: no accuracy at all)."""
    src = (ROOT / "programs" / "gcn.gd").read_text()
    src = re.sub(r"loss\s*=\s*cross_entropy\(Y, mask = train\)", "loss = cross_entropy(Y)", src)
    src = re.sub(r"\n\s*eval\s*=.*", "", src)
    g = random_graph(n=30, e=90, f=4, c=3)
    r = gdsl.train(gdsl.compile(src), g, backend="reference", epochs=2)
    assert set(r.epochs[-1].metrics) == {"all_acc"}
    assert "eval" not in src and 0.0 <= r.final["all_acc"] <= 1.0
