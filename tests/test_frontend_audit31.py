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
