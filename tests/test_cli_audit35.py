"""helper-35: grid2d / grid3d are marked `x` in `gdsl plan`'s table as its --json says (and never
chosen); `gdsl run --np P` prices the auto plan at the ranks' backend's rates; an option value that
starts with '-' (`--mem-per-rank -4G`) reaches gdsl's own usage error; --help / --version to a
full disk or a closed pipe fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from filecheck_runner import run_gdsl

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")
DIMS = "N=100000,E=1000000,F=128,C=10"


# 1. grid2d / grid3d: the table's x mark, as the --json's runnable: false

@pytest.mark.parametrize("P, grid", [(4, "grid2d"), (8, "grid3d")])
def test_plan_table_marks_the_modelled_only_grids_as_the_json_does(tmp_path, P, grid):
    out = tmp_path / "p.json"
    code, text, err = run_gdsl(["plan", GCN, "--np", str(P), "--dims", DIMS, "--json", str(out)])
    assert code == 0, err
    row = next(line for line in text.splitlines() if line.split()[1:2] == [grid])
    assert row.split()[0] == "x", row   # (was: no mark)
    assert f"x  {grid}: not runnable: modelled, not executed by the ranks" in text.splitlines()
    cand = next(c for c in json.loads(out.read_text())["candidates"] if c["plan"] == grid)
    assert cand["runnable"] is False and cand["why_not"] == "modelled, not executed by the ranks"


def test_a_fastest_grid_plan_is_never_the_choice():
    """Were grid2d the fastest, the choice (and `partition = auto`) takes the fastest plan the
    ranks run; grid2d is named in the reason as faster but not runnable, off the Pareto front."""
    from gdsl.cost.choose import choose
    from gdsl.cost.problem import Problem
    from gdsl.planning import mark_modelled_only

    choice = choose(Problem(N=100000, E=1000000, P=4, widths=(128, 16, 10)))
    grid = next(c for c in choice.candidates if c.cost.strategy == "grid2d")
    fast = replace(grid, time=1e-9)
    cands = (fast,) + tuple(c for c in choice.candidates if c is not grid)
    rigged = replace(choice, best=fast, candidates=cands, pareto=(fast,))
    got = mark_modelled_only(rigged)
    assert got.best.cost.strategy != "grid2d" and got.best.runnable
    assert all(c.cost.strategy != "grid2d" for c in got.pareto)
    assert "faster but not runnable: grid2d" in got.reason and "modelled, not executed by the ranks" in got.reason
    assert mark_modelled_only(got) is got   # marked once
    # the auto plan of `gdsl run --np` never takes it either (no executable spec)
    from gdsl.dist.cli_run import _from_candidate
    assert _from_candidate(fast, 4, approximate=True) is None


# 2. `gdsl run --np P`: the auto plan priced at the rates of the backend the ranks run

PROFILE = {"name": "two-backends", "alpha": 2e-6, "beta": 1.6e-10, "gamma_spmm": 4e11, "gamma_gemm": 2.5e10,
           "backend": "numba",
           "per_backend": {"reference": {"gamma_spmm": 1e8, "gamma_gemm": 2.5e10},
                           "numba": {"gamma_spmm": 4e11, "gamma_gemm": 2.5e10}}}


@pytest.mark.parametrize("flags, want", [([], "reference"), (["--backend", "numba"], "numba")])
def test_run_np_prices_the_plan_at_the_ranks_backend(tmp_path, monkeypatch, flags, want):
    import gdsl.dist.launch as launch
    import gdsl.planning as planning

    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(PROFILE))
    monkeypatch.setenv("GDSL_PROFILE", str(prof))
    priced, ran = [], []
    real_plan = planning.plan

    def plan(*a, **k):
        result = real_plan(*a, **k)
        priced.append(result.profile)
        return result

    monkeypatch.setattr(planning, "plan", plan)
    monkeypatch.setattr(launch, "launch", lambda wargs, P, temp_dirs=None: ran.append(wargs) or 0)
    code, _, err = run_gdsl(["run", GCN, "--np", "2", "--epochs", "1", *flags])
    assert code == 0, err
    assert ran and ran[0]["backend"] == want   # the ranks' backend
    assert priced and priced[0].gamma_spmm == PROFILE["per_backend"][want]["gamma_spmm"], priced
    # (was: the top-level rates, numba's, whatever the ranks ran)


def test_rank_profile_falls_back_to_the_top_level_rates(tmp_path, monkeypatch):
    from gdsl.cost.profile import DEFAULT_PROFILE
    from gdsl.planning import rank_profile
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE))
    assert rank_profile("triton", prof).gamma_spmm == PROFILE["gamma_spmm"]   # not calibrated for triton
    assert "no rates for backend triton: the top-level rates (numba's)" in rank_profile("triton", prof).source
    assert rank_profile(None, prof).gamma_spmm == 1e8                         # the ranks' default: reference
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: PROFILE[k] for k in ("alpha", "beta", "gamma_spmm", "gamma_gemm")}))
    assert rank_profile("reference", plain).gamma_spmm == PROFILE["gamma_spmm"]
    monkeypatch.setenv("GDSL_PROFILE", str(tmp_path / "none.json"))
    assert rank_profile("numba") == DEFAULT_PROFILE


def test_plan_prices_at_the_backend_asked(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE))
    out = tmp_path / "o.json"
    for flags, want in (([], "reference"), (["--backend", "numba"], "numba")):
        code, text, err = run_gdsl(["plan", GCN, "--np", "4", "--dims", DIMS, "--profile", str(prof),
                                    "--json", str(out), *flags])
        assert code == 0, err
        assert f"(rates of backend {want})" in text
        got = json.loads(out.read_text())["profile"]
        assert got["backend"] == want and got["gamma_spmm"] == PROFILE["per_backend"][want]["gamma_spmm"]


# 3. a value that starts with '-'

@pytest.mark.parametrize("argv, said", [
    (["run", GCN, "--np", "2", "--mem-per-rank", "-4G"], "--mem-per-rank must be at least one byte, got '-4G'"),
    (["run", GCN, "--np", "2", "--mem-per-rank=-4G"], "--mem-per-rank must be at least one byte, got '-4G'"),
    (["run", GCN, "--np", "2", "--mem", "-4G"], "--mem-per-rank must be at least one byte, got '-4G'"),
    (["partition", GCN, "--np", "2", "--out", "o", "--mem-per-rank", "-4G"], "must be at least one byte"),
    (["compile", GCN, "--data", "cora", "--np", "2", "--mem-per-rank", "-1K"], "must be at least one byte"),
    (["plan", GCN, "--dims", DIMS, "--mem-per-rank", "-4G"], "must be at least one byte"),
    (["run", GCN, "--np", "2", "--comm-timeout", "-1e3"], "must be a number of seconds >= 0"),
    (["plan", GCN, "--dims", "-N=3"], "the program has no dim -N"),
    (["compile", GCN, "--set", "-x=3"], "--set expects NAME=VALUE, got '-x=3'"),
])
def test_a_value_starting_with_a_dash_gets_gdsls_own_usage_error(tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_gdsl(argv)
    assert code == 2 and said in err, err
    assert "expected one argument" not in err


def test_an_option_in_place_of_a_value_is_still_missing_its_value():
    code, _, err = run_gdsl(["run", GCN, "--json", "--save", "x.pt"])
    assert code == 2 and "argument --json: expected one argument" in err, err
    code, _, err = run_gdsl(["plan", GCN, "--mem-per-rank", "-h"])   # -h stays an option
    assert code == 2 and "argument --mem-per-rank: expected one argument" in err, err


# 4. --help / --version whose write fails

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["run", "--help"], ["plan", "-h"], ["--help"], ["--version"]])
def test_help_to_a_full_disk_is_an_error(argv):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "gdsl", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=120, cwd=ROOT)
    assert r.returncode == 1 and "gdsl: error: no space left on device" in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr


def test_help_to_a_reader_that_left_is_141():
    p = subprocess.Popen([sys.executable, "-m", "gdsl", "run", "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.close()
    assert p.wait(timeout=120) == 141
    assert b"Traceback" not in p.stderr.read()
    p.stderr.close()


def test_help_still_prints():
    code, out, err = run_gdsl(["run", "--help"])
    assert code == 0 and out.startswith("usage: gdsl run") and "--mem-per-rank" in out


# planning.plan passes the cost model's new inputs (docs/cost-model.md "Left", helper-34): the hash
# partition's measured halo for rows(hash), and the run's --halo

def test_plan_prices_rows_hash_on_the_measured_hash_halo(tmp_path):
    import numpy as np

    from gdsl.graph import partition as gp
    from gdsl.graph.io import load_graph
    from gdsl.planning import measure_partitions

    g = load_graph("cora").with_options(self_loops=True, symmetric=True)
    stats, how = measure_partitions(g.src, g.dst, g.num_nodes, 4)
    want = max(h.size for h in gp.halo(np.asarray(g.src), np.asarray(g.dst), gp.rows_hash(g.num_nodes, 4), 4))
    assert stats["rows_halo"] == want and "hash partition of this graph at P=4" in how["rows_halo"]
    out = tmp_path / "p.json"
    code, _, err = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4", "--json", str(out)])
    assert code == 0, err
    rows = next(c for c in json.loads(out.read_text())["candidates"] if c["plan"] == "rows(partition=hash)")
    # the cost model's rows(hash) on that halo (was: on the estimated hash halo, 1535 rows on Cora at
    # P = 4, where the partition has 1260)
    from gdsl.cost.cagnet import rows as rows_cost
    from gdsl.cost.halo import hash_halo
    from gdsl.cost.problem import Problem
    from gdsl.compiler import compile_source
    from gdsl.planning import layer_params
    lowered = compile_source(Path(GCN).read_text(), GCN, dims={"F": 1433, "C": 7}, stop_after="lower").module
    pb = Problem(N=g.num_nodes, E=g.num_edges, P=4, widths=(1433, 16, 7), params=tuple(layer_params(lowered)))
    assert rows["words_per_rank"] == pytest.approx(float(rows_cost(pb, orders="narrow", halo=want).words))
    assert rows["words_per_rank"] != pytest.approx(float(rows_cost(pb, orders="narrow", halo=hash_halo(pb.N, pb.E, 4)).words))


def test_run_np_prices_the_halo_exchange_it_runs(tmp_path, monkeypatch):
    import gdsl.dist.launch as launch
    import gdsl.planning as planning

    monkeypatch.setenv("GDSL_PROFILE", str(tmp_path / "none.json"))
    seen = []
    real_plan = planning.plan

    def plan(*a, **k):
        result = real_plan(*a, **k)
        seen.append((k.get("halo"), {c.name: c for c in result.choice.candidates}))
        return result

    monkeypatch.setattr(planning, "plan", plan)
    monkeypatch.setattr(launch, "launch", lambda wargs, P, temp_dirs=None: 0)
    words = {}
    for mode in ("alltoallv", "bcast"):
        code, _, err = run_gdsl(["run", GCN, "--np", "2", "--epochs", "1", "--halo", mode])
        assert code in (0, 1), err   # (bcast: a row plan may not be the choice; --halo then refuses it)
        halo, cands = seen[-1]
        assert halo == mode
        words[mode] = float(next(c for n, c in cands.items() if n.startswith("rows(partition=hash")).cost.words)
    assert words["bcast"] > words["alltoallv"]   # CAGNET's broadcast of whole blocks (was: priced alike)


def test_plan_prices_a_layer_without_aggregation_with_no_spmm():
    """docs/cost-model.md "Left" (c), its first half: planning.plan passes Problem(aggregates=...),
    so APPNP's two Linear layers (and an MLP's) have no SpMM and no exchange (was: one each way)."""
    from gdsl.compiler import compile_source
    from gdsl.planning import layer_aggregates, plan

    def lowered(name):
        f = ROOT / "programs" / "extra" / name
        return compile_source(f.read_text(), str(f), dims={"F": 1433, "C": 7}, stop_after="lower").module

    appnp = lowered("appnp.gd")
    assert layer_aggregates(appnp) == [False, False, True, True, True, True, True]
    assert layer_aggregates(lowered("mlp.gd")) == [False, False]
    r = plan(appnp, {"N": 2708, "E": 13264}, 4)
    assert r.problem.aggregates == (False, False, True, True, True, True, True)
    layers = {op.layer for op in r.choice.best.cost.ops if op.op in ("spmm", "halo_exchange")}
    assert layers and not layers & {1, 2}, r.choice.best.cost.ops   # the Linear layers: no SpMM, no exchange
