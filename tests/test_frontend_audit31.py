"""helper-31: a train block over a model with no params (a located error at
its `model =` line), nll's log-probability check (log(softmax(x)) is one),
`.half()` / `.bfloat16()` on a parent module holding a compiled gdsl module,
and programs written from the language reference alone compared with plain
torch."""
from __future__ import annotations

import pytest
import torch

import gdsl
from gdsl.diagnostics import CompileError
from helpers import gdsl_here, random_graph

NOPARAM = """\
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

model M {
    return Prop(X)
}

train t {
    model     = M
    loss      = mse(X, mask = train)
    optimizer = adam(lr = 0.01)
    epochs    = 3
}
"""


def test_no_params_is_located_at_model_line(tmp_path):
    """Was: `gdsl: error: f.gd: model 'M' has no params to train`, no line;
    now at the train block's `model =` line, with the source and a caret."""
    f = tmp_path / "noparam.gd"
    f.write_text(NOPARAM)
    r = gdsl_here("run", f, "--backend", "reference", "--epochs", "1")
    assert r.returncode == 1
    assert f"{f}:17:5: error: model 'M' has no params to train" in r.stderr
    assert "  17 |     model     = M\n" in r.stderr and "^^^^^^^^^^^^^" in r.stderr
    # compiling it, and binding it as a module (inference: a propagation), stay fine
    assert gdsl_here("compile", f).returncode == 0
    g = random_graph(n=10, e=30, f=3, c=2)
    prog = gdsl.compile(NOPARAM)
    assert prog.module(g, backend="reference")().shape == (10, 3)
    with pytest.raises(CompileError, match=r"<input>:17:5: error: model 'M' has no params"):
        gdsl.train(prog, g, epochs=1, backend="reference")
    # a block without `model =` (one model): at the block's header
    prog = gdsl.compile(NOPARAM.replace("    model     = M\n", ""))
    with pytest.raises(CompileError, match=r"<input>:16:1: error: model 'M' has no params"):
        gdsl.train(prog, g, epochs=1, backend="reference")


def test_no_params_found_before_the_module_is_built_and_when_dead():
    """The check is made on the program as written before any module is built
    (binding.check_masks, which `gdsl run --np` also calls before it
    partitions: was torch's ValueError from the ranks, an internal error),
    and again on the module: a layer whose param is never used, or whose only
    call is in a `repeat 0`, leaves nothing to train either."""
    from gdsl.runtime.binding import check_masks
    g = random_graph(n=10, e=30, f=3, c=2)
    with pytest.raises(CompileError, match=r"<input>:17:5: error: model 'M' has no params"):
        check_masks(gdsl.compile(NOPARAM).checked, g)
    dead = NOPARAM.replace("    gather  a = sum(m)\n", "    gather  a = sum(m)\n    param W : f32[d, d] = glorot\n")
    zero = NOPARAM + "\nlayer Lin(h: [d]) -> [d] {\n    param W : f32[d, d] = glorot\n    return h @ W\n}\n"
    zero = zero.replace("    return Prop(X)", "    h = X\n    repeat 0 { h = Lin(h) }\n    return Prop(h)")
    for src, line in ((dead, 18), (zero, 19)):
        with pytest.warns(UserWarning) if src is dead else _nothing():
            prog = gdsl.compile(src)
        check_masks(prog.checked, g)   # as written, the model calls a layer with a param
        with pytest.raises(CompileError, match=rf"<input>:{line}:5: error: model 'M' has no params"):
            gdsl.train(prog, g, epochs=1, backend="reference")


def _nothing():
    import contextlib
    return contextlib.nullcontext()


def test_make_optimizer_empty_is_user_error():
    """`gdsl run --np` builds its optimizer in the ranks: an empty list was
    torch's ValueError, reported as an internal error."""
    from gdsl.diagnostics import GdslError
    from gdsl.runtime.trainer import make_optimizer
    with pytest.raises(GdslError, match="no params to train"):
        make_optimizer("adam", {"lr": 0.01}, [])


def _gcn_returning(expr: str, loss: str = "nll") -> str:
    from pathlib import Path
    src = (Path(__file__).parent.parent / "programs" / "gcn.gd").read_text()
    src = src.replace("return GCNConv[C](h)", f"return {expr}").replace("cross_entropy", loss)
    return src + "\nlayer P(h: [d]) -> [d] {\n    apply o = softmax(h)\n    return o\n}\n"


@pytest.mark.parametrize("expr, warns", [
    ("log(softmax(GCNConv[C](h)))", False),            # was: warned (a false positive)
    ("log(softmax(GCNConv[C](h), axis = 0))", False),  # the class axis, by number
    ("log(P(GCNConv[C](h)))", False),                  # the softmax in a layer, the log in the model
    ("log_softmax(GCNConv[C](h))", False),
    ("GCNConv[C](h)", True),                           # raw logits: still warned
    ("softmax(GCNConv[C](h))", True),                  # probabilities, not their log
    ("log(relu(GCNConv[C](h)))", True),
    ("log(softmax(GCNConv[C](h)) * 2)", True),
    ("mean(log(softmax(reshape(GCNConv[C](h), [1, C]), axis = 0)), 0)", True),   # a softmax over the 1-axis
])
def test_nll_recognises_log_of_softmax(expr, warns):
    from gdsl.compiler import compile_source
    c = compile_source(_gcn_returning(expr))
    got = [d for d in c.warnings if "nll takes log-probabilities" in d.message]
    assert bool(got) == warns, (expr, got)


def test_half_and_bfloat16_of_a_parent_are_refused_whole():
    """`parent.half()` / `.bfloat16()` / `.to(torch.float16)` over a module
    holding a compiled gdsl module: refused, naming the dtypes that run, and
    the gdsl module is left whole (params, constants) and still runs; the
    parent's `.double()` converts it whole (tests/helpers.py
    check_double_module). (Already so at 9017110: a regression test.)"""
    from gdsl.diagnostics import GdslError
    g = random_graph(n=12, e=40, f=3, c=2)
    prog = gdsl.compile(_gcn_returning("GCNConv[C](h)", "cross_entropy"))
    for backend in ("reference", "numba"):
        torch.manual_seed(0)
        m = prog.module(g, backend=backend).eval()
        want = m().detach()
        parent = torch.nn.ModuleDict({"gnn": m})
        for convert in (lambda p: p.half(), lambda p: p.bfloat16(), lambda p: p.to(torch.float16)):
            with pytest.raises(GdslError, match=r"runs in float32 or float64 .*not (b?float16)"):
                convert(parent)
            assert m.dtype == torch.float32 and {p.dtype for p in m.parameters()} == {torch.float32}
            assert torch.equal(m(), want)
        parent.double()
        assert m.dtype == torch.float64 and m().dtype == torch.float64
        torch.testing.assert_close(m().float(), want, rtol=1e-5, atol=1e-6)


# ---- programs written from the language reference, against plain torch ----------------------------

HEAD = """\
graph G {opts}
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test
"""
LINEAR = """
layer Linear[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    apply     out = t + b
    return out
}
"""


def _scatter_sum(v, dst, n):
    return torch.zeros((n,) + v.shape[1:], dtype=v.dtype).index_add(0, dst, v)


def _edge_softmax(e, dst, n):
    mx = torch.full((n,) + e.shape[1:], -float("inf")).index_reduce(0, dst, e, "amax")
    p = torch.exp(e - mx[dst])
    return p / _scatter_sum(p, dst, n)[dst]


def _graph_edges(g, opts):
    h = g.with_options(self_loops="self_loops" in opts, symmetric="symmetric" in opts)
    return h.src, h.dst, g.num_nodes


CHEB = HEAD.format(opts="(symmetric)") + """
layer ChebConv[dout](h: [din]) -> [dout] {
    param W0 : f32[din, dout] = glorot
    param W1 : f32[din, dout] = glorot
    param W2 : f32[din, dout] = glorot
    param b  : f32[dout] = zeros
    scatter   m1 = -src.h * rsqrt(max(src.degree, 1) * max(dst.degree, 1))
    gather    t1 = sum(m1)
    scatter   m2 = -src.t1 * rsqrt(max(src.degree, 1) * max(dst.degree, 1))
    gather    l2 = sum(m2)
    apply     t2 = 2 * l2 - h
    transform t = h @ W0 + t1 @ W1 + t2 @ W2
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model Cheb[hidden = 5] {
    h = relu(ChebConv[hidden](X))
    return ChebConv[C](h)
}
"""


def cheb_torch(x, p, src, dst, n):
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()
    w = -(deg[src] * deg[dst]).rsqrt()[:, None]

    def conv(h, k):
        t1 = _scatter_sum(h[src] * w, dst, n)
        t2 = 2 * _scatter_sum(t1[src] * w, dst, n) - h
        return h @ p[f"ChebConv_{k}.W0"] + t1 @ p[f"ChebConv_{k}.W1"] + t2 @ p[f"ChebConv_{k}.W2"] + p[f"ChebConv_{k}.b"]
    return conv(torch.relu(conv(x, 1)), 2)


MAXMIN = HEAD.format(opts="(self_loops, symmetric)") + LINEAR + """
layer MaxMinConv[dout](h: [din]) -> [dout] {
    param Wp : f32[din, dout] = glorot
    param Ws : f32[din, dout] = glorot
    param Wn : f32[dout, dout] = glorot
    param Wm : f32[dout, dout] = glorot
    transform p = h @ Wp
    apply     q = relu(p)
    scatter   m = src.q
    gather    hi = max(m)
    gather    lo = min(m)
    transform t = h @ Ws + hi @ Wn + lo @ Wm
    apply     out = t
    return out
}

model MaxMin[hidden = 6] {
    h = relu(MaxMinConv[hidden](X))
    h = h + relu(MaxMinConv[hidden](h))
    return Linear[C](h)
}
"""


def maxmin_torch(x, p, src, dst, n):
    def conv(h, k):
        q = torch.relu(h @ p[f"MaxMinConv_{k}.Wp"])
        shape = (n, q.shape[1])
        hi = torch.zeros(shape).index_reduce(0, dst, q[src], "amax", include_self=False)
        lo = torch.zeros(shape).index_reduce(0, dst, q[src], "amin", include_self=False)
        return h @ p[f"MaxMinConv_{k}.Ws"] + hi @ p[f"MaxMinConv_{k}.Wn"] + lo @ p[f"MaxMinConv_{k}.Wm"]
    h = torch.relu(conv(x, 1))
    h = h + torch.relu(conv(h, 2))
    return h @ p["Linear_1.W"] + p["Linear_1.b"]


AGNN = HEAD.format(opts="(self_loops, symmetric)") + LINEAR + """
layer AGNNConv(h: [d]) -> [d] {
    param beta : f32[1] = ones
    apply     n = h * rsqrt(reshape(sum(h * h, 0), [1]) + 0.000001)
    scatter   e = beta * reshape(dot(src.n, dst.n), [1])
    scatter   alpha = edge_softmax(e)
    scatter   m = alpha * src.h
    gather    out = sum(m)
    return out
}

model AGNN[hidden = 6] {
    h = relu(Linear[hidden](X))
    h = AGNNConv(h)
    h = AGNNConv(h)
    return Linear[C](h)
}
"""


def agnn_torch(x, p, src, dst, n):
    h = torch.relu(x @ p["Linear_1.W"] + p["Linear_1.b"])
    for k in (1, 2):
        nh = h * torch.rsqrt((h * h).sum(-1, keepdim=True) + 1e-6)
        e = p[f"AGNNConv_{k}.beta"] * (nh[src] * nh[dst]).sum(-1, keepdim=True)
        h = _scatter_sum(_edge_softmax(e, dst, n) * h[src], dst, n)
    return h @ p["Linear_2.W"] + p["Linear_2.b"]


SHARED = HEAD.format(opts="(self_loops, symmetric)") + """
layer Conv[dout, slope = 0.01, selfw = 1](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    scatter   m = src.h / dst.degree
    gather    a = sum(m)
    apply     c = a + selfw * h
    transform t = c @ W
    apply     out = leaky_relu(t + b, slope)
    return out
}

model Shared[hidden = 6] {
    h = Conv[hidden, 0.2, 2](X)
    return Conv[C, slope = 1, selfw = 0.5](h)
}
"""


def shared_torch(x, p, src, dst, n):
    deg = torch.bincount(dst, minlength=n).float()

    def conv(h, k, slope, selfw):
        c = _scatter_sum(h[src] / deg[dst][:, None], dst, n) + selfw * h
        return torch.nn.functional.leaky_relu(c @ p[f"Conv_{k}.W"] + p[f"Conv_{k}.b"], slope)
    return conv(conv(x, 1, 0.2, 2.0), 2, 1.0, 0.5)


GCNII = HEAD.format(opts="(self_loops, symmetric)") + LINEAR + """
layer IIConv[alpha, beta](h: [d], h0: [d]) -> [d] {
    param W : f32[d, d] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    apply     s = (1 - alpha) * a + alpha * h0
    transform t = s @ W
    apply     out = (1 - beta) * s + beta * t
    return out
}

model II[hidden = 6, outer = 2, inner = 2, alpha = 0.1, beta = 0.5] {
    h0 = relu(Linear[hidden](X))
    h = h0
    repeat outer {
        repeat inner {
            h = relu(IIConv[alpha, beta](h, h0))
        }
        h = h * 0.5
    }
    return Linear[C](h)
}
"""


def gcnii_torch(x, p, src, dst, n):
    deg = torch.bincount(dst, minlength=n).float()
    w = (deg[src] * deg[dst]).rsqrt()[:, None]
    h0 = torch.relu(x @ p["Linear_1.W"] + p["Linear_1.b"])
    h, k = h0, 1
    for _ in range(2):
        for _ in range(2):
            s = 0.9 * _scatter_sum(h[src] * w, dst, n) + 0.1 * h0
            h = torch.relu(0.5 * s + 0.5 * (s @ p[f"IIConv_{k}.W"]))
            k += 1
        h = h * 0.5
    return h @ p["Linear_2.W"] + p["Linear_2.b"]


EDGE_MEAN = HEAD.format(opts="").replace("mask train", "input w : edge f32\nmask train") + """
layer WConv[dout](h: [din]) -> [dout] {
    param Ws : f32[din, dout] = glorot
    param Wn : f32[din, dout] = glorot
    gather    wsum = sum(w)
    scatter   m = src.h * w / max(dst.wsum, 0.001)
    gather    a = sum(m)
    transform t = h @ Ws + a @ Wn
    return t
}

layer BiConv[dout](h: [din]) -> [dout] {
    param Wo : f32[din, dout] = glorot
    scatter   mo = dst.h
    gather    ao = mean(mo, to = src)
    transform t = ao @ Wo
    return t
}

model WNet[hidden = 6] {
    h = elu(WConv[hidden](X))
    return WConv[C](h) + BiConv[C](h)
}
"""


def edge_mean_torch(x, p, src, dst, n, w):
    wsum = _scatter_sum(w, dst, n)

    def conv(h, k):
        a = _scatter_sum(h[src] * (w / wsum[dst].clamp(min=0.001))[:, None], dst, n)
        return h @ p[f"WConv_{k}.Ws"] + a @ p[f"WConv_{k}.Wn"]
    h = torch.nn.functional.elu(conv(x, 1))
    outdeg = torch.bincount(src, minlength=n).clamp(min=1).float()
    ao = _scatter_sum(h[dst], src, n) / outdeg[:, None]
    return conv(h, 2) + ao @ p["BiConv_1.Wo"]


CASES = {
    "chebnet": (CHEB, cheb_torch, "(symmetric)"),
    "maxmin_skip": (MAXMIN, maxmin_torch, "(self_loops, symmetric)"),
    "maxmin_skip_isolated": (MAXMIN.replace("(self_loops, symmetric)", "(symmetric)"), maxmin_torch, "(symmetric)"),
    "agnn": (AGNN, agnn_torch, "(self_loops, symmetric)"),
    "shared_layer": (SHARED, shared_torch, "(self_loops, symmetric)"),
    "gcnii_nested_repeat": (GCNII, gcnii_torch, "(self_loops, symmetric)"),
    "edge_weighted_mean_and_out_mean": (EDGE_MEAN, edge_mean_torch, ""),
}


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("name", list(CASES))
def test_program_matches_plain_torch(name, backend):
    """Forward and gradients (params and input features) of a program written
    from docs/language.md, against the same model written in plain torch."""
    source, by_hand, opts = CASES[name]
    g = random_graph(n=30, e=90, f=5, c=3, seed=3)
    w = None
    if "input w" in source:
        w = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(1)) + 0.1
        g = gdsl.Graph.from_edges(g.src, g.dst, g.num_nodes, features=g.features, labels=g.labels,
                                  masks=dict(g.masks), edata={"w": w})
    torch.manual_seed(0)
    m = gdsl.compile(source).module(g, backend=backend).eval()
    params = dict(m.named_parameters())
    with torch.no_grad():   # away from relu's and max's ties: nonzero biases, eps, temperatures
        for k, v in params.items():
            if k.endswith((".b", ".beta", ".eps")):
                v.copy_(torch.randn(v.shape, generator=torch.Generator().manual_seed(7)) * 0.3 + (1 if "beta" in k else 0))
    x = g.features.clone().requires_grad_()
    src, dst, n = _graph_edges(g, opts)
    out = m(x)
    want = by_hand(x, params, src, dst, n, *([w] if w is not None else []))
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    r = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    names = list(params)
    got = torch.autograd.grad((out * r).sum(), [x] + [params[k] for k in names])
    exp = torch.autograd.grad((want * r).sum(), [x] + [params[k] for k in names])
    for k, a, b in zip(["X"] + names, got, exp):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda s, k=k: f"{name} d/d{k}: {s}")


SGC_NLL = HEAD.format(opts="(self_loops, symmetric)") + """
layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

layer Out[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    apply     p = softmax(t)
    return p
}

model SGCnll[k = 3] {
    h = X
    repeat k { h = Prop(h) }
    return log(Out[C](h))
}

train t {
    model     = SGCnll
    loss      = nll(Y, mask = train)
    optimizer = sgd(lr = 0.2, momentum = 0.9)
    epochs    = 4
}
"""


def test_sgc_with_log_of_softmax_trains_without_nll_warning():
    """The program that showed the false positive (written from the language
    reference): no warning, and it trains alike on both backends, its loss
    that of F.nll_loss over log(softmax(.))."""
    import warnings
    g = random_graph(n=30, e=90, f=5, c=3, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a GdslWarning would raise here
        prog = gdsl.compile(SGC_NLL)
    losses = {}
    for backend in ("reference", "numba"):
        r = gdsl.train(prog, g, backend=backend, seed=1)
        losses[backend] = [e.loss for e in r.epochs]
        m = r.model.eval()
        with torch.no_grad():
            out = m()
        mask = g.masks["train"]
        torch.testing.assert_close(m.loss(out).detach(), torch.nn.functional.nll_loss(out[mask], g.labels[mask]))
        torch.testing.assert_close(out.exp().sum(-1), torch.ones(g.num_nodes))   # log-probabilities
    assert losses["reference"][-1] < losses["reference"][0]
    torch.testing.assert_close(losses["numba"], losses["reference"], rtol=1e-5, atol=1e-6)
