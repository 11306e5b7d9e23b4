"""Cost-model terms the golden tests of tests/test_cost.py leave unpinned:
SpMM memory traffic, per-rank memory terms, which process grids are offered,
the RDM configuration added under a memory limit, and Pareto ties.
(Mutation-testing audit: each test fails under a deliberate bug that the
existing tests let pass.)"""
import pytest
import sympy as sp

from gdsl.cost import rdm
from gdsl.cost import symbols as sy
from gdsl.cost.choose import _best_rdm, _is_power, candidates
from gdsl.cost.problem import Problem
from gdsl.cost.profile import DEFAULT_PROFILE, predict_time
from gdsl.cost.redistribute import redistribute
from gdsl.cost.strategies import features, grid3d, replicate, rows
from gdsl.cost.symbols import WORD_BYTES

fi, fh, fo = sy.f_in, sy.f_h, sy.f_out
N, E, P = sy.N, sy.E, sy.P


def same(a, b) -> bool:
    return sp.expand(sp.sympify(a) - sp.sympify(b)) == 0


def _mem(cost, name):
    [v] = [v for k, v in cost.memory_terms if k == name]
    return v


def test_spmm_traffic_counts_indices_gathered_rows_and_written_rows():
    """Each SpMM is timed on 4 (2 nnz + nnz f + rows f) bytes (gdsl/cost/build.py,
    profile.py): an index and a value per nonzero, a gathered input row per
    nonzero and a written output row per row. 1D rows: nnz = E/P, rows = N/P."""
    cost = rows(Problem(widths=(fi, fh, fo)))
    spmms = [o for o in cost.ops if o.op == "spmm"]
    assert spmms
    for o in spmms:
        f = o.flops / (2 * E / P)           # the SpMM's width
        assert same(o.bytes, WORD_BYTES * (2 * E / P + E / P * f + N / P * f)), o
    # so the sparse time grows with N for fixed E (the output rows are written)
    a = predict_time(rows(Problem(N=10_000, E=50_000, F=32, H=16, C=4, L=2, P=4)))
    b = predict_time(rows(Problem(N=40_000, E=50_000, F=32, H=16, C=4, L=2, P=4)))
    assert b > a


def test_parameters_are_weights_gradients_and_two_adam_moments():
    cost = replicate(Problem(widths=(fi, fh, fo)))
    assert same(_mem(cost, "parameters"), 4 * (fi * fh + fh * fo))
    # P3 keeps only its f_in/P rows of W^1 (model-parallel layer 1)
    p3 = features(Problem(widths=(fi, fh, fo)), halo=sy.S)
    assert same(_mem(p3, "parameters"), 4 * (fi / P * fh + fh * fo))


def test_p3_data_parallel_layer_1_keeps_z_and_h_of_its_rows():
    """P3's layer 1_D holds Z^1 and H^1 of the rank's N/P rows, as every
    data-parallel layer does (activation_terms: 2 n_loc f_l per layer)."""
    p3 = features(Problem(widths=(fi, fh, fo)), halo=sy.S)
    assert same(_mem(p3, "layer 1_D"), 2 * N / P * fh)
    one_d = rows(Problem(widths=(fi, fh, fo)))
    assert same(_mem(one_d, "activations"), 2 * N / P * fh + 2 * N / P * fo)


def test_grid3d_replicates_the_activations_p_cuberoot_times():
    """CAGNET §IV-D: the layer in flight is held P^(1/3) times, P^(1/3) n f/P
    words per rank in all, of which n f/P are the activations every plan
    keeps: the extra term is (P^(1/3) - 1) n f_max / P."""
    q = P ** sp.Rational(1, 3)
    cost = grid3d(Problem(widths=(fi, fh, fo)))
    extra = _mem(cost, "3D replication")
    f = sp.Symbol("f", positive=True)
    uniform = extra.subs({fi: f, fh: f, fo: f})
    assert same(uniform, (q - 1) * N * f / P)
    # one rank (P = 1) replicates nothing
    assert sp.simplify(uniform.subs(P, 1)) == 0


@pytest.mark.parametrize("P_,k,want", [(64, 3, True), (125, 3, True), (27, 3, True), (1000, 3, True),
                                       (63, 3, False), (16, 2, True), (15, 2, False), (4096, 3, True)])
def test_perfect_powers(P_, k, want):
    assert _is_power(P_, k) is want


def test_grid3d_is_a_candidate_on_every_perfect_cube():
    """64 ** (1/3) is 3.9999999999999996 in floating point: truncating it
    dropped the 4x4x4 grid (and 5x5x5, 10x10x10) from the candidates."""
    for P_ in (8, 27, 64, 125):
        pb = Problem(N=10_000, E=100_000, F=64, H=32, C=8, L=2, P=P_)
        names = {cd.cost.strategy for cd in candidates(pb, strategies=("grid3d",))}
        assert names == {"grid3d"}, P_


def test_rdm_under_a_memory_limit_adds_the_fastest_configuration_that_fits():
    """_best_rdm: the fastest RDM configuration, and, when it does not fit,
    the fastest of those that do (not any fitting one)."""
    pb = Problem(N=100_000, E=2_000_000, widths=(512, 256, 16), P=4)
    R_A = 4
    scored = []
    for cfg in rdm.configurations(2, memoize=(True, False)):
        cst = redistribute(pb, R_A, config=cfg)
        scored.append((float(predict_time(cst, DEFAULT_PROFILE)), float(WORD_BYTES * cst.memory), cst.name))
    scored.sort()
    fastest_time, fastest_mem, fastest_name = scored[0]
    # a limit the fastest misses but others meet, with fitting configurations of different times
    fitting_mems = sorted({m for _, m, _ in scored if m < fastest_mem})
    assert fitting_mems, "the fastest configuration should not be the smallest here"
    limit = fitting_mems[-1]
    fits = [t for t in scored if t[1] <= limit]
    assert len({t for t, _, _ in fits}) > 1
    got = _best_rdm(pb, R_A, DEFAULT_PROFILE, limit)
    assert [c.name for c in got][0] == fastest_name
    assert len(got) == 2
    second = got[1]
    assert float(WORD_BYTES * second.memory) <= limit
    assert float(predict_time(second, DEFAULT_PROFILE)) == pytest.approx(fits[0][0])


def test_pareto_keeps_points_that_tie():
    """Equal points do not dominate each other (RDM §IV-B: dominated means <=
    everywhere and < somewhere): both stay on the front."""
    assert rdm.pareto({0: (1, 2), 1: (1, 2), 2: (2, 3), 3: (0, 5)}) == [0, 1, 3]
    assert rdm.pareto({"a": (3, 3), "b": (3, 3)}) == ["a", "b"]
