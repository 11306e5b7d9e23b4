"""An .npz file feeds every kind of input (docs/cli.md, "Data"): `node_NAME`
arrays a vertex input after the first, `NAME_mask` masks of any name (bool
or 0/1 integers), and `labels` only when the program has a label input. Data
the program does not read is named in a warning, at the program's binding."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gdsl
from gdsl.cli import main
from gdsl.diagnostics import GdslError
from gdsl.graph.io import load_graph
from gdsl.runtime.trainer import train
from helpers import vertex_target_npz

ROOT = Path(__file__).resolve().parent.parent
TARGET_PROG = ROOT / "tests" / "dist_programs" / "vertex_target.gd"
GCN = str(ROOT / "programs" / "gcn.gd")


@pytest.fixture(scope="module")
def target_npz(tmp_path_factory):
    return vertex_target_npz(tmp_path_factory.mktemp("npz") / "cora_target.npz")


def test_node_arrays_masks_of_any_name_and_no_labels_load(target_npz):
    g = load_graph(target_npz)
    z = np.load(target_npz)
    assert g.labels is None and set(g.masks) == {"labelled"} and g.masks["labelled"].dtype == torch.bool
    assert int(g.masks["labelled"].sum()) == 640
    assert list(g.ndata) == ["T"] and g.ndata["T"].dtype == torch.float32
    assert torch.equal(g.ndata["T"], torch.from_numpy(z["node_T"]))


def test_a_vertex_target_from_the_file_trains_as_one_built_in_python(target_npz):
    """The file's graph and one built with Graph.from_edges(..., ndata=...)
    train to the same losses; numba gives the reference's."""
    z = np.load(target_npz)
    built = gdsl.Graph.from_edges(z["src"], z["dst"], features=z["features"], ndata={"T": z["node_T"]},
                                  masks={"labelled": z["labelled_mask"].astype(bool)})
    prog = gdsl.compile(TARGET_PROG)
    a = [e.loss for e in train(prog, load_graph(target_npz), epochs=5, seed=0, backend="reference").epochs]
    b = [e.loss for e in train(prog, built, epochs=5, seed=0, backend="reference").epochs]
    assert a == b and a[-1] < a[0]
    pytest.importorskip("numba")
    c = [e.loss for e in train(prog, load_graph(target_npz), epochs=5, seed=0, backend="numba").epochs]
    np.testing.assert_allclose(c, a, rtol=1e-5)


def test_integer_masks_are_taken_when_0_or_1(tmp_path):
    z = dict(np.load(vertex_target_npz()))
    z["labelled_mask"] = z["labelled_mask"].astype(np.uint8) * 2
    np.savez(tmp_path / "two.npz", **z)
    with pytest.raises(GdslError, match=r"two.npz: array 'labelled_mask' must be bool \(or 0/1 integers\), got "
                                        r"dtype uint8 holding values other than 0 and 1"):
        load_graph(tmp_path / "two.npz")
    z["labelled_mask"] = z["labelled_mask"].astype(np.float32) / 2
    np.savez(tmp_path / "float.npz", **z)
    # a float mask is refused; one of 0.0s and 1.0s says how to store it (helper-37)
    with pytest.raises(GdslError, match=r"array 'labelled_mask' must be bool \(or 0/1 integers\), got dtype float32 "
                                        r"holding 0.0 and 1.0; store it as bool: mask.astype\(bool\)$"):
        load_graph(tmp_path / "float.npz")
    z["labelled_mask"] = np.stack([z["labelled_mask"].astype(np.int64)] * 2)
    z["labelled_masks"] = z.pop("labelled_mask")
    np.savez(tmp_path / "multi.npz", **z)
    assert load_graph(tmp_path / "multi.npz", split=1).masks["labelled"].dtype == torch.bool


def test_node_arrays_are_checked(tmp_path):
    z = dict(np.load(vertex_target_npz()))
    for bad, msg in ((z["node_T"][:-1], r"array 'node_T' must have one row per vertex \(2708\), got shape \[2707, 2\]"),
                     (np.array(1.0), r"array 'node_T' must have one row per vertex, got a scalar"),
                     (np.array(["a"] * 2708), r"array 'node_T' must be numeric, got dtype <U1")):
        np.savez(tmp_path / "bad.npz", **{**z, "node_T": bad})
        with pytest.raises(GdslError, match=msg):
            load_graph(tmp_path / "bad.npz")
    nan = z["node_T"].copy()
    nan[5, 1] = np.nan
    np.savez(tmp_path / "nan.npz", **{**z, "node_T": nan})
    with pytest.raises(GdslError, match=r"vertex data 'T' contains NaN or inf \(first at vertex 5\)"):
        load_graph(tmp_path / "nan.npz")


def test_missing_labels_and_unread_data_are_named_at_the_program(target_npz, capsys):
    assert main(["run", GCN, "--data", str(target_npz), "--epochs", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{target_npz}: vertex data 'node_T' is not read: the program declares no vertex input of that name " \
           "(input T : vertex f32[...] reads it)" in err
    assert f"{target_npz}: mask 'labelled_mask' is not read: the program declares no mask of that name (it " \
           "declares: train, val, test)" in err
    assert f"error: {target_npz}: the train block uses masks 'train', 'val', 'test', but the graph has masks: " \
           "labelled" in err
    z = dict(np.load(ROOT / "gdsl" / "data" / "cora.npz"))
    np.savez(target_npz.parent / "unlabelled.npz", **{k: v for k, v in z.items() if k != "labels"})
    assert main(["run", GCN, "--data", str(target_npz.parent / "unlabelled.npz"), "--epochs", "1"]) == 1
    assert "unlabelled.npz: the program's input 'Y' needs labels, but the graph has none (an .npz file gives them " \
           "as the array 'labels')" in capsys.readouterr().err
    # a misspelt mask (was: ignored by the loader with a warning) is named at the program too
    z["trian_mask"] = z.pop("train_mask")
    typo = target_npz.parent / "typo.npz"
    np.savez(typo, **z)
    assert main(["compile", GCN, "--data", str(typo)]) == 0
    assert "mask 'trian_mask' is not read: the program declares no mask of that name" in capsys.readouterr().err
    assert main(["run", GCN, "--data", str(typo), "--epochs", "1"]) == 1
    assert "the train block uses mask 'train', but the graph has masks: val, test, trian" in capsys.readouterr().err


def test_a_program_without_a_second_vertex_input_array_says_how_to_give_it(tmp_path, capsys):
    z = dict(np.load(vertex_target_npz()))
    del z["node_T"]
    np.savez(tmp_path / "no_t.npz", **z)
    assert main(["run", str(TARGET_PROG), "--data", str(tmp_path / "no_t.npz"), "--epochs", "1"]) == 1
    assert "no vertex data 'T' for the program's input 'T' (have: none); the program's first vertex input reads " \
           "the features, a further one graph.ndata['T']: the array 'node_T' of an .npz file, or " \
           "Graph.from_edges(..., ndata={...})" in capsys.readouterr().err


def test_the_feature_split_refuses_a_second_vertex_input_in_its_first_layer():
    """P3's layer 1 runs on every vertex; the ranks hold a further vertex
    input on their own rows only (was: an internal shape error on the ranks)."""
    from gdsl.dist.support import check_supported
    src = TARGET_PROG.read_text().replace("input T : vertex f32[2]", "input T : vertex f32[2]\ninput s : vertex f32")
    prog = gdsl.compile(src.replace("h = relu(Conv[hidden](X))", "h = relu(Conv[hidden](X * s))"))
    g = load_graph(vertex_target_npz())
    g.ndata["s"] = torch.rand(g.num_nodes)
    with pytest.raises(GdslError, match=r"its factor %s is the vertex input 's', which the feature split holds on "
                                        r"each rank's own rows only"):
        check_supported("features", prog.bind(g).module, P=2)


@pytest.mark.mpi
def test_a_vertex_target_trains_over_ranks_as_in_one_process(tmp_path):
    """`gdsl run --np 2` on the file: the ranks' partition files carry T
    (its own rows; its halo rows for src.T come by the exchange), and the
    loss curve is the single process's."""
    pytest.importorskip("mpi4py")
    if shutil.which("mpiexec", path=str(Path(sys.executable).parent)) is None and shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec")
    data = vertex_target_npz()
    ref = [e.loss for e in train(gdsl.compile(TARGET_PROG), load_graph(data), epochs=6, seed=0,
                                 backend="reference").epochs]
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "gdsl", "run", str(TARGET_PROG), "--data", str(data), "--np", "2",
                        "--partition", "rows(hash)", "--epochs", "6", "--backend", "reference", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                         "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    got = [e["loss"] for e in json.loads(out.read_text())["epochs"]]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_big_endian_arrays_load_as_native_ones(tmp_path):
    """Data written on (or for) a big-endian machine, HDF5 or MATLAB: was a raw
    ValueError from torch.from_numpy (`gdsl run`: an internal error) for
    arrays already float32, such as edge and vertex data."""
    z = dict(np.load(vertex_target_npz()))
    be = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in z.items()}
    be["edge_w"] = np.linspace(0.5, 1.5, len(z["src"]), dtype=">f4")
    np.savez(tmp_path / "be.npz", **be)
    g = load_graph(tmp_path / "be.npz")
    assert torch.equal(g.ndata["T"], torch.from_numpy(z["node_T"]))
    assert torch.equal(g.features, torch.from_numpy(z["features"]))
    assert g.edata["w"].dtype == torch.float32 and float(g.edata["w"][0]) == 0.5
    direct = gdsl.Graph.from_edges(be["src"], be["dst"], features=be["features"], ndata={"T": be["node_T"]},
                                   masks={"l": be["labelled_mask"]}, edata={"w": be["edge_w"]})
    assert torch.equal(direct.src, g.src) and torch.equal(direct.masks["l"], g.masks["labelled"])


def test_a_split_of_some_masks_beside_single_ones_is_warned_of(tmp_path):
    """`--split 1` of a file with train_masks but one val_mask: split 1's
    train mask beside the val mask of every split, said (was: silent)."""
    z = dict(np.load(ROOT / "gdsl" / "data" / "cora.npz"))
    z["train_masks"] = np.stack([z.pop("train_mask")] * 2)
    np.savez(tmp_path / "mixed.npz", **z)
    with pytest.warns(UserWarning, match=r"mixed.npz: split 1: 'val_mask', 'test_mask' are single masks, the same in "
                                         r"every split, beside split 1 of 'train_masks'"):
        load_graph(tmp_path / "mixed.npz", split=1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_graph(tmp_path / "mixed.npz", split=0)


def test_node_data_named_like_a_label_input_says_it_is_not_read_as_such(tmp_path, capsys):
    z = dict(np.load(ROOT / "gdsl" / "data" / "cora.npz"))
    z["node_Y"] = np.ones((len(z["labels"]), 3), np.float32)
    np.savez(tmp_path / "ny.npz", **z)
    assert main(["compile", GCN, "--data", str(tmp_path / "ny.npz")]) == 0
    assert "vertex data 'node_Y' is not read: 'Y' is the program's label input, which reads the labels" \
        in capsys.readouterr().err


def test_a_split_of_a_single_split_file_names_its_masks(tmp_path):
    with pytest.raises(GdslError, match=r"split 1 is not available: the file has a single split \('labelled_mask'; "
                                        r"several splits are NAME_masks arrays of shape \[S, N\]\)"):
        load_graph(vertex_target_npz(), split=1)
