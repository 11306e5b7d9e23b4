"""helper-30: cost-model audit. Each test fails on the code before its fix;
expected values are derived by hand in the comments, from the papers'
formulas (CAGNET §IV) and from what the runtime does (gdsl/dist)."""
import math

import pytest

from gdsl.cost import Problem, choose
from gdsl.cost import symbols as sy
from gdsl.cost.cagnet import rows, rows_replicated

# a small graph where 1.5D is fastest at P = 24 on the default profile
SMALL = dict(N=10000, E=226784, F=16, H=16, C=4, L=2)


# ---------------------------------------------------------------- 1. rows_replicated(c) with c*c not dividing P

def test_rows_replicated_not_dividing_P_is_marked_and_never_chosen():
    # P = 24: c ranges over the divisors with c*c <= 24: 2, 3, 4. The ranks run
    # whole stages only (c*c | P): 4 | 24 runs; 9 and 16 do not divide 24.
    ch = choose(Problem(**SMALL, P=24), None)
    by = {cd.name: cd for cd in ch.candidates}
    assert by["rows_replicated(c=2)"].runnable
    assert not by["rows_replicated(c=3)"].runnable and not by["rows_replicated(c=4)"].runnable
    assert "c*c = 9 to divide P = 24" in by["rows_replicated(c=3)"].not_runnable
    # the model's fastest is rows_replicated(3) (was chosen): now skipped, and off the Pareto front
    assert ch.candidates[0].name == "rows_replicated(c=3)"
    assert ch.best.runnable and ch.best.cost.name != "rows_replicated(c=3)"
    assert all(cd.runnable for cd in ch.pareto)
    # the table marks both with x and says why; the reason names the faster refused plan
    table = ch.table().splitlines()
    assert [ln[:4].strip() for ln in table if "rows_replicated(c=3)" in ln][0] == "x"
    assert "x  rows_replicated(c=4): not runnable: 1.5D needs c*c = 16 to divide P = 24" in table
    assert "faster but not runnable: rows_replicated(c=3)" in ch.reason


def test_rows_replicated_dividing_P_is_runnable():
    # P = 16: c = 2 (4 | 16) and c = 4 (16 | 16) both run
    ch = choose(Problem(**SMALL, P=16), None)
    rr = [cd for cd in ch.candidates if cd.cost.strategy == "rows_replicated"]
    assert [cd.name for cd in sorted(rr, key=lambda cd: cd.name)] == ["rows_replicated(c=2)", "rows_replicated(c=4)"]
    assert all(cd.runnable for cd in rr) and "not runnable" not in ch.table()


def test_gdsl_plan_table_marks_the_unrunnable_1_5d_plan():
    # the CLI with --dims (no --data: no rank checks at all before the fix)
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "gdsl", "plan", str(root / "programs" / "gcn.gd"), "--np", "24",
                        "--dims", "N=10000,E=226784,F=16,C=4"], capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "x  rows_replicated(c=3): not runnable: 1.5D needs c*c = 9 to divide P = 24" in r.stdout, r.stdout
    assert "choice: rows_replicated(c=3)" not in r.stdout


# ---------------------------------------------------------------- 3. lg counts messages: an integer

@pytest.mark.parametrize("P, want", [(2, 1), (3, 2), (4, 2), (6, 3), (24, 5), (64, 6), (100, 7)])
def test_lg_is_an_integer_message_count(P, want):
    # a collective over P ranks takes ceil(log2 P) rounds (CAGNET §III-A, §IV-A-4's alpha lg P)
    assert sy.lg(P) == want and isinstance(sy.lg(P), int)
    assert sy.lg(P) == math.ceil(math.log2(P))
    assert sy.Lg(sy.P).subs(sy.P, P) == want    # the symbolic form agrees once P is a number


def test_rows_messages_at_six_ranks_are_whole():
    # CAGNET 1D, L = 2, P = 6, sparse-first: 4 SpMMs x (P - 1) = 20 broadcast
    # messages + 2 all-reduces x ceil(log2 6) = 3 -> 26 (was 20 + 2 log2 6 = 25.17); the ranks run
    # one all-reduce per epoch (dist/module.py sync_grads), 20 + 3 = 23 (helper-34)
    cost = rows(Problem(**SMALL, P=6), exchange="bcast")
    assert cost.messages == 23


def test_rows_replicated_stages_of_an_uneven_grid_are_whole():
    # P = 24, c = 4: P/c = 6 block rows over 4 process columns; floor(6/4) = 1 each,
    # the last column takes the remaining 6 - 3*1 = 3 stages (CAGNET §IV-B: "assigns more
    # stages to the last process column"); per SpMM 3 lg 3 = 3 * 2 = 6 messages, 4 SpMMs,
    # and 2 Y all-reduces of lg(P/c) = lg 6 = 3: 24 + 6 = 30 (was 4 * 1.5 * log2 1.5 + 2 log2 6);
    # the ranks' one all-reduce per epoch over all P (sync_grads): lg 24 = 5, 24 + 5 = 29 (helper-34)
    cost = rows_replicated(Problem(**SMALL, P=24), 4)
    assert cost.messages == 29
    # c*c | P: the paper's P/c^2 stages, P = 16, c = 2: 4 lg 4 = 8 per SpMM, lg 16 = 4 once
    assert rows_replicated(Problem(**SMALL, P=16), 2).messages == 4 * 8 + 4


# ---------------------------------------------------------------- 4. 1.5D memory: the stage blocks held

def test_rows_replicated_buffers_hold_the_column_stage_blocks():
    # P = 16, c = 2: P/c = 8 block rows of N c/P = N/8 rows; process column j runs
    # s = P/c^2 = 4 broadcast stages and the runtime receives all 4 blocks before its
    # SpMM (dist/functions.py BlockBcast concatenates them): 4 N/8 = N/2 = N/c rows,
    # plus the N/8-row partial sums of the row all-reduce (Algorithm 2 line 8): 5N/8 rows
    # at the widest SpMM. Widths 16 -> 16 -> 4, narrow orders: layer 1 sparse-first at
    # 16 (its backward reads the memoised A^T H^0: no SpMM), layer 2 dense-first at 4,
    # backward A G^2 at 4: widest 16. 5N/8 * 16 = 10 N words (was 2 N/8 * 16 = 4 N).
    N = SMALL["N"]
    mem = dict(rows_replicated(Problem(**SMALL, P=16), 2).memory_terms)
    assert mem["buffers"] == pytest.approx(10 * N)
    # A and H stay at CAGNET §IV-B's M_proc^1.5D, N c/P rows and nnz c/P nonzeros per rank:
    # CSR 2 nnz c/P + N c/P words
    assert mem["graph"] == pytest.approx(2 * SMALL["E"] * 2 / 16 + N * 2 / 16)


def test_rows_replicated_buffers_cover_what_the_partition_fetches():
    # the ranks' own partition (gdsl/dist/part.py): a rank whose block is not one of its
    # column's stage blocks fetches all s of them; the model's buffer rows (s + 1 blocks:
    # the fetched blocks and the partial sums of its own block) equal the largest
    # fetched + own rows over the ranks. N = 64, P = 16, c = 2: blocks of 8 rows, s = 4.
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import random_graph

    from gdsl.dist.part import build_parts, parse_spec
    g = random_graph(n=64, e=400, seed=3)
    parts = build_parts(parse_spec("rows_replicated(2)"), g, 16)
    held = max((pr.n_local - pr.n_own) + pr.n_own for pr in parts)   # fetched + partial sums
    assert held == 5 * 8
    pb = Problem(N=64, E=400, P=16, widths=(1, 1))   # width 1: the buffer counts rows
    assert dict(rows_replicated(pb, 2).memory_terms)["buffers"] == pytest.approx(held)


# ---------------------------------------------------------------- 2. a layer's all-reduce is its own params

def test_sgc_layer_params_come_from_the_program():
    # programs/extra/sgc.gd on Cora: Prop x 3 (no param), then Linear[C] (W: 1433 x 7, b: 7)
    from pathlib import Path

    from gdsl.compiler import compile_source
    from gdsl.planning import layer_params, layer_widths
    path = Path(__file__).resolve().parent.parent / "programs" / "extra" / "sgc.gd"
    m = compile_source(path.read_text(), str(path), dims={"F": 1433, "C": 7, "N": 2708}, stop_after="lower").module
    assert layer_widths(m) == [1433, 1433, 1433, 1433, 7]
    assert layer_params(m) == [0, 0, 0, 1433 * 7 + 7]


def test_parameter_free_layers_have_no_all_reduce_gemm_or_backward():
    # SGC on 1D rows, N = 2708, P = 4, widths 1433 x 4 -> 7, params (0, 0, 0, 10038).
    # forward: the 3 propagations are sparse-first at 1433 (equal widths), one broadcast
    # each, (P-1)/P N 1433 words; Linear narrows, dense-first, its SpMM at 7.
    # backward: only Linear's (nothing below it has a parameter, so no G^3 and nothing
    # flows into the propagations): A G^4 at 7, then Y^4. One all-reduce: 10038 words.
    N, P = 2708, 4
    pb = Problem(N=N, E=13264, P=P, widths=(1433, 1433, 1433, 1433, 7), params=(0, 0, 0, 10038))
    cost = rows(pb, orders="narrow", exchange="bcast")   # CAGNET's broadcast (`--halo bcast`)
    ar = [o for o in cost.ops if o.op == "allreduce"]
    assert [(o.layer, o.words) for o in ar] == [(4, 10038)]
    assert cost.words == pytest.approx((P - 1) / P * N * (3 * 1433 + 7 + 7) + 10038)
    # 5 broadcasts of P - 1 messages, one all-reduce of lg 4 = 2
    assert cost.messages == 5 * (P - 1) + 2
    # GEMMs: Linear's forward H W and its Y = H^T (A G), 2 (N/P) 1433 7 flops each; none for Prop
    assert cost.epoch.dense_flops == pytest.approx(2 * 2 * N / P * 1433 * 7)
    assert not [o for o in cost.ops if o.phase == "backward" and o.layer < 4]
    # parameters: 4 words each (weight, gradient, two Adam moments)
    assert dict(cost.memory_terms)["parameters"] == 4 * 10038
    # without params every layer is priced as a GCN layer, as before (CAGNET's f_{l-1} f_l)
    gcn = rows(Problem(N=N, E=13264, P=P, widths=(1433, 1433, 1433, 1433, 7)), orders="narrow")
    assert sorted(o.words for o in gcn.ops if o.op == "allreduce") == sorted([1433 * 1433] * 3 + [1433 * 7])


def test_a_parameter_free_layer_between_two_with_params_passes_the_gradient_on():
    # widths 8 -> 8 -> 8 -> 4, params (64, 0, 32): layer 2 has no W, but layer 1 does, so the
    # backward of layer 2 computes G^1 = A G^2 (one SpMM at 8, its broadcast) and no GEMM
    pb = Problem(N=100, E=500, P=2, widths=(8, 8, 8, 4), params=(64, 0, 32))
    cost = rows(pb, exchange="bcast")    # CAGNET's order: sparse-first both ways
    l2 = [(o.phase, o.op) for o in cost.ops if o.layer == 2]
    assert l2 == [("forward", "bcast"), ("forward", "spmm"), ("backward", "bcast"), ("backward", "spmm")]
    assert [(o.layer, o.words) for o in cost.ops if o.op == "allreduce"] == [(1, 64), (3, 32)]


def test_plan_prices_sgc_without_the_phantom_all_reduce():
    # gdsl plan / compile --np: the chosen plan's all-reduces are Linear's only
    from pathlib import Path

    from gdsl.compiler import compile_source
    from gdsl.planning import plan
    path = Path(__file__).resolve().parent.parent / "programs" / "extra" / "sgc.gd"
    dims = {"F": 1433, "C": 7, "N": 2708}
    m = compile_source(path.read_text(), str(path), dims=dims, stop_after="lower").module
    res = plan(m, {**dims, "E": 13264}, 4)
    for cd in res.choice.candidates:
        if cd.cost.strategy in ("replicate", "grid2d", "grid3d"):
            continue
        words = [(o.layer, o.words) for o in cd.cost.ops if o.op == "allreduce"]
        assert words == [(4, 1433 * 7 + 7)], (cd.name, words)
