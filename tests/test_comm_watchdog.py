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
from gdsl.dist.errors import mark_waiting, not_joined

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
