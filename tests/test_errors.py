"""Every parser and checker error a user can meet: exact position, message, exit 1.

Each malformed program is one small edit of an example program (programs/*.gd),
so exactly one thing is wrong, and exactly one error must be reported: a
statement that failed must not set off errors in the statements after it.
Most cases call `gdsl.cli.main` in-process; a few run the real process to see
the exit code and that no Python traceback reaches the user.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gdsl
from gdsl.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
ERROR_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$", re.M)


def edit(base: str, old: str, new: str) -> str:
    """`base` with the one occurrence of `old` replaced by `new`."""
    src = (PROGRAMS / base).read_text()
    assert src.count(old) == 1, f"{old!r} must occur exactly once in {base}"
    return src.replace(old, new)


def compile_errors(tmp_path: Path, capsys, text: str | bytes, *extra: str) -> tuple[str, list[re.Match]]:
    """Compile `text` in-process; check exit 1, no traceback; return stderr and its error lines."""
    path = tmp_path / "prog.gd"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    rc = main(["compile", str(path), *extra])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err and "internal compiler error" not in err, err
    errors = list(ERROR_LINE.finditer(err))
    assert errors, err
    assert all(m["file"] == str(path) for m in errors), err
    return err, errors


# (id, base program, old text, new text, "line:col", part of the message)
CASES = [
    # ---- syntax
    ("unexpected-token", "gcn.gd", "gather    a = sum(m)", "gather    a = = sum(m)",
     "11:19", "unexpected '=', expected one of"),
    ("bad-character", "gcn.gd", "apply     out = s + b", "apply     out = s $ b",
     "14:23", "unexpected character '$'"),
    ("non-ascii-character", "gcn.gd", "apply     out = s + b", "apply     out = s × b",
     "14:23", "unexpected character '×'"),
    # Unicode digits are no number (were read as 16: the grammar's \\d; --set refused them)
    ("arabic-indic-digits", "gcn.gd", "model GCN[hidden = 16", "model GCN[hidden = \u0661\u0666",
     "18:20", "unexpected character '\u0661'"),
    ("fullwidth-digits", "gcn.gd", "model GCN[hidden = 16", "model GCN[hidden = \uff11\uff16",
     "18:20", "unexpected character '\uff11'"),
    ("operator-at-end-of-line", "gcn.gd", "apply     out = s + b", "apply     out = s +",
     "14:24", "unexpected end of line, expected one of"),
    ("stray-close-paren", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C](h))",
     "22:25", "unexpected ')'"),
    # ---- names and definitions
    ("layer-returns-a-param", "gcn.gd", "    return out\n", "    return b\n",   # (was: at the layer's header)
     "15:5", "GCNConv must return a vertex tensor, not a param"),
    ("undefined-name-in-layer", "gcn.gd", "apply     out = s + b", "apply     out = s + bias",
     "14:25", "undefined name 'bias'"),
    ("undefined-name-in-model", "gcn.gd", "h = dropout(h, p)", "h = dropout(hh, p)",
     "21:17", "undefined name 'hh'"),
    # (was: "cannot use 'GCNConv[C](h)[0]' here"; helper-71)
    ("indexed-tensor", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C](h)[0]",
     "22:12", "'GCNConv[C](h)[0]': a tensor cannot be indexed; brackets pass a layer's static arguments"),
    ("unknown-function", "gcn.gd", "h = relu(GCNConv", "h = rleu(GCNConv",
     "20:9", "unknown function 'rleu'"),
    ("duplicate-definition", "gcn.gd", "mask train, val, test", "mask train, val, test, X",
     "5:24", "'X' is already defined as an input at line 3"),
    ("duplicate-layer", "sage.gd", "model SAGE[",
     "layer SAGEConv(h: [d]) -> [d] {\n    apply o = h\n    return o\n}\n\nmodel SAGE[",
     "19:1", "'SAGEConv' is already defined as a layer at line 7"),
    ("param-named-like-an-argument", "gcn.gd", "    param b : f32[dout] = zeros\n",
     "    param b : f32[dout] = zeros\n    param h : f32[din] = zeros\n", "10:5",
     "param 'h' has the name of the layer's tensor argument 'h'; rename one"),
    ("param-named-like-a-static", "gcn.gd", "    param b : f32[dout] = zeros\n",
     "    param b : f32[dout] = zeros\n    param dout : f32[din] = zeros\n", "10:5",
     "param 'dout' has the name of the layer's static argument 'dout'; rename one"),
    ("layer-named-like-a-builtin", "sage.gd", "model SAGE[",
     "layer relu(h: [d]) -> [d] {\n    apply o = h\n    return o\n}\n\nmodel SAGE[",
     "19:7", "layer 'relu' has the name of a builtin function; rename the layer"),   # at the name (helper-74)
    ("duplicate-param", "gcn.gd", "    param b : f32[dout] = zeros\n",
     "    param b : f32[dout] = zeros\n    param W : f32[din] = zeros\n", "10:5", "param 'W' is declared twice"),
    ("duplicate-train-block", "gcn.gd", "train cora {", "train cora {\n    loss = nll(Y)\n}\ntrain cora {",
     "28:1", "train block 'cora' is defined twice"),
    ("two-graphs", "gcn.gd", "input X", "graph H\ninput X",
     "3:1", "only one graph declaration is allowed"),
    ("unknown-graph-option", "gcn.gd", "(self_loops, symmetric)", "(self_loops, undirected)",
     "2:22", "unknown graph option 'undirected' (expected one of self_loops, symmetric)"),
    ("unknown-input-domain", "gcn.gd", "input X : vertex", "input X : node",
     "3:11", "unknown domain 'node' for input 'X'"),   # at the word (helper-74)
    ("unknown-element-type", "gcn.gd", "input X : vertex f32", "input X : vertex f64",
     "3:18", "unknown element type 'f64'"),
    # ---- stage rules
    ("scatter-reads-vertex-tensor", "gcn.gd", "src.h * rsqrt", "h * rsqrt",
     "10:19", "scatter cannot read vertex tensor 'h' directly; write src.h or dst.h"),
    ("scatter-result-not-edge", "gcn.gd", "scatter   m = src.h * rsqrt(src.degree * dst.degree)",
     "scatter   m = b * 2", "10:19", "scatter must produce an edge tensor"),
    ("transform-reads-edge-tensor", "gcn.gd", "transform t = a @ W", "transform t = m @ W",
     "12:19", "transform cannot read edge tensor 'm'; gather it first"),
    ("apply-reads-edge-tensor", "gcn.gd", "apply     out = s + b", "apply     out = s + m",
     "14:25", "apply cannot read edge tensor 'm'"),
    ("endpoint-of-an-undefined-name", "gcn.gd", "src.degree * dst.degree", "src.outdegree * dst.degree",
     "10:33", "undefined name 'outdegree' in src.outdegree (src. reads a vertex tensor of the layer, or src.degree)"),
    ("gather-of-vertex-tensor", "gcn.gd", "gather    a = sum(m)", "gather    a = sum(h)",
     "11:23", "gather reduces edge tensors; 'h' is a vertex tensor (write scatter m = src.h first)"),
    ("gather-of-a-vertex-tensor-named-m", "gcn.gd", "scatter   m = src.h * rsqrt(src.degree * dst.degree)",
     "apply     m = h", "11:23", "gather reduces edge tensors; 'm' is a vertex tensor (write scatter m_e = src.m first)"),
    ("gather-of-expression", "gcn.gd", "gather    a = sum(m)", "gather    a = sum(m * 2)",
     "11:19", "gather reduces one edge tensor by name"),
    ("gather-bad-reducer", "gcn.gd", "gather    a = sum(m)", "gather    a = prod(m)",
     "11:19", "gather is r(m) with r one of sum, mean, max, min"),
    ("gather-bad-direction", "gcn.gd", "gather    a = sum(m)", "gather    a = sum(m, to = both)",
     "11:31", "gather direction is to = src or to = dst"),
    ("two-param-products-in-a-term", "sage.gd", "transform t = h @ Ws + a @ Wn", "transform t = h @ Ws @ Wn",
     "13:19", "at most one '@ param' product"),
    ("matmul-by-non-param", "gcn.gd", "transform t = a @ W", "transform t = a @ h",
     "12:19", "the right side of '@' must be a param"),
    ("sync-of-non-transform", "gcn.gd", "sync      s = sum(t)", "sync      s = sum(a)",
     "13:23", "sync needs a transform result; 'a' is not one"),
    ("sync-not-sum", "gcn.gd", "sync      s = sum(t)", "sync      s = max(t)",
     "13:19", "sync is sum(t) of a transform result"),
    ("src-outside-scatter", "gcn.gd", "apply     out = s + b", "apply     out = src.h + b",
     "14:21", "src.h is read in a scatter statement only"),
    ("degree-outside-scatter", "gcn.gd", "apply     out = s + b", "apply     out = s + dst.degree",
     "14:25", "dst.degree is read in a scatter statement only"),
    ("src-without-field", "gcn.gd", "src.h * rsqrt", "src * rsqrt",
     "10:19", "'src' needs a field: src.x or src.degree"),
    ("edge-softmax-outside-scatter", "gat.gd", "apply     out = a + b", "apply     out = edge_softmax(a) + b",
     "18:21", "edge_softmax is written in a scatter statement"),
    ("layer-statement-without-stage", "gcn.gd", "apply     out = s + b", "out = s + b",
     "14:5", "a layer statement needs a stage"),
    ("repeat-in-layer", "gcn.gd", "    return out\n", "    repeat 2 {\n    }\n    return out\n",
     "15:5", "repeat is allowed in models only"),
    ("layer-called-from-layer", "gcn.gd", "apply     out = s + b", "apply     out = GCNConv[dout](s)",
     "14:21", "layers are called from a model, not from layer bodies"),
    # ---- shapes
    ("matmul-wrong-param-rows", "gcn.gd", "param W : f32[din, dout]", "param W : f32[dout, dout]",
     "12:19", "shape mismatch in '@': left side has F features but the param has 16 rows"),
    ("return-shape-mismatch", "gcn.gd", "-> [dout]", "-> [din]",
     "15:5", "GCNConv returns [16] but declares -> [din] = [F]"),
    ("broadcast-error", "gcn.gd", "apply     out = s + b", "apply     out = s + h",
     "14:21", "cannot broadcast shapes [16] and [F]"),
    ("dimension-not-positive", "gcn.gd", "param b : f32[dout] = zeros", "param b : f32[0] = zeros",
     "9:19", "dimension must be a positive integer, got 0"),
    ("dimension-too-large", "gcn.gd", "param b : f32[dout] = zeros", "param b : f32[99999999999999999999] = zeros",
     "9:19", "dimension is too large: 99999999999999999999 (at most 2**40)"),   # was: an overflow inside torch
    ("static-arg-dimension-too-large", "gcn.gd", "model     = GCN[hidden = 16]", "model     = GCN[hidden = 4000000000000]",
     "20:14", "GCNConv's static argument 'dout' is used as a dimension and is too large: 4000000000000"),
    ("sum-without-axis", "gcn.gd", "apply     out = s + b", "apply     out = sum(s) + b",
     "14:21", "sum(x, axis) reduces a feature axis"),
    ("leaky-relu-non-constant-slope", "gat.gd", "leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.2)",
     "leaky_relu(dot(src.zs, al), dot(dst.zs, ar))",
     "14:47", "leaky_relu slope must be a static value"),
    # ---- models and static arguments
    ("default-uses-a-later-static-arg", "gcn.gd", "model GCN[hidden = 16, p = 0.5]",
     "model GCN[hidden = p * 32, p = 0.5]",
     "18:20", "the default of static argument 'hidden' refers to 'p', declared after it"),
    ("default-uses-itself", "gcn.gd", "layer GCNConv[dout](h: [din])", "layer GCNConv[dout = dout](h: [din])",
     "7:22", "the default of static argument 'dout' refers to itself"),
    ("too-many-static-args", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C, 2](h)",
     "22:23", "GCNConv takes 1 static argument, got 2"),
    ("unknown-static-kwarg", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C, heads = 2](h)",
     "22:23", "GCNConv has no static argument 'heads' (it has: dout)"),
    ("missing-static-arg", "gcn.gd", "return GCNConv[C](h)", "return GCNConv(h)",
     "22:12", "GCNConv needs a value for static argument 'dout'"),
    ("tensor-args-by-keyword", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C](h = h)",
     "22:23", "GCNConv takes tensors positionally"),
    ("wrong-tensor-arg-count", "gcn.gd", "return GCNConv[C](h)", "return GCNConv[C](h, h)",
     "22:12", "GCNConv takes 1 tensor argument, got 2"),
    ("unknown-static-arg-in-train", "gcn.gd", "model     = GCN[hidden = 16]", "model     = GCN[hiden = 16]",
     "26:21", "GCN has no static argument 'hiden' (it has: hidden, p)"),
    ("static-arg-given-twice", "gcn.gd", "model     = GCN[hidden = 16]", "model     = GCN[16, hidden = 16]",
     "26:25", "static argument 'hidden' of GCN is given twice"),
    ("static-kwarg-given-twice", "gcn.gd", "model     = GCN[hidden = 16]", "model     = GCN[hidden = 16, hidden = 8]",
     "26:34", "static argument 'hidden' of GCN is given twice"),
    ("params-in-a-model", "gcn.gd", "    h = dropout(X, p)\n", "    param W : f32[F, 4] = glorot\n    h = dropout(X, p)\n",
     "19:5", "params are declared in layers, not models"),
    ("stage-statement-in-a-model", "gcn.gd", "    h = dropout(X, p)\n", "    apply h = dropout(X, p)\n",
     "19:5", "'apply' statements belong in a layer"),
    ("model-called", "gcn.gd", "h = dropout(h, p)", "h = GCN(h)",
     "21:9", "model 'GCN' cannot be called"),
    ("labels-read-by-model", "gcn.gd", "h = dropout(X, p)", "h = dropout(Y, p)",
     "19:17", "'Y' holds labels; only the loss reads it"),
    ("mask-used-as-tensor", "gcn.gd", "h = dropout(X, p)", "h = dropout(train, p)",
     "19:17", "mask 'train' is only used by loss and eval"),
    ("repeat-non-integer-count", "sage.gd", "repeat layers - 1", "repeat 1.5",
     "21:12", "repeat count must be an integer >= 0, got 1.5"),
    ("repeat-tensor-count", "sage.gd", "repeat layers - 1", "repeat h",
     "21:12", "repeat count must be a static value"),
    ("return-inside-repeat", "sage.gd", "h = dropout(relu(SAGEConv[hidden](h)), p)", "return h",
     "22:9", "return inside repeat"),
    # the model's only return is in the repeat: that is the error (was also "model 'SAGE' has no return statement")
    ("only-return-inside-repeat", "sage.gd", "    }\n    return SAGEConv[C](h)\n", "        return SAGEConv[C](h)\n    }\n",
     "23:9", "return inside repeat"),
    ("statement-after-return-in-layer", "gcn.gd", "    return out\n", "    return out\n    apply z = out\n",
     "16:5", "statement after return"),
    ("statement-after-return-in-model", "gcn.gd", "    return GCNConv[C](h)\n", "    return GCNConv[C](h)\n    h = X\n",
     "23:5", "statement after return"),
    ("missing-return-in-layer", "gcn.gd", "    return out\n", "",
     "7:1", "layer 'GCNConv' has no return statement"),
    ("missing-return-in-model", "gcn.gd", "    return GCNConv[C](h)\n", "",
     "18:1", "model 'GCN' has no return statement"),
    ("dropout-p-too-large", "gcn.gd", "h = dropout(h, p)", "h = dropout(h, 1.5)",
     "21:20", "dropout p must be in [0, 1), got 1.5"),
    ("dropout-p-negative", "gcn.gd", "h = dropout(h, p)", "h = dropout(h, -0.1)",
     "21:20", "dropout p must be in [0, 1), got -0.1"),
    # ---- params
    ("unknown-init", "gcn.gd", "= glorot", "= xavier",
     "8:32", "unknown init 'xavier' (expected one of glorot, zeros, ones, normal(std), uniform(a))"),
    ("init-too-many-args", "gcn.gd", "= glorot", "= normal(0.1, 2)",
     "8:32", "init 'normal' takes 1 argument"),
    ("init-missing-arg", "gcn.gd", "= glorot", "= normal",
     "8:32", "init 'normal' takes 1 argument"),
    ("init-unexpected-arg", "gcn.gd", "= zeros", "= zeros(1)",
     "9:27", "init 'zeros' takes 0 arguments"),
    ("init-keyword-of-another-init", "gcn.gd", "= glorot", "= normal(a = 0.1)",
     "8:39", "normal takes one argument: normal(0.1) or normal(std = 0.1)"),
    ("init-keyword-and-positional", "gcn.gd", "= glorot", "= uniform(0.1, a = 0.1)",
     "8:45", "uniform takes one argument: uniform(0.1) or uniform(a = 0.1)"),
    # ---- train block
    ("unknown-model", "gcn.gd", "model     = GCN[hidden = 16]", "model     = GNC[hidden = 16]",
     "26:17", "unknown model 'GNC'"),
    ("unknown-optimizer", "gcn.gd", "adam(lr", "adagrad(lr",
     "28:17", "unknown optimizer 'adagrad' (expected one of adam, adamw, sgd)"),
    ("unknown-optimizer-option", "gcn.gd", "weight_decay = 5e-4", "decay = 5e-4",
     "28:33", "unknown adam option 'decay'"),
    ("optimizer-positional-option", "gcn.gd", "adam(lr = 0.01", "adam(0.01",
     "28:22", "adam takes named options only"),
    ("learning-rate-zero", "gcn.gd", "lr = 0.01", "lr = 0",
     "28:27", "adam option 'lr' must be positive"),
    ("weight-decay-negative", "gcn.gd", "weight_decay = 5e-4", "weight_decay = -1",   # was: 'must be positive' (0 is fine)
     "28:48", "adam option 'weight_decay' must be non-negative, got -1"),
    ("unknown-loss", "gcn.gd", "cross_entropy(Y", "hinge(Y",
     "27:17", "unknown loss 'hinge' (expected one of cross_entropy, nll, mse, bce"),
    ("loss-not-called", "gcn.gd", "cross_entropy(Y, mask = train)", "cross_entropy",
     "27:17", "the loss is called with the target input: cross_entropy(Y, mask = train)"),
    ("unknown-metric", "gcn.gd", "accuracy(mask = val)", "f1(mask = val)",
     "30:17", "unknown metric 'f1' (expected one of"),
    ("loss-target-not-label", "gcn.gd", "cross_entropy(Y", "cross_entropy(X",
     "27:31", "cross_entropy needs a label input; 'X' is f32"),
    ("loss-target-not-input", "gcn.gd", "cross_entropy(Y", "cross_entropy(Z",
     "27:31", "loss target 'Z' is not a vertex input"),
    ("missing-loss", "gcn.gd", "    loss      = cross_entropy(Y, mask = train)\n", "",
     "25:1", "train block 'cora' names no loss"),
    ("unknown-mask", "gcn.gd", "accuracy(mask = test)", "accuracy(mask = tst)",
     "30:55", "unknown mask 'tst' (declared: train, val, test)"),
    ("unknown-train-setting", "gcn.gd", "epochs    = 200", "epoch     = 200",
     "29:5", "unknown train setting 'epoch'"),
    ("epochs-zero", "gcn.gd", "epochs    = 200", "epochs    = 0",
     "29:17", "epochs must be a positive integer"),
    ("epochs-not-integer", "gcn.gd", "epochs    = 200", "epochs    = 2.5",
     "29:17", "epochs must be a positive integer"),
    ("fanout-zero", "sage.gd", "fanout     = [15, 10, 5]", "fanout     = [15, 0, 5]",
     "34:23", "each fanout must be a positive integer"),
    # ---- schedule hints
    ("unknown-schedule-hint", "gat.gd", "order     = auto", "ordering  = auto",
     "39:5", "unknown schedule hint 'ordering' (expected one of target, partition, order"),
    ("unknown-partition", "gat.gd", "partition = auto", "partition = slices",
     "38:17", "unknown partition 'slices'"),
    ("bad-partition-argument", "gat.gd", "partition = auto", "partition = rows(lol)",
     "38:22", "rows takes one of: hash, random, metis, block"),
    ("bad-order", "gat.gd", "order     = auto", "order     = fast",
     "39:17", "bad order hint 'fast' (expected one of auto, sparse_first, dense_first)"),
    ("bad-delay-negative", "gat.gd", "order     = auto", "delay     = -1",
     "39:17", "delay is a non-negative integer number of epochs, or none"),
    ("bad-delay-fraction", "gat.gd", "order     = auto", "delay     = 1.5",
     "39:17", "delay is a non-negative integer number of epochs, or none"),
    ("bad-cache", "gat.gd", "order     = auto", "cache     = lru",
     "39:17", "cache is none or hec("),
    ("unknown-cache-option", "gat.gd", "order     = auto", "cache     = hec(size = 1M, ttl = 3)",
     "39:32", "unknown hec option 'ttl'"),
    ("order-hint-for-missing-call", "gat.gd", "order     = auto", "order GATConv#3 = dense_first",
     "39:5", "order hint for GATConv#3, but the model calls GATConv 2 times"),
    ("order-hint-for-unknown-layer", "gat.gd", "order     = auto", "order GCNConv#1 = dense_first",
     "39:5", "order hint names unknown layer 'GCNConv'"),
    ("bad-per-call-order", "gat.gd", "order     = auto", "order GATConv#1 = fastest",
     "39:23", "bad order hint 'fastest' (expected one of sparse_first, dense_first)"),
    ("per-call-hint-not-order", "gat.gd", "order     = auto", "delay GATConv#1 = 1",
     "39:5", "only 'order' takes a per-call hint, not 'delay'"),
    # ---- found by fuzzing (session 7): values that must be finite / in range, arguments given twice,
    # follow-on errors, schedule hints that cannot hold
    ('repeat-count-inf', 'sage.gd', 'repeat layers - 1', 'repeat 1e400',
     '21:12', 'repeat count must be an integer >= 0, got 1e400'),   # as written (was: 'got inf')
    # a whole float says what to write; an underflowing literal is shown as written (was: 'got 0.0')
    ('repeat-count-whole-float', 'sage.gd', 'repeat layers - 1', 'repeat 2.0',
     '21:12', 'repeat count must be an integer >= 0, got 2.0 (a float; write 2)'),
    ('repeat-count-underflow', 'sage.gd', 'repeat layers - 1', 'repeat 1e-400',
     '21:12', 'repeat count must be an integer >= 0, got 1e-400'),
    ('nested-repeats-over-the-cap', 'sage.gd', 'repeat layers - 1 {\n        h = dropout(relu(SAGEConv[hidden](h)), p)\n    }', 'repeat 1000 { repeat 1000 {\n        h = dropout(relu(SAGEConv[hidden](h)), p)\n    }}',
     '21:26', 'the repeats unroll more than 1000 iterations in all'),
    ('adam-beta-out-of-range', 'gcn.gd', 'adam(lr = 0.01, weight_decay = 5e-4)', 'adam(lr = 0.01, beta1 = 2)',
     '28:41', "adam option 'beta1' must be in [0, 1), got 2"),
    ('lr-not-finite', 'gcn.gd', 'adam(lr = 0.01, weight_decay = 5e-4)', 'adam(lr = 1e400)',
     '28:27', "adam option 'lr' must be a finite number"),
    ('nesterov-without-momentum', 'gcn.gd', 'adam(lr = 0.01, weight_decay = 5e-4)', 'sgd(lr = 0.1, nesterov = 1)',
     '28:31', 'sgd with nesterov = 1 needs a momentum > 0'),
    ('optimizer-option-twice', 'gcn.gd', 'adam(lr = 0.01, weight_decay = 5e-4)', 'adam(lr = 0.01, lr = 0.1)',
     '28:33', "adam option 'lr' is given twice"),
    # (session 28, helper-59: each compiled, then torch failed at run time, exit 3)
    ('leaky-relu-slope-beyond-f32', 'gat.gd', 'dot(dst.zs, ar), 0.2)', 'dot(dst.zs, ar), 1e39)',
     '14:65', "leaky_relu slope must be within f32's range (|x| <= 3.4e38), got 1e+39"),
    ('uniform-bound-beyond-half-f32', 'gcn.gd', 'param b : f32[dout] = zeros', 'param b : f32[dout] = uniform(2e38)',
     '9:35', "uniform's bound a of U(-a, a) must be at most 1.7e38 (the interval's width 2a within f32's range), "
     "got 2e+38"),
    ('number-beyond-f32', 'gcn.gd', 'apply     out = s + b', 'apply     out = s + b * 4e38',
     '14:29', "the number 4e+38 is outside f32's range (|x| <= 3.4e38); the tensors it meets are f32"),
    # a 400-digit integer literal is an int beyond float's range (helper-4: 'internal compiler error: int too
    # large to convert to float' for dropout p and lr)
    ('lr-400-digit-integer', 'gcn.gd', 'adam(lr = 0.01, weight_decay = 5e-4)', 'adam(lr = 1' + '0' * 400 + ')',
     '28:27', "adam option 'lr' must be a finite number"),
    ('dropout-p-400-digit-integer', 'gcn.gd', 'h = dropout(h, p)', 'h = dropout(h, 1' + '0' * 400 + ')',
     '21:20', "dropout p must be within f32's range (|x| <= 3.4e38), got 1.00000e+400"),
    ('number-400-digit-integer', 'gcn.gd', 'apply     out = s + b', 'apply     out = s + b * 1' + '0' * 400,
     '14:29', "the number 1.00000e+400 is outside f32's range (|x| <= 3.4e38); the tensors it meets are f32"),
    ('normal-init-negative-std', 'gcn.gd', 'param b : f32[dout] = zeros', 'param b : f32[dout] = normal(-1)',
     '9:34', "normal's std must be >= 0, got -1"),
    ('dropout-p-positional-and-named', 'gcn.gd', 'h = dropout(h, p)', 'h = dropout(h, 0.2, p = 0.3)',
     '21:25', "dropout's 'p' is given both positionally and by name"),
    ('named-argument-to-relu', 'gcn.gd', 'h = relu(GCNConv[hidden](h))', 'h = relu(x = GCNConv[hidden](h))',
     '20:14', "relu has no option 'x'; its arguments are positional"),
    ('duplicate-tensor-argument', 'gcn.gd', 'layer GCNConv[dout](h: [din])', 'layer GCNConv[dout](h: [din], h: [din])',
     '7:31', "tensor argument 'h' of GCNConv is declared twice"),
    ('duplicate-input-keeps-the-first', 'gcn.gd', 'input Y : vertex label[C]\n', 'input Y : vertex label[C]\ninput Y : vertex f32[F]\n',
     '5:1', "'Y' is already defined as an input at line 4"),
    ('model-called-with-static-args', 'gcn.gd', 'return GCNConv[C](h)', 'return GCN[C](h)',
     '22:12', "model 'GCN' cannot be called"),
    ('bce-target-shape', 'gcn.gd', 'cross_entropy(Y, mask = train)', 'bce(X, mask = train)',
     '27:17', "bce: model output [C] and target [F] differ"),
    ('concat-of-a-scalar', 'gcn.gd', 'apply     out = s + b', 'apply     out = concat(sum(s, 0), b)',
     '14:21', "concat: a value with no feature axis (shape []) has no last axis to join along; reshape it to [1] first"),
    # ---- session 13: every keyword given twice is an error (was: the last one won silently)
    ('graph-option-twice', 'gcn.gd', 'graph G (self_loops, symmetric)', 'graph G (self_loops, symmetric, self_loops)',
     '2:33', "graph option 'self_loops' is given twice"),
    ('aggregation-option-twice', 'gcn.gd', 'gather    a = sum(m)', 'gather    a = sum(m, to = dst, to = src)',
     '11:36', "sum option 'to' is given twice"),
    ('metric-mask-twice', 'gcn.gd', 'accuracy(mask = val), accuracy(mask = test)', 'accuracy(mask = val, mask = test)',
     '30:38', "accuracy option 'mask' is given twice"),
    ('loss-mask-twice', 'gcn.gd', 'cross_entropy(Y, mask = train)', 'cross_entropy(Y, mask = train, mask = val)',
     '27:48', "cross_entropy option 'mask' is given twice"),
    ('order-option-twice', 'gat.gd', '    order     = auto\n', '    order     = sparse_first(backward = dense_first, backward = sparse_first)\n',
     '39:54', "sparse_first option 'backward' is given twice"),
    ('schedule-hint-twice', 'gat.gd', '    order     = auto\n', '    order     = auto\n    order     = dense_first\n',
     '40:5', "schedule hint 'order' is given twice"),
    ('order-hint-call-zero', 'gat.gd', '    order     = auto\n', '    order GATConv#0 = dense_first\n',
     '39:5', 'order hint for GATConv#0: calls are numbered from #1 (the model calls GATConv 2 times)'),
    ('delay-with-a-row-partition', 'gat.gd', '    partition = auto\n', '    partition = rows(hash)\n    delay     = 3\n',
     '39:17', 'delay = 3 cannot hold for partition = rows(hash)'),
    ('edge-labels-reported-once', 'gcn.gd', 'input Y : vertex label[C]', 'input Y : edge label[C]',
     '4:16', 'labels are vertex inputs'),
    # a tensor divided by a static expression that is 0 (was: compiled, then a NaN loss at epoch 1)
    ('tensor-division-by-static-zero', 'gcn.gd', 'h = dropout(h, p)', 'h = dropout(h / (p - 0.5), p)',
     '21:17', "division by zero: '(p - 0.5)' is 0 here"),
    # a partition hint the ranks would refuse (was: compiled; `gdsl plan` said `run --np` executes it; the
    # ranks refused it after partitioning, naming an IR value only)
    ('partition-hint-the-ranks-cannot-run', 'gat.gd', '    partition = auto\n', '    partition = vertex_cut\n',
     '38:17', "partition = vertex_cut cannot run op"),
    ('delay-with-a-max-aggregation', 'extra/sage_max.gd',
     '    eval      = accuracy(mask = val), accuracy(mask = test)\n}\n',
     '    eval      = accuracy(mask = val), accuracy(mask = test)\n}\nschedule {\n'
     '    partition = vertex_cut(libra)\n    delay     = 2\n}\n',
     '40:17', 'delay = 2 cannot hold with partition = vertex_cut(libra): op %a (aggregate): delayed aggregation '
     '(cd-r) is implemented for sum and mean reductions, not max'),
    ('delay-with-a-backward-order-hint', 'gcn.gd', '    eval      = accuracy(mask = val), accuracy(mask = test)\n}\n',
     '    eval      = accuracy(mask = val), accuracy(mask = test)\n}\nschedule {\n    partition = vertex_cut\n'
     '    delay     = 1\n    order GCNConv#1 = sparse_first(backward = sparse_first)\n}\n',
     '34:17', 'a chosen backward order is not implemented with delayed aggregation (delay = 1); drop the '
     "backward/memoize options of the schedule's `order GCNConv#1` hint"),
    # was: "sync needs a transform result; 'tt' is not one" (every other stage says undefined name)
    ('sync-of-an-undefined-name', 'gcn.gd', 'sync      s = sum(t)', 'sync      s = sum(tt)', '13:23', "undefined name 'tt'"),
    # a misspelt stage keyword (was: "unexpected 'a', expected one of '=', call reference (Layer#k)" at 'a')
    ('misspelt-stage-keyword', 'gcn.gd', 'gather    a = sum(m)', 'gahter    a = sum(m)',
     '11:5', "unknown statement keyword 'gahter' (did you mean 'gather'? the stages are"),
    ('capitalised-stage-keyword', 'gcn.gd', 'gather    a = sum(m)', 'Gather    a = sum(m)',
     '11:5', "unknown statement keyword 'Gather' (did you mean 'gather'?"),
    ('misspelt-return', 'gcn.gd', '    return GCNConv[C](h)', '    retrun GCNConv[C](h)',
     '22:5', "unknown statement keyword 'retrun' (did you mean 'return'?)"),
    # (was: the generic "gather is r(m) ..." message, not the one the docs quote)
    ('edge-softmax-in-a-gather', 'gat.gd', 'scatter   alpha = edge_softmax(s)', 'gather    alpha = edge_softmax(s)',
     '15:23', 'edge_softmax is written in a scatter statement'),
    # src / dst read an edge's endpoints (was: `apply src = ...` compiled; `src.h` after it read the endpoint)
    ('a-local-named-src', 'gcn.gd', 'apply     out = s + b', 'apply     src = s\n    apply     out = s + b',
     '14:5', "'src' cannot name a value: src.x and src.degree read an edge's source vertex"),
    ('a-model-static-named-dst', 'gcn.gd', 'model GCN[hidden = 16, p = 0.5]', 'model GCN[hidden = 16, p = 0.5, dst = 1]',
     '18:33', "'dst' cannot name a value: dst.x and dst.degree read an edge's destination vertex"),
    ('a-mask-named-src', 'gcn.gd', 'mask train, val, test', 'mask train, val, test, src',
     '5:24', "'src' cannot name a value"),
    ('delay-400-digit-integer', 'gat.gd', '    order     = auto\n', '    order     = auto\n    delay     = 1' + '0' * 400 + '\n',
     '40:17', "delay is at most 2147483647 epochs"),
    ('hec-size-400-digit-integer', 'gat.gd', '    order     = auto\n', '    order     = auto\n    cache     = hec(size = 1' + '0' * 400 + ')\n',
     '40:28', "hec option 'size' must be a non-negative finite number"),
    ('push-pull-depth-zero', 'gat.gd', '    order     = auto\n', '    order     = auto\n    pipeline  = push_pull(depth = 0)\n',
     '40:35', "push_pull option 'depth' must be a positive integer"),
]


@pytest.mark.parametrize("base", ["gcn.gd", "gat.gd", "sage.gd"])
def test_base_programs_compile(base, capsys):
    assert main(["compile", str(PROGRAMS / base)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("base, old, new, where, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(tmp_path, capsys, monkeypatch, base, old, new, where, message):
    monkeypatch.delenv("GDSL_DEBUG", raising=False)
    err, errors = compile_errors(tmp_path, capsys, edit(base, old, new))
    assert len(errors) == 1, f"one mistake must report once:\n{err}"
    e = errors[0]
    assert f"{e['line']}:{e['col']}" == where, err
    assert message in e["msg"], err
    # the source line and a caret follow the header
    line = int(e["line"])
    assert re.search(rf"^ *{line} \| .*\n *\| *\^", err, re.M), err


def test_an_underflowing_repeat_count_is_not_told_to_write_0(tmp_path, capsys):
    err, errors = compile_errors(tmp_path, capsys, edit("sage.gd", "repeat layers - 1", "repeat 1e-400"))
    assert errors[0]["msg"].endswith("got 1e-400"), err


def test_case_ids_are_unique_and_many():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 30


def test_a_statement_after_a_block_on_its_line_is_told_to_take_a_semicolon(tmp_path, capsys):
    """`}` ends no statement: the message offers ';' with the newline (it
    said "expected one of '}', newline"; helper-71), and with it the line
    compiles."""
    line = "    h = relu(GCNConv[hidden](h))\n    h = dropout(h, p)\n"
    src = edit("gcn.gd", line, "    repeat 1 { h = relu(GCNConv[hidden](h)) } h = dropout(h, p)\n")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert len(errors) == 1 and errors[0]["msg"] == "unexpected 'h', expected one of '}', newline or ';'", err
    ok = tmp_path / "ok.gd"
    ok.write_text(src.replace(") } h", ") }; h"))
    assert main(["compile", str(ok), "--emit", "ir"]) == 0


# ---- syntax errors that point at an opening bracket -------------------------
def test_unterminated_paren_points_at_the_open_paren(tmp_path, capsys):
    src = edit("gcn.gd", "h = relu(GCNConv[hidden](h))", "h = relu(GCNConv[hidden](h)")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert len(errors) == 1
    # the newline after an open '(' is not a statement end: the parser fails on the next line
    assert (errors[0]["line"], errors[0]["col"]) == ("21", "5") and "unexpected 'h'" in errors[0]["msg"]
    assert "prog.gd:20:13: note: '(' opened here is never closed" in err


def test_unterminated_paren_at_end_of_file(tmp_path, capsys):
    src = (PROGRAMS / "gcn.gd").read_text().rstrip() + "\nschedule {\n    cache = hec(size = 1M\n"
    err, errors = compile_errors(tmp_path, capsys, src)
    assert "unexpected end of input" in errors[0]["msg"]
    assert "prog.gd:33:16: note: '(' opened here is never closed" in err


def test_unclosed_brace(tmp_path, capsys):
    src = (PROGRAMS / "gcn.gd").read_text().rstrip().removesuffix("}")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert (errors[0]["line"], errors[0]["col"]) == ("30", "60")
    # the train block's statements only (was: 'apply', 'gather', 'param', 'repeat', 'return', ...: every
    # block's body is one grammar rule; helper-58)
    assert errors[0]["msg"] == "unexpected end of input, expected one of '}', name", err
    assert "prog.gd:25:12: note: '{' opened here is never closed" in err
    model = (PROGRAMS / "gcn.gd").read_text().split("train cora")[0].rstrip().removesuffix("}")
    err, errors = compile_errors(tmp_path, capsys, model)
    assert errors[0]["msg"] == "unexpected end of input, expected one of 'repeat', 'return', '}', name", err


def test_a_call_reference_outside_an_order_hint_is_a_comment_that_takes_the_brace(tmp_path, capsys):
    """`L#1` outside an order hint: '#' starts a comment, the '}' after it
    goes with it, and the parser fails on the next line. The note says which
    brace and why (was: the error at the next line alone, no note)."""
    src = edit("gcn.gd", "    return GCNConv[C](h)\n}", "    return GCNConv#2[C](h) }")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert errors[0]["msg"] == "unexpected 'cora', expected '='", err
    assert ("prog.gd:18:33: note: '{' opened here is never closed (a '#' starts a comment to the end of its line, "
            "the closing bracket after it included; `Layer#k` names a call only in a schedule's order hint)") in err
    # an order hint's `L#k` on one line with its braces is no comment: no such note for an error after it
    ok = (PROGRAMS / "gcn.gd").read_text() + "schedule { order GCNConv#1 = dense_first; cache = @ }\n"
    err, errors = compile_errors(tmp_path, capsys, ok)
    assert len(errors) == 1 and "never closed" not in err, err


def test_the_expected_tokens_are_those_the_parser_takes(tmp_path, capsys):
    # inside [ ] a newline is skipped and ')' closes nothing: neither is offered
    # (was: LALR's lookahead set, "expected one of '(', ')', '+', ',', '-', ..." and "..., newline, ...")
    src = edit("gcn.gd", "param W : f32[din, dout] = glorot", "param W : f32[din dout] = glorot")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert errors[0]["msg"] == "unexpected 'dout', expected one of '(', '+', ',', '-', '.', ...", err
    src = edit("gcn.gd", "param W : f32[din, dout] = glorot", "param W : f32[din, dout,,] = glorot")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert errors[0]["msg"] == "unexpected ',', expected one of '(', '-', '[', ']', name, ...", err


def test_a_bracketed_list_may_end_in_a_comma(tmp_path, capsys):
    # as in Python: f(a, b,), [16, 8,], L[d,](h,), graph options, layer args
    src = (PROGRAMS / "gcn.gd").read_text()
    for old, new in [("(self_loops, symmetric)", "(self_loops, symmetric,)"), ("f32[din, dout]", "f32[din, dout,]"),
                     ("(h: [din])", "(h: [din],)"), ("[hidden = 16, p = 0.5]", "[hidden = 16, p = 0.5,]"),
                     ("dropout(X, p)", "dropout(\n        X,\n        p,\n    )"),
                     ("adam(lr = 0.01, weight_decay = 5e-4)", "adam(lr = 0.01, weight_decay = 5e-4,)")]:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    (tmp_path / "t.gd").write_text(src)
    assert gdsl.compile(str(tmp_path / "t.gd")).ir == gdsl.compile(str(PROGRAMS / "gcn.gd")).ir
    # outside brackets a statement's list does not (mask a, b, and eval = x, y,)
    err, errors = compile_errors(tmp_path, capsys, edit("gcn.gd", "mask train, val, test", "mask train, val, test,"))
    assert errors[0]["msg"].startswith("unexpected end of line, expected name"), err


def test_an_init_argument_may_be_named_as_in_torch_nn_init():
    """normal(std = 0.1) and uniform(a = 0.1) (torch.nn.init's names) lower as
    normal(0.1) and uniform(0.1) (was: refused, 'normal takes a positional argument')."""
    src = (PROGRAMS / "gcn.gd").read_text()
    for named, plain in (("normal(std = 0.05)", "normal(0.05)"), ("uniform(a = 0.1)", "uniform(0.1)")):
        got = gdsl.compile(src.replace("= glorot", "= " + named, 1))
        want = gdsl.compile(src.replace("= glorot", "= " + plain, 1))
        assert f"init={plain}" in str(got.ir) and str(got.ir) == str(want.ir)


def test_a_mismatch_of_a_layers_own_symbols_does_not_wait_for_data(tmp_path, capsys):
    """An uncalled layer is checked with its own symbols (din, k): a mismatch
    between them is not marked (needs data), which --data could not resolve
    (was: '(needs data)' and a note promising a check against the data)."""
    src = edit("gcn.gd", "model GCN", "layer Bad[dout, k](h: [din]) -> [dout] {\n    param W : f32[k, dout] = glorot\n"
               "    transform t = h @ W\n    return t\n}\n\nmodel GCN")
    for extra in ((), ("--data", "cora")):
        err, errors = compile_errors(tmp_path, capsys, src, *extra)
        assert len(errors) == 1 and "left side has din features but the param has k rows" in errors[0]["msg"], err
        assert "needs data" not in err, err


def test_a_schedule_token_is_not_expected_outside_a_schedule(tmp_path, capsys):
    """A missing '}' before `model`: the parser would take `order GATConv#1 = ...`-style
    call references only in a schedule (was: "expected one of '=', call reference (Layer#k)")."""
    err, (e,) = compile_errors(tmp_path, capsys, edit("gcn.gd", "    return out\n}\n", "    return out\n\n"))
    assert e["msg"] == "unexpected 'GCN', expected '='" and "'{' opened here is never closed" in err, err
    src = edit("gat.gd", "    order     = auto\n", "    order GATConv#1 dense_first\n")
    err, (e,) = compile_errors(tmp_path, capsys, src)
    assert e["msg"] == "unexpected 'dense_first', expected '='", err


def test_closed_paren_gets_no_note(tmp_path, capsys):
    # a missing comma inside a multi-line call: the '(' is closed, so no note about it
    src = edit("gcn.gd", "h = dropout(X, p)", "h = dropout(X\n        p)")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert (errors[0]["line"], errors[0]["col"]) == ("20", "9")
    assert "note:" not in err


# ---- files that are not programs --------------------------------------------
def test_empty_file(tmp_path, capsys):
    err, errors = compile_errors(tmp_path, capsys, "")
    assert (errors[0]["line"], errors[0]["col"]) == ("1", "1")
    assert "the program is empty" in errors[0]["msg"]


def test_comments_only(tmp_path, capsys):
    err, errors = compile_errors(tmp_path, capsys, "# nothing here\n\n")
    assert "the program is empty" in errors[0]["msg"]


def test_program_without_model(tmp_path, capsys):
    src = (PROGRAMS / "gcn.gd").read_text().split("layer GCNConv")[0]
    err, errors = compile_errors(tmp_path, capsys, src)
    assert "the program declares no model" in errors[0]["msg"]


def test_binary_file(tmp_path, capsys):
    err, errors = compile_errors(tmp_path, capsys, b"graph G\nin\x00\x01\x02put\n")
    assert len(errors) == 1 and (errors[0]["line"], errors[0]["col"]) == ("2", "3")
    assert "not a text file (NUL byte)" in errors[0]["msg"]
    assert "\x00" not in err  # binary data is not echoed to the terminal


def test_non_utf8_file(tmp_path, capsys):
    data = (PROGRAMS / "gcn.gd").read_bytes().replace(b"(Kipf", b"(K\xefpf")
    err, errors = compile_errors(tmp_path, capsys, data)
    # the bad byte's column (was 1; helper-74): "# Two-layer GCN (K" is 18 characters before it
    assert (errors[0]["line"], errors[0]["col"]) == ("1", "19") and "not UTF-8" in errors[0]["msg"]
    # in characters: a valid two-byte "é" before the bad byte counts once
    err, errors = compile_errors(tmp_path, capsys, b"graph G\n# caf\xc3\xa9 \xe9\n")
    assert (errors[0]["line"], errors[0]["col"]) == ("2", "8")


@pytest.mark.parametrize("opener, closer", [("(", ")"), ("[", "]")])
def test_deeply_nested_brackets(tmp_path, capsys, opener, closer):
    src = edit("gcn.gd", "h = dropout(h, p)", f"h = dropout({opener * 5000}h{closer * 5000}, p)")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert len(errors) == 1 and errors[0]["line"] == "21"
    assert "nesting deeper than" in errors[0]["msg"]
    assert "RecursionError" not in err


@pytest.mark.parametrize("expr, col", [
    ("-" * 5000 + "h", 109),               # the 101st '-'
    ("h" + " + h" * 5000, 9),              # a left-nested sum: every level starts at the first h
    ("relu(-" * 80 + "h" + ")" * 80, 309),  # call and '-' alternate: the 51st relu is level 101
], ids=["unary-minus", "long-sum", "calls-and-minus"])
def test_deeply_nested_expressions(tmp_path, capsys, expr, col):
    src = edit("gcn.gd", "h = dropout(h, p)", f"h = {expr}")
    err, errors = compile_errors(tmp_path, capsys, src)
    assert len(errors) == 1 and (errors[0]["line"], errors[0]["col"]) == ("21", str(col)), err[:300]
    assert "expression nested deeper than 100 levels" in errors[0]["msg"]
    assert ("a chain of binary operators nests one level per operator" in errors[0]["msg"]) == (expr[:2] == "h ")
    assert "RecursionError" not in err


def test_an_error_in_a_layer_body_names_the_call(tmp_path, capsys):
    """A body that fails for one call of several: a note points at that call
    and its static arguments (was: only the body's line)."""
    src = edit("gcn.gd", "    apply     out = s + b\n", "    apply     out = s / (dout - 7) + b\n")
    err, errors = compile_errors(tmp_path, capsys, src, "--data", "cora")   # C = 7: the second call fails
    assert [(m["line"], m["col"]) for m in errors] == [("14", "21")], err
    assert "division by zero: '(dout - 7)' is 0 here" in errors[0]["msg"]
    assert f"{tmp_path / 'prog.gd'}:22:12: note: in this call of GCNConv (dout = 7)" in err, err


def test_nesting_at_the_limit_compiles(tmp_path, capsys):
    """The deepest model expression calling a layer whose expression is as deep:
    lowering recurses through both and must stay clear of Python's recursion limit."""
    from gdsl.frontend.parser import MAX_NESTING
    k = MAX_NESTING - 2  # relu(...) levels + the call + its [static args]
    src = edit("gcn.gd", "h = relu(GCNConv[hidden](h))", f"h = {'relu(' * k}GCNConv[hidden](h){')' * k}")
    k = MAX_NESTING - 1  # relu(...) levels + the '+'
    src = src.replace("apply     out = s + b", f"apply     out = {'relu(' * k}s{')' * k} + b")
    path = tmp_path / "deep.gd"
    path.write_text(src)
    assert main(["compile", str(path)]) == 0, capsys.readouterr().err[:500]
    src = src.replace("apply     out = relu(", "apply     out = -relu(")  # one level more
    path.write_text(src)
    assert main(["compile", str(path)]) == 1
    col = len("    apply     out = -") + 1 + len("relu(") * (k - 1)  # the innermost relu is level 101
    assert f"deep.gd:14:{col}: error: expression nested deeper than {MAX_NESTING} levels" in capsys.readouterr().err


def test_file_that_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "nope.gd"
    assert main(["compile", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"{missing}: no such file" in err and "Traceback" not in err


def test_unknown_override_from_command_line(tmp_path, capsys):
    err, errors = compile_errors(tmp_path, capsys, (PROGRAMS / "gcn.gd").read_text(), "--set", "hiden=3")
    assert (errors[0]["line"], errors[0]["col"]) == ("18", "1")
    assert "GCN has no static argument 'hiden' to override (it has: hidden, p)" in errors[0]["msg"]


# ---- several errors ----------------------------------------------------------
def test_checker_errors_are_all_reported_sorted(tmp_path, capsys):
    src = (PROGRAMS / "gcn.gd").read_text()
    for old, new in [("accuracy(mask = test)", "accuracy(mask = tst)"), ("adam(lr", "adagrad(lr"),
                     ("(self_loops, symmetric)", "(self_loops, undirected)")]:
        src = src.replace(old, new)
    err, errors = compile_errors(tmp_path, capsys, src)
    assert [(m["line"], m["col"]) for m in errors] == [("2", "22"), ("28", "17"), ("30", "55")]
    assert "3 errors generated." in err


def test_lowering_errors_are_all_reported_sorted(tmp_path, capsys):
    # found in the order 19 (model), then 12 and 14: the layer is still checked although its
    # call's argument failed, and 'bias' is still reported although the left side of '+' failed
    src = (PROGRAMS / "gcn.gd").read_text()
    for old, new in [("h = dropout(X, p)", "h = dropout(X, 2)"), ("transform t = a @ W", "transform t = m @ W"),
                     ("apply     out = s + b", "apply     out = s + bias")]:
        src = src.replace(old, new)
    err, errors = compile_errors(tmp_path, capsys, src)
    assert [(m["line"], m["col"]) for m in errors] == [("12", "19"), ("14", "25"), ("19", "20")]
    assert "edge tensor 'm'" in errors[0]["msg"] and "'bias'" in errors[1]["msg"] and "dropout p" in errors[2]["msg"]
    assert "3 errors generated." in err


# ---- the real process ----------------------------------------------------------
def _gdsl(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GDSL_DEBUG"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "gdsl", "compile", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_process_syntax_error_and_deep_nesting(tmp_path):
    bad = tmp_path / "bad.gd"
    bad.write_text(edit("gcn.gd", "apply     out = s + b", "apply     out = s $ b"))
    r = _gdsl(str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{bad}:14:23: error: unexpected character '$'" in r.stderr
    deep = tmp_path / "deep.gd"
    deep.write_text(edit("gcn.gd", "h = dropout(h, p)", f"h = {'(' * 5000}h{')' * 5000}"))
    r = _gdsl(str(deep))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "nesting deeper than" in r.stderr


def test_process_missing_file(tmp_path):
    r = _gdsl(str(tmp_path / "nope.gd"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "nope.gd: no such file" in r.stderr


@pytest.mark.parametrize("old,new,message", [
    ("transform t = a @ W", "transform t = a @ a", "the right side of '@' must be a param"),
    ("transform t = a @ W", "transform t = sum(a, 3) @ W", "sum: axis 3 out of range for 1 feature axis"),
    # (was: "sum axis must be an integer >= -8", an internal bound, for both)
    ("transform t = a @ W", "transform t = sum(a, -9) @ W", "sum: axis -9 out of range for 1 feature axis"),
    ("transform t = a @ W", "transform t = sum(a, 0.5) @ W", "sum axis must be an integer, got 0.5"),
])
def test_errors_no_data_can_fix_are_not_set_aside(tmp_path, capsys, old, new, message):
    """Was: tagged "(needs data)" because an operand had a symbolic dim, and
    gdsl.compile() then accepted the program until it was bound to a graph."""
    err, errors = compile_errors(tmp_path, capsys, edit("gcn.gd", old, new))
    assert len(errors) == 1 and message in errors[0]["msg"] and "needs data" not in err, err
    import gdsl
    with pytest.raises(gdsl.CompileError, match=re.escape(message)):
        gdsl.compile(edit("gcn.gd", old, new))


def test_a_refused_partition_hint_points_at_the_op(tmp_path, capsys):
    """The ranks' refusal, at compile time, with a note where the program wrote the op."""
    err, _ = compile_errors(tmp_path, capsys, edit("gat.gd", "    partition = auto\n", "    partition = vertex_cut\n"))
    # (fused with its edge softmax: GAT's attention aggregation, written as the gather of alpha * src.zs)
    assert re.search(r"prog.gd:17:19: note: this is the op\n.*gather    a = sum\(m\)", err), err


def test_a_declaration_may_have_empty_brackets(tmp_path, capsys):
    """`layer Prop[](h: [d])` and `model M[]` match the documented call form `L[](X)`
    (was: "unexpected ']', expected name")."""
    src = edit("gcn.gd", "model GCN[hidden = 16, p = 0.5] {", "model GCN[] {").replace("hidden", "16").replace(
        "dropout(X, p)", "dropout(X, 0.5)").replace("dropout(h, p)", "dropout(h, 0.5)").replace(
        "GCN[16 = 16]", "GCN[]")
    src = src.replace("layer GCNConv[dout](h: [din]) -> [dout] {", "layer Norm[](h: [d]) -> [d] {\n"
                      "    apply out = h\n    return out\n}\n\nlayer GCNConv[dout](h: [din]) -> [dout] {")
    src = src.replace("return GCNConv[C](h)", "return GCNConv[C](Norm[](Norm(h)))")
    (tmp_path / "prog.gd").write_text(src)
    assert main(["compile", str(tmp_path / "prog.gd"), "--emit", "ir"]) == 0
    assert len(re.findall(r"= call\[callee=Norm_0, layer=Norm, static=\{\}\]", capsys.readouterr().out)) == 2


def test_with_data_the_programs_own_error_comes_first(tmp_path, capsys):
    """Was: `gdsl compile --data cora` said only "no edge data 'w'" for a program whose
    model misuses its edge input 'w' (the program's error showed once the data was fixed)."""
    src = edit("gcn.gd", "mask train, val, test", "input w : edge f32\nmask train, val, test")
    src = src.replace("h = dropout(X, p)", "h = dropout(X * w, p)")
    err, (e,) = compile_errors(tmp_path, capsys, src, "--data", "cora")
    assert (e["line"], e["col"], e["msg"]) == ("20", "21", "model cannot read edge tensor 'w'; gather it first"), err
    assert "no edge data" not in err


def test_plan_refuses_a_partition_hint_the_ranks_cannot_run(tmp_path, capsys):
    """Was: `gdsl plan` said "`gdsl run --np 2` executes vertex_cut" for GAT, which the ranks refuse."""
    prog = tmp_path / "prog.gd"
    prog.write_text(edit("gat.gd", "    partition = auto\n", "    partition = vertex_cut\n"))
    assert main(["plan", str(prog), "--np", "2", "--dims", "N=100,E=500,F=8,C=3"]) == 1
    out = capsys.readouterr()
    assert "38:17: error: partition = vertex_cut cannot run op" in out.err and "executes" not in out.out
