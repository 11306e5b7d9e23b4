"""The --comm-timeout watchdog in one process (gdsl/dist/comm.py, errors.py):
what counts as waiting, the message, and which ranks the launcher names as
never having joined. The MPI run itself: tests/test_dist_cli.py."""
from __future__ import annotations

import threading
import time

from pathlib import Path

import pytest

from gdsl.cli import main
from gdsl.dist.comm import Watchdog, start_watchdog
from gdsl.dist.errors import main_thread_stack, mark_waiting, not_joined, stack_path

GCN = str(Path(__file__).resolve().parent.parent / "programs" / "gcn.gd")


def test_only_time_inside_a_call_counts():
    w = Watchdog()
    assert w.overdue(0.0) is None            # not in a call: never overdue, however long the epoch
    with w.waiting("allreduce 'g'"):
        w.since -= 10.0                      # entered 10 s ago
        assert w.overdue(20.0) is None
        msg = w.overdue(5.0)
    assert msg == ("waited 5 s in allreduce 'g' (start-up, MPI call #1) for ranks that did not join it: a rank "
                   "is stuck or out of step with the others; all ranks were stopped (--comm-timeout sets the limit)")
    assert w.overdue(0.0) is None            # left the call
    w.where = "epoch 7"
    with pytest.raises(ValueError), w.waiting("bcast"):
        raise ValueError                     # an MPI error leaves the call too
    assert w.what is None and w.calls == 2
    with w.waiting("barrier"):
        w.since -= 1.0
        assert "barrier (epoch 7, MPI call #3)" in w.overdue(0.5)


def test_the_watchdog_thread_fires_once_on_a_long_wait():
    from gdsl.dist import comm
    fired = []
    got = threading.Event()
    with comm.WATCHDOG.waiting("alltoallv 'x'"):
        t = start_watchdog(0.2, lambda m: (fired.append(m), got.set()))
        assert got.wait(5)
    t.join(5)
    assert not t.is_alive() and len(fired) == 1 and "waited 0.2 s in alltoallv 'x'" in fired[0]


def test_the_watchdog_thread_stays_quiet_between_calls():
    from gdsl.dist import comm
    fired, stop = [], threading.Event()
    t = start_watchdog(0.1, fired.append, stop)
    for _ in range(5):
        with comm.WATCHDOG.waiting("allreduce"):
            time.sleep(0.02)                 # short calls, long gaps: computation is not waiting
        time.sleep(0.1)
    stop.set()
    t.join(5)
    assert fired == [] and not t.is_alive()


def test_the_ranks_that_never_joined_are_named(tmp_path):
    d = str(tmp_path)
    rep = {1: ("waited", False, False), 2: ("waited", False, False)}
    assert not_joined(d, rep, 3) is None                 # no rank timed out: not this kind of failure
    mark_waiting(d, 1)
    mark_waiting(d, 2)
    assert not_joined(d, rep, 3) == ("gdsl: error: rank 0 never joined: busy or hung outside MPI for that long "
                                     "(a deadlock, a hung file system, an endless loop)")
    assert "ranks 0, 3 never joined" in not_joined(d, rep, 4)
    assert not_joined(d, {**rep, 0: ("boom", False, False)}, 3) is None   # rank 0 reported its own failure
    mark_waiting(d, 0)
    assert not_joined(d, rep, 3) is None                 # every rank waited: out of step, all of them reported
    assert not_joined(str(tmp_path / "gone"), rep, 3) is None


@pytest.mark.parametrize("args,message", [
    (["--np", "2", "--comm-timeout", "-1"], "--comm-timeout: must be a number of seconds >= 0 (0: no limit), got -1"),
    (["--np", "2", "--comm-timeout", "nan"], "must be a number of seconds >= 0"),
    (["--np", "2", "--comm-timeout", "soon"], "invalid number of seconds: 'soon'"),
    (["--comm-timeout", "5"], "--comm-timeout needs --np P (a distributed run)"),
])
def test_comm_timeout_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(["run", GCN, "--epochs", "1", *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- where a rank that never joined was
# worker.py registers faulthandler for SIGUSR1 (rank-R.stack); the rank whose
# watchdog fires asks the ranks that are not waiting (`_ask_for_stacks`); the
# launcher prints the main thread's frames under the "never joined" line.
_STUCK = """
import faulthandler, signal, sys, threading, time
f = open(sys.argv[1], "w")
f.write(f"main thread 0x{threading.main_thread().ident:016x}\\n"); f.flush()
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()   # another thread: not printed
print("ready", flush=True)
def stuck_in_a_deadlock():
    time.sleep(60)
stuck_in_a_deadlock()
"""


def _stuck_rank(tmp_path, rank):
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", _STUCK, stack_path(str(tmp_path), rank)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    (tmp_path / f"rank-{rank}.pid").write_text(str(p.pid))
    return p


def test_a_rank_that_never_joined_is_shown_where_it_was(tmp_path, monkeypatch):
    import os
    import signal

    from gdsl.dist import worker
    stuck, busy = _stuck_rank(tmp_path, 0), _stuck_rank(tmp_path, 2)
    mark_waiting(str(tmp_path), 2)   # rank 2 waits in MPI too: not asked
    try:
        monkeypatch.setattr(os, "getppid", os.getpid)   # this test is the ranks' process manager
        worker._ask_for_stacks(str(tmp_path), 1)
        deadline = time.monotonic() + 10
        while not main_thread_stack(str(tmp_path), 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        frames = main_thread_stack(str(tmp_path), 0)
        assert frames and "in stuck_in_a_deadlock" in frames[0] and "in <module>" in frames[1], frames
        assert all("threading.py" not in f for f in frames)   # the main thread's only
        assert main_thread_stack(str(tmp_path), 2) == []      # waiting: not asked
        assert stuck.poll() is None and busy.poll() is None   # a dump stops nothing
        mark_waiting(str(tmp_path), 1)
        text = not_joined(str(tmp_path), {1: ("waited", False, False), 2: ("waited", False, False)}, 3)
        assert text.splitlines()[1:3] == ["  rank 0 was here (most recent call first):", "    " + frames[0]], text
        monkeypatch.setattr(os, "getppid", lambda: 1)   # another parent: a pid from another node, say
        (tmp_path / "rank-0.stack").write_text(open(stack_path(str(tmp_path), 0)).readline())
        worker._ask_for_stacks(str(tmp_path), 1)
        time.sleep(0.3)
        assert main_thread_stack(str(tmp_path), 0) == []
    finally:
        for p in (stuck, busy):
            p.send_signal(signal.SIGKILL)
            p.wait()


def test_a_stack_file_without_the_main_thread_shows_nothing(tmp_path):
    d = str(tmp_path)
    assert main_thread_stack(d, 0) == []                                   # no file
    Path(stack_path(d, 0)).write_text("garbage\n  File \"x.py\", line 1 in f\n")
    assert main_thread_stack(d, 0) == []                                   # no header
    Path(stack_path(d, 0)).write_text("main thread 0x0000000000000001\n"
                                      "Thread 0x0000000000000002 (most recent call first):\n"
                                      "  File \"t.py\", line 3 in other\n")
    assert main_thread_stack(d, 0) == []                                   # another thread's dump only
    Path(stack_path(d, 0)).write_text("main thread 0x0000000000000001\n"
                                      "Current thread 0x0000000000000001 (most recent call first):\n"
                                      + "".join(f"  File \"m.py\", line {i} in f{i}\n" for i in range(20))
                                      + "Thread 0x0000000000000001 (most recent call first):\n"
                                      "  File \"later.py\", line 9 in second_dump\n")
    assert main_thread_stack(d, 0) == [f'File "m.py", line {i} in f{i}' for i in range(20)]   # the first dump
    mark_waiting(d, 1)
    lines = not_joined(d, {1: ("waited", False, False)}, 2).splitlines()
    assert lines[1] == "  rank 0 was here (most recent call first):" and len(lines) == 2 + 12 + 1
    assert lines[-1] == "    ... (8 more)"
