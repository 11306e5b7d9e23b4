"""Bad input to the Python API (found by a fuzzing pass, session 8): a clear
TypeError for a wrong kind of argument, a GdslError for a wrong value, never
a torch/sympy traceback from deep inside, a silently different graph, or a
string evaluated as code."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import gdsl
from helpers import check_double_module
from gdsl.diagnostics import CompileError, GdslError

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


def small() -> gdsl.Graph:
    return gdsl.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], 4, features=torch.ones(4, 3),
                                 labels=torch.tensor([0, 1, 0, 1]), train_mask=torch.tensor([1, 1, 0, 0]).bool(),
                                 val_mask=torch.tensor([0, 0, 1, 0]).bool(), test_mask=torch.tensor([0, 0, 0, 1]).bool())


# ---- gdsl.compile
def test_a_string_override_is_refused_not_evaluated(tmp_path):
    flag = tmp_path / "ran"
    with pytest.raises(TypeError, match=r"static override hidden=.*a number \(int or float\) is needed, got str"):
        gdsl.compile(GCN, hidden=f"__import__('pathlib').Path({str(flag)!r}).touch() or 16")
    assert not flag.exists()


@pytest.mark.parametrize("value", [True, [16], None, "16", 1 + 2j])
def test_overrides_must_be_numbers(value):
    with pytest.raises(TypeError, match="static override hidden="):
        gdsl.compile(GCN, hidden=value)


@pytest.mark.parametrize("name,value", [("hidden", np.int64(8)), ("hidden", torch.tensor(8)), ("p", np.float32(0.25))])
def test_numeric_overrides_of_any_kind(name, value):
    assert gdsl.compile(GCN, **{name: value}).module(small(), backend="reference")().shape == (4, 2)


@pytest.mark.parametrize("program", [b"model M { }", None, 42, ["x"]])
def test_compile_takes_text_or_a_path(program):
    with pytest.raises(TypeError, match="gdsl.compile takes source text"):
        gdsl.compile(program)


def test_empty_source_text_is_an_empty_program():   # was: read as the path '.' (IsADirectoryError)
    with pytest.raises(CompileError, match="the program is empty"):
        gdsl.compile("")


# ---- Program.module and the module
def test_module_needs_a_graph_and_a_backend_name():
    p = gdsl.compile(GCN)
    with pytest.raises(TypeError, match="module\\(\\) takes a gdsl.Graph"):
        p.module("cora")
    with pytest.raises(GdslError, match="unknown backend ''"):   # was: the default backend
        p.module(small(), backend="")


def test_a_missing_numba_package_is_named(monkeypatch):
    """One check (gdsl/backends/__init__.py) for prog.module() and gdsl run --np."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    with pytest.raises(GdslError, match=r"backend 'numba' needs the numba package; pip install 'gdsl\[numba\]'"):
        gdsl.compile(GCN).module(small(), backend="numba")


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("x,message", [
    (torch.ones(4, 3, 1), r"must have shape \[4, 3\] .*got \[4, 3, 1\]"),   # was: broadcast to a [4, 3, 2] output
    (torch.ones(4, 5), r"must have shape \[4, 3\] .*got \[4, 5\]"),
    (torch.ones(7, 3), r"must have shape \[4, 3\] .*got \[7, 3\]"),
    (torch.ones(4, 3, dtype=torch.float64), r"must be float32 .*got torch.float64; use x.to\(torch.float32\)"),
    # were: torch's "reshape is not implemented for sparse tensors" / "NestedTensorImpl doesn't support sizes"
    (torch.ones(4, 3).to_sparse(), r"must be a dense tensor, got a torch.sparse_coo one; use x.to_dense\(\)"),
    (lambda: torch.nested.nested_tensor([torch.ones(3)] * 4), "must be a dense tensor, got a nested one"),
    ([[1.0] * 3] * 4, "must be a torch.Tensor of shape \\[4, 3\\], got list"),
])
def test_module_input_is_checked(backend, x, message):
    if backend == "numba":
        pytest.importorskip("numba")
    m = gdsl.compile(GCN).module(small(), backend=backend)
    if callable(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch's "nested tensors are a prototype"
            x = x()
    with pytest.raises(GdslError, match=message):
        m(x)
    assert m(torch.ones(4, 3, dtype=torch.int64)).shape == (4, 2)   # integers: converted


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_double_module_runs_in_float64_and_passes_gradcheck(backend):
    """(triton: in test_triton_backend, which sets TRITON_INTERPRET before the import)"""
    if backend == "numba":
        pytest.importorskip("numba")
    check_double_module(backend)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_loss_checks_the_output_width(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    m = gdsl.compile(GCN).module(small(), backend=backend)
    # numba was: an IndexError from cross_entropy for [4, 1], a loss for [4, 7]
    for bad in ([4, 7], [4, 1], [4]):
        with pytest.raises(GdslError, match=re.escape(f"loss: the model's output must be [rows, 2], got {bad}")):
            m.loss(torch.ones(*bad))
    assert torch.isfinite(m.loss(m()))


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_loss_on_a_graph_without_labels_or_masks_says_the_same_on_every_backend(backend):
    """A module bound (with dims) to a graph that has neither: the missing
    target is named first on every backend (was: numba named the mask)."""
    if backend == "numba":
        pytest.importorskip("numba")
    g0 = small()
    g = gdsl.Graph.from_edges(g0.src, g0.dst, features=g0.features)
    m = gdsl.compile(GCN).module(g, backend=backend, dims={"C": 2})
    with pytest.raises(GdslError, match=r"^model.loss\(\): the graph bound to the module has no labels for input 'Y'$"):
        m.loss(m())


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_params_torch_code_replaced_are_checked(backend):
    """A param set to None, deleted or given another shape: a GdslError
    naming it, on every backend (was: numba dropped a None bias silently
    while the reference raised torch's TypeError; a wrong shape: torch's
    broadcast error without the param's name)."""
    if backend == "numba":
        pytest.importorskip("numba")
    prog = gdsl.compile(GCN)
    m = prog.module(small(), backend=backend)
    m.GCNConv_1.b = None
    with pytest.raises(GdslError, match=re.escape("param GCNConv_1.b is NoneType, but the program uses it: "
                                                  "it must be a tensor of shape [16]")):
        m()
    m = prog.module(small(), backend=backend)
    del m.GCNConv_2.b
    with pytest.raises(GdslError, match=re.escape("param GCNConv_2.b is no longer on the module")):
        m()
    m = prog.module(small(), backend=backend)
    m.GCNConv_2.W = torch.nn.Parameter(torch.zeros(16, 5))
    with pytest.raises(GdslError, match=re.escape("param GCNConv_2.W has shape [16, 5], but the program "
                                                  "declares [16, 2]")):
        m()
    m.GCNConv_2.W = torch.nn.Parameter(torch.zeros(16, 2))   # the right shape: used
    assert m().abs().sum() == 0


def test_meta_device_and_loss_without_a_train_block():
    m = gdsl.compile(GCN).module(small())
    w = m.GCNConv_1.W.detach().clone()
    for move, said in ((lambda: m.to("meta"), "cannot move to the meta device"),
                       (lambda: m.to_empty(device="meta"), r"cannot take to_empty\(\)")):
        with pytest.raises(GdslError, match=said):
            move()
    assert torch.equal(m.GCNConv_1.W, w) and m().shape == (4, 2)
    text = Path(GCN).read_text()
    free = gdsl.compile(text[:text.index("train cora")]).module(small())
    with pytest.raises(GdslError, match="the program has no train block with a loss"):   # was: RuntimeError
        free.loss(free())


def test_a_byte_order_mark_in_source_text():
    """As in a file (was: `unexpected character '\ufeff'` for the same text as a string)."""
    text = Path(GCN).read_text()
    assert gdsl.compile("\ufeff" + text).ir == gdsl.compile(GCN).ir


# ---- gdsl.train
@pytest.mark.parametrize("kw,error,message", [
    ({"epochs": 0}, GdslError, "epochs must be an integer >= 1, got 0"),
    ({"epochs": 1.5}, GdslError, "epochs must be an integer >= 1, got 1.5"),
    ({"seed": 2 ** 70}, GdslError, r"seed must be an integer in \[0, 2\*\*63\)"),
    ({"seed": "abc"}, GdslError, "seed must be an integer"),
    ({"on_epoch": 5}, TypeError, "on_epoch must be callable"),
])
def test_train_arguments_are_checked(kw, error, message):
    with pytest.raises(error, match=message):
        gdsl.train(gdsl.compile(GCN), small(), backend="reference", **kw)


def test_train_takes_a_program_and_a_graph():
    with pytest.raises(TypeError, match="train\\(\\) takes a gdsl.Program"):
        gdsl.train(GCN, small())
    with pytest.raises(TypeError, match="train\\(\\) takes a gdsl.Graph"):
        gdsl.train(gdsl.compile(GCN), "cora")
    res = gdsl.train(gdsl.compile(GCN), small(), backend="reference", epochs=np.int64(2), seed=np.int32(1))
    assert len(res.epochs) == 2


def test_a_non_finite_loss_before_any_step_blames_the_data_not_the_lr():
    g = small()
    g.features = torch.full((4, 3), 3e38)    # finite, but the first layer overflows float32
    with pytest.raises(GdslError, match="epoch 1: the loss is nan before any optimizer step: the data or the program"):
        gdsl.train(gdsl.compile(GCN), g, backend="reference", epochs=2)


# ---- graphs
def test_pyg_edge_index_must_be_2_by_e():
    from_pyg = pytest.importorskip("torch_geometric.data").Data
    x, y = torch.ones(4, 3), torch.tensor([0, 1, 0, 1])
    with pytest.raises(GdslError, match=r"edge_index must be a \[2, E\] tensor \(row 0 = source\), got shape \[4, 2\]"):
        gdsl.Graph.from_pyg(from_pyg(x=x, y=y, edge_index=torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]])))
    with pytest.raises(GdslError, match="got none"):
        gdsl.Graph.from_pyg(from_pyg(x=x, y=y))
    g = gdsl.Graph.from_pyg(from_pyg(x=x, y=y, edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])))
    assert g.num_edges == 4
    with pytest.raises(GdslError, match="expected a torch_geometric.data.Data, got a dict"):   # was: "got none"
        gdsl.Graph.from_pyg({"x": x, "edge_index": torch.tensor([[0, 1], [1, 2]])})


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_edge_data_that_requires_grad_is_refused_at_module(backend):
    """(was: the folded edge weight kept w's first autograd graph: epoch 2 died in torch's "Trying to backward
    through the graph a second time", and with retain_graph the loss stayed put while w changed; helper-69)"""
    if backend == "numba":
        pytest.importorskip("numba")
    g = small()
    g.edata["w"] = torch.rand(4, requires_grad=True)
    prog = gdsl.compile(ROOT / "programs" / "extra" / "edge_weighted_gcn.gd")
    with pytest.raises(GdslError, match=r"graph.edata\['w'\] requires grad: a module computes its edge constants "
                                        r"from the graph's edge data once, at module\(\)"):
        prog.module(g, backend=backend)
    g.edata["w"] = g.edata["w"].detach()
    assert prog.module(g, backend=backend)().shape == (4, 2)


@pytest.mark.parametrize("field", ["features", "src", "labels", "train_mask", "edata", "ndata"])
@pytest.mark.parametrize("kind", ["meta", "sparse"])
def test_fields_reassigned_sparse_or_meta_are_refused_at_module(field, kind):
    """docs/cli.md: module() validates reassigned fields as from_edges does. Was: torch's
    'Tensor.item() cannot be called on meta tensors' / "aten::ne.Scalar ... SparseCPU",
    or (a mask) accepted by module() and failing in the loss."""
    g = small()
    if field == "edata":
        g.edata["w"] = torch.ones(4)
    value = {"features": g.features, "src": g.src, "labels": g.labels, "train_mask": g.train_mask,
             "edata": torch.ones(4), "ndata": torch.ones(4, 2)}[field]
    value = value.to("meta") if kind == "meta" else value.to_sparse()
    if field == "edata":
        g.edata["w"] = value
    elif field == "ndata":
        g.ndata["P"] = value
    else:
        setattr(g, field, value)
    msg = "is on the meta device" if kind == "meta" else "must be a dense tensor, got a torch.sparse_coo one"
    with pytest.raises(GdslError, match=msg):
        gdsl.compile(GCN).module(g)


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("label", [5, -1, -100])
def test_the_loss_checks_labels_edited_in_place(backend, label):
    """The module shares the label tensor, which module() checked. Was: torch's IndexError
    for 5 and -1, and for -100 (cross_entropy's ignore_index) a loss without that vertex."""
    g = small()
    m = gdsl.compile(GCN).module(g, backend=backend)
    m.loss(m())
    g.labels[0] = label
    with pytest.raises(GdslError, match=rf"model.loss\(\): label {label} of vertex 0 is not a class id 0..1 "
                                        r"\(the graph's labels were changed in place"):
        m.loss(m())


def test_pyg_layouts_of_labels_and_splits():
    """OGB's [N, 1] labels read as [N]; [N, S] masks (geom-gcn Planetoid,
    WikiCS) give column `split`, a 1-d mask is every split's; HeteroData is
    named. Was: all refused, HeteroData as `edge_index ... got none`."""
    pyg = pytest.importorskip("torch_geometric.data")
    x, ei, y = torch.ones(5, 3), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]), torch.tensor([0, 1, 0, 1, 0])
    tm = torch.rand(5, 4, generator=torch.Generator().manual_seed(0)) > 0.5
    data = pyg.Data(x=x, edge_index=ei, y=y.view(-1, 1), train_mask=tm, test_mask=torch.ones(5, dtype=torch.bool))
    g = gdsl.Graph.from_pyg(data, split=2)
    assert g.labels.tolist() == y.tolist() and g.masks["train"].tolist() == tm[:, 2].tolist()
    assert g.masks["test"].all() and gdsl.Graph.from_pyg(data).masks["train"].tolist() == tm[:, 0].tolist()
    with pytest.raises(GdslError, match=r"split 4 is not available in train_mask of shape \[5, 4\]"):
        gdsl.Graph.from_pyg(data, split=4)
    with pytest.raises(GdslError, match=r"split 1 asked for, but the masks have one split"):
        gdsl.Graph.from_pyg(pyg.Data(x=x, edge_index=ei, y=y, train_mask=tm[:, 0]), split=1)
    h = pyg.HeteroData()
    h["a"].x, h["a", "to", "a"].edge_index = x, ei
    with pytest.raises(GdslError, match=r"HeteroData graph is not supported; convert it with data.to_homogeneous\(\)"):
        gdsl.Graph.from_pyg(h)


def test_vertex_ids_are_not_booleans_and_builtin_names_ignore_case():
    for ids in ([True, False], torch.tensor([True, False])):
        with pytest.raises(GdslError, match="src: expected integer ids"):
            gdsl.Graph.from_edges(ids, [0, 1], 2)
    assert gdsl.load_graph("Cora").num_nodes == 2708   # PyG's Planetoid spelling


@pytest.mark.parametrize("kw,message", [
    ({"num_nodes": 4.7}, "num_nodes must be an integer >= 0, got 4.7"),
    ({"num_nodes": "4"}, "num_nodes must be an integer >= 0, got '4'"),
    ({"num_nodes": -5}, "num_nodes must be an integer >= 0, got -5"),
    ({"num_nodes": 4, "masks": [1]}, "masks must be a dict of name -> tensor, got list"),
    ({"num_nodes": 4, "masks": {3: torch.ones(4, dtype=torch.bool)}}, r"the names in masks must be strings, got \[3\]"),
    # was: train_mask kept and masks["train"] dropped, silently
    ({"num_nodes": 4, "masks": {"train": [1, 0, 0, 0]}, "train_mask": [0, 1, 0, 0]},
     r"the train mask is given twice, as masks\['train'\] and as train_mask"),
])
def test_from_edges_arguments(kw, message):
    with pytest.raises(GdslError, match=message):
        gdsl.Graph.from_edges([0, 1], [1, 2], **kw)


def test_empty_data_is_named_as_the_datas_problem():
    p = gdsl.compile(GCN)
    empty = gdsl.Graph.from_edges([], [], 0, features=torch.ones(0, 3), labels=torch.zeros(0, dtype=torch.long))
    # was: "GCNConv's static argument 'dout' ... got 0" at the program; then "needs labels, but the graph has
    # 0 vertices and no label", labels given (empty)
    with pytest.raises(GdslError, match="the graph has no vertices: the program's input 'Y' binds its class "
                                        "count from the labels, and there are none"):
        p.module(empty)
    no_width = gdsl.Graph.from_edges([0], [1], 4, features=torch.ones(4, 0), labels=torch.zeros(4, dtype=torch.long))
    with pytest.raises(GdslError, match=r"input 'X' has an empty feature axis \(its data has shape \[4, 0\]"):
        p.module(no_width)


def test_missing_masks_are_named_together_the_losss_first():
    g = gdsl.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], 4, features=torch.ones(4, 3), labels=torch.tensor([0, 1, 0, 1]))
    with pytest.raises(GdslError, match="uses masks 'train', 'val', 'test', but the graph has masks: none"):
        gdsl.train(gdsl.compile(GCN), g, backend="reference", epochs=1)


def test_from_edges_with_dst_none_says_how_to_pass_an_edge_index():
    """PyG's habit, from_edges(edge_index, None): was "dst: object arrays are not accepted"."""
    with pytest.raises(gdsl.GdslError, match=r"dst is None: from_edges\(src, dst, \.\.\.\) takes the two endpoint "
                                             r"arrays; for a PyG edge_index \[2, E\] write from_edges\(edge_index\[0\]"):
        gdsl.Graph.from_edges(torch.tensor([[0, 1], [1, 0]]), None, features=torch.randn(2, 3))



def test_one_except_catches_every_user_error(tmp_path):
    """`except gdsl.Error` catches a program's errors and the others (data,
    values) alike; they stay separate classes, and a bug of ours is neither."""
    from gdsl.passes.pipeline import InternalCompilerError
    from gdsl.runtime.trainer import Diverged
    caught = []
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    for make in (lambda: gdsl.compile("model M[] { return Q }"), lambda: gdsl.load_graph(str(bad))):
        try:
            make()
        except gdsl.Error as e:
            caught.append(type(e))
    assert caught == [CompileError, GdslError]
    assert not issubclass(CompileError, GdslError) and not issubclass(GdslError, CompileError)
    assert issubclass(Diverged, gdsl.Error) and not issubclass(InternalCompilerError, gdsl.Error)
    assert "Error" in gdsl.__all__


def test_a_program_says_what_it_is():
    """(was object's repr; helper-69)"""
    assert repr(gdsl.compile(GCN, hidden=8)) == f"Program({GCN!r}, train='cora', model='GCN', hidden=8)"


def test_a_graph_edited_after_loading_is_not_blamed_on_its_file():
    """(was: "cora.npz: features contain NaN or inf", the file being fine; helper-69)"""
    g = gdsl.load_graph("cora")
    g.features[0, 0] = float("nan")
    with pytest.raises(GdslError, match=r"^the graph loaded from .*cora\.npz, as it is now: features contain NaN or "
                                        r"inf \(first at vertex 0\)"):
        gdsl.compile(GCN).module(g, backend="reference")
