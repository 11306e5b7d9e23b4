"""helper-27: checkpoints/resume, `gdsl calibrate` profiles and the start-up
change, used as an HPC user would (the audit's findings and a few checks of
what held)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GCN, SAGE = str(ROOT / "programs" / "gcn.gd"), str(ROOT / "programs" / "sage.gd")
sys.path.insert(0, str(Path(__file__).parent))

from helpers import gdsl_here  # noqa: E402


@pytest.mark.parametrize("flag", ["--checkpoint", "--resume", "--parts"])
def test_an_empty_checkpoint_resume_or_parts_directory_is_a_usage_error(flag):
    """`--checkpoint "$CK"` with CK unset: was taken as no --checkpoint (trained
    with none written), `--resume ""` trained from scratch, `--parts ""` in a
    temporary directory, each without a word and exit 0."""
    out = gdsl_here("run", GCN, "--np", "2", "--epochs", "1", flag, "")
    assert out.returncode == 2, out.stderr
    assert f"gdsl run: error: {flag}: empty (give a directory)" in out.stderr
    out = gdsl_here("run", GCN, "--np", "2", "--epochs", "1", flag, "  ")
    assert out.returncode == 2 and f"{flag}: empty" in out.stderr


def test_a_calibrated_profile_prices_the_plan(tmp_path):
    """`gdsl plan --profile` prices with the file's four rates: the
    communication column is alpha * messages + beta * words (checked by hand
    on one candidate), and a broken rate is an error naming the file."""
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"alpha": 3e-6, "beta": 4e-10, "gamma_spmm": 5e9, "gamma_gemm": 6e10}))
    js = tmp_path / "plan.json"
    out = gdsl_here("plan", GCN, "--np", "2", "--data", "cora", "--profile", prof, "--json", js)
    assert out.returncode == 0, out.stderr
    got = json.loads(js.read_text())
    assert got["profile"]["path"] == str(prof) and got["profile"]["alpha"] == 3e-6
    for c in got["candidates"]:
        assert c["comm"] == pytest.approx(3e-6 * c["messages_per_rank"] + 4e-10 * c["words_per_rank"])
    prof.write_text(json.dumps({"alpha": 3e-6, "beta": float("nan"), "gamma_spmm": 5e9, "gamma_gemm": 6e10}))
    out = gdsl_here("plan", GCN, "--np", "2", "--data", "cora", "--profile", prof)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"{prof}: not a valid gdsl profile: beta must be positive and finite" in out.stderr


def test_the_alpha_beta_fit_by_hand():
    """fit_alpha_beta on a ping-pong of this machine (gdsl calibrate --quick):
    alpha is the <= 4 KiB least-squares intercept, beta 4x the all-sizes slope."""
    from gdsl.cost.calibrate import fit_alpha_beta
    sizes = [8, 64, 512, 4096, 32768, 262144, 2097152, 16777216]
    times = [1.5175e-06, 1.287e-06, 1.48975e-06, 1.5875e-06, 5.7035e-06, 2.102125e-05, 1.406625e-04,
             7.174475e-04]
    fit = fit_alpha_beta(sizes, times)
    # by hand: x mean 1170, y mean 1.4704375e-6, Sxx 11567920, Sxy 4.78013e-10
    assert fit["fits"]["small"]["beta_bytes"] == pytest.approx(4.1322e-11, rel=1e-4)
    assert fit["alpha"] == pytest.approx(1.4220904e-06, rel=1e-6) and fit["alpha_from"] == "small"
    assert fit["beta"] == pytest.approx(4 * fit["fits"]["all"]["beta_bytes"])
    assert 1 / fit["beta_bytes"] == pytest.approx(16777216 / 7.174475e-04, rel=0.02)   # the big message's rate


def _mpiexec():
    here = Path(sys.executable).parent / "mpiexec"
    import shutil
    return str(here) if here.exists() else shutil.which("mpiexec")


def _gdsl(*args, timeout=300):
    e = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        e.pop(k, None)
    return subprocess.run([sys.executable, "-m", "gdsl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=e)


@pytest.mark.mpi
def test_resume_on_citeseer_with_more_epochs_continues_the_curve_exactly(tmp_path):
    """sage on CiteSeer, rows(random) at 2 ranks: 3 epochs with a checkpoint
    every 2, then --resume to 7 with a checkpoint elsewhere, then --resume
    that to 8, give the 8-epoch run's losses bit for bit; another --np and
    an empty --resume are refused."""
    pytest.importorskip("mpi4py")
    if _mpiexec() is None:
        pytest.skip("no mpiexec")
    common = ("--np", "2", "--data", "citeseer", "--partition", "rows(random)")
    ck, ck2 = tmp_path / "ck", tmp_path / "ck2"
    runs = [("full", "--epochs", "8"),
            ("a", "--epochs", "3", "--checkpoint", ck, "--checkpoint-every", "2"),
            ("b", "--epochs", "7", "--resume", ck, "--checkpoint", ck2),
            ("c", "--epochs", "8", "--resume", ck2)]
    losses = {}
    for name, *more in runs:
        out = _gdsl("run", SAGE, *common, *more, "--json", tmp_path / f"{name}.json")
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr
        losses[name] = {e["epoch"]: e["loss"] for e in json.loads((tmp_path / f"{name}.json").read_text())["epochs"]}
    # a resumed run's --json holds the checkpoint's epochs too: the whole curve (docs/cli.md, --json schema)
    assert sorted(losses["a"]) == [1, 2, 3] and sorted(losses["b"]) == list(range(1, 8))
    assert losses["a"] == {k: losses["full"][k] for k in (1, 2, 3)}
    assert losses["b"] == {k: losses["full"][k] for k in range(1, 8)}
    assert losses["c"] == losses["full"]
    assert json.loads((ck2 / "checkpoint.json").read_text())["epoch"] == 7
    out = _gdsl("run", SAGE, "--np", "3", "--data", "citeseer", "--partition", "rows(random)", "--epochs", "9",
                "--resume", ck2)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"gdsl: error: {ck2}: checkpoint of 2 ranks, this run has 3 (resume with --np 2)" in out.stderr
