"""helper-32's review of helper-30 (cost model: per-layer params, parameter-free
layers, lg, 1.5D stages) and helper-31 (the no-params train block, nll's check).

- A parameter-free layer (SGC's, APPNP's propagation) has no GEMM and no Y,
  and no backward when no layer below it has a parameter: helper-30 made it so
  for the 1D/1.5D/RDM/DistGNN/halo plans (rdm.schedule); the 2D and 3D grids
  still priced CAGNET eq. 4's dense SUMMA for Y and SGC's whole backward, and
  P3's `features` plan a phantom F/P x F GEMM each way for SGC's first
  propagation (253 ms of the table's `features` row for sgc.gd at P = 4, the
  other plans about 30 ms).
- The no-params check on the program as written (binding.check_masks) has no
  false positive on the shipped programs, and a model whose only param layer
  is in `repeat layers - 1` is trainable at layers = 2 and refused, at its
  `model =` line, at layers = 1.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import gdsl
from gdsl.cost import cagnet, p3
from gdsl.cost.choose import candidates
from gdsl.cost.problem import Problem
from gdsl.cost.symbols import lg, root
from gdsl.diagnostics import CompileError

ROOT = Path(__file__).resolve().parent.parent


def _sgc(P: int) -> Problem:
    """SGC's shape: three propagations (no params) and one Linear (W and b)."""
    F, C = 1433, 7
    return Problem(N=2708, E=13264, P=P, widths=(F, F, F, F, C), params=(0, 0, 0, F * C + C))


def _appnp(P: int) -> Problem:
    """APPNP's shape: two Linears, then two propagations above them (no params)."""
    F, H, C = 1433, 64, 7
    return Problem(N=2708, E=13264, P=P, widths=(F, H, C, C, C), params=(F * H + H, H * C + C, 0, 0))


@pytest.mark.parametrize("P", [4, 8])
def test_no_plan_prices_a_gemm_or_a_backward_for_sgc_propagations(P):
    """Every candidate (grid2d at P = 4, grid3d at P = 8, features included):
    layers 1..3 of SGC have no GEMM and no backward op at all."""
    pb = _sgc(P)
    names = set()
    for cd in candidates(pb):
        names.add(cd.cost.strategy)
        bad = [(o.op, o.phase, o.what) for o in cd.cost.ops
               if o.layer in (1, 2, 3) and (o.op == "gemm" or o.phase == "backward")]
        assert not bad, (cd.name, bad)
    assert {"features", "grid2d" if P == 4 else "grid3d"} <= names


@pytest.mark.parametrize("P, grid", [(4, cagnet.grid2d), (8, cagnet.grid3d)])
def test_grid_propagation_above_params_has_eq3_but_no_y(P, grid):
    """APPNP's propagations (layers 3, 4) sit above layers with params: their
    backward G^{l-1} (eq. 3) stays, their Y (eq. 4's dense SUMMA) goes. The
    layers with params keep both, as CAGNET §IV-C/§IV-D price every layer."""
    pb = _appnp(P)
    cost = grid(pb)
    q = root(P, 2 if grid is cagnet.grid2d else 3)
    for ly in pb.layers():
        back = [o for o in cost.ops if o.layer == ly.index and o.phase == "backward" and o.kind == "comm"]
        if ly.has_params:
            assert len(back) == 2, (ly.index, back)
        else:
            assert len(back) == 1 and "Y" not in back[0].what, (ly.index, back)
            # eq. 3's words only: nnz/q + 3 N f/q (2D) or nnz/q^2 + 5 N f/q^2 (3D), f = C here
            qq = q if grid is cagnet.grid2d else q * q
            k = 3 if grid is cagnet.grid2d else 5
            assert float(back[0].words) == pytest.approx(float(pb.E / qq + k * pb.N * ly.f_in / qq))
            assert not [o for o in cost.ops if o.layer == ly.index and o.op == "gemm"]
    # without params (every layer a GCN layer) nothing changes: eq. 3 and eq. 4 everywhere
    plain = grid(Problem(N=2708, E=13264, P=P, widths=(1433, 64, 7, 7, 7)))
    for i in range(1, 5):
        assert len([o for o in plain.ops if o.layer == i and o.phase == "backward" and o.kind == "comm"]) == 2
    assert lg(P) >= 2


def test_features_first_layer_without_params():
    """P3's layer 1 with no W^1 (SGC): no GEMM, no G^1 push, no Y^1; its
    forward aggregation and the owners' pull stay. With a param it is as before."""
    pb = _sgc(4)
    cost = p3.features(pb)
    first = [o for o in cost.ops if o.layer == 1]
    assert {o.op for o in first} == {"spmm", "reduce_scatter"}, first
    assert all(o.phase == "forward" for o in first)
    with_w = p3.features(_appnp(4))
    # (helper-33: and the all-reduce of its bias, H words, which the ranks all-reduce with the other gradients)
    assert {o.op for o in with_w.ops if o.layer == 1} == {"spmm", "gemm", "reduce_scatter", "allgather", "allreduce"}
    [ar] = [o for o in with_w.ops if o.layer == 1 and o.op == "allreduce"]
    assert int(ar.words) == _appnp(4).params[0] - 1433 * 64


def test_sgc_plan_table_features_not_a_phantom(capsys):
    """`gdsl plan sgc.gd --np 4`: the features row is priced within a factor of
    the other plans (was about 9x the fastest, from its phantom GEMMs)."""
    cands = candidates(_sgc(4))
    by = {cd.cost.strategy: cd.time for cd in cands}
    assert by["features"] < 2 * min(by.values())
    assert by["grid2d"] < 2 * by["rows"]


# ---- helper-31: the no-params check --------------------------------------------------------------

def _programs():
    paths = sorted([*ROOT.glob("programs/*.gd"), *ROOT.glob("programs/extra/*.gd"),
                    *ROOT.glob("tests/dist_programs/*.gd")])
    assert len(paths) > 20
    return paths


def test_no_params_check_passes_every_shipped_program():
    """binding._calls_a_param, on the program as written: every shipped program
    (and sage.gd at layers = 1, its hidden call in a repeat 0) names a layer
    with a param."""
    from gdsl.runtime.binding import _calls_a_param
    for p in _programs():
        prog = gdsl.compile(p)
        assert _calls_a_param(prog.checked), p
    assert _calls_a_param(gdsl.compile(ROOT / "programs" / "sage.gd", layers=1).checked)


REPEAT = """\
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    sync s = sum(t)
    return s
}

model M[layers = 2] {
    h = Prop(X)
    repeat layers - 1 {
        h = Lin[F](h)
    }
    return h
}

train t {
    model = M
    loss = mse(X, mask = train)
    optimizer = adam(lr = 0.01)
    epochs = 1
}
"""


def test_params_only_in_repeat_layers_minus_one():
    """The only param layer in `repeat layers - 1`: trains at layers = 2 (no
    false positive), refused at its `model =` line when `layers = 1` leaves
    the repeat empty (the module check, after the check as written passed)."""
    from gdsl.runtime.binding import check_masks
    from helpers import random_graph
    g = random_graph(n=12, e=40, f=3, c=2)
    res = gdsl.train(gdsl.compile(REPEAT), g, epochs=1, backend="reference")
    assert len(res.epochs) == 1
    prog = gdsl.compile(REPEAT, layers=1)
    check_masks(prog.checked, g)
    line = REPEAT.splitlines().index("    model = M") + 1
    with pytest.raises(CompileError, match=rf"<input>:{line}:5: error: model 'M' has no params to train"):
        gdsl.train(prog, g, epochs=1, backend="reference")
