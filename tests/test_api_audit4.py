"""The Python API at the edges helper-60's fuzz found (session 28): each was
a torch / numpy error from deep inside, a silently stale or wrong value, or
the user's own array changed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import gdsl
from gdsl.backends.reference.executor import check_features
from gdsl.diagnostics import GdslError

ROOT = Path(__file__).resolve().parent.parent
GCN = gdsl.compile(ROOT / "programs" / "gcn.gd")
BCE = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
layer L[d](h: [k]) -> [d] {
    param W : f32[k, d] = glorot
    scatter   m = src.h
    gather    a = sum(m)
    transform t = a @ W
    return t
}
model M { return L[1](X) }
train t { model = M; loss = bce(Y) }
"""


def small(**kw):
    return gdsl.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], features=torch.randn(4, 3),
                                 labels=kw.pop("labels", [0, 1, 2, 0]), train_mask=[True] * 4, **kw)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_dropout_seed_takes_integer_likes_and_refuses_the_rest_where_it_is_set(backend):
    """Was: np.int64(3) overflowed at the next training forward ("Python int
    too large to convert to C long"); 1.5 or a tensor failed there too."""
    m = GCN.module(small(), backend).train()
    m.dropout_seed = np.int64(3)
    a = m()
    m.dropout_seed = 3
    torch.manual_seed(0)
    assert m.dropout_seed == 3 and type(m.dropout_seed) is int
    m.dropout_seed = torch.tensor(3)
    assert m.dropout_seed == 3 and a.shape == (4, 3)
    for bad in (1.5, "a", None, True, -1, 2 ** 63):
        with pytest.raises(GdslError, match=r"dropout_seed must be an integer in \[0, 2\*\*63\)"):
            m.dropout_seed = bad
    assert m.dropout_seed == 3


def test_bce_labels_edited_in_place_are_checked_again():
    """cross_entropy's re-check of in-place edits (docs/cli.md) did not cover
    bce: a label 2 or -1 gave a loss silently."""
    g = small(labels=[0, 1, 0, 1])
    m = gdsl.compile(BCE).module(g, "reference")
    float(m.loss(m()))
    for bad in (2, -1):
        g.labels[0] = bad
        with pytest.raises(GdslError, match=rf"label {bad} of vertex 0 is not a class id 0..1"):
            m.loss(m())


def test_from_edges_keeps_its_own_copies():
    """docs/cli.md: the graph keeps detached CPU copies. Was: a float32 numpy
    array or tensor was aliased, so `graph.features.mul_(2)` (the documented
    in-place update) changed the caller's array."""
    x = np.ones((4, 3), np.float32)
    t = torch.ones(4, 3)
    lab = torch.tensor([0, 1, 0, 1])
    for feats in (x, t):
        g = gdsl.Graph.from_edges([0, 1], [1, 0], 4, features=feats, labels=lab)
        g.features.mul_(2)
        g.labels[0] = 1
    assert x[0, 0] == 1.0 and t[0, 0] == 1.0 and lab[0] == 0


def test_longdouble_features_a_numpy_edge_index_and_a_dict_for_dgl():
    g = gdsl.Graph.from_edges([0], [1], 2, features=np.ones((2, 3), np.longdouble))   # was torch's TypeError
    assert g.features.dtype == torch.float32

    class Data:   # a PyG-like object whose edge_index is a numpy array (was: "must be a [2, E] tensor, got shape [2, 2]")
        edge_index = np.array([[0, 1], [1, 0]])
        num_nodes = 2
    assert gdsl.Graph.from_pyg(Data()).num_edges == 2
    with pytest.raises(GdslError, match=r"dgl graph: expected a dgl.DGLGraph, got dict"):   # was AttributeError
        gdsl.Graph.from_dgl({"feat": torch.ones(2, 3)})


def test_an_id_whose_successor_overflows_int64_and_an_empty_path():
    with pytest.raises(GdslError, match=r"num_nodes 9223372036854775808 \(the largest vertex id \+ 1, when not "
                                        r"given\) does not fit in int64"):   # was: "num_nodes ... got -9223..."
        gdsl.Graph.from_edges([2 ** 63 - 1], [0])
    with pytest.raises(GdslError, match=r"load_graph: empty path"):   # was ".: is a directory"
        gdsl.load_graph("")


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_loss_of_a_sparse_or_meta_output_is_a_gdsl_error(backend):
    m = GCN.module(small(), backend)
    out = m().detach()
    with pytest.raises(GdslError, match=r"dense tensor with data, got a torch.sparse_coo tensor"):
        m.loss(out.to_sparse())
    with pytest.raises(GdslError, match=r"dense tensor with data, got a tensor on the meta device"):
        m.loss(out.to("meta"))


def test_an_input_on_the_meta_device_is_refused_by_a_module_that_takes_any_device():
    """Triton's module takes x on any device (it moves it): a meta tensor got
    "Cannot copy out of meta tensor; no data!" there."""
    with pytest.raises(GdslError, match=r"the model's input is on the meta device \(no data\)"):
        check_features(torch.ones(4, 3, device="meta"), 4, (3,), device=None)


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("program", ["gcn.gd", "gat.gd"])
def test_a_graph_without_vertices_runs(backend, program):
    """The reference backend's SpMM reshaped [0, -1] (torch: "cannot reshape
    tensor of 0 elements"); Numba gave [0, C]. GAT's fused kernel on numba
    (and triton) reshaped its scores so too (helper-1)."""
    if backend == "numba":
        pytest.importorskip("numba")
    g0 = gdsl.Graph.from_edges([], [], 0, features=torch.zeros(0, 3), labels=torch.zeros(0, dtype=torch.long))
    m = gdsl.compile(ROOT / "programs" / program).module(g0, backend, dims={"C": 2})
    out = m()
    assert out.shape == (0, 2)
    out.sum().backward()


def test_params_too_large_for_the_machine_are_a_gdsl_error():
    """hidden = 10**12 reached torch's allocator error at module() (the CLI
    said "out of memory"; the API did not)."""
    prog = gdsl.compile(ROOT / "programs" / "gcn.gd", hidden=10 ** 12)
    with pytest.raises(GdslError, match=r"^out of memory: torch could not allocate"):
        prog.module(small(), "reference")
