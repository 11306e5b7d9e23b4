"""helper-12's message findings (session 38): the layer-not-called error names
the layer's own arguments (was `L[static args](x)`, docs said `L[C](x)`),
and a positional option of a builtin whose options are named only says how
to name it (`softmax(X, 0)`, a torch habit)."""
from __future__ import annotations

import pytest

import gdsl
from gdsl.diagnostics import CompileError

HEAD = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[dout, k = 2](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}
layer P(h: [din], g: [din]) -> [din] {
    apply o = h + g
    return o
}
"""
TAIL = "\ntrain t { model = M; loss = cross_entropy(Y, mask = train) }\n"


@pytest.mark.parametrize("body, line_col, message", [
    ("model M { return L }", "14:18", "layer 'L' must be called: L[dout](h)"),
    ("model M { return P }", "14:18", "layer 'P' must be called: P(h, g)"),
    ("model M { h = softmax(X, 0)\n return L[C](h) }", "14:15",
     "softmax takes 1 argument, got 2 (its options are named: softmax(x, axis = ...))"),
])
def test_messages(body, line_col, message):
    with pytest.raises(CompileError) as ei:
        gdsl.compile(HEAD + body + TAIL)
    assert f"<input>:{line_col}: error: {message}" in str(ei.value)


def test_a_positional_option_that_is_allowed_gets_no_hint():
    with pytest.raises(CompileError) as ei:
        gdsl.compile(HEAD + "model M { h = dropout(X, 0.5, 1)\n return L[C](h) }" + TAIL)
    assert "dropout takes 1 to 2 arguments, got 3" in str(ei.value) and "named" not in str(ei.value)
