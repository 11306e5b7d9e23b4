"""Builtin defaults and range checks of the lowering, against plain torch and
exact messages (mutation audit: the defaults were not pinned by any test)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gdsl
from gdsl.diagnostics import CompileError
from helpers import random_graph

ROOT = Path(gdsl.__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()

# one dense layer whose apply statement is `apply out = {APPLY}` (no aggregation: the builtin alone)
DENSE = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Dense[heads, d](h: [din]) -> [heads * d] {
    param W : f32[din, heads * d] = glorot
    transform t = h @ W
    sync      s = sum(t)
    apply     out = {APPLY}
    return out
}

model M {
    return Dense[2, 3](X)
}

train t {
    loss = mse(X, mask = train)
}
"""

NO_TRAIN = DENSE.split("\ntrain t")[0] + "\n"   # the module alone (no loss)


def _run(apply: str):
    g = random_graph(n=10, e=30, f=4, c=2, seed=1)
    torch.manual_seed(0)
    m = gdsl.compile(NO_TRAIN.replace("{APPLY}", apply)).module(g, backend="reference").eval()
    s = g.features @ m.Dense_1.W
    return m(), s


def test_leaky_relu_default_slope_is_torchs():
    """leaky_relu(x) without a slope is torch's leaky_relu(x, 0.01) (LANGUAGE.md), not GAT's 0.2."""
    out, s = _run("leaky_relu(s)")
    assert (s < 0).any()
    torch.testing.assert_close(out, F.leaky_relu(s, 0.01))
    out2, s2 = _run("leaky_relu(s, 0.3)")
    torch.testing.assert_close(out2, F.leaky_relu(s2, 0.3))


def test_softmax_default_axis_is_the_last():
    """softmax(x) of a [heads, d] value normalises over d (axis -1), per head."""
    out, s = _run("flatten(softmax(reshape(s, [heads, d])))")
    torch.testing.assert_close(out, torch.softmax(s.reshape(-1, 2, 3), -1).reshape(-1, 6))
    out0, s0 = _run("flatten(log_softmax(reshape(s, [heads, d]), axis = 0))")
    torch.testing.assert_close(out0, torch.log_softmax(s0.reshape(-1, 2, 3), 1).reshape(-1, 6))


def _errors(text: str) -> list[str]:
    with pytest.raises(CompileError) as e:
        gdsl.compile(text)
    return [d.message for d in e.value.diagnostics if d.severity == "error"]


def test_dropout_p_of_one_is_refused():
    """p = 1 drops everything and divides by 1 - p = 0 (NaN): [0, 1) is half-open."""
    assert _errors(GCN.replace("h = dropout(h, p)", "h = dropout(h, 1)")) == ["dropout p must be in [0, 1), got 1"]
    assert _errors(GCN.replace("h = dropout(h, p)", "h = dropout(h, 1.0)")) == ["dropout p must be in [0, 1), got 1"]
    gdsl.compile(GCN.replace("h = dropout(h, p)", "h = dropout(h, 0.99)"))   # just under: fine


def test_bce_needs_at_most_two_classes():
    """bce of label[3] is refused (the smallest count that is not 0/1); label[2] is bce's case."""
    src = GCN.replace("input Y : vertex label[C]", "input Y : vertex label[3]").replace(
        "cross_entropy(Y, mask = train)", "bce(Y, mask = train)").replace("return GCNConv[C](h)", "return GCNConv[1](h)")
    assert _errors(src) == ["bce needs 0/1 labels, but 'Y' has 3 classes (use cross_entropy)"]
    gdsl.compile(src.replace("label[3]", "label[2]"))


@pytest.mark.parametrize("old, new", [
    ("h = relu(GCNConv[hidden](h))", "h = relu(GCNConv[hidden / (p - 0.5)](h))"),   # a static argument
    ("param W : f32[din, dout] = glorot", "param W : f32[din, dout / 0] = glorot"),   # a dimension
])
def test_static_division_by_zero_is_named(old, new):
    """A static expression divided by 0 is 'division by zero' at the division (was not pinned: sympy's zoo
    then surfaced as 'must be a positive integer, got zoo')."""
    assert _errors(GCN.replace(old, new)) == ["division by zero"]


def test_dropout_default_p_is_a_half():
    """dropout(x) without p drops with p = 0.5 and scales the kept values by 1 / (1 - p) = 2."""
    g = random_graph(n=200, e=400, f=4, c=2, seed=2)
    src = NO_TRAIN.replace("{APPLY}", "dropout(s)")
    torch.manual_seed(0)
    m = gdsl.compile(src).module(g, backend="reference").train()
    out = m()
    s = (g.features @ m.Dense_1.W).detach()
    kept = out != 0
    torch.testing.assert_close(out[kept], 2 * s[kept])
    assert 0.4 < kept.float().mean().item() < 0.6   # 1200 draws of p = 0.5


def test_memoize_false_needs_a_linear_aggregation():
    """`memoize = false` recomputes A X in the backward (a reassociation): refused for max, like
    `backward = sparse_first` (test_order_backward); `memoize = true` is autograd's own and holds."""
    src = GCN.replace("gather    a = sum(m)", "gather    a = max(m)")
    bad = src + "\nschedule {\n    order GCNConv#1 = sparse_first(memoize = false)\n}\n"
    errs = _errors(bad)
    assert len(errs) == 1 and errs[0].startswith(
        "order sparse_first(backward = dense_first, memoize = false) cannot hold for GCNConv#1: "
        "its aggregation is not linear"), errs
    gdsl.compile(src + "\nschedule {\n    order GCNConv#1 = sparse_first(memoize = true)\n}\n")


def test_nested_repeats_count_every_iteration_against_the_cap():
    """10 x 100 nested iterations (plus the outer 10) pass 1000 in all: refused, though no single count
    is over the cap (test_errors' case is 1000 x 1000, which a cap of 10000 also refuses)."""
    sage = (ROOT / "programs" / "sage.gd").read_text()
    old = "repeat layers - 1 {\n        h = dropout(relu(SAGEConv[hidden](h)), p)\n    }"
    assert sage.count(old) == 1
    new = "repeat 10 { repeat 100 {\n        h = dropout(relu(SAGEConv[hidden](h)), p)\n    }}"
    errs = _errors(sage.replace(old, new))
    assert errs == ["the repeats unroll more than 1000 iterations in all (a nested repeat counts once per outer "
                    "iteration)"]


UNUSED_DEFAULTS = """input X : vertex f32[F]
input Y : vertex label[C]
layer L[dout = no_such + relu](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}
model M[k = also_undefined, j = k + F] {
    return L[C](X)
}
train t {
    model = M[k = 1]
    loss = cross_entropy(Y)
}
"""


def test_an_undefined_name_in_a_default_is_an_error_though_every_call_overrides_it():
    """Was: only a call that took the default reported it; `L[C]` and
    `M[k = 1]` override theirs, so the program compiled (helper-59). Earlier
    statics and the inputs' dims are names a default may use."""
    with pytest.raises(CompileError) as e:
        gdsl.compile(UNUSED_DEFAULTS)
    assert [(d.span.line, d.span.col, d.message) for d in e.value.diagnostics] == [
        (3, 16, "undefined name 'no_such'"), (3, 26, "undefined name 'relu'"),
        (8, 13, "undefined name 'also_undefined'")]
    gdsl.compile(UNUSED_DEFAULTS.replace("no_such + relu", "C").replace("also_undefined", "2"))
