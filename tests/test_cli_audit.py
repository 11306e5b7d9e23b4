"""The gdsl command's option checks and exit paths, at their boundaries
(a mutation audit of gdsl/cli.py found them untested): each test names the
behaviour docs/cli.md promises."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from filecheck_runner import run_gdsl
from helpers import interrupt_in_evaluation, random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


@pytest.fixture
def small_npz(tmp_path):
    g = random_graph(n=30, e=90, f=5, c=3)
    path = tmp_path / "small.npz"
    np.savez(path, src=g.src.numpy(), dst=g.dst.numpy(), features=g.features.numpy(), labels=g.labels.numpy(),
             train_mask=g.train_mask.numpy(), val_mask=g.val_mask.numpy(), test_mask=g.test_mask.numpy())
    return path


def test_seed_bounds_are_exactly_0_to_2_pow_63():
    """--seed is an integer in [0, 2**63): 2**63 itself is a usage error,
    2**63 - 1 is taken."""
    from gdsl.cli import _seed
    assert _seed(str(2 ** 63 - 1)) == 2 ** 63 - 1 and _seed("0") == 0
    code, _, err = run_gdsl(["run", GCN, "--seed", str(2 ** 63)])
    assert code == 2 and "must be in [0, 2**63)" in err, err


def test_a_negative_delay_is_a_usage_error():
    """--delay is 0, r > 0 or none: -1 is refused by the parser."""
    code, _, err = run_gdsl(["run", GCN, "--np", "2", "--delay", "-1"])
    assert code == 2 and "expected a non-negative integer or none" in err, err
    code, _, err = run_gdsl(["partition", GCN, "--np", "2", "--out", "x", "--delay", "-1"])
    assert code == 2 and "expected a non-negative integer or none" in err, err


@pytest.mark.parametrize("argv, message", [
    (["plan", GCN, "--np", "0", "--dims", "N=10,E=10,F=3,C=2"], "gdsl plan: error: --np must be at least 1"),
    (["compile", GCN, "--np", "0", "--data", "cora"],
     "gdsl compile: error: --np needs a positive P and --data"),
])
def test_np_zero_is_a_usage_error_for_plan_and_compile(argv, message):
    code, out, err = run_gdsl(argv)
    assert code == 2 and message in err and out == "", err


def test_the_rank_limit_is_inclusive():
    """At most 10,000,000 ranks: exactly that many passes the limit (here to
    compile's own check, --np without --data); one more is refused."""
    code, _, err = run_gdsl(["compile", GCN, "--np", "10000000"])
    assert code == 2 and "--np needs a positive P and --data" in err and "at most" not in err, err
    code, _, err = run_gdsl(["compile", GCN, "--np", "10000001"])
    assert code == 2 and "--np 10000001: at most 10,000,000 ranks" in err, err


def test_compile_np_with_emit_ir_is_allowed_when_dumping(tmp_path, small_npz):
    """`--np` with `--emit ir` is a usage error "unless IR dumps are asked
    for": with --print-ir-after partition the plan is chosen and printed,
    then the lowered IR."""
    code, out, err = run_gdsl(["compile", GCN, "--data", str(small_npz), "--np", "2", "--emit", "ir",
                               "--print-ir-after", "partition"])
    assert code == 0, err
    assert out.startswith("// ----- IR after partition -----") and "plan={P=2" in out
    assert "@GCNConv_0" in out    # --emit ir: the IR as lowered (layer functions) follows the dump


def test_emit_ir_with_a_dump_dir_still_runs_every_pass(tmp_path):
    """--emit ir stops after lowering only when nothing is dumped: with
    --dump-dir every stage is written and the lowered IR printed."""
    d = tmp_path / "d"
    code, out, err = run_gdsl(["compile", GCN, "--emit", "ir", "--dump-dir", str(d)])
    assert code == 0, err
    assert sorted(p.name for p in d.iterdir()) == [
        "00-ast.txt", "01-lower.ir", "02-inline.ir", "03-insert-sync.ir", "04-canonicalize.ir",
        "05-fold-edge-constants.ir", "06-fuse.ir", "07-order.ir", "08-mark-invariant.ir", "09-partition.ir"]
    assert "@GCNConv_0" in out and "aggregate[" not in out   # the lowered IR, not the optimised one


def test_json_and_save_naming_one_file_in_two_spellings(tmp_path, monkeypatch):
    """"--json and --save naming one file, in any spelling, is a usage error":
    a relative name and the absolute one."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_gdsl(["run", GCN, "--epochs", "1", "--backend", "reference",
                               "--json", "m.out", "--save", str(tmp_path / "m.out")])
    assert code == 2 and "--json and --save name the same file" in err, err
    assert not (tmp_path / "m.out").exists()


def test_interrupted_after_one_epoch_is_singular(monkeypatch):
    """`gdsl: interrupted after K epochs`, with "1 epoch" for one."""
    interrupt_in_evaluation(monkeypatch, 2)
    code, out, err = run_gdsl(["run", GCN, "--epochs", "5", "--backend", "reference"])
    assert code == 130 and "final (epoch 1)" in out, err
    assert "gdsl: interrupted after 1 epoch\n" in err, err


# ---- the one boundary (`_dispatch`): every failure is a message and an exit status ---------------

def _boom_in_fuse(monkeypatch, exc):
    from gdsl.passes.fuse import Fuse

    def boom(self, module, ctx):
        raise exc
    monkeypatch.setattr(Fuse, "run", boom)


def test_an_internal_error_in_a_pass_prints_the_ir_and_exits_3(monkeypatch):
    """docs/cli.md, Errors: `gdsl: internal compiler error: pass 'NAME'
    failed (after lower, ...)`, then the IR at that point, then the bug line;
    exit 3, no traceback."""
    monkeypatch.delenv("GDSL_DEBUG", raising=False)
    _boom_in_fuse(monkeypatch, RuntimeError("boom"))
    code, out, err = run_gdsl(["compile", GCN])
    assert code == 3 and out == "", err
    lines = err.splitlines()
    assert lines[0] == ("gdsl: internal compiler error: pass 'fuse' failed (after lower, inline, insert-sync, "
                        "canonicalize, fold-edge-constants): RuntimeError('boom')"), err
    assert "func @main() {" in err and "edge_const[" in err     # the IR as fold-edge-constants left it
    assert lines[-1] == "(this is a bug in gdsl; rerun with GDSL_DEBUG=1 for the traceback)"
    assert "Traceback" not in err


def test_gdsl_debug_re_raises_an_internal_error(monkeypatch):
    """GDSL_DEBUG=1: the internal error propagates (Python's traceback);
    user errors are reported the same way with or without it."""
    from gdsl.cli import main
    from gdsl.passes.pipeline import InternalCompilerError
    _boom_in_fuse(monkeypatch, RuntimeError("boom"))
    monkeypatch.setenv("GDSL_DEBUG", "1")
    with pytest.raises(InternalCompilerError, match="pass 'fuse' failed"):
        main(["compile", GCN])
    code, _, err = run_gdsl(["compile", str(ROOT / "nosuch.gd")])
    assert code == 1 and "no such file" in err


def test_one_error_prints_no_count_several_do(tmp_path):
    """Errors in a program: "a count when there are several" only."""
    one = tmp_path / "one.gd"
    one.write_text("graph G\nmodel M { return Y }\n")
    code, _, err = run_gdsl(["compile", str(one)])
    assert code == 1 and "undefined name 'Y'" in err and "generated" not in err, err
    two = tmp_path / "two.gd"
    two.write_text("graph G\nmodel M { return Y + Z }\n")
    code, _, err = run_gdsl(["compile", str(two)])
    assert code == 1 and err.rstrip().endswith("2 errors generated."), err


@pytest.mark.parametrize("exc, code, message", [
    (KeyboardInterrupt(), 130, "gdsl: interrupted"),
    ("SIGHUP", 129, "gdsl: terminated (SIGHUP)"),
    ("SIGTERM", 143, "gdsl: terminated (SIGTERM)"),
    (PermissionError(13, "Permission denied", "secret.gd"), 1, "gdsl: error: secret.gd: permission denied"),
])
def test_a_signal_or_a_refused_file_outside_training_has_its_exit_status(monkeypatch, exc, code, message):
    """Ctrl-C (130), SIGHUP / SIGTERM (128 + the signal) while a command
    compiles, and a program file the user may not read (1), as the Exit
    status table says."""
    import signal

    import gdsl.compiler
    from gdsl.runtime.signals import Terminated
    if isinstance(exc, str):
        exc = Terminated(getattr(signal, exc))

    def stop(*a, **k):
        raise exc
    monkeypatch.setattr(gdsl.compiler, "read_source", stop)
    rc, out, err = run_gdsl(["compile", GCN])
    assert rc == code and err.strip() == message and out == "", err


def test_the_best_val_line_shows_that_epochs_accuracies(tmp_path):
    """`best val epoch E: val_acc V  test_acc T`: the numbers of --json's
    best_val/val_acc and best_val/test_acc, each under its own name."""
    import json
    j = tmp_path / "r.json"
    code, out, err = run_gdsl(["run", GCN, "--epochs", "3", "--backend", "reference", "--json", str(j)])
    assert code == 0, err
    f = json.loads(j.read_text())["final"]
    assert f["best_val/val_acc"] != f["best_val/test_acc"]
    assert (f"best val epoch {f['best_val_epoch']}: val_acc {f['best_val/val_acc']:.4f}  "
            f"test_acc {f['best_val/test_acc']:.4f}\n") in out, out


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_disk_on_stdout_is_a_one_line_error_whatever_the_output_size():
    """docs/cli.md, Exit status 1: "`gdsl: error: no space left on device`
    when stdout is a full disk". `gdsl passes` prints 8 short lines."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}   # as a user's shell has it
    env["PYTHONPATH"] = str(ROOT)
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "gdsl", "passes"], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=60)
    assert r.returncode == 1 and r.stderr == "gdsl: error: no space left on device\n", (r.returncode, r.stderr)


def test_a_reader_that_left_before_a_short_output_is_quiet_141():
    """`gdsl passes | true`: the reader is gone before the 8 lines are
    flushed. Was: flushed at exit, exit 120 and Python's BrokenPipeError."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        r = subprocess.run([sys.executable, "-m", "gdsl", "passes"], stdout=w_fd, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=60)
    finally:
        os.close(w_fd)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr)
