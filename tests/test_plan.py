"""`gdsl plan` and `gdsl compile --np`: the cost model's choice for a program."""
from __future__ import annotations

import json
from pathlib import Path

from filecheck_runner import run_gdsl

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


def test_plan_on_cora_prints_table_choice_and_reason(tmp_path):
    code, out, err = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4", "--json", str(tmp_path / "p.json")])
    assert code == 0, err
    assert "layer widths [1433, 16, 7], N=2708, E=13264" in out  # E after self loops
    assert "choice: " in out and "why: " in out
    for strategy in ("replicate", "rows(partition=hash)", "rows_replicated(c=2)", "grid2d", "features",
                     "redistribute(R_A=1", "vertex_cut(", "edge_cut("):
        assert strategy in out, strategy
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["P"] == 4 and data["widths"] == [1433, 16, 7]
    assert data["choice"] == data["candidates"][0]["plan"] or any(c["plan"] == data["choice"] for c in data["candidates"])
    assert sum(c["pareto"] for c in data["candidates"]) >= 1


def test_plan_symbolic_without_sizes():
    code, out, err = run_gdsl(["plan", GCN, "--np", "4"])
    assert code == 0, err
    assert "layer widths [F, 16, C]" in out and "sizes are symbolic" in out
    assert "flops=2*E*F" in out


def test_plan_dims_and_memory_budget():
    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "sage.gd"), "--dims", "N=2400000,E=124000000,F=100,C=47",
                               "--np", "64", "--mem-per-rank", "8G"])
    assert code == 0, err
    assert "fits 8 GiB per rank" in out
    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "sage.gd"), "--dims", "N=2400000,E=124000000,F=100,C=47",
                               "--np", "2", "--mem-per-rank", "1M"])
    assert code == 1 and "no plan fits in 1 MiB per rank" in err and "needs" in err


def test_compile_np_records_the_choice_in_the_ir():
    code, out, _ = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4"])
    choice = next(line for line in out.splitlines() if line.startswith("choice: ")).split(": ", 1)[1]
    code, ir, err = run_gdsl(["compile", GCN, "--data", "cora", "--np", "4"])
    assert code == 0, err
    assert f'strategy="{choice}"' in ir and "plan={P=4" in ir
    code, _, err = run_gdsl(["compile", GCN, "--np", "4"])
    assert code == 2 and "--np needs" in err
