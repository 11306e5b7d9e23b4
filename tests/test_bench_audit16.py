"""bench/ scripts refuse bad arguments with a usage message before measuring
anything (helper-16's audit of bench/): no traceback, no report written.
Only the argument checks run here (each well under a second); speed is
measured in bench/, never asserted in tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _refused(script: str, *args: str, cwd: Path | None = None) -> str:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                       timeout=60, cwd=cwd or ROOT)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "error:" in r.stderr and not r.stdout
    return r.stderr


@pytest.mark.parametrize("args, says", [
    ((), "--framework: required"),                       # was: AttributeError on None.removeprefix
    (("--framework", "bogus"), "--framework: unknown 'bogus'"),   # was: every op "skipped: no 'bogus' backend"
])
def test_peer_pyg_needs_a_known_framework(args, says):
    assert says in _refused("peer_pyg.py", "--graph", "uniform20k", "--ops", "copy_sum", *args)


@pytest.mark.parametrize("args, says", [
    (("--gather", "100:x"), "is not N:E"),               # was: a ValueError traceback after the triad
    (("--gather", "0:10"), "is not N:E"),
    (("--threads", "0"), "--threads must be at least 1"),
])
def test_machine_checks_its_sizes_before_measuring(args, says):
    assert says in _refused("machine.py", *args)


def test_dist_refuses_a_plan_with_no_run(tmp_path):
    # was: the graph built, then an empty report written over bench/dist/RESULTS.md
    out = tmp_path / "d.md"
    err = _refused("dist/run.py", "--nps", "8", "--out", str(out))
    assert "no run" in err and "rows_hash at P = 1,2,4" in err
    assert "rows_replicated at P = 4" in _refused("dist/run.py", "--strategies", "rows_replicated", "--nps", "2",
                                                  "--out", str(out))
    assert not out.exists()


@pytest.mark.parametrize("script, args, says", [
    ("dist/run.py", ("--timeout", "0"), "--timeout must be more than 0"),
    ("dist/run.py", ("--f", "0"), "--f must be at least 1"),
    # gdsl run refuses a cd-r delay beyond the epochs (was: a failed row per P, the report written anyway)
    ("dist/run.py", ("--strategies", "vc_cd5", "--epochs", "3"), "vc_cd5 needs --epochs >= 5"),
    # ... also when the others chosen do not run at --nps (was: nothing run, an empty report written)
    ("dist/run.py", ("--strategies", "vc_cd5,replicate", "--nps", "2", "--epochs", "3"), "vc_cd5 needs --epochs >= 5"),
    ("run.py", ("--cap-gib", "0"), "--cap-gib must be more than 0"),
    ("run.py", ("--timeout", "-1"), "--timeout must be more than 0"),
    ("run.py", ("--previous", "/nonexistent/RESULTS.json"), "no such file"),
])
def test_runners_refuse_limits_that_would_fail_every_run(script, args, says, tmp_path):
    assert says in _refused(script, *args, "--out", str(tmp_path / "r.md"))
    assert not (tmp_path / "r.md").exists()


def test_readme_says_which_scripts_take_quick():
    # the README said every script takes --quick but gpu.py and fused_update.py:
    # machine.py and gpu_profile.py refused it (`unrecognized arguments: --quick`)
    import re

    readme = (ROOT / "bench" / "README.md").read_text()
    sections = re.findall(r"^## .*\(`python bench/(\S+\.py)`\)$", readme, re.M)
    assert "maxmin.py" in sections and "dist/run.py" in sections and "gpu.py" in sections

    def takes_quick(script: str) -> bool:
        r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return "--quick" in r.stdout

    assert [s for s in sections if s != "gpu.py" and not takes_quick(s)] == []
    for script in ("machine.py", "fused_update.py", "gpu_profile.py"):
        assert not takes_quick(script) and f"`{script}`" in readme
    assert "`machine.py` and `fused_update.py` take no `--quick`" in readme
