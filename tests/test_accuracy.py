"""The issue's accuracy bar on the embedded Cora, trained exactly as written.

gcn.gd and gat.gd: mean final test accuracy over seeds 0, 1, 2 >= 0.80
(Kipf & Welling report 81.5, Velickovic et al. 83.0 with row-normalised
features; the programs here train on the raw 0/1 features as shipped).
sage.gd (full-batch fallback of its mini-batch train block) >= 0.77.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import gdsl
from gdsl.runtime.trainer import train

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cora():
    return gdsl.load_graph("cora")


def _final_test(program: str, graph, seed: int) -> float:
    prog = gdsl.compile(ROOT / "programs" / program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train(prog, graph, seed=seed)
    return result.final["test_acc"]


@pytest.mark.parametrize("program", ["gcn.gd", "gat.gd"])
def test_mean_over_three_seeds(program, cora):
    accs = [_final_test(program, cora, s) for s in (0, 1, 2)]
    mean = sum(accs) / 3
    print(f"{program}: test accuracy per seed {accs}, mean {mean:.4f}")
    assert mean >= 0.80, accs


def test_sage_full_batch(cora):
    acc = _final_test("sage.gd", cora, 0)
    print(f"sage.gd: test accuracy {acc:.4f}")
    assert acc >= 0.77
