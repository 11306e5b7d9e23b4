"""The Numba backend's fused kernels against plain-torch references
(index_add / scatter_reduce), with gradcheck in float64 for every variant.

Numba compile time dominates a cold run (1-6 s of one core per parallel
kernel and dtype, some 130 here): a module fixture compiles them all up front
in parallel worker processes (gdsl.backends.numba.warm, the list in
kernel_warmup.py, which conftest.py also starts compiling in the background
when the session starts) into the disk cache, from which later runs only
load.  Every variant is checked in
float64 (forward and gradcheck), float32 on a subset that covers each kernel
family.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as Fn

pytest.importorskip("numba")

from kernel_warmup import F32_VARIANTS, REQUESTS, SCALE_CASES, VARIANTS

from gdsl.backends.numba import (
    COMPILE_TIMES,
    CSRGraph,
    aggregate,
    edge_softmax,
    gat_aggregate,
    kernel_source,
    sddmm,
    set_cache_blocking,
)
from gdsl.backends.numba import dense as ndense
from gdsl.backends.numba import ops as nops
from gdsl.backends.numba.graph import balanced_chunks
from gdsl.backends.numba.warm import warm

F64 = torch.float64


# --------------------------------------------------------------------------
# graphs
# --------------------------------------------------------------------------

class G:
    """Edges, CSR graph and a name."""

    def __init__(self, name, src, dst, n, **kw):
        self.name = name
        self.src = torch.as_tensor(src, dtype=torch.int64)
        self.dst = torch.as_tensor(dst, dtype=torch.int64)
        self.n = n
        self.e = int(self.src.numel())
        self.g = CSRGraph.build(self.src, self.dst, n, **kw)

    def __repr__(self):
        return self.name


def _small():
    # self loops (1, 3, 4, 6), a duplicated edge (5 -> 2 twice), a vertex with
    # out-edges only (0), vertices 7 and 8 isolated
    src = [0, 1, 2, 3, 3, 4, 5, 5, 6, 2, 1, 0, 4, 0]
    dst = [1, 1, 0, 3, 4, 4, 2, 2, 6, 5, 6, 3, 0, 5]
    return G("small", src, dst, 9)


def _hub():
    # vertex 0 has 3000 in-edges (repeated sources); 29 is isolated
    gen = torch.Generator().manual_seed(1)
    hs = torch.randint(1, 29, (3000,), generator=gen)
    rs = torch.randint(0, 29, (60,), generator=gen)
    rd = torch.randint(1, 29, (60,), generator=gen)
    return G("hub", torch.cat([hs, rs]), torch.cat([torch.zeros(3000, dtype=torch.int64), rd]), 30)


def _empty():
    return G("empty", [], [], 5)


SMALL, HUB, EMPTY = _small(), _hub(), _empty()


# --------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------

def _pad(w, nd):
    return w.reshape(tuple(w.shape) + (1,) * (nd - w.dim()))


def ref_aggregate(gr: G, x, w, msg, reduce, to):
    col, row = (gr.src, gr.dst) if to == "dst" else (gr.dst, gr.src)
    if msg == "copy_edge":
        m = w
    else:
        xs = x[col]
        if msg == "copy_src":
            m = xs
        else:
            wb = _pad(w, xs.dim())
            m = {"add": xs + wb, "sub": xs - wb, "mul": xs * wb, "div": xs / wb}[msg]
    out = m.new_zeros((gr.n,) + tuple(m.shape[1:]))
    if reduce in ("sum", "mean"):
        out = out.index_add(0, row, m)
        if reduce == "mean":
            deg = torch.bincount(row, minlength=gr.n).clamp(min=1).to(m.dtype)
            out = out / _pad(deg, out.dim())
        return out
    # start at -inf (+inf): scatter_reduce's backward counts a start equal to
    # the result as one more tie, so a zero start would halve a max of 0's gradient
    idx = _pad(row, m.dim()).expand_as(m)
    start = out.new_full(out.shape, float("-inf") if reduce == "max" else float("inf"))
    out = start.scatter_reduce(0, idx, m, "amax" if reduce == "max" else "amin", include_self=False)
    has = _pad(torch.bincount(row, minlength=gr.n) > 0, out.dim())
    return torch.where(has, out, out.new_zeros(()))


def ref_edge_softmax(gr: G, s):
    idx = _pad(gr.dst, s.dim()).expand_as(s)
    mx = s.new_full((gr.n,) + tuple(s.shape[1:]), float("-inf")).scatter_reduce(
        0, idx, s.detach(), "amax", include_self=True)
    e = torch.exp(s - mx[gr.dst])
    den = e.new_zeros((gr.n,) + tuple(s.shape[1:])).index_add(0, gr.dst, e)
    return e / den[gr.dst]


def ref_gat(gr: G, el, er, z, slope):
    a = ref_edge_softmax(gr, Fn.leaky_relu(el[gr.src] + er[gr.dst], slope))
    return z.new_zeros(z.shape).index_add(0, gr.dst, a.unsqueeze(-1) * z[gr.src])


def ref_sddmm(gr: G, a, b, op):
    au, bv = a[gr.src], b[gr.dst]
    if op == "dot":
        return (au * bv).sum(-1)
    return {"add": au + bv, "sub": au - bv, "mul": au * bv, "div": au / bv}[op]


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------

# broadcast kinds: x feature shape, w feature shape
SHAPES = {
    "copy_src": ((2, 3), None),
    "copy_edge": (None, (3,)),
    "scalar": ((3, 2), ()),          # w [E], broadcast over all feature axes
    "head": ((2, 3), (2,)),          # w [E, H] with x [N, H, D]
    "full": ((4,), (4,)),            # w [E, *fs]
}


def make_inputs(gr: G, kind, msg, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    xs, ws = SHAPES[kind]
    x = torch.randn((gr.n,) + xs, generator=gen, dtype=F64).to(dtype) if xs is not None else None
    w = None
    if ws is not None:
        w = torch.randn((gr.e,) + ws, generator=gen, dtype=F64)
        if msg == "div":   # keep away from 0
            w = torch.sign(w) * (0.5 + w.abs())
        w = w.to(dtype)
    return x, w


@pytest.fixture(scope="module", autouse=True)
def _warm_kernels():
    """Compile this file's kernels in parallel processes (a no-op once cached).
    The small graphs run their kernels on one thread (cheap launches for
    gradcheck's many calls), the hub graph's go parallel over its chunks."""
    warm(REQUESTS, processes=min(2, os.cpu_count() or 1))
    saved = nops.SERIAL_BELOW
    nops.SERIAL_BELOW = 2048
    yield
    nops.SERIAL_BELOW = saved


def _vid(v):
    return "-".join(v)


# --------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
def test_aggregate_float64(variant):
    msg, reduce, to, kind = variant
    for gr in (SMALL, HUB, EMPTY):
        x, w = make_inputs(gr, kind, msg, F64)
        got = aggregate(gr.g, x, w, msg, reduce, to)
        want = ref_aggregate(gr, x, w, msg, reduce, to)
        assert got.shape == want.shape and got.dtype == F64
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

        inputs = tuple(t.requires_grad_() for t in (x, w) if t is not None)

        def f(*ts, gr=gr, has_x=x is not None, has_w=w is not None):
            it = iter(ts)
            xx = next(it) if has_x else None
            ww = next(it) if has_w else None
            return aggregate(gr.g, xx, ww, msg, reduce, to)
        # full Jacobians on the small graph for to=dst; random projections
        # (fast mode) otherwise: each kernel launch costs tens of microseconds
        # and the hub's 3000 edges make full Jacobians slow
        assert torch.autograd.gradcheck(f, inputs, fast_mode=not (gr is SMALL and to == "dst"))


def tie_inputs(gr: G, kind, msg, seed=0):
    """Small integers: many tied messages per row."""
    gen = torch.Generator().manual_seed(seed)
    xs, ws = SHAPES[kind]
    x = torch.randint(-1, 2, (gr.n,) + xs, generator=gen).to(F64) if xs is not None else None
    w = None
    if ws is not None:
        w = torch.randint(-1, 2, (gr.e,) + ws, generator=gen).to(F64)
        if msg == "div":   # +-1, +-2
            w = torch.where(w >= 0, 1.0, -1.0) * (1 + torch.randint(0, 2, w.shape, generator=gen))
    return x, w


@pytest.mark.parametrize("chunk", [None, 5], ids=["whole", "chunked"])
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[1] in ("max", "min")], ids=_vid)
def test_aggregate_ties_share_the_gradient(variant, chunk, monkeypatch):
    """Tied messages (as after a relu, or from equal rows) share each output
    element's gradient evenly, as torch's scatter_reduce does in the reference
    (was: all of it to the one edge the kernel kept); also with the edges
    taken a few at a time (maxmin.CHUNK_ELEMENTS)."""
    msg, reduce, to, kind = variant
    if chunk is not None:
        from gdsl.backends import maxmin
        monkeypatch.setattr(maxmin, "CHUNK_ELEMENTS", chunk)
    for gr in (SMALL, HUB):
        x, w = tie_inputs(gr, kind, msg)
        xs = [t.clone().requires_grad_() if t is not None else None for t in (x, x)]
        ws = [t.clone().requires_grad_() if t is not None else None for t in (w, w)]
        got = aggregate(gr.g, xs[0], ws[0], msg, reduce, to)
        want = ref_aggregate(gr, xs[1], ws[1], msg, reduce, to)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        gout = torch.randn(got.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
        got.backward(gout)
        want.backward(gout)
        for a, b in ((xs[0], xs[1]), (ws[0], ws[1])):
            if a is not None:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", F32_VARIANTS, ids=_vid)
def test_aggregate_float32(variant):
    msg, reduce, to, kind = variant
    for gr in (SMALL, HUB):
        x, w = make_inputs(gr, kind, msg, torch.float32, seed=3)
        got = aggregate(gr.g, x, w, msg, reduce, to)
        assert got.dtype == torch.float32
        want = ref_aggregate(gr, *(t.double() if t is not None else None for t in (x, w)), msg, reduce, to)
        # float32 sums over the hub's 3000 in-edges: sequential rounding error
        # grows with the degree (torch's index_add has the same)
        tol = {"rtol": 1e-4, "atol": 2e-2} if gr is HUB else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(got.double(), want, **tol)
        # float32 backward against autograd of the reference
        xr = x.clone().requires_grad_() if x is not None else None
        wr = w.clone().requires_grad_() if w is not None else None
        xn = x.clone().requires_grad_() if x is not None else None
        wn = w.clone().requires_grad_() if w is not None else None
        gout = torch.randn(got.shape)
        ref_aggregate(gr, xr, wr, msg, reduce, to).backward(gout)
        aggregate(gr.g, xn, wn, msg, reduce, to).backward(gout)
        for a, b in ((xn, xr), (wn, wr)):
            if a is not None:
                assert a.grad.dtype == torch.float32
                torch.testing.assert_close(a.grad, b.grad, **tol)


def test_aggregate_needs_input_grad(monkeypatch):
    """No gradient (and no kernel) for inputs that do not need one."""
    x, w = make_inputs(SMALL, "head", "mul", F64)
    x.requires_grad_()

    def boom(*a, **k):
        raise AssertionError("d w computed although w needs no gradient")
    monkeypatch.setattr(nops, "sddmm_raw", boom)
    out = aggregate(SMALL.g, x, w, "mul", "sum")
    out.sum().backward()
    assert x.grad is not None and w.grad is None

    x2, w2 = make_inputs(SMALL, "head", "mul", F64)
    w2.requires_grad_()
    calls = []
    real = nops.agg_raw

    def spy(*a, **k):
        calls.append(a[3])
        return real(*a, **k)
    monkeypatch.undo()  # sddmm_raw back: d w needs it
    monkeypatch.setattr(nops, "agg_raw", spy)
    aggregate(SMALL.g, x2, w2, "mul", "sum").sum().backward()
    assert calls == ["mul"]  # the forward only: d x was not computed
    assert x2.grad is None and w2.grad is not None


def test_aggregate_rejects_bad_shapes():
    x, w = make_inputs(SMALL, "full", "mul", F64)
    with pytest.raises(ValueError, match="does not broadcast"):
        aggregate(SMALL.g, x, w[:, :3], "mul", "sum")
    with pytest.raises(ValueError, match="unknown message"):
        aggregate(SMALL.g, x, w, "pow", "sum")
    with pytest.raises(ValueError, match="rows"):
        aggregate(SMALL.g, x[:3], w, "mul", "sum")


@pytest.mark.parametrize("seed", [0, 1])
def test_csr_construction_equals_a_stable_sort(seed):
    """The counting-sort CSR build gives the slots of a stable sort on
    (row, endpoint): repeated edges (in edge-id order), a 300-edge hub row
    (the argsort branch), short unsorted rows (insertion) and empty rows."""
    gen = np.random.default_rng(seed)
    n = 60
    src = np.concatenate([gen.integers(0, n, 700), gen.integers(0, n, 300), np.full(40, 3)])
    dst = np.concatenate([gen.integers(0, n - 5, 700), np.full(300, 7), gen.integers(0, 4, 40)])
    g = CSRGraph.build(torch.from_numpy(src), torch.from_numpy(dst), n)
    for csr, rows, cols in ((g.in_csr, dst, src), (g.out_csr, src, dst)):
        order = np.argsort(rows * n + cols, kind="stable")
        assert np.array_equal(csr.indptr, np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]))
        assert np.array_equal(csr.indices, cols[order]) and np.array_equal(csr.eid, order)
        assert csr.indices.dtype == np.int32 and csr.eid.dtype == np.int32
    g64 = CSRGraph.build(torch.from_numpy(src), torch.from_numpy(dst), n, index_dtype=np.int64)
    assert np.array_equal(g64.in_csr.eid, g.in_csr.eid) and g64.in_csr.eid.dtype == np.int64


def test_permuted_edge_data_makes_the_backward_order_on_first_use():
    g = CSRGraph.build(HUB.src, HUB.dst, HUB.n)
    x, w = make_inputs(HUB, "scalar", "mul", F64, seed=31)
    wp = nops.permute_edge_data(g, w, "dst")
    with torch.no_grad():
        out = aggregate(g, x, w, "mul", "sum", w_perm=wp)
    assert wp._orders[1] is None and g._out is None      # forward only: no reverse order, no out-CSR
    torch.testing.assert_close(out, ref_aggregate(HUB, x, w, "mul", "sum", "dst"))
    x.requires_grad_(True)
    aggregate(g, x, w, "mul", "sum", w_perm=wp).sum().backward()
    assert wp._orders[1] is not None
    assert torch.equal(wp[1], w[torch.from_numpy(g.out_csr.eid).long()])
    xr = x.detach().clone().requires_grad_(True)
    ref_aggregate(HUB, xr, w, "mul", "sum", "dst").sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_csrs_are_built_on_first_use():
    """A forward aggregation to dst builds only the in-CSR; the backward (or
    to=src) builds the out-CSR; the results equal an eagerly built graph's."""
    g = CSRGraph.build(HUB.src, HUB.dst, HUB.n)
    assert g._in is None and g._out is None and "built=none" in repr(g)
    x, _ = make_inputs(HUB, "copy_src", "copy_src", F64)
    x.requires_grad_(True)
    out = aggregate(g, x, None, "copy_src", "sum")
    assert g._in is not None and g._out is None
    out.sum().backward()
    assert g._out is not None
    torch.testing.assert_close(out, ref_aggregate(HUB, x, None, "copy_src", "sum", "dst"))
    for a, b in ((g.in_csr, HUB.g.in_csr), (g.out_csr, HUB.g.out_csr)):
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.array_equal(a.eid, b.eid) and np.array_equal(a.chunks, b.chunks)


def test_int64_indices():
    g64 = CSRGraph.build(HUB.src, HUB.dst, HUB.n, index_dtype=np.int64)
    assert g64.in_csr.indices.dtype == np.int64 and HUB.g.in_csr.indices.dtype == np.int32
    x, _ = make_inputs(HUB, "copy_src", "copy_src", F64)
    torch.testing.assert_close(aggregate(g64, x, None, "copy_src", "sum"),
                               ref_aggregate(HUB, x, None, "copy_src", "sum", "dst"))


def test_cache_blocked_aggregate():
    """DistGNN Alg. 2 kernels (used in "auto" mode only when x outgrows the
    cache, so forced on here) agree with the reference."""
    prev = set_cache_blocking("on")
    try:
        for block in (1, 4, 7, 100):
            set_cache_blocking("on", block)
            for gr in (SMALL, HUB):
                x, w = make_inputs(gr, "head", "mul", F64, seed=5)
                for msg, ww in (("copy_src", None), ("mul", w)):
                    for reduce in ("sum", "mean"):
                        torch.testing.assert_close(aggregate(gr.g, x, ww, msg, reduce),
                                                   ref_aggregate(gr, x, ww, msg, reduce, "dst"))
        assert any(k.startswith("aggregate_blocked_") for k in COMPILE_TIMES)
    finally:
        set_cache_blocking(*prev)


@pytest.mark.parametrize("chunk", [1, 3, 50, 1 << 21])
def test_block_pointers_in_row_runs(monkeypatch, chunk):
    """CSR.blocked builds its pointers over runs of rows (chunk = slots per
    run; 1 and 3 split the hub's row, wider than a run, and the empty rows):
    bptr[b, r] = first slot of row r whose endpoint is at least b * block."""
    import gdsl.backends.numba.graph as ngraph

    monkeypatch.setattr(ngraph, "BLOCKED_CHUNK_EDGES", chunk)
    for gr in (SMALL, HUB):
        fresh = CSRGraph.build(gr.src, gr.dst, gr.n)
        csr = fresh.in_csr
        for block in (1, 4, 7, 100):
            bp = csr.blocked(block)
            nb = bp.shape[0] - 1
            assert nb == -(-(csr.max_col() + 1) // block)
            for r in range(csr.nrows):
                s, e = int(csr.indptr[r]), int(csr.indptr[r + 1])
                cols = csr.indices[s:e]
                want = [s + int(np.searchsorted(cols, b * block)) for b in range(nb)] + [e]
                assert bp[:, r].tolist() == want


def test_cache_blocking_auto_follows_the_cache_model(monkeypatch):
    """auto mode blocks only when the active source rows outgrow half the
    last-level cache; pretend the cache holds 8 rows of the hub's x."""
    x, _ = make_inputs(HUB, "copy_src", "copy_src", F64)
    row = x[0].numel() * 8
    assert nops.block_size_for(HUB.g.in_csr, row) is None  # real cache: fits
    monkeypatch.setattr(nops, "_cache_bytes", lambda: 16 * row)
    assert nops.block_size_for(HUB.g.in_csr, row) == 8
    csr = HUB.g.in_csr
    used = []
    real = csr.blocked
    monkeypatch.setattr(csr, "blocked", lambda b: used.append(b) or real(b))
    prev = set_cache_blocking("auto")
    try:
        torch.testing.assert_close(aggregate(HUB.g, x, None, "copy_src", "sum"),
                                   ref_aggregate(HUB, x, None, "copy_src", "sum", "dst"))
        assert used == [8]
        aggregate(HUB.g, x, None, "copy_src", "max")  # max/min are never blocked
        assert used == [8]
    finally:
        set_cache_blocking(*prev)


def test_balanced_chunks():
    deg = np.array([0, 5, 3000, 1, 1, 0, 7] + [2] * 500)
    b = balanced_chunks(deg, nthreads=2, per_thread=8, min_work=16)
    assert b[0] == 0 and b[-1] == deg.size and np.all(np.diff(b) > 0)
    cost = np.add.reduceat(deg + 1, b[:-1])
    # every chunk but the one holding the 3000-edge row is near the mean
    assert cost.max() == cost[np.searchsorted(b, 2, side="right") - 1]
    assert HUB.g.in_csr.chunks.shape[0] > 2  # small tests still cross chunk borders
    assert balanced_chunks(np.zeros(0, np.int64)).tolist() == [0]


# --------------------------------------------------------------------------
# sddmm, edge softmax, GAT
# --------------------------------------------------------------------------

SDDMM_CASES = [("dot", (2, 3)), ("dot", (4,)), ("add", (2,)), ("sub", (2, 2)), ("mul", (3,)), ("div", (2,))]


@pytest.mark.parametrize("op,fs", SDDMM_CASES, ids=[f"{o}-{'x'.join(map(str, f))}" for o, f in SDDMM_CASES])
def test_sddmm(op, fs):
    for gr in (SMALL, HUB, EMPTY):
        gen = torch.Generator().manual_seed(2)
        a = torch.randn((gr.n,) + fs, generator=gen, dtype=F64)
        b = torch.randn((gr.n,) + fs, generator=gen, dtype=F64)
        if op == "div":
            b = torch.sign(b) * (0.5 + b.abs())
        torch.testing.assert_close(sddmm(gr.g, a, b, op), ref_sddmm(gr, a, b, op))
        a.requires_grad_()
        b.requires_grad_()
        assert torch.autograd.gradcheck(lambda p, q, gr=gr: sddmm(gr.g, p, q, op), (a, b), fast_mode=gr is HUB)
        # only one side needs a gradient
        a2 = a.detach().clone().requires_grad_()
        sddmm(gr.g, a2, b.detach(), op).sum().backward()
        assert a2.grad is not None


def test_sddmm_float32():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(HUB.n, 3, 8, generator=gen)
    b = torch.randn(HUB.n, 3, 8, generator=gen)
    torch.testing.assert_close(sddmm(HUB.g, a, b, "dot"), ref_sddmm(HUB, a, b, "dot"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hs", [(), (3,), (2, 2)], ids=["E", "ExH", "Ex2x2"])
def test_edge_softmax(hs):
    for gr in (SMALL, HUB, EMPTY):
        gen = torch.Generator().manual_seed(6)
        s = (3 * torch.randn((gr.e,) + hs, generator=gen, dtype=F64)).requires_grad_()
        got = edge_softmax(gr.g, s)
        torch.testing.assert_close(got, ref_edge_softmax(gr, s))
        assert torch.autograd.gradcheck(lambda t, gr=gr: edge_softmax(gr.g, t), (s,), fast_mode=gr is HUB)
    s32 = (10 * torch.randn(HUB.e, 3)).requires_grad_()
    y = edge_softmax(HUB.g, s32)
    torch.testing.assert_close(y, ref_edge_softmax(HUB, s32), rtol=1e-5, atol=1e-6)
    gout = torch.randn(HUB.e, 3)
    (gn,) = torch.autograd.grad(y, s32, gout)
    (gr_,) = torch.autograd.grad(ref_edge_softmax(HUB, s32), s32, gout)
    torch.testing.assert_close(gn, gr_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("H,D", [(1, 3), (3, 2)])
def test_gat_aggregate(H, D):
    slope = 0.2
    for gr in (SMALL, HUB, EMPTY):
        gen = torch.Generator().manual_seed(7)
        el = (2 * torch.randn(gr.n, H, generator=gen, dtype=F64)).requires_grad_()
        er = (2 * torch.randn(gr.n, H, generator=gen, dtype=F64)).requires_grad_()
        z = torch.randn(gr.n, H, D, generator=gen, dtype=F64).requires_grad_()
        torch.testing.assert_close(gat_aggregate(gr.g, el, er, z, slope), ref_gat(gr, el, er, z, slope))
        assert torch.autograd.gradcheck(lambda a, b, c, gr=gr: gat_aggregate(gr.g, a, b, c, slope), (el, er, z),
                                        fast_mode=gr is HUB)
        # subsets of inputs needing gradients
        for need in ((False, False, True), (True, False, False), (False, True, False)):
            ts = [t.detach().clone().requires_grad_(n) for t, n in zip((el, er, z), need)]
            gout = torch.randn(gr.n, H, D, generator=gen, dtype=F64)
            gat_aggregate(gr.g, *ts, slope).backward(gout)
            refs = [t.detach().clone().requires_grad_(n) for t, n in zip((el, er, z), need)]
            ref_gat(gr, *refs, slope).backward(gout)
            for t, r, n in zip(ts, refs, need):
                assert (t.grad is None) == (not n)
                if n:
                    torch.testing.assert_close(t.grad, r.grad)


def test_gat_float32_large_degree():
    gen = torch.Generator().manual_seed(8)
    H, D = 4, 8
    el = (3 * torch.randn(HUB.n, H, generator=gen)).requires_grad_()
    er = (3 * torch.randn(HUB.n, H, generator=gen)).requires_grad_()
    z = torch.randn(HUB.n, H, D, generator=gen).requires_grad_()
    got = gat_aggregate(HUB.g, el, er, z, 0.2)
    want = ref_gat(HUB, el, er, z, 0.2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    gout = torch.randn(HUB.n, H, D, generator=gen)
    gn = torch.autograd.grad(got, (el, er, z), gout)
    gr_ = torch.autograd.grad(want, (el, er, z), gout)
    for a, b in zip(gn, gr_):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------
# source and compile accounting
# --------------------------------------------------------------------------

def test_kernel_source_and_compile_times():
    src = kernel_source("aggregate", msg="mul", reduce="max", bcast="w")
    assert "@njit(parallel=True, cache=True, fastmath=False)" in src
    assert "prange(chunks.shape[0] - 1)" in src
    assert "t = x0[h, i] * s0" in src and "if t > o[h, i] or (t != t and o[h, i] == o[h, i]):" in src
    assert "x0[h, i] + " not in src  # the message op is a constant of the text
    assert "s0 = w0[h]" in kernel_source("aggregate", msg="div", reduce="sum", bcast="w")
    assert "for b in range(nb):" in kernel_source("aggregate", msg="copy_src", reduce="sum", blocked=True)
    # sum: eight edges per step, summed pairwise; permuted edge data read at the slot;
    # row scale (mean) in the epilogue; flat [rows, F] rows without per-head scalars
    s = kernel_source("aggregate", msg="mul", reduce="sum", bcast="s", wperm=True, rscale=True)
    assert "while j + 8 <= end:" in s and "s7 = w[j + 7]" in s and "= eid[" not in s
    assert "o[d] += ((x0[d] * s0 + x1[d] * s1)" in s and "o[d] = o[d] * f" in s
    assert "o[d] = o[d] * f" in kernel_source("aggregate", msg="copy_src", reduce="mean")
    epi = kernel_source("epilogue", act="relu", bias=True, drop=True)
    assert "def mt_twist" in epi and "def epi_fwd" in epi and "def epi_bwd" in epi
    assert "def sddmm_dot" in kernel_source("sddmm", op="dot")
    assert "def edge_softmax_bwd" in kernel_source("edge_softmax")
    gat = kernel_source("gat_aggregate")
    assert "def gat_fwd" in gat and "def gat_bwd" in gat and "p = math.exp(q[h] - m[h])" in gat
    assert "o[h, i] += (p0 * z0[h, i] + p1 * z1[h, i]) + (p2 * z2[h, i] + p3 * z3[h, i])" in gat
    with pytest.raises(ValueError):
        kernel_source("aggregate", msg="copy_src", reduce="prod")
    # the kernels used above were recorded with their compile (or load) time
    aggregate(SMALL.g, torch.randn(SMALL.n, 2, dtype=F64), None, "copy_src", "sum")
    assert any(k.startswith("aggregate_copy_src_sum_none[float64") for k in COMPILE_TIMES)
    assert all(v >= 0 for v in COMPILE_TIMES.values())


# --------------------------------------------------------------------------
# fused scales, permuted edge data, the layer epilogue
# --------------------------------------------------------------------------

@pytest.mark.parametrize("case", SCALE_CASES, ids=["-".join(c) for c in SCALE_CASES])
@pytest.mark.parametrize("to", ["dst", "src"])
def test_aggregate_scales(case, to):
    """out[v] = oscale[v] * REDUCE_e MSG(x[u] * xscale[u], w[e]): forward and
    gradients (float64 gradcheck; the scales are constants) on graphs with
    isolated vertices, a 3000-in-edge hub and no edges."""
    msg, kind, reduce = case
    for gr in (SMALL, HUB, EMPTY):
        x, w = make_inputs(gr, kind, msg, F64, seed=9)
        gen = torch.Generator().manual_seed(10)
        xs = torch.rand(gr.n, generator=gen, dtype=F64) + 0.5
        os_ = torch.rand(gr.n, generator=gen, dtype=F64) + 0.5
        for use_x, use_o in ((True, False), (False, True), (True, True)):
            kw = {"xscale": xs if use_x else None, "oscale": os_ if use_o else None}

            def ref(xx, ww, gr=gr, xs=xs, os_=os_, use_x=use_x, use_o=use_o):
                xx2 = xx * _pad(xs, xx.dim()) if use_x else xx
                out = ref_aggregate(gr, xx2, ww, msg, reduce, to)
                return out * _pad(os_, out.dim()) if use_o else out

            torch.testing.assert_close(aggregate(gr.g, x, w, msg, reduce, to, **kw), ref(x, w),
                                       rtol=1e-10, atol=1e-10)
            ins = tuple(t.clone().requires_grad_() for t in (x, w) if t is not None)

            def f(*ts, gr=gr, kw=kw):
                return aggregate(gr.g, ts[0], ts[1] if len(ts) > 1 else None, msg, reduce, to, **kw)
            assert torch.autograd.gradcheck(f, ins, fast_mode=gr is HUB)


@pytest.mark.parametrize("to", ["dst", "src"])
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
def test_aggregate_permuted_constant_edge_data(to, dtype):
    """A constant w read in CSR slot order (permute_edge_data) gives the same
    aggregation and the same gradient of x as w read through the edge ids."""
    for gr in (SMALL, HUB, EMPTY):
        x, w = make_inputs(gr, "scalar", "mul", dtype, seed=11)
        wp = nops.permute_edge_data(gr.g, w, to)
        os_ = torch.rand(gr.n, dtype=dtype) + 0.5
        for kw in ({}, {"oscale": os_}):
            xa = x.clone().requires_grad_()
            xb = x.clone().requires_grad_()
            a = aggregate(gr.g, xa, w, "mul", "sum", to, **kw)
            b = aggregate(gr.g, xb, w, "mul", "sum", to, w_perm=wp, **kw)
            torch.testing.assert_close(b, a)
            gout = torch.randn(a.shape, dtype=dtype)
            a.backward(gout)
            b.backward(gout)
            torch.testing.assert_close(xb.grad, xa.grad)
    x, w = make_inputs(SMALL, "scalar", "mul", F64)
    with pytest.raises(ValueError, match="constant"):
        aggregate(SMALL.g, x, w.requires_grad_(), "mul", "sum", w_perm=nops.permute_edge_data(SMALL.g, w))


def test_aggregate_scale_errors():
    x, w = make_inputs(SMALL, "scalar", "mul", F64)
    s = torch.ones(SMALL.n, dtype=F64)
    with pytest.raises(ValueError, match="sum and mean"):
        aggregate(SMALL.g, x, w, "mul", "max", oscale=s)
    with pytest.raises(ValueError, match="copy_src and mul"):
        aggregate(SMALL.g, x, w, "add", "sum", xscale=s)
    with pytest.raises(ValueError, match="values"):
        aggregate(SMALL.g, x, w, "mul", "sum", oscale=s[:3])


def ref_epilogue(x, b, act, p, seed):
    """The reference backend's chain: add, activation, its dropout."""
    y = x + b if b is not None else x
    y = {"none": lambda t: t, "relu": torch.relu, "elu": Fn.elu}[act](y)
    if seed is None:
        return y
    keep = torch.rand(y.shape, generator=torch.Generator().manual_seed(seed)) >= p
    return y * keep / (1.0 - p)


EPI_CASES = [(a, b, d) for a in ("none", "relu", "elu") for b in (False, True) for d in (False, True)
             if a != "none" or d]


@pytest.mark.parametrize("act,bias,drop", EPI_CASES, ids=[f"{a}-{'b' if b else 'nob'}-{'d' if d else 'nod'}"
                                                          for a, b, d in EPI_CASES])
def test_epilogue(act, bias, drop, monkeypatch):
    """dropout(act(x + b)) in one pass equals the reference's three ops: the
    same dropout mask, bit for bit (relu, none; elu to rounding), across
    generator blocks and the kernel's stream segments (made small here), and
    the same gradients (float64 gradcheck and float32 against autograd)."""
    monkeypatch.setattr(ndense, "_MT_SEG_WORDS", 700)
    p = 0.6 if drop else 0.0
    for shape in ((1, 1), (5, 3), (300, 7), (2000, 2, 4)):
        gen = torch.Generator().manual_seed(shape[0])
        x = torch.randn(shape, generator=gen)
        b = torch.randn(shape[1:], generator=gen) if bias else None
        seed = 1000 + shape[0] if drop else None
        got = ndense.epilogue(x, b, act, p, seed)
        want = ref_epilogue(x, b, act, p, seed)
        if act == "elu":
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            assert torch.equal(got == 0, want == 0)
        else:
            assert torch.equal(got, want)
        # float32 gradients against autograd of the reference
        xr, xn = x.clone().requires_grad_(), x.clone().requires_grad_()
        br = b.clone().requires_grad_() if bias else None
        bn = b.clone().requires_grad_() if bias else None
        gout = torch.randn(shape, generator=gen)
        ref_epilogue(xr, br, act, p, seed).backward(gout)
        ndense.epilogue(xn, bn, act, p, seed).backward(gout)
        torch.testing.assert_close(xn.grad, xr.grad, rtol=1e-6, atol=1e-6)
        if bias:
            torch.testing.assert_close(bn.grad, br.grad, rtol=1e-5, atol=1e-5)
    # float64 gradcheck (the mask is fixed by the seed)
    x = (torch.randn(40, 3, dtype=F64) + 0.05).requires_grad_()
    b = (0.1 * torch.randn(3, dtype=F64)).requires_grad_() if bias else None
    ins = (x, b) if bias else (x,)
    assert torch.autograd.gradcheck(lambda *t: ndense.epilogue(t[0], t[1] if bias else None, act, p,
                                                             7 if drop else None), ins)
    # only the inputs that need a gradient get one
    x2 = x.detach().clone()
    if bias:
        b2 = b.detach().clone().requires_grad_()
        ndense.epilogue(x2, b2, act, p, 7 if drop else None).sum().backward()
        assert b2.grad is not None and x2.grad is None


def test_epilogue_rejects_bad_inputs():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="activation"):
        ndense.epilogue(x, None, "tanh", 0.5, 1)
    with pytest.raises(ValueError, match="dropout p"):
        ndense.epilogue(x, None, "relu", 1.0, 1)
    with pytest.raises(ValueError, match="bias"):
        ndense.epilogue(x, torch.randn(4), "relu", 0.5, 1)


def test_mt_state_follows_torch():
    """The stream the kernels continue is torch's: the state read for a seed
    generates torch.rand's numbers."""
    words, pos = ndense.mt_state(123)
    assert words.shape == (624,) and pos == 624
    x = torch.zeros(1500, 1)
    got = ndense.epilogue(x + 1, None, "none", 0.5, 123)   # keep = u >= 0.5
    u = torch.rand(1500, 1, generator=torch.Generator().manual_seed(123))
    assert torch.equal(got != 0, u >= 0.5)


def test_huge_page_outputs(monkeypatch):
    """Kernel outputs above HUGE_ALLOC_BYTES live in their own huge-page
    mapping; they behave as ordinary tensors and free with them."""
    monkeypatch.setattr(nops, "HUGE_ALLOC_BYTES", 64)
    t = nops._empty((100, 3), torch.float32)
    assert t.shape == (100, 3) and t.dtype == torch.float32 and t.is_contiguous()
    t.fill_(2.0)
    assert float(t.sum()) == 600.0
    x, _ = make_inputs(HUB, "copy_src", "copy_src", F64)
    torch.testing.assert_close(aggregate(HUB.g, x, None, "copy_src", "mean"),
                               ref_aggregate(HUB, x, None, "copy_src", "mean", "dst"))


def test_lazy_edge_tensors():
    """row_of_edge / col_of_edge / degree, built on first use, are the edge
    list's own."""
    for gr in (SMALL, HUB, EMPTY):
        g = CSRGraph.build(gr.src, gr.dst, gr.n)
        assert torch.equal(g.in_csr.row_of_edge, gr.dst) and torch.equal(g.in_csr.col_of_edge, gr.src)
        assert torch.equal(g.out_csr.row_of_edge, gr.src) and torch.equal(g.out_csr.col_of_edge, gr.dst)
        assert torch.equal(g.in_csr.degree, torch.bincount(gr.dst, minlength=gr.n))


def test_linear(monkeypatch):
    """x1 @ W1 (+ x2 @ W2) into huge-page outputs equals torch's matmul, with
    the same gradients; weights with several output axes keep them."""
    monkeypatch.setattr(nops, "HUGE_ALLOC_BYTES", 64)  # the huge-page path even on small tensors
    gen = torch.Generator().manual_seed(12)
    for dt in (F64, torch.float32):
        x1 = torch.randn(50, 6, generator=gen, dtype=dt).requires_grad_()
        x2 = torch.randn(50, 3, generator=gen, dtype=dt).requires_grad_()
        w1 = torch.randn(6, 4, generator=gen, dtype=dt).requires_grad_()
        w2 = torch.randn(3, 4, generator=gen, dtype=dt).requires_grad_()
        w3 = torch.randn(6, 2, 2, generator=gen, dtype=dt).requires_grad_()
        tol = {} if dt == F64 else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(ndense.linear(x1, w1), x1 @ w1, **tol)
        torch.testing.assert_close(ndense.linear(x1, w1, x2, w2), x1 @ w1 + x2 @ w2, **tol)
        torch.testing.assert_close(ndense.linear(x1, w3), torch.tensordot(x1, w3, dims=1), **tol)
        if dt == F64:
            assert torch.autograd.gradcheck(lambda a, b, c, d: ndense.linear(a, b, c, d), (x1, w1, x2, w2))
            assert torch.autograd.gradcheck(lambda a, b: ndense.linear(a, b), (x1, w3))
    # only the inputs that need a gradient get one
    x = torch.randn(50, 6)
    w = torch.randn(6, 4, requires_grad=True)
    ndense.linear(x, w).sum().backward()
    assert w.grad is not None and x.grad is None


def test_head_dot():
    """(z * a_k).sum(-1) for several parameters in one pass: values and
    gradients (gradcheck), [N, H, D] and [N, D], and empty / mismatched
    inputs on torch's ops."""
    gen = torch.Generator().manual_seed(13)
    z = torch.randn(300, 4, 8, generator=gen, dtype=F64).requires_grad_()
    al = torch.randn(4, 8, generator=gen, dtype=F64).requires_grad_()
    ar = torch.randn(4, 8, generator=gen, dtype=F64).requires_grad_()
    el, er = ndense.head_dot(z, al, ar)
    torch.testing.assert_close(el, (z * al).sum(-1))
    torch.testing.assert_close(er, (z * ar).sum(-1))
    assert torch.autograd.gradcheck(lambda a, b, c: ndense.head_dot(a, b, c), (z, al, ar))
    z2 = torch.randn(50, 5, generator=gen, dtype=F64).requires_grad_()
    a2 = torch.randn(5, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ndense.head_dot(a, b)[0], (z2, a2))
    # one output used: the other's gradient is zero
    (g,) = torch.autograd.grad(ndense.head_dot(z, al, ar)[1].sum(), (z,))
    torch.testing.assert_close(g, ar.detach().expand_as(z))
    z32 = torch.randn(70, 2, 3, generator=gen)
    a32 = torch.randn(2, 3, generator=gen)
    torch.testing.assert_close(ndense.head_dot(z32, a32)[0], (z32 * a32).sum(-1), rtol=1e-5, atol=1e-6)
    assert ndense.head_dot(torch.zeros(0, 2, 3), torch.ones(2, 3))[0].shape == (0, 2)


def test_cache_blocked_with_scales_and_permuted_edge_data():
    """The cache-blocked kernels take the fused scales and CSR-ordered edge
    data too (auto mode picks them on large graphs, GCN's included)."""
    prev = set_cache_blocking("on", 3)
    try:
        for gr in (SMALL, HUB):
            _check_scaled_permuted_mul(gr, seed=14, mean_too=True)
    finally:
        set_cache_blocking(*prev)


def _check_scaled_permuted_mul(gr, seed: int, mean_too: bool = False) -> None:
    """aggregate mul by CSR-ordered w with both fused scales (and copy_src
    mean with the gathered-row scale) against the reference, both directions."""
    x, w = make_inputs(gr, "scalar", "mul", F64, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    xs = torch.rand(gr.n, generator=gen, dtype=F64) + 0.5
    os_ = torch.rand(gr.n, generator=gen, dtype=F64) + 0.5
    for to in ("dst", "src"):
        wp = nops.permute_edge_data(gr.g, w, to)
        want = ref_aggregate(gr, x * _pad(xs, x.dim()), w, "mul", "sum", to) * _pad(os_, x.dim())
        got = aggregate(gr.g, x, w, "mul", "sum", to, xscale=xs, oscale=os_, w_perm=wp)
        torch.testing.assert_close(got, want)
        if mean_too:
            want = ref_aggregate(gr, x * _pad(xs, x.dim()), None, "copy_src", "mean", to)
            torch.testing.assert_close(aggregate(gr.g, x, None, "copy_src", "mean", to, xscale=xs), want)


def test_prefetching_kernels_agree_with_the_reference():
    """Prefetch forced on (auto uses it only on large graphs): every message
    that reads x, sum and mean, both directions, with the fused scales and
    CSR-ordered edge data."""
    prev = nops.set_prefetch("on")
    prev_b = set_cache_blocking("off")
    try:
        for gr in (SMALL, HUB):
            for kind, msg in (("copy_src", "copy_src"), ("scalar", "mul"), ("head", "mul"), ("full", "add"),
                              ("full", "div")):
                x, w = make_inputs(gr, kind, msg, F64, seed=21)
                if msg == "div":
                    w = w.abs() + 0.5
                for to in ("dst", "src"):
                    for reduce in ("sum", "mean"):
                        torch.testing.assert_close(aggregate(gr.g, x, w, msg, reduce, to),
                                                   ref_aggregate(gr, x, w, msg, reduce, to))
            _check_scaled_permuted_mul(gr, seed=22, mean_too=True)
        # kernel names end in f<lines prefetched per row> (codegen.agg_name)
        import re
        assert any(re.match(r"aggregate_mul_sum_\w*f\d+\[", k) for k in COMPILE_TIMES)
    finally:
        nops.set_prefetch(prev)
        set_cache_blocking(*prev_b)


@pytest.mark.parametrize("msg", ["copy_src", "mul"])
def test_auto_prefetches_instead_of_blocking_large_sources(monkeypatch, msg):
    """auto: where the cache model would block (active rows of x over half
    the cache) and x is large, copy_src and mul sums prefetch and do not block."""
    x, w = make_inputs(HUB, "scalar", "mul", F64, seed=24)
    w = w if msg == "mul" else None
    row = x[0].numel() * 8
    monkeypatch.setattr(nops, "_cache_bytes", lambda: 16 * row)
    monkeypatch.setattr(nops, "PREFETCH_MIN_BYTES", 0)
    csr = HUB.g.in_csr
    used = []
    real = csr.blocked
    monkeypatch.setattr(csr, "blocked", lambda b: used.append(b) or real(b))
    plan = []
    real_plan = nops._prefetch_plan
    monkeypatch.setattr(nops, "_prefetch_plan", lambda *a: plan.append(real_plan(*a)) or plan[-1])
    prev, prev_b = nops.set_prefetch("auto"), set_cache_blocking("auto")
    try:
        torch.testing.assert_close(aggregate(HUB.g, x, w, msg, "sum"), ref_aggregate(HUB, x, w, msg, "sum", "dst"))
        assert plan and plan[-1] > 0 and used == []
    finally:
        nops.set_prefetch(prev)
        set_cache_blocking(*prev_b)


# --------------------------------------------------------------------------
# the disk cache shared by processes
# --------------------------------------------------------------------------

_RACE = r"""
import json, os, sys, time
import torch
from gdsl.backends.numba import codegen
from gdsl.backends.numba.graph import CSRGraph
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.005)
CSRGraph.build(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2, 0, 1]), 3).in_csr
print(json.dumps(codegen.COMPILE_FROM_CACHE))
"""


def test_processes_that_need_one_kernel_at_once_compile_it_once(tmp_path):
    """Ranks starting on a cold cache ask for the same kernels at the same
    moment: one process compiles each, the others wait and load it from the
    disk cache (without the lock each would compile it: P ranks on fewer
    cores, P times the time)."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    go = tmp_path / "go"
    env = dict(os.environ, GDSL_NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(go), str(tmp_path / f"ready{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(3)]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.01)
        go.touch()   # all three are past their imports: they race for the kernels
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    got = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    keys = set().union(*got)
    assert {k.split("[")[0] for k in keys} == {"csr_scatter", "csr_sort_rows"}
    for k in keys:
        assert sorted(g[k] for g in got) == [False, True, True], (k, got)
