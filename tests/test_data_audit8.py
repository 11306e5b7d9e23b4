"""helper-8's data-file and Graph API findings (session 38): archives numpy
cannot read, files whose first bytes are not a zip, messages that named the
wrong array or contradicted themselves, a stray label that made C huge, and
API inputs that escaped as raw Python errors."""
from __future__ import annotations

import io
import warnings
import zipfile

import numpy as np
import pytest
import torch

import gdsl
from gdsl import GdslError
from gdsl.cli import main
from gdsl.graph.graph import Graph
from gdsl.graph.io import load_graph
from test_data import GCN, refused, tiny, write


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _patch_headers(data: bytes, at_local: int, at_central: int, value: bytes) -> bytes:
    """Every local and central header of a zip with `value` at its offset
    (the flag bits or the compression method)."""
    out = bytearray(data)
    for sig, off in ((b"PK\x03\x04", at_local), (b"PK\x01\x02", at_central)):
        i = out.find(sig)
        while i >= 0:
            out[i + off:i + off + len(value)] = value
            i = out.find(sig, i + 4)
    return bytes(out)


def test_an_encrypted_member_is_named(tmp_path):
    """(was: internal compiler error, exit 3: "File ... is encrypted, password required")"""
    p = tmp_path / "enc.npz"
    p.write_bytes(_patch_headers(_npz_bytes(tiny()), 6, 8, b"\x01\x00"))
    refused(p, "member 'src.npy' is encrypted")


def test_a_compression_python_cannot_read_is_named(tmp_path, capsys):
    """Deflate64 (method 9, written by 7-Zip and Windows): (was: exit 3, "That
    compression method is not supported")."""
    p = tmp_path / "d64.npz"
    p.write_bytes(_patch_headers(_npz_bytes(tiny()), 8, 10, b"\x09\x00"))
    refused(p, "uses zip compression method 9", "numpy.savez")
    assert main(["compile", GCN, "--data", str(p)]) == 1
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("head, said", [
    (b"\x93NUMPY", "a single .npy array"),   # np.load returned an array: was a raw TypeError
    (b"\x80\x04", "a pickled Python object; gdsl never unpickles data"),
    (b"junk", "bytes before its zip archive"),   # was numpy's "If you trust the file ... allow_pickle="
])
def test_bytes_before_the_zip_archive_are_refused(tmp_path, head, said):
    p = tmp_path / "poly.npz"
    if head == b"\x93NUMPY":
        buf = io.BytesIO()
        np.save(buf, np.zeros(3))
        head = buf.getvalue()
    p.write_bytes(head + _npz_bytes(tiny()))
    assert zipfile.is_zipfile(p)   # Python's zipfile would read it; np.load would not treat it as a zip
    msg = refused(p, said)
    assert "allow_pickle" not in msg


def _with_features_npy(path, edit) -> None:
    """tiny()'s file with its features member's .npy bytes edited (the zip's CRC of the edited bytes)."""
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in tiny().items():
            buf = io.BytesIO()
            np.save(buf, v)
            zf.writestr(k + ".npy", edit(buf.getvalue()) if k == "features" else buf.getvalue())


def test_a_malformed_npy_header_is_said_plainly(tmp_path):
    p = tmp_path / "hdr.npz"
    _with_features_npy(p, lambda b: b.replace(b"'descr': '<f4'", b"'descr': xx_f4", 1))
    msg = refused(p, "array 'features' has a malformed .npy header")
    assert "<ast." not in msg


def test_an_npy_version_numpy_does_not_know_is_named(tmp_path):
    p = tmp_path / "v9.npz"
    _with_features_npy(p, lambda b: b[:6] + b"\x09" + b[7:])
    refused(p, "array 'features' is in .npy format version 9.0")


def test_a_member_one_row_short_gives_the_bytes_when_the_sizes_round_alike(tmp_path):
    """(was: "(9.77 MiB), but the archive holds 9.77 MiB of it")"""
    d = tiny()
    d["features"] = np.zeros((20001, 128), np.float32)
    data = _npz_bytes(d)
    # declare one row more than stored: patch the header's shape
    bad = data.replace(b"(20001, 128)", b"(20002, 128)", 1)
    p = tmp_path / "short.npz"
    p.write_bytes(bad)
    refused(p, "(10,241,024 bytes), but the archive holds 10,240,512 bytes")


def test_edge_and_node_arrays_are_named_as_the_file_names_them(tmp_path):
    d = tiny()
    refused(write(tmp_path / "ei.npz", {**d, "edge_index": np.stack([d["src"], d["dst"]])}),
            "array 'edge_index' must have one row per edge (10), got shape [2, 10]", "PyG's edge_index")
    refused(write(tmp_path / "nx.npz", {**d, "node_x": np.ones((4, 2), np.float32)}),
            "array 'node_x' must have one row per vertex (5), got shape [4, 2]")


def test_a_stray_label_warns_naming_the_vertex(tmp_path):
    d = tiny()
    d["labels"] = d["labels"].copy()
    d["labels"][3] = 1000
    p = write(tmp_path / "stray.npz", d)
    with pytest.warns(UserWarning, match=r"labels: C = 1,001 classes \(the largest label \+ 1, 1,000 at vertex 3\), "
                                         r"but only 3 distinct labels occur") as rec:
        load_graph(p)
    assert str(p) in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_graph(write(tmp_path / "ok.npz", tiny()))   # compact labels: no warning
        Graph.from_edges([0], [1], 2, labels=[0, 2])      # C = 3 of 2 seen: not sparse enough to warn


def test_many_unknown_arrays_are_listed_briefly(tmp_path):
    p = write(tmp_path / "many.npz", {**tiny(), **{f"col{i}": np.zeros(1) for i in range(50)}})
    with pytest.warns(UserWarning) as rec:
        load_graph(p)
    msg = str(rec[0].message)
    assert "and 40 more" in msg and "'col9'" in msg and "'col10'" not in msg and len(msg) < 400


def test_a_builtin_name_with_npz_says_how_builtins_are_named():
    with pytest.raises(GdslError, match=r"cora.npz: no such file \(the built-in data set is named cora, without"):
        load_graph("cora.npz")


def test_from_edges_refuses_what_a_file_refuses():
    with pytest.raises(GdslError, match=r"^graph: labels: expected integer class ids, got torch.bool"):
        Graph.from_edges([0], [1], 2, labels=[True, False])
    with pytest.raises(GdslError, match=r"^graph: src: not a rectangular array"):
        Graph.from_edges([[0, 1], [1]], [1], 2)
    with pytest.raises(GdslError, match=r"^mine: dst: expected integer ids, got torch.float64"):
        Graph.from_edges([0], [1.0], 2, where="mine")


def test_copy_false_shares_and_the_default_copies():
    f = np.ones((3, 2), np.float32)
    shared = Graph.from_edges([0], [1], 3, features=f, copy=False)
    own = Graph.from_edges([0], [1], 3, features=f)
    f[0, 0] = 5.0
    assert shared.features[0, 0] == 5.0 and own.features[0, 0] == 1.0


def test_a_list_assigned_as_a_mask_is_a_gdsl_error_in_train():
    """(was: AttributeError 'list' object has no attribute 'any' from gdsl.train;
    module() said it properly)"""
    g = Graph.from_edges(**{k: v for k, v in tiny().items() if not k.endswith("_mask")},
                         masks={k[:-5]: v for k, v in tiny().items() if k.endswith("_mask")})
    g.train_mask = [True, False, False, False, False]
    with pytest.raises(GdslError, match=r"mask 'train' must be a bool tensor"):
        gdsl.train(gdsl.compile(GCN), g, epochs=1)


class _Data:
    """A stand-in for torch_geometric.data.Data (not installed here): attributes and keys()."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def keys(self):
        return list(self.__dict__)


def test_from_pyg_keeps_every_mask_and_a_float_target():
    """(was: masks beyond train/val/test dropped, while from_dgl and files keep
    them; a float y refused as "labels: expected integer ids")"""
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    m = torch.tensor([True, False, True])
    g = Graph.from_pyg(_Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([0, 1, 0]), train_mask=m,
                             labelled_mask=~m, num_nodes=3))
    assert set(g.masks) == {"train", "labelled"} and g.masks["labelled"].tolist() == [False, True, False]
    r = Graph.from_pyg(_Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([[0.5], [1.5], [2.5]]), num_nodes=3))
    assert r.labels is None and r.ndata["y"].view(-1).tolist() == [0.5, 1.5, 2.5]
    with pytest.raises(GdslError, match=r"^pyg data: "):
        Graph.from_pyg(_Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([0, -1, 0]), num_nodes=3))


def test_from_pyg_leaves_attributes_that_are_not_vertex_masks():
    """helper-14: an explainer's edge_mask [E] and node_mask [N, F] (float or
    bool) made from_pyg fail, or read F splits, once every *_mask was taken."""
    ei = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 2]])
    d = _Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([0, 1, 0]), train_mask=torch.ones(3, dtype=torch.bool),
              edge_mask=torch.ones(4, dtype=torch.bool), node_mask=torch.ones(3, 2, dtype=torch.bool),
              score_mask=torch.rand(3), num_nodes=3)
    assert set(Graph.from_pyg(d).masks) == {"train"}


def test_from_pyg_keeps_a_float_target_of_one_column_as_it_is():
    """`input y : vertex f32[1]` reads an [N, 1] float y (was squeezed to [N] as OGB's class ids are)."""
    ei = torch.tensor([[0, 1], [1, 2]])
    g = Graph.from_pyg(_Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([[0.5], [1.5], [2.5]]), num_nodes=3))
    assert tuple(g.ndata["y"].shape) == (3, 1)
    assert Graph.from_pyg(_Data(edge_index=ei, x=torch.ones(3, 2), y=torch.tensor([[0], [1], [0]]),
                                num_nodes=3)).labels.tolist() == [0, 1, 0]


def test_the_blockwise_checks_name_the_row_past_the_first_block():
    """The float64 range check and the NaN check run a block of rows at a time
    (about 4M elements): a bad value past the first block is named by its row."""
    f = np.zeros((2100, 2000))
    f[2099, 7] = 1e300
    with pytest.raises(GdslError, match=r"features value 1e\+300 \(row 2099\) does not fit in float32"):
        Graph.from_edges([0], [1], 2100, features=f)
    f[2099, 7] = 0.0
    f[2098, 1] = np.nan
    with pytest.raises(GdslError, match=r"features contain NaN or inf \(first at vertex 2098\)"):
        Graph.from_edges([0], [1], 2100, features=f)
