"""helper-36: data input as a new user meets it.

Masks that share vertices (train and test, say) are legal but warned of at
load time, once, naming the file, the masks and how many vertices they
share; data warnings are `gdsl.GdslWarning`s (`DataWarning`), printed by the
CLI as its own lines even under PYTHONWARNINGS=error. Odd but plausible .npz
contents either load as docs/cli.md ("Data") says or are refused naming the
file and the problem.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import gdsl
from gdsl import GdslError
from gdsl.cli import main
from gdsl.graph import DataWarning
from gdsl.graph.graph import Graph
from gdsl.graph.io import load_graph

ROOT = Path(__file__).resolve().parents[1]
GCN = str(ROOT / "programs" / "gcn.gd")


def tiny(n: int = 10) -> dict[str, np.ndarray]:
    """A valid n-vertex ring in the file format, disjoint masks 0-3 / 4-6 / 7-9 (n = 10)."""
    src = np.arange(n, dtype=np.int64)
    dst = (src + 1) % n
    m = {k: np.zeros(n, bool) for k in ("train", "val", "test")}
    m["train"][:4], m["val"][4:7], m["test"][7:] = True, True, True
    return {"src": np.concatenate([src, dst]), "dst": np.concatenate([dst, src]),
            "features": np.arange(3 * n, dtype=np.float32).reshape(n, 3) / (3 * n),
            "labels": np.arange(n, dtype=np.int64) % 2, **{f"{k}_mask": v for k, v in m.items()}}


def write(path: Path, arrays: dict) -> Path:
    np.savez(path, **arrays)
    return path


def data_warnings(fn):
    """(result, [messages of the DataWarnings fn raised])."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in got if issubclass(w.category, DataWarning)]


# -- overlapping masks ------------------------------------------------------

def test_a_file_whose_train_and_test_masks_share_vertices_is_warned_of_once(tmp_path):
    d = tiny()
    d["test_mask"][:2] = True          # vertices 0 and 1 are train and test
    p = write(tmp_path / "leak.npz", d)
    with pytest.warns(DataWarning) as got:
        g = load_graph(p)
    said = [str(w.message) for w in got if issubclass(w.category, DataWarning)]
    assert len(said) == 1, said
    assert said[0].startswith(f"{p}: the masks overlap: 'train' and 'test' share 2 vertices (the first is vertex 0)")
    assert "the test accuracy counts vertices the model trained on" in said[0]
    assert "val" not in said[0].split(".")[0]           # only the pair that overlaps is named
    assert g.test_mask.sum() == 5                        # legal: loaded as given


def test_every_overlapping_pair_is_named_in_the_one_warning(tmp_path):
    d = tiny()
    d["val_mask"][[0, 8]] = True       # train∩val = {0}, val∩test = {8}
    d["test_mask"][3] = True           # train∩test = {3}
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "all3.npz", d)))
    assert len(said) == 1, said
    assert ("'train' and 'val' share 1 vertex (vertex 0); 'train' and 'test' share 1 vertex (vertex 3); "
            "'val' and 'test' share 1 vertex (vertex 8)") in said[0]
    assert "the test and val accuracies count vertices the model trained on, and the best-val epoch is picked " \
           "on test vertices" in said[0]


def test_only_val_and_test_overlapping_says_what_that_does(tmp_path):
    d = tiny()
    d["val_mask"][9] = True
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "vt.npz", d)))
    assert len(said) == 1 and "'val' and 'test' share 1 vertex (vertex 9)" in said[0], said
    assert "trained on" not in said[0] and "the best-val epoch is picked on test vertices" in said[0]


def test_disjoint_masks_and_masks_that_are_every_vertex_are_not_warned_of(tmp_path):
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "ok.npz", tiny())))
    assert said == []
    _, said = data_warnings(lambda: load_graph("cora"))
    assert said == []
    # a graph without a split (every mask every vertex, as smoke tests write one) is a choice, not a leak
    d = tiny()
    for k in ("train", "val", "test"):
        d[f"{k}_mask"] = np.ones(10, bool)
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "nosplit.npz", d)))
    assert said == []
    # but a subset of an every-vertex train mask is warned of
    d["test_mask"] = tiny()["test_mask"]
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "trainall.npz", d)))
    assert len(said) == 1 and "'train' and 'test' share 3 vertices (the first is vertex 7)" in said[0], said


def test_masks_of_other_names_are_not_compared():
    """Only train/val/test are splits; a mask 'labelled' covering train is normal."""
    _, said = data_warnings(lambda: Graph.from_edges([0], [1], 3, masks={"train": [1, 0, 0], "labelled": [1, 1, 0]}))
    assert said == []


def test_from_edges_from_pyg_and_a_selected_split_warn_too(tmp_path):
    _, said = data_warnings(lambda: Graph.from_edges([0], [1], 3, train_mask=[True, True, False],
                                                     test_mask=[False, True, True]))
    assert len(said) == 1 and said[0].startswith("graph: the masks overlap: 'train' and 'test' share 1 vertex "
                                                 "(vertex 1)"), said

    class Data:   # the attributes of a torch_geometric.data.Data that from_pyg reads
        def __init__(self, **kw):
            self.__dict__.update(kw)

    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), x=torch.ones(3, 2), y=torch.tensor([0, 1, 0]),
                num_nodes=3, train_mask=torch.tensor([True, False, False]),
                val_mask=torch.tensor([True, True, False]), test_mask=torch.tensor([False, False, True]))
    _, said = data_warnings(lambda: Graph.from_pyg(data))
    assert len(said) == 1 and said[0].startswith("pyg data: the masks overlap: 'train' and 'val' share 1 vertex"), said
    # several splits: only the one loaded is compared
    d = tiny()
    d["train_masks"] = np.stack([d["train_mask"], d["test_mask"]])
    _, said = data_warnings(lambda: load_graph(write(tmp_path / "splits.npz", d)))
    assert said == []
    _, said = data_warnings(lambda: load_graph(tmp_path / "splits.npz", split=1))
    said = [w for w in said if "overlap" in w]   # (beside the warning that val/test are single masks)
    assert len(said) == 1 and "'train' and 'test' share 3 vertices" in said[0], said


def test_gdsl_run_prints_the_overlap_warning_and_trains(tmp_path, capsys):
    d = tiny()
    d["test_mask"][:4] = True
    p = write(tmp_path / "leak.npz", d)
    assert main(["run", GCN, "--data", str(p), "--epochs", "1", "--backend", "reference"]) == 0
    err = capsys.readouterr().err
    assert err.count("the masks overlap") == 1, err
    assert f"gdsl: warning: {p}: the masks overlap: 'train' and 'test' share 4 vertices" in err, err


def test_data_warnings_are_printed_not_raised_under_pythonwarnings_error(tmp_path, capsys):
    """Was: `PYTHONWARNINGS=error gdsl run --data f.npz` on a file with an extra
    array ended in 'gdsl: internal compiler error: f.npz: ignoring arrays ...'
    (the loader's warnings were plain UserWarnings; the CLI prints only its
    GdslWarnings and lets the others follow the filters)."""
    d = tiny()
    d["notes"] = np.arange(3)
    d["test_mask"][0] = True
    p = write(tmp_path / "extra.npz", d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc = main(["run", GCN, "--data", str(p), "--epochs", "1", "--backend", "reference"])
    err = capsys.readouterr().err
    assert rc == 0 and "internal" not in err, err
    assert f"gdsl: warning: {p}: ignoring array 'notes'" in err and "the masks overlap" in err, err


def test_data_warnings_are_gdsl_warnings():
    assert issubclass(DataWarning, gdsl.GdslWarning) and issubclass(DataWarning, UserWarning)
    w = DataWarning("g.npz: something")
    assert str(w) == "g.npz: something" and w.rendered == "gdsl: warning: g.npz: something"
    # the sparse-labels warning is one
    _, said = data_warnings(lambda: Graph.from_edges([0], [1], 3, labels=[0, 0, 100]))
    assert len(said) == 1 and "labels: C = 101 classes" in said[0]


# -- masks that select nothing ---------------------------------------------

@pytest.mark.parametrize("mask", ["train", "val"])
def test_an_empty_loss_or_eval_mask_is_refused_before_training(tmp_path, capsys, mask):
    d = tiny()
    d[f"{mask}_mask"][:] = False
    p = write(tmp_path / f"no_{mask}.npz", d)
    assert main(["run", GCN, "--data", str(p), "--epochs", "1", "--backend", "reference"]) == 1
    err = capsys.readouterr().err
    assert f"gdsl: error: {p}: mask '{mask}' selects no vertex" in err and "Traceback" not in err, err
    with pytest.raises(GdslError, match=f"mask '{mask}' selects no vertex"):
        gdsl.train(gdsl.compile(GCN), load_graph(p), epochs=1, backend="reference")
