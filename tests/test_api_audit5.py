"""The nn.Module and backends at the edges helper-73 found (session 35): a
NaN or an all-infinite row in a max / min gather, autocast over a product
of a product, Module.type(), to_empty(), a refused call that still counted
a training step, and a param named like a torch.nn.Module attribute."""
from __future__ import annotations

import copy
import importlib.util
import os

os.environ.setdefault("TRITON_INTERPRET", "1")   # as tests/test_triton_backend.py: the kernels on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402

import gdsl  # noqa: E402
from gdsl.diagnostics import GdslError  # noqa: E402
from helpers import random_graph  # noqa: E402

BACKENDS = ["reference", "numba"] + (["triton"] if importlib.util.find_spec("triton") else [])

REDUCE = """graph G
input X : vertex f32[F]
layer Prop(h: [d]) -> [d] {
    scatter m = src.h
    gather a = REDUCE(m)
    return a
}
model P { return Prop(X) }
"""

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce,far", [("max", -INF), ("min", INF)])
def test_max_and_min_take_nan_and_rows_of_infinities_as_torch_does(backend, reduce, far):
    """torch's amax / amin: a NaN message gives NaN wherever it comes in the
    row (numba kept it only when first, triton never), and a row whose
    messages are all -inf (max) / +inf (min) is that, not the 0 of a row
    without messages (triton gave 0)."""
    prog = gdsl.compile(REDUCE.replace("REDUCE", reduce))
    # vertex 3 <- 0 (5), 1 (NaN), 2 (1); vertex 4 <- 0, 2 (NaN last); vertex 5 <- 6 (far) only;
    # vertex 7 <- 6, 6 is far twice over two columns; vertex 8: no in-edges
    src = [0, 1, 2, 0, 2, 6, 6, 1]
    dst = [3, 3, 3, 4, 4, 5, 7, 7]
    g = gdsl.Graph.from_edges(src, dst, 9, features=torch.zeros(9, 2))
    x = torch.tensor([[5.0, 5.0], [NAN, 1.0], [1.0, NAN], [0, 0], [0, 0], [0, 0], [far, far], [0, 0], [0, 0]])
    want = prog.module(g, backend="reference")(x)
    assert want[3, 0].isnan() and want[4, 1].isnan() and want[5].eq(far).all() and want[8].eq(0).all()
    got = prog.module(g, backend=backend)(x)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gat_with_a_nan_feature_is_nan_on_every_backend(backend):
    """The fused attention kernel's empty-row test was `sum > 0`, false for a
    NaN sum: triton gave finite numbers for a NaN input."""
    prog = gdsl.compile(os.path.join(os.path.dirname(__file__), "..", "programs", "gat.gd"), hidden=2)
    g = gdsl.Graph.from_edges([0, 1, 2], [1, 2, 0], 3, features=torch.ones(3, 2), labels=[0, 1, 0])
    torch.manual_seed(0)
    ref = prog.module(g, backend="reference").eval()
    m = prog.module(g, backend=backend).eval()
    m.load_state_dict(ref.state_dict())
    x = torch.tensor([[NAN, 1.0], [1.0, 2.0], [3.0, -1.0]])
    assert ref(x).isnan().all() and m(x).isnan().all()


def test_autocast_over_a_product_of_a_product_on_the_reference():
    """Two bias-free `@` in a row: torch.tensordot, which autocast does not
    cast, got a bfloat16 and a float32 operand (was torch's "both inputs
    should have same dtype")."""
    prog = gdsl.compile("""graph G
input X : vertex f32[F]
layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}
model M { return Lin[2](relu(Lin[4](X))) }
""")
    g = random_graph(n=12, e=30, f=5)
    m = prog.module(g, backend="reference")
    want = m()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = m()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_module_type_float64_is_double_and_keeps_the_edge_indices(backend):
    """nn.Module.type(dtype) casts every param and buffer: the index buffers
    became float64 and the next call failed in index_select."""
    prog = gdsl.compile(os.path.join(os.path.dirname(__file__), "..", "programs", "gat.gd"), hidden=2)
    g = random_graph(n=12, e=30, f=5)
    torch.manual_seed(0)
    a = prog.module(g, backend=backend).eval()
    b = copy.deepcopy(a)
    a.type(torch.float64)
    b.double()
    assert {n: t.dtype for n, t in a.named_buffers()} == {n: t.dtype for n, t in b.named_buffers()}
    assert all(t.dtype == torch.int64 for n, t in a.named_buffers() if n.endswith("_index"))
    assert torch.equal(a(), b()) and a().dtype == torch.float64
    a.float()
    assert a().dtype == torch.float32


def test_to_empty_is_refused_and_leaves_the_module_as_it_was():
    """The graph's edges and constants are not in the state_dict, so
    to_empty() + load_state_dict left them uninitialised (wrong numbers or
    an IndexError)."""
    g = random_graph(n=12, e=30, f=5)
    m = gdsl.compile(os.path.join(os.path.dirname(__file__), "..", "programs", "gcn.gd")).module(g).eval()
    want = m()
    with pytest.raises(GdslError, match=r"cannot take to_empty\(\).*the module is unchanged"):
        m.to_empty(device="cpu")
    assert torch.equal(m(), want)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_a_refused_call_counts_no_training_step(backend):
    """model(x) refused for its shape still advanced model.step, so every
    later dropout mask was another one than a run without the mistake."""
    g = random_graph(n=12, e=30, f=5)
    prog = gdsl.compile(os.path.join(os.path.dirname(__file__), "..", "programs", "gcn.gd"))
    losses = []
    for mistake in (False, True):
        torch.manual_seed(0)
        m = prog.module(g, backend=backend)
        if mistake:
            for bad in (torch.randn(3, 5), torch.zeros(12, 5, dtype=torch.float64), [[0.0] * 5] * 12):
                with pytest.raises(GdslError, match="the model's input"):
                    m(bad)
        assert m.step == 0
        losses.append(float(m.loss(m()).detach()))
        assert m.step == 1
    assert losses[0] == losses[1]


@pytest.mark.parametrize("name", ["type", "to", "training", "forward"])
def test_a_param_named_like_a_module_attribute_is_refused_with_its_line(name):
    """Was torch's raw KeyError "attribute 'type' already exists" from
    register_parameter (`gdsl run`: an internal error)."""
    prog = gdsl.compile(f"""graph G
input X : vertex f32[F]
layer L[dout](h: [din]) -> [dout] {{
    param {name} : f32[din, dout] = glorot
    transform t = h @ {name}
    return t
}}
model M {{ return L[2](X) }}
""", )
    with pytest.raises(GdslError, match=rf"param '{name}' \(at <input>:4:5\) has the name of an attribute of the "
                                        rf"torch module that holds it \(LayerParams\.{name}\); rename the param"):
        prog.module(random_graph(n=12, e=30, f=5))


def test_graph_conversions_name_what_is_wrong():
    """helper-73's nits: from_pyg of a bare edge_index said "got none";
    from_dgl with a feature_key the graph lacks gave features=None without a
    word; masks={"train": None} was "object arrays are not accepted" while
    train_mask=None is accepted; == between graphs raised torch's "Boolean
    value of Tensor ... is ambiguous"."""
    import types

    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(GdslError, match=r"expected a torch_geometric.data.Data, got a Tensor \(for an edge_index "
                                        r"alone: gdsl.Graph.from_edges"):
        gdsl.Graph.from_pyg(ei)

    class NData(dict):
        pass
    nd = NData(feat=torch.zeros(3, 2), label=torch.tensor([0, 1, 0]))
    g = types.SimpleNamespace(edges=lambda: (ei[0], ei[1]), ndata=nd, num_nodes=lambda: 3)
    assert gdsl.Graph.from_dgl(g).features.shape == (3, 2)
    with pytest.raises(GdslError, match=r"feature_key='feats', but g.ndata has no 'feats' \(it has: feat, label\)"):
        gdsl.Graph.from_dgl(g, feature_key="feats")
    a = gdsl.Graph.from_edges([0, 1], [1, 2], 3, masks={"train": None, "val": [True, False, True]})
    assert set(a.masks) == {"val"}
    b = copy.deepcopy(a)
    assert a == a and a != b and len({a, b}) == 2
