"""Mutation audit (helper-21): the Triton backend (gdsl/backends/triton/).

84 hand mutants of codegen.py, ops.py, graph.py, module.py, tuning.py and
aot.py were run against the tests that use the backend (test_triton_kernels,
test_triton_backend and the `triton` cases of test_api_audit5,
test_order_backward, test_hoist, test_api_audit4, test_dist_device) under
TRITON_INTERPRET=1.  Each test below compares the Triton kernels (or the
Triton module) with plain torch or the reference backend and kills at least
one survivor, named in its docstring.  The survivors left alone are
equivalent: the merge kernel's "row without edges" guard (a long row always
has edges), the sddmm div's masked `other` (the lanes are not stored), a
smaller edge-softmax head block, GAT's log-sum-exp written by every lane of
a head, the H == 1 per-head weight taken as a scalar, `>=` in the balance
threshold, CSR indptr kept int32 (tiny graphs), a smaller interpreter block
config; and three that no program can reach: a vector vertex constant in the
fusion (vertex constants are scalars), max aggregation fused with a row
scale (no pass forms mul(aggregate[max], vertex_const)), kernel_signature
without its `broadcast == "trail"` check (fuse forms aggregates of `lead`
broadcasts only; test_mutation_audit20 pins that down).

One mutant-hunting probe found a real bug (fixed in codegen.py):
edge_softmax and gat_aggregate gave NaN for a whole destination row when
the row's first edge tile held only -inf scores for a head (masked edges):
the online softmax subtracted a running max of -inf from -inf.
"""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from gdsl.backends.triton import interpret_mode  # noqa: E402

if not interpret_mode() and not torch.cuda.is_available():
    pytest.skip("TRITON_INTERPRET=0 and no CUDA GPU", allow_module_level=True)

import triton  # noqa: E402

from gdsl.backends.triton import tuning  # noqa: E402
from gdsl.backends.triton.graph import TritonGraph  # noqa: E402
from gdsl.backends.triton.ops import aggregate, edge_softmax, gat_aggregate, sddmm, set_balance  # noqa: E402
from test_triton_backend import ROOT, _compile, _graph_for, _same_grads  # noqa: E402
from test_triton_kernels import (DEV, F64, HUB, SMALL, G, _check_forward_backward, ref_aggregate,  # noqa: E402
                                 ref_edge_softmax, ref_gat, ref_sddmm)


@contextmanager
def fixed_blocks(**families):
    """tuning.set_fixed for each family (meta dicts), restored after."""
    prev = {f: tuning.set_fixed(f, m) for f, m in families.items()}
    try:
        yield
    finally:
        for f, p in prev.items():
            tuning.set_fixed(f, None)
            if p is not None:
                tuning.set_fixed(f, *p)


def _grads(out, ins, gout):
    return torch.autograd.grad(out, [t for t in ins if t.requires_grad], gout)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(DEV)


# --------------------------------------------------------------------------
# the bug: a first edge tile of -inf scores
# --------------------------------------------------------------------------

def _masked_row():
    """Vertex 0 has 10 in-edges (sources 1..10); the edge blocks hold 4 slots,
    so the first tile is sources 1..4."""
    return G("masked", torch.arange(1, 11), torch.zeros(10, dtype=torch.int64), 11)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy, in the interpreter: the NaN head, masked lanes
def test_edge_softmax_with_masked_edges_in_the_first_tile():
    """Scores of -inf (masked edges) filling the row's first tile for one
    head: their softmax is 0 and the others' is torch's. Was NaN for the whole
    row (the online softmax's exp(-inf - -inf)); a head of only -inf scores
    is NaN, as in torch. The fix subtracts 0 while a head has seen only -inf
    but keeps -inf as its running max (scores of -1000 after the masked tile
    would underflow against a max of 0)."""
    gr = _masked_row()
    s = _rand(gr.e, 3, seed=1)
    s[:, 0] -= 1000                 # head 0: far below 0 (exp(s - 0) underflows: the true max is subtracted)
    s[:4, 0] = float("-inf")        # head 0: the first tile masked
    s[:, 2] = float("-inf")         # head 2: every edge masked (torch: NaN)
    s[6, 1] = float("-inf")         # head 1: one edge in a later tile
    sn, sr = s.clone().requires_grad_(), s.clone().requires_grad_()
    with fixed_blocks(softmax={"BLOCK_E": 4}):
        got, want = edge_softmax(gr.g, sn), ref_edge_softmax(gr, sr)
        torch.testing.assert_close(got, want, equal_nan=True)
        assert not got[:, :2].isnan().any()
        gout = _rand(gr.e, 3, seed=2)
        gout[:, 2] = 0.0
        (a,), (b,) = _grads(got, [sn], gout), _grads(want, [sr], gout)
    torch.testing.assert_close(a[:, :2], b[:, :2])


def test_gat_with_masked_sources_in_the_first_tile():
    """gat_aggregate with el = -inf for the first tile's sources on one head:
    the same online softmax (same bug, same fix), forward and the gradients
    of er and z."""
    gr = _masked_row()
    el, er, z = _rand(gr.n, 2, seed=3), _rand(gr.n, 2, seed=4), _rand(gr.n, 2, 3, seed=5)
    el[1:5, 1] = float("-inf")
    er[0, 1] = -5000.0              # scores of -1000 after the slope: the true running max is subtracted
    ins = [el, er.clone().requires_grad_(), z.clone().requires_grad_()]
    refs = [el, er.clone().requires_grad_(), z.clone().requires_grad_()]
    with fixed_blocks(gat={"BLOCK_E": 4, "BLOCK_F": 8}):
        got, want = gat_aggregate(gr.g, *ins, 0.2), ref_gat(gr, *refs, 0.2)
        torch.testing.assert_close(got, want)
        gout = _rand(gr.n, 2, 3, seed=6)
        for a, b in zip(_grads(got, ins, gout), _grads(want, refs, gout)):
            torch.testing.assert_close(a, b)


# --------------------------------------------------------------------------
# survivors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("slope", [0.05, 1.5])
def test_gat_kernels_use_their_slope(slope):
    """A leaky_relu slope other than GAT's 0.2 (every other triton test
    passes 0.2), forward and all three gradients. Kills codegen.py t40 (gat_fwd's
    slope fixed at 0.2) and t45 (gat_bwd_z's)."""
    H, D = 2, 3
    ins = [(2 * _rand(SMALL.n, H, seed=7)).requires_grad_(), (2 * _rand(SMALL.n, H, seed=8)).requires_grad_(),
           _rand(SMALL.n, H, D, seed=9).requires_grad_()]
    got, want = gat_aggregate(SMALL.g, *ins, slope), ref_gat(SMALL, *ins, slope)
    torch.testing.assert_close(got, want)
    gout = _rand(SMALL.n, H, D, seed=10)
    for a, b in zip(_grads(got, ins, gout), _grads(want, ins, gout)):
        torch.testing.assert_close(a, b)


def test_gat_program_with_its_own_slope_equals_reference():
    """gat.gd with leaky_relu(.., 0.05): the Triton module equals the
    reference's outputs and parameter gradients. Kills module.py t74 (the
    module passing 0.2 to gat_aggregate whatever the op's slope)."""
    src = (ROOT / "programs" / "gat.gd").read_text().replace("leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.2)",
                                                           "leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.05)")
    assert "0.05)" in src
    prog = _compile(src)
    g = _graph_for(src)
    ref = prog.module(g, backend="reference").eval()
    tr = prog.module(g, backend="triton").eval()
    tr.load_state_dict(ref.state_dict())
    a, b = ref(), tr()
    torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)
    _same_grads(ref, tr, a, b)


def test_edge_softmax_over_more_than_64_heads():
    """s [E, 70]: more heads than one program's 64-wide block, so a second
    column of programs. Kills ops.py t36 (the grid's K // BLOCK_K rounding
    down: heads 64..69 never written)."""
    s = _rand(SMALL.e, 70, seed=11)
    sn, sr = s.clone().requires_grad_(), s.clone().requires_grad_()
    got, want = edge_softmax(SMALL.g, sn), ref_edge_softmax(SMALL, sr)
    torch.testing.assert_close(got, want)
    gout = _rand(SMALL.e, 70, seed=12)
    torch.testing.assert_close(_grads(got, [sn], gout)[0], _grads(want, [sr], gout)[0])


def test_mixed_float32_and_float64_operands_compute_in_float64():
    """x float32, w (or b) float64: the result is float64, as torch's
    promotion gives, and exact in float64. Kills ops.py t51 (_data_dtype
    taking the first operand's dtype: float32 results)."""
    x = _rand(SMALL.n, 4, seed=13).float()
    w = _rand(SMALL.e, 4, seed=14)
    got = aggregate(SMALL.g, x, w, "mul", "sum", "dst")
    assert got.dtype == F64
    torch.testing.assert_close(got, ref_aggregate(SMALL, x, w, "mul", "sum", "dst"))
    b = _rand(SMALL.n, 4, seed=15)
    got = sddmm(SMALL.g, x, b, "sub")
    assert got.dtype == F64
    torch.testing.assert_close(got, ref_sddmm(SMALL, x, b, "sub"))


@pytest.mark.parametrize("msg", ["mul", "add"])
def test_edge_weight_with_a_trailing_unit_axis(msg):
    """w [E, 1] against x [N, 3]: one value per edge, forward and both
    gradients. Kills ops.py t62 (_classify without stripping trailing 1s:
    'does not broadcast'); the numba twin is in test_mutation_audit20."""
    x = _rand(SMALL.n, 3, seed=16)
    w = torch.rand(SMALL.e, 1, generator=torch.Generator().manual_seed(17), dtype=F64).to(DEV) + 0.5
    _check_forward_backward(SMALL, x, w, msg, "sum", "dst")


def test_float64_mean_is_exact():
    """mean in float64 on the hub graph (in-degree 300 and others): 1/degree
    computed in float64, so the result matches torch to 1e-12. Kills graph.py
    t68 (inv_degree computed in float32, then cast: off by ~1e-8)."""
    x = _rand(HUB.n, 3, seed=18)
    for to in ("dst", "src"):
        got = aggregate(HUB.g, x, None, "copy_src", "mean", to)
        torch.testing.assert_close(got, ref_aggregate(HUB, x, None, "copy_src", "mean", to), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_balanced_long_row_of_infinities(reduce):
    """Balanced variant, the hub's 300-slot row cut into 64-slot segments, all
    its messages -inf (max) / +inf (min) in one feature: the merge takes the
    first segment's value whatever it is, so the row is -inf / +inf, not the
    empty row's 0. Kills codegen.py t20 (the merge's `best < 0` clause
    dropped); test_api_audit5 has the row-parallel case only."""
    x = _rand(HUB.n, 2, seed=19)
    x[:, 0] = float("-inf") if reduce == "max" else float("inf")
    prev = set_balance("on", 64)
    try:
        got = aggregate(HUB.g, x, None, "copy_src", reduce, "dst")
    finally:
        set_balance(*prev)
    want = ref_aggregate(HUB, x, None, "copy_src", reduce, "dst")
    assert got[0, 0] == want[0, 0] == x[1, 0]
    torch.testing.assert_close(got, want)


def test_float64_kernels_compile_for_the_gpu():
    """The float64 path (gradcheck, model.double() on a GPU) compiles: every
    accumulator has the data's dtype. Under the interpreter a float32
    accumulator silently turns float64 after its first `+=`; compiled, it is
    a loop-carried type error. Kills codegen.py t22, t23, t30, t38, t49 (the
    merge, aggregation, sddmm dot, edge softmax and GAT d z accumulators
    declared float32)."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "gdsl.backends.triton.aot", "--arch", "90", "--dtype", "fp64"],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and "\n0 failed" in r.stdout, r.stdout + r.stderr
    for name in ("agg_mul_sum_w_xs_bal_merge", "agg_copy_src_sum_none_rs", "sddmm_dot", "edge_softmax_fwd",
                 "gat_bwd_z"):
        assert f"ok   {name} " in r.stdout, r.stdout


def test_prune_keeps_feature_blocks_up_to_twice_the_padded_width():
    """Configs whose BLOCK_F is more than twice the power-of-two padded
    feature width are pruned, the others kept (F = 20: padded 32, so 32 and
    64 kept, 128 dropped). Kills tuning.py t80 (limit the padded width / 2:
    only the smallest config left) and t81 (`<` limit: 64 dropped)."""
    space = [triton.Config(dict(m), num_warps=w) for m, w in tuning.SPACES["aggregate"]]
    kept = tuning.prune_feature_block(space, {"F": 20})
    assert [c.kwargs for c in kept] == [c.kwargs for c in space if c.kwargs["BLOCK_F"] <= 64]
    assert {c.kwargs["BLOCK_F"] for c in kept} == {32, 64}


def test_csr_slots_sorted_by_the_other_endpoint():
    """Within a row the slots are sorted by the other endpoint (graph.py: as
    the Numba backend's CSR, so both sum in the same order), and eid maps
    each slot to its edge. Kills graph.py t69 (slots in edge-id order)."""
    for gr in (SMALL, HUB):
        for csr, row, col in ((gr.g.in_csr, gr.dst, gr.src), (gr.g.out_csr, gr.src, gr.dst)):
            ptr, idx, eid = csr.indptr.long().cpu(), csr.indices.long().cpu(), csr.eid.long().cpu()
            rows = torch.repeat_interleave(torch.arange(csr.nrows), ptr[1:] - ptr[:-1])
            assert torch.equal(col.cpu()[eid], idx) and torch.equal(row.cpu()[eid], rows)
            for r in range(csr.nrows):
                s = idx[ptr[r]:ptr[r + 1]]
                assert torch.equal(s, s.sort().values), (gr, r)
