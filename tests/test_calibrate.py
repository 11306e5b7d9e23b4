"""`gdsl calibrate` and machine profiles (issue: cost model, item 5).

The alpha-beta fit on synthetic timings; load_profile's search order
(explicit path, $GDSL_PROFILE, $XDG_CONFIG_HOME/gdsl/profile.json, the
built-in default) and its errors; and, marked `mpi`, a real quick
calibration under `mpiexec -n 2` whose profile `gdsl plan --profile` uses.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
from filecheck_runner import run_gdsl

from gdsl.cost.calibrate import QUICK_SIZES, fit_alpha_beta, write_profile
from gdsl.cost.profile import (
    DEFAULT_PROFILE,
    WORD_BYTES,
    default_profile_path,
    describe_profile,
    load_profile,
    profile_from_dict,
)
from gdsl.diagnostics import GdslError

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")
GOOD = {"name": "test-machine", "alpha": 3e-6, "beta": 4e-10, "gamma_spmm": 2e9, "gamma_gemm": 2e10,
        "source": "test", "date": "2026-01-01T00:00:00+00:00",
        "per_backend": {"numba": {"gamma_spmm": 3e9, "gamma_gemm": 2e10}}}


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """No $GDSL_PROFILE, and a config folder with nothing in it."""
    monkeypatch.delenv("GDSL_PROFILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


# ---------------------------------------------------------------------------
# the fit
# ---------------------------------------------------------------------------

def test_fit_recovers_alpha_and_beta_from_exact_data():
    alpha, beta_bytes = 2e-6, 1 / 10e9           # 2 us, 10 GB/s
    sizes = [8 << k for k in range(22)]
    fit = fit_alpha_beta(sizes, [alpha + beta_bytes * s for s in sizes])
    assert fit["alpha"] == pytest.approx(alpha, rel=1e-6)
    assert fit["beta_bytes"] == pytest.approx(beta_bytes, rel=1e-9)
    assert fit["beta"] == pytest.approx(WORD_BYTES * beta_bytes, rel=1e-9)
    assert fit["bandwidth"] == pytest.approx(10e9, rel=1e-9)
    assert set(fit["fits"]) == {"all", "small"}                     # both fits reported
    assert fit["fits"]["small"]["alpha"] == pytest.approx(alpha, rel=1e-6)


def test_fit_takes_alpha_from_small_messages_and_beta_from_all():
    # large messages noisy (+-5%), small ones exact: the all-sizes intercept is
    # swamped by the big residuals, the small-size one is not
    alpha, beta_bytes = 1.5e-6, 1 / 5e9
    sizes = QUICK_SIZES
    noise = [1.0, 1.0, 1.0, 1.0, 1.05, 0.95, 1.05, 0.97]
    times = [(alpha + beta_bytes * s) * n for s, n in zip(sizes, noise)]
    fit = fit_alpha_beta(sizes, times)
    assert fit["alpha"] == pytest.approx(alpha, rel=1e-3)
    assert abs(fit["fits"]["all"]["alpha"] - alpha) > 10 * abs(fit["alpha"] - alpha)
    assert fit["beta_bytes"] == pytest.approx(beta_bytes, rel=0.05)
    assert fit["alpha_from"] == "small"


def test_fit_never_gives_a_non_positive_alpha_or_beta():
    sizes = [8, 64, 512, 4096, 1 << 20]
    times = [2e-6, 1.9e-6, 1.8e-6, 1.7e-6, 1e-4]     # noisy small sizes: their fit slopes downwards
    fit = fit_alpha_beta(sizes, times)
    assert fit["alpha"] > 0 and fit["beta"] > 0
    flat = fit_alpha_beta([8, 64, 512], [2e-6, 2e-6, 2e-6])
    assert flat["alpha"] == pytest.approx(2e-6) and flat["beta"] > 0
    with pytest.raises(ValueError, match="two message sizes"):
        fit_alpha_beta([8], [1e-6])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([8, 64], [1e-6, float("nan")])


# ---------------------------------------------------------------------------
# load_profile
# ---------------------------------------------------------------------------

def test_default_profile_when_no_file(no_env):
    assert default_profile_path() == no_env / "config" / "gdsl" / "profile.json"
    assert load_profile() is DEFAULT_PROFILE
    assert "built-in default" in describe_profile(DEFAULT_PROFILE)


def test_xdg_default_location_env_var_and_explicit_path(no_env, monkeypatch):
    cfg = no_env / "config" / "gdsl" / "profile.json"
    write_profile(GOOD, cfg)
    umask = os.umask(0o022)
    os.umask(umask)
    assert cfg.stat().st_mode & 0o777 == 0o666 & ~umask                # not mkstemp's 0600
    p = load_profile()
    assert (p.name, p.alpha, p.beta, p.gamma_spmm, p.gamma_gemm) == ("test-machine", 3e-6, 4e-10, 2e9, 2e10)
    assert p.path == str(cfg) and str(cfg) in describe_profile(p)
    other = no_env / "other.json"
    other.write_text(json.dumps({**GOOD, "name": "from-env", "alpha": 5e-6}))
    monkeypatch.setenv("GDSL_PROFILE", str(other))
    assert default_profile_path() == other
    assert load_profile().name == "from-env"
    explicit = no_env / "explicit.json"
    explicit.write_text(json.dumps({**GOOD, "name": "explicit"}))
    assert load_profile(explicit).name == "explicit"                  # an explicit path beats the env var
    assert load_profile(explicit, backend="numba").gamma_spmm == 3e9  # per-backend rates
    monkeypatch.setenv("GDSL_PROFILE", str(no_env / "not-there.json"))
    assert load_profile() is DEFAULT_PROFILE                           # nothing calibrated there yet


def test_write_profile_is_atomic_and_validated(no_env):
    out = no_env / "deep" / "er" / "p.json"
    assert write_profile(GOOD, out) == out
    assert json.loads(out.read_text())["name"] == "test-machine"
    assert [f.name for f in out.parent.iterdir()] == ["p.json"]       # no temporary left behind
    with pytest.raises(GdslError, match="beta must be positive"):
        write_profile({**GOOD, "beta": 0.0}, out)
    assert json.loads(out.read_text())["beta"] == 4e-10                # the old file is untouched
    with pytest.raises(GdslError, match="is a directory"):
        write_profile(GOOD, no_env)


@pytest.mark.parametrize("text, problem", [
    ('{"alpha": 1e-6,', "invalid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"alpha": 1e-6, "beta": 1e-9}', "missing gamma_spmm, gamma_gemm"),
    ('{"alpha": "fast", "beta": 1e-9, "gamma_spmm": 1e9, "gamma_gemm": 1e10}', 'alpha must be a number, got "fast"'),
    ('{"alpha": true, "beta": 1e-9, "gamma_spmm": 1e9, "gamma_gemm": 1e10}', "alpha must be a number"),
    ('{"alpha": 1e-6, "beta": -1e-9, "gamma_spmm": 1e9, "gamma_gemm": 1e10}', "beta must be positive and finite"),
    ('{"alpha": 1e-6, "beta": 1e-9, "gamma_spmm": 1e999, "gamma_gemm": 1e10}', "gamma_spmm must be positive and finite"),
])
def test_broken_profile_is_a_clear_error(no_env, monkeypatch, text, problem):
    bad = no_env / "bad.json"
    bad.write_text(text)
    with pytest.raises(GdslError) as e:
        load_profile(bad)
    assert str(bad) in str(e.value) and problem in str(e.value)
    monkeypatch.setenv("GDSL_PROFILE", str(bad))                      # the default location too
    with pytest.raises(GdslError, match="not a valid gdsl profile"):
        load_profile()


def test_missing_explicit_file_and_unknown_backend(no_env):
    with pytest.raises(GdslError, match="no such profile file"):
        load_profile(no_env / "nope.json")
    with pytest.raises(GdslError, match="no rates for backend 'cuda'"):
        profile_from_dict(GOOD, "x.json", backend="cuda")


def test_plan_cli_reports_the_profile_and_rejects_a_broken_one(no_env):
    code, out, err = run_gdsl(["plan", GCN, "--dims", "N=2708,E=13264,F=1433,C=7", "--np", "4"])
    assert code == 0, err
    assert "profile: dev-cpu+hdr (built-in default" in out
    slow = no_env / "slow.json"
    slow.write_text(json.dumps({**GOOD, "name": "slow-net", "alpha": 1e-3, "beta": 1e-6}))
    code, out2, err = run_gdsl(["plan", GCN, "--dims", "N=2708,E=13264,F=1433,C=7", "--np", "4",
                                "--profile", str(slow), "--json", str(no_env / "p.json")])
    assert code == 0, err
    assert f"profile: slow-net from {slow}" in out2
    assert json.loads((no_env / "p.json").read_text())["profile"]["alpha"] == 1e-3
    assert out2.split("choice: ")[1] != out.split("choice: ")[1]       # a slow network changes the choice
    (no_env / "broken.json").write_text("{")
    code, _, err = run_gdsl(["plan", GCN, "--dims", "N=2708,E=13264,F=1433,C=7", "--np", "4",
                             "--profile", str(no_env / "broken.json")])
    assert code == 1 and "broken.json: not a valid gdsl profile: invalid JSON" in err and "Traceback" not in err


# ---------------------------------------------------------------------------
# a real calibration
# ---------------------------------------------------------------------------

def test_missing_mpi_is_a_clear_error(monkeypatch, tmp_path):
    import gdsl.cost.calibrate as cal

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GdslError, match=r"no mpiexec .*pip install mpi4py mpich"):
        cal.find_mpiexec()
    real = importlib.util.find_spec
    monkeypatch.setattr(cal.importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py" else real(name, *a))
    with pytest.raises(GdslError, match=r"needs mpi4py .*pip install mpi4py mpich"):
        cal.measure_network(2)
    with pytest.raises(GdslError, match="at least 2"):
        cal.measure_network(1)
    code, _, err = run_gdsl(["calibrate", "--np", "1"])
    assert code == 2 and "--np must be at least 2" in err


def _have_mpi() -> bool:
    if importlib.util.find_spec("mpi4py") is None:
        return False
    here = Path(sys.executable).parent
    return (here / "mpiexec").exists() or shutil.which("mpiexec") is not None


@pytest.mark.mpi
@pytest.mark.skipif(not _have_mpi(), reason="needs mpi4py and mpiexec (pip install mpi4py mpich)")
def test_calibrate_quick_end_to_end(no_env):
    out = no_env / "prof.json"
    code, stdout, err = run_gdsl(["calibrate", "--quick", "--out", str(out)])
    assert code == 0, err
    assert "share its cores" in stdout and "not a network" in stdout
    assert f"wrote {out}" in stdout and "GFLOP/s" in stdout and "GB/s" in stdout
    data = json.loads(out.read_text())
    for k in ("alpha", "beta", "gamma_spmm", "gamma_gemm"):
        assert math.isfinite(data[k]) and data[k] > 0, k
    assert 1e-8 < data["alpha"] < 1e-2 and 1e-13 < data["beta"] < 1e-6
    assert data["network"]["np"] == 2 and data["network"]["same_machine"]
    assert data["raw"]["pingpong"]["sizes"] == QUICK_SIZES
    assert all(t > 0 for t in data["raw"]["pingpong"]["times"] + data["raw"]["allreduce"]["times"])
    assert "reference" in data["per_backend"] and data["backend"] in data["per_backend"]
    for rates in data["per_backend"].values():
        assert rates["gamma_spmm"] > 0 and rates["gamma_gemm"] > 0
    assert data["machine"]["cores"] >= 1 and data["machine"]["hostname"]
    assert not (no_env / "config").exists()                             # --out: the default location untouched
    p = load_profile(out)
    assert p.alpha == data["alpha"] and p.gamma_gemm == data["gamma_gemm"]
    code, plan_out, err = run_gdsl(["plan", GCN, "--dims", "N=2708,E=13264,F=1433,C=7", "--np", "4",
                                    "--profile", str(out)])
    assert code == 0, err
    assert f"profile: {data['name']} from {out}" in plan_out


@pytest.mark.mpi
@pytest.mark.skipif(not _have_mpi(), reason="needs mpi4py and mpiexec (pip install mpi4py mpich)")
def test_network_timeout_kills_the_ranks_and_says_so():
    from gdsl.cost.calibrate import measure_network

    with pytest.raises(GdslError, match=r"did not finish in 0.3 s"):
        measure_network(2, [8, 1 << 24], reps=10 ** 6, timeout=0.3)


def test_summary_columns_stay_apart_with_wide_values():
    """(was: `8.32e+03 us3.52e+03 GB/s` when a value filled its column)"""
    from gdsl.cost.calibrate import summary
    fit = {"alpha": 8.32e-3, "bandwidth": 3.52e12, "beta": 1.234e-10}
    text = summary({
        "machine": {"hostname": "h", "cpu": "c", "cores": 2},
        "network": {"mpi_library": "m", "np": 2, "same_machine": True, "pingpong_fit": fit, "allreduce_fit": fit},
        "per_backend": {"numba-with-a-long-name": {"gamma_spmm": 1.23e13, "gamma_gemm": 4.56e13}},
        "backend": "numba-with-a-long-name",
    })
    assert "8.32e+03 us 3.52e+03 GB/s  1.23e-10 s/word" in text
    assert "numba-with-a-long-name (used) 1.23e+04 GB/s 4.56e+04 GFLOP/s" in text
