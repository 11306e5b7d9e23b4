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


# -- odd but plausible .npz contents -----------------------------------------

def refused(path, *needles):
    with pytest.raises(GdslError) as e:
        load_graph(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_a_mask_given_as_vertex_ids_is_refused_with_the_conversion(tmp_path):
    """(was: 'must be bool (or 0/1 integers), got dtype int64 holding values other than 0 and 1',
    or for ids [0, 1] 'has shape [2], expected [10]', without a word about index arrays)"""
    d = tiny()
    d["train_mask"] = np.array([0, 2, 5])   # OGB's split_idx, np.nonzero(mask)[0]
    refused(write(tmp_path / "ids.npz", d), "array 'train_mask'", "values other than 0 and 1",
            "it looks like vertex ids", "mask = np.zeros(10, bool); mask[ids] = True")
    d["train_mask"] = np.array([0, 1])      # ids that happen to be 0 and 1: never read as ids
    refused(write(tmp_path / "ids01.npz", d), "array 'train_mask' has shape [2], expected [10]",
            "it looks like vertex ids")
    d["train_mask"] = np.array([0, 1, 12])  # not ids of this graph: no such guess
    assert "vertex ids" not in refused(write(tmp_path / "ids12.npz", d), "array 'train_mask'")
    with pytest.raises(GdslError, match=r"^graph: train mask: .* values other than 0 and 1; if these are vertex ids "
                                        r"\(an index array, as OGB's split_idx\), make a mask"):
        Graph.from_edges([0], [1], 10, train_mask=torch.tensor([0, 2, 5]))


def test_0_1_integer_masks_still_load(tmp_path):
    d = tiny()
    d["train_mask"], d["val_mask"] = d["train_mask"].astype(np.int64), d["val_mask"].astype(np.uint8)
    g = load_graph(write(tmp_path / "int.npz", d))
    assert g.train_mask.dtype == torch.bool and g.train_mask.tolist() == tiny()["train_mask"].tolist()


def test_labels_stored_as_float_are_refused_saying_which_kind_they_are(tmp_path):
    d = tiny()
    d["labels"] = d["labels"].astype(np.float64)   # pandas, torch's .float(): whole numbers
    refused(write(tmp_path / "wl.npz", d), "array 'labels' must hold integers, got dtype float64",
            "whole numbers", "labels.astype(np.int64)")
    d["labels"] = d["labels"] + 0.25               # a regression target
    msg = refused(write(tmp_path / "real.npz", d), "array 'labels' must hold integers", "node_NAME", "mse")
    assert "whole" not in msg
    with pytest.raises(GdslError, match=r"^graph: labels: expected integer class ids, got torch.float32; they are "
                                        r"whole numbers: pass them as integers \(labels.long\(\)"):
        Graph.from_edges([0], [1], 2, labels=torch.tensor([0.0, 1.0]))
    with pytest.raises(GdslError, match=r"not a class label: pass it as ndata="):
        Graph.from_edges([0], [1], 2, labels=torch.tensor([0.5, 1.0]))


def test_a_1d_feature_array_is_refused_with_the_reshape(tmp_path):
    d = tiny()
    d["features"] = d["features"][:, 0]
    refused(write(tmp_path / "f1.npz", d), "array 'features' must be a 2-d numeric array [N, F]", "shape [10]",
            "features[:, None]")
    with pytest.raises(GdslError, match=r"features must be \[N=3, F\], got \[3\] \(one feature per vertex is "
                                        r"\[N, 1\]: features\[:, None\]\)"):
        Graph.from_edges([0], [1], 3, features=np.ones(3))


def test_an_empty_float_edge_list_is_no_edges(tmp_path):
    """np.array([]) is float64: an edgeless graph written with it loads, as from_edges takes it
    (was: "array 'src' must hold integers, got dtype float64")."""
    d = tiny()
    d["src"], d["dst"] = np.array([]), np.array([])
    g = load_graph(write(tmp_path / "e0.npz", d))
    assert g.num_edges == 0 and g.num_nodes == 10 and g.src.dtype == torch.int64
    d["src"], d["dst"] = np.array([0.0]), np.array([1.0])   # a non-empty float edge list is still refused
    refused(write(tmp_path / "e1.npz", d), "array 'src' must hold integers, got dtype float64")


def test_zero_edges_int_and_a_vertex_count_beyond_the_edges_load(tmp_path):
    d = tiny()
    d["src"], d["dst"] = np.zeros(0, np.int32), np.zeros(0, np.int32)
    assert load_graph(write(tmp_path / "e0.npz", d)).num_edges == 0
    d = tiny()
    keep = (d["src"] < 5) & (d["dst"] < 5)   # vertices 5..9 without edges: N is the features' rows
    d["src"], d["dst"] = d["src"][keep].astype(np.int32), d["dst"][keep].astype(np.int32)
    g = load_graph(write(tmp_path / "iso.npz", d))
    assert g.num_nodes == 10 and g.src.dtype == torch.int64 and int(g.in_degree()[5:].sum()) == 0


def test_from_edges_without_num_nodes_says_where_n_came_from():
    """(was: 'labels must have one entry per vertex (3), got shape [4]' with N nowhere given)"""
    with pytest.raises(GdslError, match=r"labels must have one entry per vertex \(3\), got shape \[4\] \(without "
                                        r"num_nodes or features, N is the largest vertex id in the edges \+ 1; "
                                        r"pass num_nodes=N\)"):
        Graph.from_edges([0, 1], [1, 2], labels=[0, 1, 0, 1])
    assert Graph.from_edges([0, 1], [1, 2], 4, labels=[0, 1, 0, 1]).num_nodes == 4


def test_an_empty_file_is_said_to_be_empty(tmp_path):
    p = tmp_path / "empty.npz"
    p.write_bytes(b"")
    refused(p, "not an .npz file: not a zip archive: the file is empty (0 bytes)")


def test_arrays_saved_by_position_are_named_as_the_cause(tmp_path):
    d = tiny()
    p = tmp_path / "pos.npz"
    np.savez(p, d["src"], d["dst"], d["features"])
    with pytest.warns(DataWarning, match="ignoring arrays 'arr_0', 'arr_1', 'arr_2'"):
        refused(p, "missing arrays 'src', 'dst', 'features'", "arrays passed by position are stored as arr_0")
    q = write(tmp_path / "nofeat.npz", {"src": d["src"], "dst": d["dst"]})
    assert "by position" not in refused(q, "missing array 'features'")


def test_negative_labels_name_the_vertex_and_the_usual_fix(tmp_path):
    d = tiny()
    d["labels"][6] = -1   # unlabelled, as some data sets mark them
    refused(write(tmp_path / "neg.npz", d), "labels must be class ids >= 0, found -1 (at vertex 6)",
            "leave them out of the masks")


def test_float64_features_bool_features_and_big_endian_load_as_float32(tmp_path):
    for conv in (lambda f: f.astype(np.float64), lambda f: f > 0.5, lambda f: f.astype(">f4"),
                 lambda f: np.asfortranarray(f), lambda f: (f * 30).astype(np.int16)):
        d = tiny()
        d["features"] = conv(d["features"])
        g = load_graph(write(tmp_path / "f.npz", d))
        assert g.features.dtype == torch.float32 and g.features.shape == (10, 3)
        assert np.allclose(g.features.numpy(), np.asarray(d["features"], np.float64))


def test_duplicate_edges_and_self_loops_meet_the_graph_options(tmp_path):
    d = tiny()
    d["src"] = np.concatenate([d["src"], d["src"][:3], np.arange(10)])
    d["dst"] = np.concatenate([d["dst"], d["dst"][:3], np.arange(10)])
    g = load_graph(write(tmp_path / "dl.npz", d))
    assert g.num_edges == 20 + 3 + 10                                    # as given
    assert g.with_options(self_loops=True).num_edges == 20 + 3 + 10      # loops replaced, one per vertex
    assert g.with_options(symmetric=True).num_edges == 20 + 10           # duplicates removed
    assert g.with_options(self_loops=True, symmetric=True).num_edges == 30
    s = g.with_options(self_loops=True, symmetric=True)
    assert int((s.src == s.dst).sum()) == 10


def test_other_files_in_place_of_an_npz_are_refused_naming_them(tmp_path, monkeypatch):
    import zipfile
    import gdsl.graph.io as io_module
    np.save(tmp_path / "x.npy", np.ones(3))
    refused(tmp_path / "x.npy", "not an .npz file: a single .npy array")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("notes.txt", "hi")
    with pytest.warns(DataWarning, match=r"ignoring member 'notes.txt' \(not a .npy array\)"):
        refused(tmp_path / "other.zip", "missing arrays 'src', 'dst', 'features'")
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(GdslError, match=r"d.npz: is a directory"):
        load_graph(tmp_path / "d.npz")
    p = write(tmp_path / "locked.npz", tiny())

    def no_permission(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(io_module, "open", no_permission, raising=False)   # root reads a chmod 0 file
    refused(p, "permission denied")


def test_from_dgl_warns_of_overlapping_masks_naming_a_dgl_graph():
    class Nd(dict):
        pass

    class DglLike:   # what from_dgl reads of a dgl.DGLGraph
        def __init__(self):
            self.ndata = Nd(feat=torch.ones(3, 2), label=torch.tensor([0, 1, 0]),
                            train_mask=torch.tensor([True, True, False]), test_mask=torch.tensor([False, True, True]))

        def edges(self):
            return torch.tensor([0, 1]), torch.tensor([1, 2])

        def num_nodes(self):
            return 3

    _, said = data_warnings(lambda: Graph.from_dgl(DglLike()))
    assert len(said) == 1 and said[0].startswith("dgl graph: the masks overlap: 'train' and 'test' share 1 vertex "
                                                 "(vertex 1)"), said


def test_arrays_under_another_librarys_names_are_named_with_the_fix(tmp_path):
    """PyG's edge_index / x / y, an [E, 2] 'edges' (was: the missing-array error and an 'ignoring' warning)."""
    d = tiny()
    ei = np.stack([d["src"], d["dst"]])
    p = write(tmp_path / "pyg.npz", {"edge_index": ei, "x": d["features"], "y": d["labels"]})
    with pytest.warns(DataWarning, match="ignoring arrays 'x', 'y'"):
        refused(p, "missing arrays 'src', 'dst', 'features'", "it has 'edge_index', 'x', 'y', not names of the "
                "format: save them as src=edge_index[0], dst=edge_index[1]; features=x; labels=y")
    p = write(tmp_path / "edges.npz", {"edges": ei.T, "features": d["features"]})
    with pytest.warns(DataWarning):
        refused(p, "missing arrays 'src', 'dst'", "src=edges[:, 0], dst=edges[:, 1] for [E, 2]")


def test_1_based_edge_ids_are_named_as_such():
    with pytest.raises(GdslError, match=r"edge endpoint 3 is out of range for 3 vertices \(the ids run from 1 to N: "
                                        r"numbered from 1\? subtract 1\)"):
        Graph.from_edges([1, 2], [2, 3], 3)
    with pytest.raises(GdslError) as e:   # an id merely too large: no guess
        Graph.from_edges([0, 2], [2, 3], 3)
    assert "numbered from 1" not in str(e.value)


def test_labels_and_split_masks_in_other_libraries_layouts_are_named(tmp_path):
    d = tiny()
    d["labels"] = tiny()["labels"][:, None]
    refused(write(tmp_path / "ogb.npz", d), "array 'labels' must be 1-d, got shape [10, 1]", "labels[:, 0]")
    d["labels"] = np.eye(2, dtype=np.int64)[tiny()["labels"]]
    refused(write(tmp_path / "onehot.npz", d), "array 'labels' must be 1-d, got shape [10, 2]", "labels.argmax(1)")
    d = tiny()
    d["train_masks"] = np.stack([d["train_mask"]] * 3, 1)   # PyG's [N, S]
    refused(write(tmp_path / "ns.npz", d), "array 'train_masks'", "shape [10, 3]", "PyG's layout [N, S]: save its "
            "transpose, .T")


def test_float_labels_with_nan_for_unlabelled_vertices_say_so(tmp_path):
    d = tiny()
    d["labels"] = d["labels"].astype(np.float32)
    d["labels"][[2, 5]] = np.nan   # OGB's unlabelled vertices
    refused(write(tmp_path / "nan.npz", d), "got dtype float32 holding whole numbers and NaN (first at vertex 2: "
            "unlabelled?)", "leave them out of the masks", "labels.astype(np.int64)")


def test_from_edges_float_labels_with_nan_say_so():
    with pytest.raises(GdslError, match=r"got torch.float32; they are whole numbers and NaN \(first at vertex 1: "
                                        r"unlabelled\?\): give unlabelled vertices any class id"):
        Graph.from_edges([0], [1], 3, labels=torch.tensor([0.0, float("nan"), 2.0]))


def test_a_text_file_given_as_data_is_said_to_be_text(tmp_path):
    """(was: 'not a zip archive (truncated, corrupt or another format)' for a CSV edge list)"""
    p = tmp_path / "edges.csv"
    p.write_text("src,dst\n0,1\n1,2\n")
    refused(p, "not an .npz file: not a zip archive: it is a text file (an edge list or CSV?)", "numpy.savez(path, ")
    refused(Path(GCN), "not a zip archive: it is a text file, a gdsl program by its name, not data")
    q = tmp_path / "noise.bin"
    q.write_bytes(bytes(range(256)) * 2)
    assert "text file" not in refused(q, "not a zip archive (truncated, corrupt or another format)")
    r = tmp_path / "utf8.txt"
    r.write_bytes(("é" * 300).encode())   # a character cut at the end of the sample is still text
    refused(r, "it is a text file")
