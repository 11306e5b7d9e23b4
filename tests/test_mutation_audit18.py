"""Mutation audit (helper-18): behaviour of the passes, the reference executor,
the optimizers and the trainer that the tests of those modules did not pin
down. Each test compares against hand-written torch, torch.optim or
hand-computed numbers, and kills at least one hand-made mutant (named in its
docstring) that those modules' own test files let pass."""
from __future__ import annotations

import pytest
import torch

import gdsl
from helpers import random_graph
from test_passes_semantics import DENSE as _ONE_DENSE

LAYER = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L[d](h: [din]) -> [d] {
    param W : f32[din, d] = glorot
    scatter   m = {MSG}
    gather    a = {RED}
    transform t = a @ W
    sync      s = sum(t)
    apply     out = s
    return out
}

model M {
    return L[3](X)
}

train t {
    loss = cross_entropy(Y, mask = train)
}
"""


def _layer(msg: str, red: str = "sum(m)", g=None):
    g = g or random_graph(n=30, e=60, f=4, c=3)
    torch.manual_seed(0)
    m = gdsl.compile(LAYER.replace("{MSG}", msg).replace("{RED}", red)).module(g, backend="reference")
    return m.eval(), g, m.L_1.W.detach()


def _seg_max(v, idx, n):
    """out[r] = max of v[e] over idx[e] = r (-inf where none)."""
    out = torch.full((n,) + tuple(v.shape[1:]), -float("inf"))
    return out.scatter_reduce(0, idx.reshape((-1,) + (1,) * (v.dim() - 1)).expand_as(v), v, "amax")


def _deg(g):
    n = g.num_nodes
    return (torch.bincount(g.dst, minlength=n).float(), torch.bincount(g.src, minlength=n).float())


def test_mean_to_src_divides_by_the_out_degree():
    """`mean(m, to = src)` is the sum over each vertex's out-edges over max(1, out-degree)
    (mutant: canonicalize used the in-degree for `to = src` too)."""
    m, g, W = _layer("dst.h", "mean(m, to = src)")
    indeg, outdeg = _deg(g)
    assert not torch.equal(indeg, outdeg)
    x, src, dst, n = g.features, g.src, g.dst, g.num_nodes
    agg = torch.zeros(n, 4).index_add(0, src, x[dst]) / outdeg.clamp(min=1)[:, None]
    torch.testing.assert_close(m(), agg @ W)


def test_relu_of_a_degree_expression_is_folded_as_relu():
    """`relu(c)` of a graph constant folds to Max(c, 0) (mutant: folded as c)."""
    m, g, W = _layer("src.h * relu(src.degree - 3)")
    indeg, _ = _deg(g)
    x, src, dst, n = g.features, g.src, g.dst, g.num_nodes
    w = torch.relu(indeg[src] - 3)
    agg = torch.zeros(n, 4).index_add(0, dst, x[src] * w[:, None])
    torch.testing.assert_close(m(), agg @ W)


@pytest.mark.parametrize("msg, weight", [
    ("src.h / (src.degree + 1) * (dst.degree + 2)", lambda a, b: (b + 2) / (a + 1)),
    ("src.h * (src.degree + 1) / (dst.degree + 2)", lambda a, b: (a + 1) / (b + 2)),
    ("src.h / (src.degree + 1) / (dst.degree + 2)", lambda a, b: 1 / ((a + 1) * (b + 2))),
    ("-(src.h / (src.degree + 1))", lambda a, b: -1 / (a + 1)),
    ("src.h * (src.degree + 1) - src.h / (dst.degree + 2)", lambda a, b: (a + 1) - 1 / (b + 2)),
    ("src.h / (dst.degree + 2) - src.h", lambda a, b: 1 / (b + 2) - 1),
    ("src.h * min(src.degree, 3) * max(dst.degree, 2)", lambda a, b: a.clamp(max=3) * b.clamp(min=2)),
])
def test_regrouped_edge_factors_keep_their_value(msg, weight):
    """fold-edge-constants' regrouping of a chain of edge factors (`x / c1 * c2 -> x * (c2 / c1)`, ...)
    and collection of terms, against the weights by hand (mutants: c1 / c2 for c2 / c1, x / c1 / c2 as
    x * (c1 * c2), a subtracted term added, src_degree and dst_degree swapped, a folded min evaluated as
    a max)."""
    m, g, W = _layer(msg)
    indeg, _ = _deg(g)
    x, src, dst, n = g.features, g.src, g.dst, g.num_nodes
    w = weight(indeg[src], indeg[dst])
    agg = torch.zeros(n, 4).index_add(0, dst, x[src] * w[:, None])
    torch.testing.assert_close(m(), agg @ W, rtol=1e-5, atol=1e-4)


# test_passes_semantics' one-layer program, with room for more inputs and another model body
DENSE = _ONE_DENSE.replace("input Y", "{INPUTS}input Y").replace("    return Dense[3](X)\n", "    {BODY}\n")


def _dense(apply: str = "s", body: str = "return Dense[3](X)", inputs: str = "", g=None):
    g = g or random_graph(n=30, e=60, f=4, c=3)
    torch.manual_seed(0)
    src = DENSE.replace("{APPLY}", apply).replace("{BODY}", body).replace("{INPUTS}", inputs)
    m = gdsl.compile(src).module(g, backend="reference")
    return m.eval(), g, m.Dense_1.W.detach()


def test_an_unused_first_input_still_takes_the_features():
    """The first vertex f32 input binds graph.features even when nothing reads it; a second one
    reads graph.ndata (mutant: canonicalize dropped the unused first input, and the second read
    the features)."""
    g0 = random_graph(n=30, e=60, f=4, c=3)
    z = torch.randn(30, 4, generator=torch.Generator().manual_seed(1))
    g = gdsl.Graph.from_edges(g0.src, g0.dst, 30, features=g0.features, labels=g0.labels,
                              train_mask=g0.masks["train"], ndata={"Z": z})
    m, _, W = _dense(body="return Dense[3](Z)", inputs="input Z : vertex f32[F]\n", g=g)
    torch.testing.assert_close(m(), z @ W)


def test_cse_keeps_operand_order_of_a_subtraction():
    """`(s - relu(s)) + 2 * (relu(s) - s)` is relu(s) - s: CSE must not take `a - b` for `b - a`."""
    m, g, W = _dense(apply="(s - relu(s)) + 2 * (relu(s) - s)")
    s = g.features @ W
    torch.testing.assert_close(m(), torch.relu(s) - s)


def test_a_returned_value_merged_by_cse_is_still_returned():
    """`y = relu(h); return relu(h)`: CSE merges the two relus, and the model's result must follow
    (mutant: the result was left pointing at the dropped op)."""
    m, g, W = _dense(body="h = Dense[3](X)\n    y = relu(h)\n    return relu(h)")
    torch.testing.assert_close(m(), torch.relu(g.features @ W))


ATT = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer A[d](h: [din]) -> [d] {
    param W  : f32[din, d] = glorot
    param al : f32[d] = glorot
    param ar : f32[d] = glorot
    transform z = h @ W
    sync      zs = sum(z)
    scatter   s = {SCORE}
    scatter   alpha = edge_softmax(s)
    scatter   m = alpha * src.zs
    gather    a = {RED}(m)
    apply     out = a
    return out
}

model M {
    return A[3](X)
}

train t {
    loss = cross_entropy(Y, mask = train)
}
"""


@pytest.mark.parametrize("score, red, fn", [
    ("dot(src.zs, al) + dot(dst.zs, ar)", "sum", lambda el, er: el + er),
    ("leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.3)", "sum",
     lambda el, er: torch.nn.functional.leaky_relu(el + er, 0.3)),
    ("dot(src.zs, al) * dot(dst.zs, ar)", "sum", lambda el, er: el * er),
    ("dot(src.zs, al) + dot(dst.zs, ar)", "max", lambda el, er: el + er),
])
def test_attention_forms_against_handwritten(score, red, fn):
    """edge_softmax attention without leaky_relu (slope 1, not GAT's 0.2), with another slope, with a
    product score (not the fused `add` kernel), and reduced by max (not fused as a sum), against torch
    (mutants: fuse's default slope 0.2; gat_aggregate formed from an sddmm `mul` or a `max` gather)."""
    g = random_graph(n=30, e=80, f=4, c=3)
    torch.manual_seed(0)
    m = gdsl.compile(ATT.replace("{SCORE}", score).replace("{RED}", red)).module(g, backend="reference").eval()
    p = {k: v.detach() for k, v in m.named_parameters()}
    src, dst, n = g.src, g.dst, g.num_nodes
    zs = g.features @ p["A_1.W"]
    s = fn((zs @ p["A_1.al"])[src], (zs @ p["A_1.ar"])[dst])
    mx = _seg_max(s, dst, n)
    e = torch.exp(s - mx[dst])
    alpha = e / torch.zeros(n).index_add(0, dst, e)[dst]
    msg = alpha[:, None] * zs[src]
    if red == "sum":
        want = torch.zeros(n, 3).index_add(0, dst, msg)
    else:
        want = _seg_max(msg, dst, n)
        want[torch.bincount(dst, minlength=n) == 0] = 0.0
    torch.testing.assert_close(m(), want)


@pytest.mark.parametrize("msg, fn", [
    ("dst.h - src.h", lambda xs, xd, a, b: xd - xs),
    ("(src.degree + 1) - src.h", lambda xs, xd, a, b: (a + 1)[:, None] - xs),
    ("(src.degree + 1) / (src.h * src.h + 1)", lambda xs, xd, a, b: (a + 1)[:, None] / (xs * xs + 1)),
    ("-src.h + src.h / (dst.degree + 2)", lambda xs, xd, a, b: xs * (1 / (b + 2) - 1)[:, None]),
])
def test_non_commutative_messages_keep_their_operand_order(msg, fn):
    """`dst.a - src.b` and `w - src.h` are not `src.b - dst.a` and `src.h - w` (mutants: fuse swapped the
    operands of sub and div as of add and mul); a negated term in a collected sum keeps its sign."""
    m, g, W = _layer(msg)
    indeg, _ = _deg(g)
    x, src, dst, n = g.features, g.src, g.dst, g.num_nodes
    agg = torch.zeros(n, 4).index_add(0, dst, fn(x[src], x[dst], indeg[src], indeg[dst]))
    torch.testing.assert_close(m(), agg @ W)


def _steps(opt, ps, steps=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    for t in range(steps):
        opt.zero_grad(set_to_none=True)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * (1 + t)
        opt.step()


def _ps(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in ((5, 3), (3,))]


@pytest.mark.parametrize("name, args, theirs", [
    ("sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3},
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.3, foreach=False)),
    ("sgd", {}, lambda ps: torch.optim.SGD(ps, foreach=False)),
    ("adam", {}, lambda ps: torch.optim.Adam(ps, foreach=False)),
])
def test_optimizer_defaults_and_dampening_match_torch(name, args, theirs):
    """SGD's dampening, and the defaults a train block leaves out (sgd's lr 1e-3, adam's lr, betas and
    eps), give torch.optim's bits (mutants: dampening ignored, another default lr)."""
    from gdsl.runtime.trainer import make_optimizer
    mine, ref = _ps(), _ps()
    _steps(make_optimizer(name, args, mine), mine)
    _steps(theirs(ref), ref)
    for a, b in zip(mine, ref):
        assert torch.equal(a, b), (a - b).abs().max()


def test_optimizer_class_defaults_are_torchs():
    """optim.Adam / AdamW / SGD built with no options step as torch's do with none (mutants: betas
    (0.9, 0.99), eps 1e-6, AdamW's weight decay 0)."""
    from gdsl.runtime import optim
    for mine_cls, theirs_cls in ((optim.Adam, torch.optim.Adam), (optim.AdamW, torch.optim.AdamW),
                                 (optim.SGD, torch.optim.SGD)):
        mine, ref = _ps(), _ps()
        _steps(mine_cls(mine), mine, steps=40)
        _steps(theirs_cls(ref, foreach=False), ref, steps=40)
        for a, b in zip(mine, ref):
            assert torch.equal(a, b), (mine_cls.__name__, (a - b).abs().max())


def test_optimizer_option_checks_match_torch():
    """A beta of 1 and Nesterov with dampening are refused, as torch refuses them."""
    from gdsl.runtime import optim
    for kw in ({"betas": (0.9, 1.0)}, {"betas": (1.0, 0.999)}):
        with pytest.raises(ValueError):
            torch.optim.Adam(_ps(), **kw)
        with pytest.raises(ValueError, match="beta"):
            optim.Adam(_ps(), **kw)
    with pytest.raises(ValueError):
        torch.optim.SGD(_ps(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(_ps(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)


TRAIN = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val

layer Dense[d](h: [din]) -> [d] {
    param W : f32[din, d] = glorot
    transform t = h @ W
    sync      s = sum(t)
    apply     out = s
    return out
}

model M {
    return Dense[C]({X})
}

train t {
    model     = M
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.05, weight_decay = 0.01)
    epochs    = 4
    eval      = accuracy(mask = val)
}
"""


def test_training_matches_a_handwritten_loop():
    """gdsl.train's losses and val accuracies, epoch by epoch, against a torch loop: Adam with L2 decay on
    the train rows' cross-entropy, the accuracy of the updated params on the val rows."""
    g = random_graph(n=40, e=80, f=5, c=3)
    prog = gdsl.compile(TRAIN.replace("{X}", "X"))
    torch.manual_seed(7)
    W = prog.module(g, backend="reference").Dense_1.W.detach().clone().requires_grad_()
    res = gdsl.train(prog, g, backend="reference", seed=7)
    opt = torch.optim.Adam([W], lr=0.05, weight_decay=0.01, foreach=False)
    x, y, tr, va = g.features, g.labels, g.masks["train"], g.masks["val"]
    assert len(res.epochs) == 4
    for e in res.epochs:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy((x @ W)[tr], y[tr])
        loss.backward()
        opt.step()
        acc = ((x @ W).argmax(-1)[va] == y[va]).float().mean().item()
        assert e.loss == pytest.approx(loss.item(), rel=1e-5)
        assert e.metrics["val_acc"] == pytest.approx(acc)
    assert set(res.epochs[0].metrics) == {"train_acc", "val_acc"}   # the loss's rows, then the eval block's


def test_accuracy_is_taken_without_dropout():
    """The metrics of an epoch are those of the model in eval mode (no dropout), after the step."""
    g = random_graph(n=60, e=80, f=5, c=3)
    res = gdsl.train(gdsl.compile(TRAIN.replace("{X}", "dropout(X, 0.9)")), g, backend="reference", seed=3)
    W = res.model.Dense_1.W.detach()
    x, y, tr, va = g.features, g.labels, g.masks["train"], g.masks["val"]
    pred = (x @ W).argmax(-1)
    last = res.epochs[-1].metrics
    assert last["val_acc"] == pytest.approx((pred[va] == y[va]).float().mean().item())
    assert last["train_acc"] == pytest.approx((pred[tr] == y[tr]).float().mean().item())


def test_edge_softmax_of_large_scores_is_finite():
    """edge_softmax subtracts each destination's max score: scores in the hundreds (exp overflows
    float32) still give the softmax (mutant: exp(s) unshifted, inf / inf = nan)."""
    g = random_graph(n=30, e=80, f=4, c=3)
    m = gdsl.compile(ATT.replace("{SCORE}", "dot(src.zs, al) + dot(dst.zs, ar)").replace("{RED}", "sum")).module(
        g, backend="reference").eval()
    with torch.no_grad():
        m.A_1.al.copy_(torch.tensor([300.0, -200.0, 100.0]))
        m.A_1.ar.copy_(torch.tensor([-100.0, 250.0, 50.0]))
    p = {k: v.detach() for k, v in m.named_parameters()}
    src, dst, n = g.src, g.dst, g.num_nodes
    zs = g.features @ p["A_1.W"]
    s = (zs @ p["A_1.al"])[src] + (zs @ p["A_1.ar"])[dst]
    assert s.abs().max() > 200
    e = torch.exp(s - _seg_max(s, dst, n)[dst])
    alpha = e / torch.zeros(n).index_add(0, dst, e)[dst]
    want = torch.zeros(n, 3).index_add(0, dst, alpha[:, None] * zs[src])
    out = m()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want)


def test_max_to_src_reads_the_destination_end():
    """`max(m, to = src)` of `dst.h * w`: each vertex's max over its out-edges of the destination's
    row (mutant: the executor's messages read the source row for `to = src` too)."""
    m, g, W = _layer("dst.h * (dst.degree + 1)", "max(m, to = src)")
    indeg, outdeg = _deg(g)
    x, src, dst, n = g.features, g.src, g.dst, g.num_nodes
    agg = _seg_max(x[dst] * (indeg[dst] + 1)[:, None], src, n)
    agg[outdeg == 0] = 0.0
    torch.testing.assert_close(m(), agg @ W)


AXES = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L(h: [din]) -> [2, 3] {
    param W : f32[din, 2, 3] = glorot
    transform t = h @ W
    sync      s = sum(t)
    apply     out = {FN}(s, axis = {AXIS})
    return out
}

model M {
    return flatten(L(X))
}

train t {
    loss = cross_entropy(Y, mask = train)
}
"""


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, -2])
def test_softmax_uses_its_feature_axis(fn, axis):
    """softmax / log_softmax over axis k of a [2, 3] vertex tensor is over torch dim k + 1 (the row
    axis first) (mutant: over the last axis whatever k)."""
    g = random_graph(n=20, e=40, f=4, c=6)
    m = gdsl.compile(AXES.replace("{FN}", fn).replace("{AXIS}", str(axis))).module(g, backend="reference").eval()
    s = (g.features @ m.L_1.W.detach().reshape(4, 6)).reshape(-1, 2, 3)
    want = (torch.softmax if fn == "softmax" else torch.log_softmax)(s, axis % 2 + 1)
    torch.testing.assert_close(m(), want.reshape(-1, 6))


def test_mse_loss_is_the_mean_squared_error():
    """`loss = mse(T, mask = train)`: the mean over the train rows and the features of (out - T)^2
    (mutant: another loss)."""
    g0 = random_graph(n=30, e=60, f=4, c=3)
    t = torch.randn(30, 3, generator=torch.Generator().manual_seed(2))
    g = gdsl.Graph.from_edges(g0.src, g0.dst, 30, features=g0.features, train_mask=g0.masks["train"],
                              ndata={"T": t})
    src = DENSE.replace("input Y : vertex label[C]", "input T : vertex f32[3]").replace(
        "cross_entropy(Y, mask = train)", "mse(T, mask = train)").replace("{APPLY}", "s").replace(
        "{BODY}", "return Dense[3](X)").replace("{INPUTS}", "")
    torch.manual_seed(0)
    m = gdsl.compile(src).module(g, backend="reference")
    out = m.eval()()
    tr = g.masks["train"]
    want = ((g.features @ m.Dense_1.W.detach())[tr] - t[tr]).pow(2).mean()
    torch.testing.assert_close(m.loss(out), want)


def test_train_seed_is_the_dropout_seed():
    """gdsl.train(seed=s) draws its dropout masks from seed s (mutant: from 0 whatever s): its first
    loss is that of a module built after torch.manual_seed(s) whose dropout_seed is s, not 0."""
    g = random_graph(n=60, e=80, f=5, c=3)
    prog = gdsl.compile(TRAIN.replace("{X}", "dropout(X, 0.5)"))
    first = gdsl.train(prog, g, backend="reference", seed=3, epochs=1).epochs[0].loss
    losses = {}
    for s in (3, 0):
        torch.manual_seed(3)
        m = prog.module(g, backend="reference", hoist=True)
        m.dropout_seed = s
        losses[s] = m.loss(m.train()()).item()
    assert losses[3] != losses[0]
    assert first == pytest.approx(losses[3], rel=1e-6)


@pytest.mark.parametrize("msg", ["(src.degree + 1) / src.h", "src.h + relu(src.h)", "src.h * src.h"])
def test_dense_first_is_refused_for_a_non_linear_message(msg):
    """`order L#1 = dense_first` needs an aggregation linear in src.h: `c / src.h` and `src.h + relu(src.h)`
    are not (mutants: the linearity analysis took `c / x` as `x / c`, and a sum linear when one term is)."""
    from gdsl.diagnostics import CompileError
    src = LAYER.replace("{MSG}", msg).replace("{RED}", "sum(m)").replace("L[3](X)", "L[C](X)") + \
        "\nschedule {\n    order L#1 = dense_first\n}\n"
    with pytest.raises(CompileError, match="not linear"):
        gdsl.compile(src).bind(random_graph(n=30, e=60, f=4, c=3))
    # the same program without the hint compiles, and sparse_first is accepted
    gdsl.compile(src.replace("dense_first", "sparse_first")).bind(random_graph(n=30, e=60, f=4, c=3))


def test_dense_first_for_an_aggregation_to_the_sources():
    """For `to = src` the linear endpoint is dst: `sum(dst.h, to = src)` takes dense_first and keeps its
    value; `sum(src.h, to = src)` does not (mutant: the analysis took src as the endpoint either way)."""
    from gdsl.diagnostics import CompileError
    hint = "\nschedule {\n    order L#1 = dense_first\n}\n"
    src = LAYER.replace("{RED}", "sum(m, to = src)").replace("L[3](X)", "L[C](X)") + hint
    g = random_graph(n=30, e=60, f=4, c=3)
    with pytest.raises(CompileError, match="not linear"):
        gdsl.compile(src.replace("{MSG}", "src.h")).bind(g)
    torch.manual_seed(0)
    m = gdsl.compile(src.replace("{MSG}", "dst.h * 2")).module(g, backend="reference").eval()
    assert any(op.attrs.get("order") == "dense_first" for op in m.ir.main.ops)
    x, W = g.features, m.L_1.W.detach()
    torch.testing.assert_close(m(), torch.zeros(30, 4).index_add(0, g.src, 2 * x[g.dst]) @ W)


def test_a_vector_edge_weight_is_not_reordered():
    """`src.h * E` with E an edge f32[F] input (a weight per edge and feature) is not `A X` with one scalar
    per edge: it stays sparse-first even where the layer narrows (4 -> 2), and keeps its value
    (mutant: the order pass reordered any `aggregate[msg=mul]`)."""
    g0 = random_graph(n=30, e=60, f=4, c=2)
    e = torch.rand(g0.src.numel(), 4, generator=torch.Generator().manual_seed(3))
    g = gdsl.Graph.from_edges(g0.src, g0.dst, 30, features=g0.features, labels=g0.labels,
                              train_mask=g0.masks["train"], edata={"E": e})
    src = LAYER.replace("input Y", "input E : edge f32[F]\ninput Y").replace("{MSG}", "src.h * E").replace(
        "{RED}", "sum(m)").replace("L[3](X)", "L[2](X)")
    torch.manual_seed(0)
    m = gdsl.compile(src).module(g, backend="reference").eval()
    assert not any(op.attrs.get("order") == "dense_first" for op in m.ir.main.ops)
    x, W = g.features, m.L_1.W.detach()
    torch.testing.assert_close(m(), torch.zeros(30, 4).index_add(0, g.dst, x[g.src] * e) @ W)


def test_auto_order_counts_the_leading_axes_in_both_widths():
    """`a @ W` with a : [2, 4] and W : f32[4, 5] aggregates 8 columns sparse-first and 10 dense-first, so
    auto keeps sparse_first (mutant: the leading axis left out of f_out, 5 < 8: dense_first)."""
    src = LAYER.replace("input X : vertex f32[F]", "input X : vertex f32[F]\ninput Z : vertex f32[2, 4]").replace(
        "layer L[d](h: [din]) -> [d]", "layer L(h: [k, din]) -> [k, 5]").replace(
        "param W : f32[din, d]", "param W : f32[din, 5]").replace("{MSG}", "src.h").replace(
        "{RED}", "sum(m)").replace("L[3](X)", "flatten(L(Z))")
    g0 = random_graph(n=30, e=60, f=8, c=10)
    x = g0.features.reshape(30, 2, 4)
    g = gdsl.Graph.from_edges(g0.src, g0.dst, 30, features=g0.features, labels=g0.labels,
                              train_mask=g0.masks["train"], ndata={"Z": x})
    m = gdsl.compile(src).module(g, backend="reference").eval()
    orders = [op.attrs["order"] for op in m.ir.main.ops if "order" in op.attrs]
    assert orders == ["sparse_first"]
    W = m.L_1.W.detach()
    agg = torch.zeros(30, 2, 4).index_add(0, g.dst, x[g.src])
    torch.testing.assert_close(m(), (agg @ W).reshape(30, 10))
