"""Audit of gdsl/dist/errors.py and gdsl/dist/worker.py (mutation testing,
session 26): how a failing rank's error becomes one line, in-process. A
rank's report under another launcher (no run directory) goes to fd 2;
under gdsl's launcher it is a file the launcher reads back."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

import gdsl.dist.errors as errors_mod
from gdsl.dist.errors import error_path, format_reports, read_reports, report
from gdsl.dist.worker import STDERR_MARK, MarkedStderr, _message, _start_time, launcher_alive


# ---------------------------------------------------------------- errors.py

def test_one_rank_of_one_is_still_named():
    """`--np 1`: "every rank reported it" is not the same as "all ranks
    alike" with a single rank (format_reports' `P > 1`)."""
    assert format_reports({0: ("boom", False, False)}, 1) == ["gdsl: error: rank 0: boom"]
    assert format_reports({0: ("boom", True, False)}, 1) == ["gdsl: error: boom"]


def test_a_rank_under_another_launcher_prints_its_report(capfd, monkeypatch):
    """No run directory (mpiexec / srun started the ranks): one write to
    stderr, naming the rank; an every-rank error once, by rank 0, without
    a rank, and a compile error as rendered (no second `error:` prefix);
    the other ranks wait for rank 0's MPI_Abort before printing theirs."""
    slept = []
    monkeypatch.setattr(errors_mod.time, "sleep", slept.append)
    report(1, "boom", False, None)
    assert capfd.readouterr().err == "gdsl: error: rank 1: boom\n" and slept == []
    report(0, "the loss is nan", True, None)
    assert capfd.readouterr().err == "gdsl: error: the loss is nan\n" and slept == []
    located = "p.gd:3:5: error: unknown name 'x'\n  3 | y = x\n    |     ^"
    report(0, located, True, None, located=True)
    assert capfd.readouterr().err == located + "\n"
    report(1, "the loss is nan", True, None)
    assert slept == [5]   # rank 0 reports it; this rank is stopped before it prints
    assert capfd.readouterr().err == "gdsl: error: rank 1: the loss is nan\n"


def test_reports_written_by_ranks_are_read_back_whole(tmp_path):
    located = "p.gd:3:5: error: unknown name 'x'\n  3 | y = x"
    report(0, located, True, str(tmp_path), located=True)
    report(1, located, True, str(tmp_path), located=True)
    report(2, "disk full", False, str(tmp_path))
    got = read_reports(str(tmp_path))
    assert got == {0: (located, True, True), 1: (located, True, True), 2: ("disk full", False, False)}
    assert format_reports(got, 3) == [located, "gdsl: error: rank 2: disk full"]
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unreadable_report_is_skipped_not_a_traceback(tmp_path):
    report(1, "boom", False, str(tmp_path))
    with open(error_path(str(tmp_path), 0), "w") as f:
        f.write('{"rank": 0, "mess')    # cut short (a report is written atomically, but read defensively)
    with open(error_path(str(tmp_path), 2), "w") as f:
        f.write('{"rank": 2, "message": "x", "all_ranks": false, "located": false}\n trailing')
    assert read_reports(str(tmp_path)) == {1: ("boom", False, False)}


# ---------------------------------------------------------------- worker.py

def test_a_ranks_failure_is_worded_for_the_user():
    from gdsl.diagnostics import GdslError
    assert _message(MemoryError()) == "out of memory"
    assert _message(KeyboardInterrupt()) == "interrupted"
    assert _message(GdslError("bad input")) == "bad input"
    mpi_exc = type("Exception", (Exception,), {"__module__": "mpi4py.MPI"})
    assert _message(mpi_exc("Other MPI error, error stack: ...")) == "MPI error: Other MPI error, error stack: ..."
    msg = _message(ValueError("x"))
    assert msg.startswith("internal error: ValueError: x (this is a bug in gdsl")


def test_marked_stderr_keeps_lines_whole():
    """Rank 0's stderr under gdsl's launcher: whole lines, each marked once,
    a partial line held until its newline or a flush (the last progress
    line of a run that ends without one must not be lost)."""
    out = io.StringIO()
    err = MarkedStderr(out)
    err.write("epoch 1/3")
    err.write(" loss 0.5\nepoch 2/3")
    assert out.getvalue() == f"{STDERR_MARK}epoch 1/3 loss 0.5\n"
    err.write(" loss 0.4\n\n")
    assert out.getvalue().split("\n") == [f"{STDERR_MARK}epoch 1/3 loss 0.5", f"{STDERR_MARK}epoch 2/3 loss 0.4",
                                          STDERR_MARK, ""]
    err.write("wrote out.json")
    err.flush()
    assert out.getvalue().endswith(f"{STDERR_MARK}wrote out.json\n")
    err.flush()
    assert out.getvalue().count("wrote out.json") == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")
def test_a_launcher_is_alive_only_as_the_process_it_was():
    """A rank stops itself when its launcher is gone: a pid now held by
    another process (another start time) is a gone launcher."""
    me = os.getpid()
    assert launcher_alive({"pid": me, "start": _start_time(me)})
    assert launcher_alive({"pid": me})                            # no start time recorded
    assert not launcher_alive({"pid": me, "start": "1"})          # the pid was reused
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not launcher_alive({"pid": p.pid, "start": None})


def test_a_rank_under_another_launcher_waits_before_its_abort(monkeypatch):
    """Under mpiexec / srun (no run directory) the report is a line on stderr,
    which MPICH's hydra may drop when the MPI_Abort right after it tears the
    job down (the clean CI run at 95996b6: `mpiexec -n 2 gdsl run --parts
    DIR` exited 1 with an empty stderr): the rank gives it ABORT_GRACE
    seconds first; under gdsl's launcher the report is a file, and no wait."""
    import gdsl.dist.worker as worker_mod
    slept = []
    monkeypatch.setattr(worker_mod.time, "sleep", slept.append)
    worker_mod.output_through("/tmp/run-dir")
    assert slept == []
    worker_mod.output_through(None)
    assert slept == [worker_mod.ABORT_GRACE] and worker_mod.ABORT_GRACE >= 0.5
