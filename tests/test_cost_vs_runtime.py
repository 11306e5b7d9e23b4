"""Predicted words per collective must equal measured bytes / 4 (issue: cost model).

The distributed runtime that would move and count those bytes (mpi4py
collectives, `gdsl run --np P --report comm`) is not built yet, so there is
nothing to measure: this test is skipped with that reason until it lands. The
prediction side exists: `gdsl.cost` lists every collective with its words
(`Cost.ops`), which is what the comparison will read.
"""
import pytest

from gdsl.cost.problem import Problem
from gdsl.cost.strategies import rows


def test_predicted_collectives_are_listed_with_words():
    cost = rows(Problem(N=2708, E=13264, F=1433, H=16, C=7, L=2, P=4))
    comm = [op for op in cost.ops if op.kind == "comm"]
    assert comm and all(float(op.words) > 0 for op in comm)
    assert sum(float(op.words) for op in comm) == pytest.approx(float(cost.words))


@pytest.mark.skip(reason="no distributed runtime yet to measure bytes per collective (MPI runtime issue)")
def test_predicted_words_equal_measured_bytes_over_4():
    raise AssertionError("enable once `gdsl run --np P --report comm` counts bytes per collective")
