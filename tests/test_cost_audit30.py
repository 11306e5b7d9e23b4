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
    # messages + 2 all-reduces x ceil(log2 6) = 3 -> 26 (was 20 + 2 log2 6 = 25.17)
    cost = rows(Problem(**SMALL, P=6))
    assert cost.messages == 26


def test_rows_replicated_stages_of_an_uneven_grid_are_whole():
    # P = 24, c = 4: P/c = 6 block rows over 4 process columns; floor(6/4) = 1 each,
    # the last column takes the remaining 6 - 3*1 = 3 stages (CAGNET §IV-B: "assigns more
    # stages to the last process column"); per SpMM 3 lg 3 = 3 * 2 = 6 messages, 4 SpMMs,
    # and 2 Y all-reduces of lg(P/c) = lg 6 = 3: 24 + 6 = 30 (was 4 * 1.5 * log2 1.5 + 2 log2 6)
    cost = rows_replicated(Problem(**SMALL, P=24), 4)
    assert cost.messages == 30
    # c*c | P: the paper's P/c^2 stages, P = 16, c = 2: 4 lg 4 = 8 per SpMM, lg 8 = 3 per Y
    assert rows_replicated(Problem(**SMALL, P=16), 2).messages == 4 * 8 + 2 * 3


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
