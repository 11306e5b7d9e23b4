"""gdsl/runtime/binding.py: dims from the data at their boundaries (a class
count equal to the labels', a second vertex input, two inputs disagreeing
on a dim, `dims=` values) and the train block's masks. Cases a mutation
audit found untested."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.diagnostics import GdslError
from gdsl.runtime.binding import bind_dims, check_masks

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()

TWO_INPUTS = """graph G
input X : vertex f32[F]
input P : vertex f32[K]
input Y : vertex label[C]
mask train

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}

model M {
    return Lin[C](X) + Lin[C](P)
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    epochs = 1
}
"""


def _graph(n=4, f=3, labels=(0, 1, 2, 1), **kw):
    return gdsl.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], n, features=torch.randn(n, f), labels=list(labels),
                                 train_mask=[True] * n, **kw)


def _checked(src):
    from gdsl.compiler import front
    return front(src, "p.gd")[1]


def test_a_class_count_equal_to_the_labels_binds():
    """`dims={"C": 3}` for labels 0..2, and `label[3]` for the same labels:
    every class present is allowed (only more is refused)."""
    g = _graph()
    prog = gdsl.compile(GCN, hidden=4)
    assert prog.module(g, backend="reference", dims={"C": 3})().shape == (4, 3)
    with pytest.raises(GdslError, match="dims gives C=2, but the labels of input 'Y' go up to 2"):
        prog.module(g, backend="reference", dims={"C": 2})
    fixed = GCN.replace("label[C]", "label[3]").replace("GCNConv[C](h)", "GCNConv[3](h)")
    assert gdsl.compile(fixed, hidden=4).module(g, backend="reference")().shape == (4, 3)


def test_a_second_vertex_input_binds_from_its_own_data():
    """The first vertex f32 input reads graph.features, the others
    graph.ndata[name] (docs/cli.md: `graph.ndata["P"] = tensor`)."""
    g = _graph()
    g.ndata["P"] = torch.randn(4, 5)
    dims = bind_dims(_checked(TWO_INPUTS), g)
    assert dims["F"] == 3 and dims["K"] == 5 and dims["C"] == 3 and dims["N"] == 4
    del g.ndata["P"]
    with pytest.raises(GdslError, match=r"no vertex data 'P' for the program's input 'P' \(have: none\); .*"
                                        r"graph.ndata\['P'\]: the array 'node_P' of an .npz file"):
        bind_dims(_checked(TWO_INPUTS), g)


def test_two_inputs_that_disagree_on_a_dim_are_refused():
    src = TWO_INPUTS.replace("input P : vertex f32[K]", "input P : vertex f32[F]")
    g = _graph()
    g.ndata["P"] = torch.randn(4, 5)
    with pytest.raises(GdslError, match="dimension F is 3 from one input and 5 from 'P'"):
        bind_dims(_checked(src), g)
    g.ndata["P"] = torch.randn(4, 3)
    assert bind_dims(_checked(src), g)["F"] == 3


def test_a_bool_is_not_a_dim():
    with pytest.raises(GdslError, match=r"dims gives C=True: a dim is an integer >= 1"):
        gdsl.compile(GCN).module(_graph(), backend="reference", dims={"C": True})


def test_a_mask_missing_for_the_loss_and_an_eval_is_named_once():
    src = GCN   # loss on train; eval on val and test
    g = gdsl.Graph.from_edges([0, 1], [1, 0], 2, features=torch.randn(2, 3), labels=[0, 1],
                              masks={"val": [True, True]})
    with pytest.raises(GdslError, match=r"uses masks 'train', 'test', but the graph has masks: val$"):
        check_masks(_checked(src), g)
    twice = src.replace("accuracy(mask = val), accuracy(mask = test)", "accuracy(mask = train), accuracy(mask = val)")
    assert twice != src
    with pytest.raises(GdslError, match=r"uses mask 'train', but the graph has masks: val$"):
        check_masks(_checked(twice), g)
