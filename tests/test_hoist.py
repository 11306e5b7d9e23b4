"""The values that are the same in every step (passes/invariant.py marks
them), computed once per features tensor (`prog.module(graph, hoist=True)`,
`gdsl run`, `gdsl.train`; backends/reference/executor.py `_hoisted`), and
the order pass aggregating such inputs sparse-first (`order_by=invariant`).

Each backend's hoisted forward must give the unhoisted forward's numbers bit
for bit on the same IR (the kept values come from the same `exec_op`), and
a kept value must never outlive what it was computed from."""
from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")   # before anything imports triton (test_triton_backend.py)

import pytest  # noqa: E402
import torch  # noqa: E402

import gdsl  # noqa: E402
from gdsl.compiler import compile_source  # noqa: E402
from gdsl.passes.invariant import invariant_ops  # noqa: E402
from helpers import random_graph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

HEAD = """graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

layer Mean(h: [d]) -> [d] {
    scatter m = src.h
    gather  a = mean(m)
    return a
}

layer Linear[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}
"""

TRAIN = """
train t {
    model     = M
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.05)
    epochs    = 3
}
"""

# SGC with an elementwise op and a residual on the input, all before the one param
SGC = HEAD + """
model M[K = 2] {
    h = relu(X)
    repeat K {
        h = Prop(h)
    }
    h = h + X
    return Linear[C](h)
}
""" + TRAIN

# a mean aggregation (numba runs it fused with its 1/deg scale) whose result
# also feeds a dropout: the dropout and everything after it run each step
MEAN = HEAD + """
model M[p = 0.5] {
    h = Mean(X)
    h = dropout(h, p)
    return Linear[C](h)
}
""" + TRAIN

# no param at all: the output itself is invariant
PARAM_FREE = HEAD + """
model M {
    return Prop(X)
}
""" + TRAIN


def _backends():
    out = ["reference"]
    try:
        import numba  # noqa: F401
        out.append("numba")
    except ImportError:
        pass
    return out


def _graph(seed=3):
    return random_graph(n=30, e=90, f=6, c=3, seed=seed, isolated=2)


def _pair(src: str, backend: str, g):
    """Two modules of one IR (compiled for hoisting), params drawn alike:
    one hoisting, one not."""
    prog = gdsl.compile(src)
    mods = []
    for on in (True, False):
        torch.manual_seed(0)
        m = prog.module(g, backend=backend, hoist=True)
        m.hoist = on
        m.dropout_seed = 5
        mods.append(m)
    return mods


def _count_ops(m) -> list[str]:
    """The names of the ops `m.exec_op` runs from now on, in order."""
    ran: list[str] = []
    real = m.exec_op

    def counting(op, env, x):
        ran.append(op.name)
        real(op, env, x)
    m.exec_op = counting
    return ran


def _marked(ir_text: str) -> list[str]:
    return [ln.split("=")[0].strip() for ln in ir_text.splitlines() if "invariant=true" in ln]


# ---- the pass: what is marked
def test_marks_what_depends_on_no_param_and_no_dropout():
    ir = gdsl.compile(SGC).ir
    # relu(X), the two propagations and the residual; not the params, the matmul, the bias
    assert _marked(ir) == ["%h : vertex f32[N, F]", "%a : vertex f32[N, F]", "%a_1 : vertex f32[N, F]",
                           "%h_1 : vertex f32[N, F]"], ir
    mean = gdsl.compile(MEAN).ir
    assert len(_marked(mean)) == 2 and "dropout[invariant" not in mean   # sum and its 1/deg scale
    gcn = gdsl.compile(ROOT / "programs" / "gcn.gd").ir   # dropout(X) first: nothing is the same each step
    assert "invariant" not in gcn


def test_numbers_alone_and_leaves_are_not_marked():
    src = HEAD + """
model M[alpha = 0.25] {
    h = X * (1 - alpha)
    return Linear[C](h)
}
""" + TRAIN
    ir = compile_source(src).module
    marked = invariant_ops(ir.main)
    assert [op.name for op in marked] == ["mul"]   # X * 0.75; `1 - 0.25` (numbers) and the leaves are not
    assert all(op.attrs.get("invariant") for op in marked)
    assert not any(op.attrs.get("invariant") for op in ir.main.ops if op.name in ("input", "const", "param"))


# ---- the order pass
def test_order_aggregates_invariant_inputs_sparse_first_when_hoisting():
    sage = (ROOT / "programs" / "sage.gd").read_text()
    dims = {"F": 1433, "C": 7}
    plain = compile_source(sage, dims=dims).module
    hoisted = compile_source(sage, dims=dims, hoist=True).module

    def first_agg(m):
        return next(op for op in m.main.ops if op.name == "aggregate")
    # without hoisting 1433 -> 256 is aggregated dense-first, by width
    assert first_agg(plain).attrs["order"] == "dense_first" and first_agg(plain).attrs["order_by"] == "width"
    a = first_agg(hoisted)
    assert a.operands[0].hint == "X" and a.attrs["order"] == "sparse_first" and a.attrs["order_by"] == "invariant"
    assert a.attrs["invariant"] is True
    # its input needs no gradient: autograd's own backward (dW = (A X)^T G) costs no SpMM
    assert a.attrs["order_grad"] == "dense_first" and a.attrs["order_memo"] is True
    # layer 2 reads layer 1's output (params): decided by width as before
    later = [op for op in hoisted.main.ops if op.name == "aggregate"][1:]
    assert later and all(op.attrs["order_by"] == "width" and "invariant" not in op.attrs for op in later)
    # a hint still decides
    hinted = compile_source(sage + "\nschedule {\n    order = dense_first\n}\n", dims=dims, hoist=True)
    assert first_agg(hinted.module).attrs["order_by"] == "hint"


def test_cli_compile_shows_what_run_executes(tmp_path):
    from filecheck_runner import run_gdsl
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "sage.gd"), "--data", "cora"])
    assert code == 0, err
    assert "order_by=invariant" in out and "invariant=true" in out
    # a distributed plan's ranks compute every op each epoch: nothing hoisted, the order by width
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "sage.gd"), "--data", "cora", "--np", "2"])
    assert code == 0, err
    assert "order_by=invariant" not in out


# ---- the executors
def _step(m, opt) -> float:
    """One training step of module m; its loss."""
    m.train()
    opt.zero_grad()
    loss = m.loss(m())
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("src", [SGC, MEAN], ids=["sgc", "mean"])
def test_hoisted_training_is_bit_identical(src, backend):
    g = _graph()
    on, off = _pair(src, backend, g)
    assert on.hoist_plan().ops, "something is hoisted"
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (on, off)]
    for _ in range(4):
        losses = []
        for m, opt in zip((on, off), opts):
            losses.append(_step(m, opt))
        assert losses[0] == losses[1]
    for m in (on, off):
        m.eval()
    assert torch.equal(on(), off())
    for p, q in zip(on.parameters(), off.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("backend", _backends())
def test_the_marked_ops_run_once(backend):
    g = _graph()
    m = gdsl.compile(SGC).module(g, backend=backend, hoist=True)
    ran = _count_ops(m)
    for _ in range(3):
        m()
    assert ran.count("aggregate") == 2 and ran.count("relu") == 1   # K = 2: once, not once per forward
    assert ran.count("matmul") == 3   # the param's matmul each forward
    m.hoist = False
    ran.clear()
    m()
    assert ran.count("aggregate") == 2 and m._hoist_cache is None


@pytest.mark.parametrize("backend", _backends())
def test_kept_values_follow_the_features(backend):
    g = _graph()
    on, off = _pair(SGC, backend, g)
    for m in (on, off):
        m.eval()
    x = g.features.clone()
    assert torch.equal(on(x), off(x))
    x.mul_(2)   # in place: torch's version counter
    assert torch.equal(on(x), off(x))
    y = torch.rand_like(x)   # another tensor
    assert torch.equal(on(y), off(y))
    assert torch.equal(on(), off())   # the bound features again
    g2 = on.graph.features
    g2.add_(1)   # the bound features edited in place
    assert torch.equal(on(), off())
    for _ in range(3):   # new tensors, freed each time (a reused id must not look like the old tensor)
        z = torch.rand_like(x)
        assert torch.equal(on(z), off(z))
        del z


@pytest.mark.parametrize("backend", _backends())
def test_an_input_requiring_grad_is_not_kept(backend):
    g = _graph()
    on, off = _pair(SGC, backend, g)
    x = g.features.clone().requires_grad_(True)
    gx = [torch.autograd.grad(m(x).square().sum(), x)[0] for m in (on, off)]
    assert torch.equal(gx[0], gx[1]) and gx[0].abs().sum() > 0
    assert on._hoist_cache is None
    with torch.no_grad():   # no gradient asked for: kept
        assert torch.equal(on(x), off(x))
    assert on._hoist_cache is not None


@pytest.mark.parametrize("backend", _backends())
def test_dtype_and_copies(backend):
    g = _graph()
    on, off = _pair(SGC, backend, g)
    on(), off()
    on.double(), off.double()
    a, b = on(), off()
    assert a.dtype == torch.float64 and torch.equal(a, b)
    on.float(), off.float()
    assert torch.equal(on(), off())
    for clone in (copy.deepcopy(on), pickle.loads(pickle.dumps(on))):
        assert clone.hoist and torch.equal(clone(), off())


def test_an_invariant_output_is_returned_as_a_copy():
    g = random_graph(n=30, e=90, f=3, c=3, seed=3)   # F = C: the propagated features are the logits
    m = gdsl.compile(PARAM_FREE).module(g, backend="reference", hoist=True)
    first = m()
    expected = first.clone()
    first.add_(100)   # the caller's edit
    assert torch.equal(m(), expected)


# the output is a kept value seen through a dropout (the identity in eval mode, and at p = 0)
DROPPED_OUTPUT = HEAD + """
model M[p = 0.5] {
    return dropout(Prop(X), p)
}
""" + TRAIN


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("mode", ["eval", "p0"])
def test_an_output_aliasing_a_kept_value_is_returned_as_a_copy(backend, mode):
    g = random_graph(n=30, e=90, f=3, c=3, seed=3)
    prog = gdsl.compile(DROPPED_OUTPUT, p=0.0 if mode == "p0" else 0.5)
    m = prog.module(g, backend=backend, hoist=True)
    m.train(mode == "p0")
    first = m()
    expected = first.clone()
    first.zero_()   # the caller's edit
    assert torch.equal(m(), expected) and expected.abs().sum() > 0


@pytest.mark.parametrize("backend", _backends())
def test_inference_mode(backend):
    """A forward under torch.inference_mode() keeps nothing (its tensors
    could not be saved for a later training step's backward), uses what an
    earlier forward kept, and features made under it (no version counter)
    are never kept."""
    g = _graph()
    on, off = _pair(SGC, backend, g)
    with torch.inference_mode():
        assert torch.equal(on(), off())
    assert on._hoist_cache is None
    for m in (on, off):   # a training step after it
        m.loss(m()).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(on.parameters(), off.parameters()))
    kept = on._hoist_cache
    with torch.inference_mode():
        assert torch.equal(on(), off())
        x = g.features * 2
        assert torch.equal(on(x), off(x))
    assert on._hoist_cache is kept
    assert torch.equal(on(x), off(x)) and on._hoist_cache is kept


def test_hoist_is_a_bool():
    g = _graph()
    prog = gdsl.compile(SGC)
    with pytest.raises(TypeError, match="hoist must be True or False"):
        prog.module(g, backend="reference", hoist=1)
    m = prog.module(g, backend="reference")
    assert m.hoist is False   # off by default, as PyG's cached=False
    with pytest.raises(TypeError, match="model.hoist must be True or False"):
        m.hoist = "yes"


def test_train_hoists():
    import warnings
    from gdsl.runtime.trainer import train
    prog = gdsl.compile(SGC)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = train(prog, _graph(), epochs=3, backend="reference")
    assert res.model.hoist and res.model._hoist_cache is not None and len(res.epochs) == 3


def test_triton_hoisted_matches_unhoisted():
    pytest.importorskip("triton")
    from gdsl.backends.triton import interpret_mode
    if not (interpret_mode() or torch.cuda.is_available()):
        pytest.skip("TRITON_INTERPRET=0 and no CUDA GPU")
    g = random_graph(n=14, e=40, f=5, c=3, seed=11, isolated=2)
    on, off = _pair(MEAN, "triton", g)
    for _ in range(2):
        losses = []
        for m in (on, off):
            m.train()
            loss = m.loss(m())
            loss.backward()
            losses.append(loss.item())
        assert losses[0] == losses[1]
    assert on.hoist_plan().ops and on._hoist_cache is not None


@pytest.mark.parametrize("backend", _backends())
def test_a_group_with_an_unmarked_op_runs_whole(backend):
    """A backend group (here the order pass's linear group, from a backward
    order autograd would not pick) that holds a marked aggregation and the
    unmarked `@`: the group runs each forward, and what feeds it (Prop's
    aggregation) is still kept."""
    src = HEAD + """
layer Conv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    return s
}

model M {
    h = Prop(X)
    return Conv[C](h)
}
""" + TRAIN + """
schedule {
    order Conv#1 = sparse_first(backward = sparse_first)
}
"""
    g = _graph()
    on, off = _pair(src, backend, g)
    assert on._lin_anchor, "the hint makes a linear group"
    ran = _count_ops(on)
    for _ in range(3):
        on.train()
        off.train()
        a, b = on(), off()
        assert torch.equal(a, b)
        ga = torch.autograd.grad(a.square().sum(), list(on.parameters()))
        gb = torch.autograd.grad(b.square().sum(), list(off.parameters()))
        assert all(torch.equal(p, q) for p, q in zip(ga, gb))
    assert ran.count("aggregate") == 1   # Prop's, once; Conv's runs inside its group's anchor
    assert ran.count("matmul") == 3


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_dropout_masks_do_not_depend_on_whether_the_compile_hoists(backend):
    """Twin calls on X before a dropout (helper-65): the hoisting compile (`gdsl run`) orders their
    aggregation of X by `invariant` (one shared A X), `prog.module(graph)` and the MPI ranks by width (two
    dense-first layers), so the dropout sits at another op position, which seeded another mask (loss 0.128
    apart by step 5 on Cora). compiler.mask_keys gives both `gdsl run`'s numbering."""
    if backend == "numba":
        pytest.importorskip("numba")
    prog = gdsl.compile(ROOT / "tests" / "dist_programs" / "twin_dropout.gd")
    g = random_graph(n=60, e=200, f=24, c=4)
    hoisted, plain = prog.bind(g, hoist=True).module, prog.bind(g).module
    # the case: one shared A X there, two dense-first aggregations here, the dropout at another position
    assert [sum(op.name == "aggregate" for op in m.main.ops) for m in (hoisted, plain)] == [1, 2]
    assert plain.mask_keys is not None and hoisted.mask_keys is None
    losses = []
    for hoist in (True, False):
        torch.manual_seed(0)
        m = prog.module(g, backend=backend, hoist=hoist)
        opt = torch.optim.Adam(m.parameters(), lr=0.05)
        losses.append([_step(m, opt) for _ in range(4)])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_the_example_programs_keep_their_masks():
    """gcn / gat: no aggregation a hoisting compile orders otherwise, so no second compile; sage
    (sparse-first on X there, dense-first here) has its dropouts at the same positions in both: the
    three keep the masks they drew before compiler.mask_keys."""
    g = gdsl.load_graph("cora")
    for name in ("gcn", "gat", "sage"):
        m = gdsl.compile(ROOT / "programs" / f"{name}.gd").bind(g).module
        own = [i for i, op in enumerate(m.main.ops) if op.name == "dropout"]
        assert m.mask_keys == (own if name == "sage" else None)
