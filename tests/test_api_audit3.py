"""gdsl/api.py (helper audit 3): the train block chosen by name is the one
`module()` binds, the type of `train`, paths that do not exist (str and
os.PathLike), and a Numba backend that is installed but cannot be imported."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import gdsl
from gdsl.diagnostics import GdslError

from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()


def test_module_binds_the_train_block_named_at_compile():
    """`gdsl.compile(src, train="second")` selects the second block's model
    (hidden = 8): the module built from it has those shapes (was free:
    `bind` could drop the name and bind the first block's hidden = 16)."""
    two = GCN.replace("train cora {", "train first {") + """
train second {
    model     = GCN[hidden = 8]
    loss      = cross_entropy(Y, mask = train)
    epochs    = 3
}
"""
    g = random_graph()
    first = dict(gdsl.compile(two).module(g, backend="reference").named_parameters())
    second = dict(gdsl.compile(two, train="second").module(g, backend="reference").named_parameters())
    w1 = next(k for k in first if k.endswith("_1.W"))
    assert first[w1].shape[1] == 16 and second[w1].shape[1] == 8


def test_train_must_be_a_name():
    with pytest.raises(TypeError, match=r"train: the name of a train block \(str\), got int"):
        gdsl.compile(GCN, train=3)


@pytest.mark.parametrize("name,as_path", [("missing.gd", False), ("missing.gd", True), ("missing_program", True)],
                         ids=["str-gd", "PathLike-gd", "PathLike-bare"])
def test_a_path_that_does_not_exist_is_read_as_a_file(tmp_path, name, as_path):
    """A .gd name (str), or any os.PathLike, is a file: one that does not
    exist is FileNotFoundError naming it, never compiled as source text
    (which would report a parse error at "missing")."""
    p = tmp_path / name   # (a bare str without .gd that does not exist is source text, by design)
    with pytest.raises(FileNotFoundError, match=name):
        gdsl.compile(p if as_path else str(p))


def test_an_installed_numba_that_cannot_be_imported_is_a_gdsl_error(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setitem(sys.modules, "gdsl.backends.numba.module", None)   # import raises ImportError
    with pytest.raises(GdslError, match="backend 'numba' could not be imported"):
        gdsl.compile(GCN).module(random_graph(), backend="numba")
