"""The Triton backend's kernels against plain-torch references (index_add /
scatter_reduce and autograd through them).

Without a GPU the kernels run under Triton's interpreter: TRITON_INTERPRET=1
is set below before anything imports triton (the backend reads it when it
decorates its generated kernels, at their first launch).  The interpreter
costs about a millisecond per tl operation per program, so the graphs are
tiny (9 vertices; a 30-vertex graph whose hub has 300 in-edges) and
gradients are checked against autograd of the reference (one backward)
rather than with full gradcheck Jacobians, except on a few variants.  With
TRITON_INTERPRET=0 and a GPU the same tests run on the GPU.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as Fn  # noqa: E402

pytest.importorskip("triton")

from gdsl.backends.triton import default_device, interpret_mode  # noqa: E402

if not interpret_mode() and not torch.cuda.is_available():
    pytest.skip("TRITON_INTERPRET=0 and no CUDA GPU", allow_module_level=True)

from gdsl.backends.triton import codegen, tuning  # noqa: E402
from gdsl.backends.triton import ops as tops  # noqa: E402
from gdsl.backends.triton.graph import TritonGraph  # noqa: E402
from gdsl.backends.triton.ops import aggregate, edge_softmax, gat_aggregate, sddmm, set_balance  # noqa: E402

F64 = torch.float64
DEV = default_device()


# --------------------------------------------------------------------------
# graphs
# --------------------------------------------------------------------------

class G:
    def __init__(self, name, src, dst, n):
        self.name = name
        self.src = torch.as_tensor(src, dtype=torch.int64)
        self.dst = torch.as_tensor(dst, dtype=torch.int64)
        self.n = n
        self.e = int(self.src.numel())
        self.g = TritonGraph.build(self.src, self.dst, n, DEV)
        self.src, self.dst = self.src.to(DEV), self.dst.to(DEV)

    def __repr__(self):
        return self.name


def _small():
    # self loops (1, 3, 4, 6), a duplicated edge (5 -> 2 twice), a vertex with
    # out-edges only (0), vertices 7 and 8 isolated
    src = [0, 1, 2, 3, 3, 4, 5, 5, 6, 2, 1, 0, 4, 0]
    dst = [1, 1, 0, 3, 4, 4, 2, 2, 6, 5, 6, 3, 0, 5]
    return G("small", src, dst, 9)


def _hub():
    # vertex 0 has 300 in-edges (repeated sources, a self loop), 40 more
    # random edges, vertex 29 isolated
    gen = torch.Generator().manual_seed(1)
    hs = torch.cat([torch.randint(1, 29, (299,), generator=gen), torch.zeros(1, dtype=torch.int64)])
    rs = torch.randint(0, 29, (40,), generator=gen)
    rd = torch.randint(1, 29, (40,), generator=gen)
    return G("hub", torch.cat([hs, rs]), torch.cat([torch.zeros(300, dtype=torch.int64), rd]), 30)


def _empty():
    return G("empty", [], [], 5)


SMALL, HUB, EMPTY = _small(), _hub(), _empty()


@pytest.fixture
def balanced():
    """The balanced variant forced on, 64-slot segments (the hub's row: 5)."""
    prev = set_balance("on", 64)
    yield
    set_balance(*prev)


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
    x = torch.randn((gr.n,) + xs, generator=gen, dtype=F64).to(dtype).to(DEV) if xs is not None else None
    w = None
    if ws is not None:
        w = torch.randn((gr.e,) + ws, generator=gen, dtype=F64)
        if msg == "div":   # keep away from 0
            w = torch.sign(w) * (0.5 + w.abs())
        w = w.to(dtype).to(DEV)
    return x, w


def _variants():
    """Every (message, broadcast kind, reduction) once, the direction
    alternating so that both CSRs see every kernel family."""
    out = []
    i = 0
    for reduce in ("sum", "max", "min", "mean"):
        out.append(("copy_src", reduce, "dst" if i % 2 == 0 else "src", "copy_src"))
        out.append(("copy_edge", reduce, "src" if i % 2 == 0 else "dst", "copy_edge"))
        for msg, kind in itertools.product(("add", "sub", "mul", "div"), ("scalar", "head", "full")):
            out.append((msg, reduce, "dst" if i % 2 == 0 else "src", kind))
            i += 1
    return out


VARIANTS = _variants()


def _vid(v):
    return "-".join(v)


def _check_forward_backward(gr, x, w, msg, reduce, to, tol=None):
    tol = tol or {}
    xn = x.clone().requires_grad_() if x is not None else None
    wn = w.clone().requires_grad_() if w is not None else None
    xr = x.clone().requires_grad_() if x is not None else None
    wr = w.clone().requires_grad_() if w is not None else None
    got = aggregate(gr.g, xn, wn, msg, reduce, to)
    want = ref_aggregate(gr, xr, wr, msg, reduce, to)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, **tol)
    gout = torch.randn(got.shape, generator=torch.Generator().manual_seed(3), dtype=F64).to(got.dtype).to(DEV)
    got.backward(gout)
    want.backward(gout)
    for a, b in ((xn, xr), (wn, wr)):
        if a is not None:
            torch.testing.assert_close(a.grad, b.grad, **tol)


# --------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
def test_aggregate(variant):
    """Forward and both gradients against autograd of the reference, float64,
    on the small graph (isolated vertices, self loops, a duplicated edge:
    ties for max / min)."""
    msg, reduce, to, kind = variant
    x, w = make_inputs(SMALL, kind, msg, F64)
    _check_forward_backward(SMALL, x, w, msg, reduce, to)


def tie_inputs(gr: G, kind, msg, seed=0):
    """Small integers: many tied messages per row."""
    gen = torch.Generator().manual_seed(seed)
    xs, ws = SHAPES[kind]
    x = torch.randint(-1, 2, (gr.n,) + xs, generator=gen).to(F64).to(DEV) if xs is not None else None
    w = None
    if ws is not None:
        w = torch.randint(-1, 2, (gr.e,) + ws, generator=gen).to(F64)
        if msg == "div":   # +-1, +-2
            w = torch.where(w >= 0, 1.0, -1.0) * (1 + torch.randint(0, 2, w.shape, generator=gen))
        w = w.to(DEV)
    return x, w


TIE_VARIANTS = [("copy_src", "max", "dst", "copy_src"), ("copy_edge", "min", "src", "copy_edge"),
                ("mul", "max", "src", "head"), ("div", "min", "dst", "full"), ("sub", "max", "dst", "scalar")]


@pytest.mark.parametrize("variant", TIE_VARIANTS, ids=_vid)
def test_aggregate_ties_share_the_gradient(variant):
    """Tied messages share each output element's gradient evenly, as the
    reference's scatter_reduce does (was: all to the edge the kernel kept)."""
    msg, reduce, to, kind = variant
    x, w = tie_inputs(SMALL, kind, msg)
    _check_forward_backward(SMALL, x, w, msg, reduce, to)


HUB_VARIANTS = [("copy_src", "sum", "dst", "copy_src"), ("mul", "mean", "dst", "head"),
                ("copy_src", "max", "dst", "copy_src"), ("div", "min", "src", "full"),
                ("mul", "sum", "src", "scalar")]


@pytest.mark.parametrize("variant", HUB_VARIANTS, ids=_vid)
@pytest.mark.parametrize("mode", ["rows", "balanced"])
def test_aggregate_long_row(variant, mode, request):
    """A 300-in-edge row: several edge steps per program; in the balanced
    variant the row is cut into 64-slot segments whose partial sums (or
    maxima and their edges) a second kernel merges."""
    if mode == "balanced":
        request.getfixturevalue("balanced")
    msg, reduce, to, kind = variant
    x, w = make_inputs(HUB, kind, msg, F64, seed=4)
    _check_forward_backward(HUB, x, w, msg, reduce, to)


def test_balanced_segments(balanced):
    segs = HUB.g.in_csr.segments(64)
    t = segs.table.cpu()
    assert segs.long_rows.tolist() == [0] and segs.long_ptr.tolist() == [0, 5] and segs.num_parts == 5
    assert t[:5, 0].tolist() == [0] * 5 and t[:5, 3].tolist() == [-1, -2, -3, -4, -5]
    assert t[:5, 1].tolist() == [0, 64, 128, 192, 256] and t[4, 2] == 300
    assert (t[5:, 3] == t[5:, 0]).all()   # the other rows: whole, written directly
    assert tops.use_balanced(HUB.g.in_csr)
    set_balance("auto", 64)
    assert tops.use_balanced(HUB.g.in_csr) and not tops.use_balanced(SMALL.g.in_csr)
    set_balance("off")
    assert not tops.use_balanced(HUB.g.in_csr)


def test_aggregate_gradcheck():
    """Full float64 gradcheck on a few variants (the rest: autograd of the reference)."""
    for msg, reduce, to, kind in (("mul", "sum", "dst", "head"), ("div", "max", "src", "scalar")):
        x, w = make_inputs(SMALL, kind, msg, F64, seed=2)
        ins = (x.requires_grad_(), w.requires_grad_())
        assert torch.autograd.gradcheck(lambda a, b, m=msg, r=reduce, t=to: aggregate(SMALL.g, a, b, m, r, t),
                                        ins, fast_mode=True)


def test_aggregate_float32_and_empty_graph():
    x, w = make_inputs(HUB, "head", "mul", torch.float32, seed=3)
    _check_forward_backward(HUB, x, w, "mul", "sum", "dst", tol={"rtol": 1e-5, "atol": 1e-4})
    out = aggregate(HUB.g, x, w, "mul", "max")
    assert out.dtype == torch.float32
    for reduce in ("sum", "max"):
        x, w = make_inputs(EMPTY, "full", "mul", F64)
        out = aggregate(EMPTY.g, x.requires_grad_(), w, "mul", reduce)
        assert out.shape == (5, 4) and not out.any()
        out.sum().backward()
        assert not x.grad.any()


def test_feature_tiling():
    """Several feature blocks per row and several edge steps per block:
    BLOCK_F 4 against F = 6 (a padded second block), BLOCK_E 4."""
    prev = {f: tuning.set_fixed(f, m) for f, m in (("aggregate", {"BLOCK_E": 4, "BLOCK_F": 4}),
                                                   ("gat", {"BLOCK_E": 4, "BLOCK_F": 4}),
                                                   ("sddmm", {"BLOCK_E": 4, "BLOCK_F": 4}))}
    try:
        x, w = make_inputs(SMALL, "head", "mul", F64, seed=6)
        for reduce in ("sum", "max"):
            _check_forward_backward(SMALL, x, w, "mul", reduce, "dst")
        gen = torch.Generator().manual_seed(7)
        el = torch.randn(SMALL.n, 2, generator=gen, dtype=F64).to(DEV)
        er = torch.randn(SMALL.n, 2, generator=gen, dtype=F64).to(DEV)
        z = torch.randn(SMALL.n, 2, 3, generator=gen, dtype=F64).to(DEV)
        torch.testing.assert_close(gat_aggregate(SMALL.g, el, er, z, 0.2), ref_gat(SMALL, el, er, z, 0.2))
        a, b = x.reshape(SMALL.n, 6), x.flip(0).reshape(SMALL.n, 6)
        torch.testing.assert_close(sddmm(SMALL.g, a, b, "sub"), ref_sddmm(SMALL, a, b, "sub"))
    finally:
        for f, p in prev.items():
            tuning.set_fixed(f, None)
            if p is not None:
                tuning.set_fixed(f, *p)


def test_aggregate_scales():
    """out[v] = oscale[v] * SUM/MEAN_e MSG(x[u] * xscale[u], w[e]); the scales
    are constants (no gradient); forward and gradients."""
    gen = torch.Generator().manual_seed(10)
    xs = (torch.rand(SMALL.n, generator=gen, dtype=F64) + 0.5).to(DEV)
    os_ = (torch.rand(SMALL.n, generator=gen, dtype=F64) + 0.5).to(DEV)
    for msg, kind, reduce, to in (("copy_src", "copy_src", "mean", "dst"), ("mul", "head", "sum", "src")):
        x, w = make_inputs(SMALL, kind, msg, F64, seed=9)
        xn, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        wn = w.clone().requires_grad_() if w is not None else None
        wr = w.clone().requires_grad_() if w is not None else None
        got = aggregate(SMALL.g, xn, wn, msg, reduce, to, xscale=xs, oscale=os_)
        want = ref_aggregate(SMALL, xr * _pad(xs, x.dim()), wr, msg, reduce, to)
        want = want * _pad(os_, want.dim())
        torch.testing.assert_close(got, want)
        gout = torch.randn(got.shape, generator=gen, dtype=F64).to(DEV)
        got.backward(gout)
        want.backward(gout)
        torch.testing.assert_close(xn.grad, xr.grad)
        if wn is not None:
            torch.testing.assert_close(wn.grad, wr.grad)


def test_aggregate_needs_input_grad(monkeypatch):
    """No gradient (and no kernel) for inputs that do not need one."""
    x, w = make_inputs(SMALL, "head", "mul", F64)
    calls = []
    real = tops.sddmm_raw
    monkeypatch.setattr(tops, "sddmm_raw", lambda *a, **k: calls.append("sddmm") or real(*a, **k))
    aggregate(SMALL.g, x.requires_grad_(), w, "mul", "sum").sum().backward()
    assert x.grad is not None and w.grad is None and calls == []


def test_aggregate_rejects_bad_inputs():
    x, w = make_inputs(SMALL, "full", "mul", F64)
    with pytest.raises(ValueError, match="does not broadcast"):
        aggregate(SMALL.g, x, w[:, :3], "mul", "sum")
    with pytest.raises(ValueError, match="unknown message"):
        aggregate(SMALL.g, x, w, "pow", "sum")
    with pytest.raises(ValueError, match="rows"):
        aggregate(SMALL.g, x[:3], w, "mul", "sum")
    with pytest.raises(ValueError, match="sum and mean"):
        aggregate(SMALL.g, x, w, "mul", "max", oscale=torch.ones(SMALL.n, dtype=F64, device=DEV))
    if DEV.type == "cpu":
        return
    with pytest.raises(ValueError, match="move it first"):
        aggregate(SMALL.g, x.cpu(), None, "copy_src", "sum")


# --------------------------------------------------------------------------
# sddmm, edge softmax, GAT
# --------------------------------------------------------------------------

SDDMM_CASES = [("dot", (2, 3)), ("dot", (4,)), ("add", (2,)), ("sub", (2, 2)), ("mul", (3,)), ("div", (2,))]


@pytest.mark.parametrize("op,fs", SDDMM_CASES, ids=[f"{o}-{'x'.join(map(str, f))}" for o, f in SDDMM_CASES])
def test_sddmm(op, fs):
    for gr in (SMALL, EMPTY):
        gen = torch.Generator().manual_seed(2)
        a = torch.randn((gr.n,) + fs, generator=gen, dtype=F64)
        b = torch.randn((gr.n,) + fs, generator=gen, dtype=F64)
        if op == "div":
            b = torch.sign(b) * (0.5 + b.abs())
        a, b = a.to(DEV), b.to(DEV)
        an, bn = a.clone().requires_grad_(), b.clone().requires_grad_()
        ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
        got, want = sddmm(gr.g, an, bn, op), ref_sddmm(gr, ar, br, op)
        torch.testing.assert_close(got, want)
        gout = torch.randn(got.shape, generator=gen, dtype=F64).to(DEV)
        got.backward(gout)
        want.backward(gout)
        torch.testing.assert_close(an.grad, ar.grad)
        torch.testing.assert_close(bn.grad, br.grad)
    # only one side needs a gradient
    a2 = torch.randn((SMALL.n,) + fs, dtype=F64).to(DEV).requires_grad_()
    b2 = torch.rand((SMALL.n,) + fs, dtype=F64).to(DEV) + 0.5
    sddmm(SMALL.g, a2, b2, op).sum().backward()
    assert a2.grad is not None


def test_sddmm_gradcheck_and_float32():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(SMALL.n, 2, 3, generator=gen, dtype=F64).to(DEV).requires_grad_()
    b = torch.randn(SMALL.n, 2, 3, generator=gen, dtype=F64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, q: sddmm(SMALL.g, p, q, "dot"), (a, b), fast_mode=True)
    a32, b32 = a.detach().float(), b.detach().float()
    torch.testing.assert_close(sddmm(HUB.g, a32[:1].expand(HUB.n, 2, 3).contiguous(),
                                     b32[:1].expand(HUB.n, 2, 3).contiguous(), "dot"),
                               ref_sddmm(HUB, a32[:1].expand(HUB.n, 2, 3), b32[:1].expand(HUB.n, 2, 3), "dot"))


@pytest.mark.parametrize("hs", [(), (3,), (2, 2)], ids=["E", "ExH", "Ex2x2"])
def test_edge_softmax(hs):
    for gr in (SMALL, HUB, EMPTY):
        gen = torch.Generator().manual_seed(6)
        s = (3 * torch.randn((gr.e,) + hs, generator=gen, dtype=F64)).to(DEV)
        sn, sr = s.clone().requires_grad_(), s.clone().requires_grad_()
        got, want = edge_softmax(gr.g, sn), ref_edge_softmax(gr, sr)
        torch.testing.assert_close(got, want)
        gout = torch.randn(got.shape, generator=gen, dtype=F64).to(DEV)
        got.backward(gout)
        want.backward(gout)
        torch.testing.assert_close(sn.grad, sr.grad)
    s = torch.randn(SMALL.e, 2, dtype=F64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: edge_softmax(SMALL.g, t), (s,), fast_mode=True)
    s32 = (10 * torch.randn(HUB.e, 3)).to(DEV)
    torch.testing.assert_close(edge_softmax(HUB.g, s32), ref_edge_softmax(HUB, s32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("H,D", [(1, 3), (3, 2)])
def test_gat_aggregate(H, D):
    slope = 0.2
    for gr in (SMALL, HUB, EMPTY):
        gen = torch.Generator().manual_seed(7)
        el = (2 * torch.randn(gr.n, H, generator=gen, dtype=F64)).to(DEV)
        er = (2 * torch.randn(gr.n, H, generator=gen, dtype=F64)).to(DEV)
        z = torch.randn(gr.n, H, D, generator=gen, dtype=F64).to(DEV)
        gout = torch.randn(gr.n, H, D, generator=gen, dtype=F64).to(DEV)
        ins = [t.clone().requires_grad_() for t in (el, er, z)]
        refs = [t.clone().requires_grad_() for t in (el, er, z)]
        got, want = gat_aggregate(gr.g, *ins, slope), ref_gat(gr, *refs, slope)
        torch.testing.assert_close(got, want)
        got.backward(gout)
        want.backward(gout)
        for a, b in zip(ins, refs):
            torch.testing.assert_close(a.grad, b.grad)
    # subsets of inputs needing gradients, on the small graph
    for need in ((False, False, True), (True, False, False), (False, True, False)):
        ts = [t.detach().clone().requires_grad_(n) for t, n in zip((el, er, z), need)]
        gout = torch.randn(gr.n, H, D, dtype=F64).to(DEV)
        gat_aggregate(gr.g, *ts, slope).backward(gout)
        for t, n in zip(ts, need):
            assert (t.grad is None) == (not n)


def test_gat_gradcheck_and_float32_large_scores():
    gen = torch.Generator().manual_seed(8)
    el = torch.randn(SMALL.n, 2, generator=gen, dtype=F64).to(DEV).requires_grad_()
    er = torch.randn(SMALL.n, 2, generator=gen, dtype=F64).to(DEV).requires_grad_()
    z = torch.randn(SMALL.n, 2, 2, generator=gen, dtype=F64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: gat_aggregate(SMALL.g, a, b, c, 0.2), (el, er, z),
                                    fast_mode=True)
    # float32 with large scores (exp overflows without the running max)
    H, D = 2, 4
    el = (30 * torch.randn(HUB.n, H, generator=gen)).to(DEV).requires_grad_()
    er = (30 * torch.randn(HUB.n, H, generator=gen)).to(DEV).requires_grad_()
    z = torch.randn(HUB.n, H, D, generator=gen).to(DEV).requires_grad_()
    got = gat_aggregate(HUB.g, el, er, z, 0.2)
    want = ref_gat(HUB, el, er, z, 0.2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    gout = torch.randn(HUB.n, H, D, generator=gen).to(DEV)
    for a, b in zip(torch.autograd.grad(got, (el, er, z), gout), torch.autograd.grad(want, (el, er, z), gout)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------
# source, modes, configs
# --------------------------------------------------------------------------

def test_kernel_source():
    src = codegen.kernel_source("aggregate", msg="mul", reduce="max", bcast="w")
    assert "@triton.jit" in src and "@triton.autotune(configs=tuning.configs(\"aggregate\")" in src
    assert "wv = tl.load(w + e[:, None] * H + hh[None, :]" in src and "t = xv * wv" in src
    assert "xv + wv" not in src  # the message op is a constant of the text
    assert "ta = tl.min(tl.where(tl.where(nan[None, :], tn, t == tb[None, :]), oe[:, None], end), axis=0)" in src
    s = codegen.kernel_source("aggregate", msg="copy_src", reduce="sum", rscale=True, balanced=True)
    assert "def agg_copy_src_sum_none_rs_bal(" in s and "def agg_copy_src_sum_none_rs_bal_merge(" in s
    assert "tl.atomic" not in s
    with pytest.raises(ValueError, match="unknown aggregate signature keys"):   # the max / min backward is torch's
        codegen.kernel_source("aggregate", msg="mul", reduce="sum", select=True)
    gat = codegen.kernel_source("gat_aggregate")
    assert "def gat_fwd" in gat and "def gat_bwd_z" in gat and "def gat_bwd_edge" in gat
    assert "rescale = tl.exp(m - mn)" in gat and "o = o * rescale + tl.sum(p * zv, axis=0)" in gat
    assert "def edge_softmax_bwd" in codegen.kernel_source("edge_softmax")
    assert "def sddmm_dot" in codegen.kernel_source("sddmm", op="dot")
    with pytest.raises(ValueError):
        codegen.kernel_source("aggregate", msg="copy_src", reduce="prod")
    with pytest.raises(ValueError):
        codegen.kernel_source("aggregate", msg="add", reduce="sum", xscale=True)


def test_configs_and_pruning(monkeypatch):
    if interpret_mode():
        assert not tuning.autotuning()
        assert len(tuning.configs("aggregate")) == 1   # the interpreter's fixed config
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("GDSL_TRITON_AUTOTUNE", "1")
    space = tuning.configs("aggregate")
    assert len(space) == len(tuning.SPACES["aggregate"]) > 1
    kept = tuning.prune_feature_block(space, {"F": 16})
    assert kept and all(c.kwargs["BLOCK_F"] <= 32 for c in kept)
    assert len(tuning.prune_feature_block(space, {"F": 500})) == len(space)
    monkeypatch.setenv("GDSL_TRITON_AUTOTUNE", "0")
    assert [c.kwargs for c in tuning.configs("aggregate")] == [tuning.GPU_DEFAULT["aggregate"][0]]


def test_kernels_cached_per_mode(monkeypatch):
    monkeypatch.setenv("GDSL_TRITON_AUTOTUNE", "0")   # set_fixed is the config where autotuning is off (a GPU tunes)
    a = codegen.get_kernel("sddmm", op="mul")
    assert codegen.get_kernel("sddmm", op="mul") is a
    prev = tuning.set_fixed("sddmm", {"BLOCK_E": 8, "BLOCK_F": 8})
    try:
        b = codegen.get_kernel("sddmm", op="mul")
        assert b is not a
    finally:
        tuning.set_fixed("sddmm", None)
        if prev is not None:
            tuning.set_fixed("sddmm", *prev)
    assert codegen.get_kernel("sddmm", op="mul") is a


def test_lazy_edge_tensors():
    for gr in (SMALL, HUB, EMPTY):
        g = gr.g
        assert torch.equal(g.in_csr.row_of_edge, gr.dst) and torch.equal(g.out_csr.row_of_edge, gr.src)
        assert torch.equal(g.in_csr.degree, torch.bincount(gr.dst, minlength=gr.n))
        assert g.in_csr.indices.dtype == torch.int32


def test_kernels_follow_the_interpreter_setting(monkeypatch):
    """TRITON_INTERPRET is read when a generated module is imported (at its
    first launch), and modules are kept per mode; Triton's own library is
    decorated when triton is imported, so a process cannot switch modes:
    asking for the other mode is a clear error."""
    from triton.runtime.interpreter import InterpretedFunction

    from gdsl.diagnostics import GdslError

    a = codegen.get_kernel("sddmm", op="add")
    assert isinstance(a.sddmm_add.fn, InterpretedFunction) == interpret_mode()
    monkeypatch.setenv("TRITON_INTERPRET", "0" if interpret_mode() else "1")
    with pytest.raises(GdslError, match="before anything imports triton"):
        codegen.get_kernel("sddmm", op="add")


def test_kernels_compile_for_the_gpu():
    """What the interpreter cannot check: every kernel family lowers to PTX
    and a cubin for sm_90 (Triton compiles ahead of time without a device,
    with the ptxas its wheel ships).  In a fresh process: the interpreter's
    triton cannot compile.  `python -m gdsl.backends.triton.aot --all
    --configs all` does every signature and config."""
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "gdsl.backends.triton.aot", "--arch", "90"], env=env,
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and "\n0 failed" in r.stdout, r.stdout + r.stderr
    for name in ("agg_div_max_s_bal_merge", "sddmm_dot", "edge_softmax_bwd", "gat_fwd",
                 "gat_bwd_z", "gat_bwd_edge"):
        assert f"ok   {name} " in r.stdout, r.stdout
