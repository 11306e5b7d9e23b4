"""Audit of gdsl/graph/io.py and gdsl/graph/graph.py (mutation testing,
session 26): checks of the .npz loader and the Graph API that no test
pinned down. All in-process, on test_data.py's 5-vertex `tiny()` file."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from gdsl import GdslError
from gdsl.graph.graph import MAX_CLASSES, Graph
from gdsl.graph.io import load_graph
from test_data import refused, tiny, write


# -- the .npz loader ----------------------------------------------------------

def test_boolean_ids_and_labels_are_refused(tmp_path):
    """src / dst / labels must hold integers: a bool array (a mask saved under
    the wrong name) would load as ids 0 and 1."""
    for key in ("src", "dst", "labels"):
        d = tiny()
        d[key] = d[key] > 0
        refused(write(tmp_path / f"bool_{key}.npz", d), f"array '{key}' must hold integers, got dtype bool")


def test_bool_and_unsigned_features_load_as_float32(tmp_path):
    """Bag-of-words features are often stored as bool or uint8 (the format
    takes any numeric kind, 'fiub')."""
    for dtype in (np.bool_, np.uint8, np.uint16):
        d = tiny()
        d["features"] = ((d["features"] * 15).astype(np.int64) % 2).astype(dtype)
        g = load_graph(write(tmp_path / f"f_{np.dtype(dtype).name}.npz", d))
        assert g.features.dtype == torch.float32
        assert g.features.tolist() == ((tiny()["features"] * 15).astype(np.int64) % 2).astype(np.float32).tolist()


@pytest.mark.skipif(np.finfo(np.longdouble).bits == 64, reason="longdouble is float64 here")
def test_longdouble_and_half_features_load_as_float32(tmp_path):
    """numpy types torch cannot take (longdouble) are converted by the loader
    before Graph.from_edges (was a TypeError from torch.from_numpy if not)."""
    for dtype in (np.longdouble, np.float16):
        d = tiny()
        d["features"] = d["features"].astype(dtype)
        g = load_graph(write(tmp_path / f"f_{np.dtype(dtype).name}.npz", d))
        assert g.features.dtype == torch.float32 and g.features.shape == (5, 3)
        np.testing.assert_allclose(g.features.numpy(), tiny()["features"], rtol=1e-3)


def test_split_1_of_a_single_split_file_is_refused(tmp_path):
    """Only split 0 exists in a file without *_masks: split 1 must not
    silently train split 0 (test_data checks splits 2 and 9)."""
    p = write(tmp_path / "single.npz", tiny())
    refused_split = pytest.raises(GdslError, match=r"split 1 is not available: the file has a single split")
    with refused_split as ei:
        load_graph(p, split=1)
    assert str(p) in str(ei.value)
    assert load_graph(p, split=0).num_nodes == 5


@pytest.mark.parametrize("key", ["edges", "edgelist", "edge"])
def test_arrays_that_only_look_like_edge_data_are_named(tmp_path, key):
    """Edge data is `edge_<name>`; an 'edges' array (another format's edge
    list) is not read, so it is named in the warning, not dropped silently."""
    d = tiny()
    d[key] = np.zeros((2, 10), np.int64)
    with pytest.warns(UserWarning, match=rf"ignoring array '{key}' \(not part of the .npz graph format"):
        g = load_graph(write(tmp_path / "e.npz", d))
    assert g.edata == {}


# -- Graph.validate / from_edges -------------------------------------------

def test_nan_features_name_the_first_bad_vertex():
    x = np.ones((5, 2), np.float32)
    x[1, 0] = np.nan
    x[3, 1] = np.inf
    with pytest.raises(GdslError, match=r"mygraph: features contain NaN or inf \(first at vertex 1\)"):
        Graph.from_edges([0], [1], features=x, where="mygraph")


def test_labels_up_to_max_classes():
    """C = max label + 1 may be at most MAX_CLASSES: label MAX_CLASSES - 1 is
    the largest accepted."""
    assert Graph.from_edges([0], [1], labels=[0, MAX_CLASSES - 1]).num_classes == MAX_CLASSES
    with pytest.raises(GdslError, match=f"found {MAX_CLASSES:,}"):
        Graph.from_edges([0], [1], labels=[0, MAX_CLASSES])


def test_vertex_data_is_validated():
    g = Graph.from_edges([0, 1], [1, 2], 3)
    g.ndata["h"] = torch.ones(3, 2)
    g.validate("mygraph")
    g.ndata["h"] = torch.tensor([[1.0, 0.0], [float("nan"), 0.0], [1.0, 1.0]])
    with pytest.raises(GdslError, match=r"mygraph: vertex data 'h' contains NaN or inf"):
        g.validate("mygraph")
    g.ndata["h"] = torch.ones(2, 2)
    with pytest.raises(GdslError, match=r"mygraph: vertex data 'h' must have one row per vertex \(3\), got shape \[2, 2\]"):
        g.validate("mygraph")


def test_uint64_ids_beyond_int64_are_named_unwrapped():
    """As the loader does for a file (test_data's edge_id_uint64_huge): the
    value is shown as given, not wrapped to a negative id."""
    big = np.array([2 ** 63 + 5, 0], np.uint64)
    with pytest.raises(GdslError) as ei:
        Graph.from_edges(big, np.array([0, 1], np.uint64))
    assert "src: value 9223372036854775813 does not fit in int64" in str(ei.value)


class _PygLike:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_from_pyg_split_columns_and_ogb_labels():
    """Masks [N, S]: split S is refused with a message (not an IndexError);
    OGB's labels [N, 1] are read as [N]."""
    train = torch.tensor([[True, False], [False, True], [True, True], [False, False]])
    data = _PygLike(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), x=torch.rand(4, 3),
                    y=torch.tensor([[0], [1], [2], [1]]), train_mask=train)
    g = Graph.from_pyg(data, split=1)
    assert g.train_mask.tolist() == [False, True, True, False]
    assert g.labels.shape == (4,) and g.labels.tolist() == [0, 1, 2, 1] and g.num_classes == 3
    with pytest.raises(GdslError, match=r"pyg data: split 2 is not available in train_mask of shape \[4, 2\]"):
        Graph.from_pyg(data, split=2)


def test_audit_control_tiny_file_loads(tmp_path):
    """Control: the unedited fixture loads without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_graph(write(tmp_path / "t.npz", tiny())).num_nodes == 5
