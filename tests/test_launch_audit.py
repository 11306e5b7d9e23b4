"""Audit of gdsl/dist/launch.py (mutation testing, session 26).

`launch()` is driven in this process against a fake `mpiexec`: a small
Python script that plays a scenario (lines on stdout / stderr as hydra and
rank 0 write them, pid files and error reports in the run directory, an
exit code), so the launcher's own logic (output pump, which rank died,
exit codes, its environment and cleanup) is tested without MPI or torch in
the ranks. The watcher and the stop are tested on real child processes
(zombies, a SIGSTOPped "rank", a process that ignores SIGTERM)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import gdsl.dist.launch as launch_mod
from gdsl.dist.launch import (
    _exists,
    _pid_ranks,
    _rank_pids,
    _running,
    _signal_all,
    _stop,
    _watch_ranks,
    launch,
    launcher_rank,
    under_launcher,
)
from gdsl.dist.worker import STDERR_MARK, _start_time

pytest.importorskip("mpi4py")   # launch() checks for it (it is not started here)
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID",
                  "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_NTASKS")


def fake_mpiexec(tmp_path: Path, monkeypatch, body: str) -> None:
    """Make launch() start `body` (Python, with P, run_dir, args, MARK and
    dead_pid() defined) instead of mpiexec."""
    script = tmp_path / "fake-mpiexec"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
        import json, os, subprocess, sys, time
        P = int(sys.argv[sys.argv.index("-n") + 1])
        args = json.loads(sys.argv[-1])
        run_dir = args["run_dir"]
        MARK = %r

        def dead_pid():
            p = subprocess.Popen([sys.executable, "-c", "pass"])
            p.wait()
            return p.pid

        def pid_file(rank, pid):
            with open(os.path.join(run_dir, f"rank-{rank}.pid"), "w") as f:
                f.write(str(pid))
        """ % STDERR_MARK) + textwrap.dedent(body))
    script.chmod(0o755)
    monkeypatch.setattr(launch_mod, "find_mpiexec", lambda: str(script))


def err_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "gdsl: error:" in ln]


# ---------------------------------------------------------------- launcher detection

def test_a_one_task_slurm_step_is_not_a_launcher(monkeypatch):
    """`gdsl run --np 4` inside `sbatch` / a 1-task `srun` starts its own ranks;
    a Slurm step of several tasks is a launcher, and SLURM_PROCID the rank
    (the other variables unset)."""
    for k in _LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    assert not under_launcher() and launcher_rank() is None
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert not under_launcher() and launcher_rank() is None
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert under_launcher() and launcher_rank() == 3
    monkeypatch.setenv("PMI_RANK", "2")     # MPICH's variable first
    assert launcher_rank() == 2


# ---------------------------------------------------------------- launch() against a fake mpiexec

def test_launch_streams_rank_output_and_cleans_up(tmp_path, monkeypatch, capsys):
    """Rank 0's marked stderr lines go to stderr unmarked, its stdout to
    stdout, hydra's noise nowhere; the user's OMP_NUM_THREADS reaches the
    ranks; the ranks are told which temporary directories to remove; the
    run directory is gone afterwards."""
    fake_mpiexec(tmp_path, monkeypatch, """\
        print(MARK + "epoch 1/1 loss 0.5")
        print("final (epoch 1)")
        print("===================================================================================")
        print("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES")
        print("[mpiexec@host] some hydra line")
        sys.stderr.write("another rank's own line\\n")
        print("info " + json.dumps({"omp": os.environ.get("OMP_NUM_THREADS"), "run_dir": run_dir,
                                     "cleanup": args["launcher"]["cleanup"]}))
        """)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    extra = tmp_path / "parts-tmp"
    rc = launch({"program": "p.gd"}, 2, temp_dirs=[str(extra)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    info = json.loads(next(ln for ln in out.splitlines() if ln.startswith("info "))[5:])
    assert [ln for ln in out.splitlines() if not ln.startswith("info ")] == ["final (epoch 1)"]
    assert "epoch 1/1 loss 0.5" in err.splitlines() and "another rank's own line" in err.splitlines()
    assert "\x1e" not in out + err and "BAD TERMINATION" not in out + err and "mpiexec@" not in out + err
    assert info["omp"] == "3"                                  # the user's value, not cores // P
    assert info["cleanup"] == [info["run_dir"], str(extra)]    # for ranks whose launcher was SIGKILLed
    assert not Path(info["run_dir"]).exists()


def test_launch_sets_omp_threads_to_cores_per_rank_by_default(tmp_path, monkeypatch, capsys):
    fake_mpiexec(tmp_path, monkeypatch, 'print("omp", os.environ.get("OMP_NUM_THREADS"))\n')
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert launch({}, 2) == 0
    assert capsys.readouterr().out.split() == ["omp", str(max(1, (os.cpu_count() or 1) // 2))]


@pytest.mark.parametrize("hydra_line", [
    "=   KILLED BY SIGNAL: 9 (Killed)",
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)",   # hydra's other wording
])
def test_the_dead_rank_and_its_signal_are_named(tmp_path, monkeypatch, capsys, hydra_line):
    fake_mpiexec(tmp_path, monkeypatch, f"""\
        pid_file(1, dead_pid())
        pid_file(0, os.getpid())
        time.sleep(0.5)            # the watcher sees rank 1 gone while rank 0 runs
        print({hydra_line!r})
        sys.exit(9)
        """)
    rc = launch({}, 2)
    out, err = capsys.readouterr()
    assert rc == 1
    assert err_lines(err) == ["gdsl: error: rank 1 died (signal 9 (Killed)); all 2 ranks were stopped"], err
    assert "signal 9" not in out and "EXIT STRING" not in out + err


def test_a_failure_without_report_or_pids_names_no_rank(tmp_path, monkeypatch, capsys):
    fake_mpiexec(tmp_path, monkeypatch, "sys.exit(7)\n")
    assert launch({}, 3) == 1
    assert err_lines(capsys.readouterr().err) == ["gdsl: error: a rank died (exit code 7); all 3 ranks were stopped"]


def test_an_error_a_rank_printed_itself_is_not_followed_by_a_second(tmp_path, monkeypatch, capsys):
    """A rank that could not write its report prints it (errors.report); the
    launcher must not add "a rank died" under it."""
    fake_mpiexec(tmp_path, monkeypatch, """\
        sys.stderr.write("gdsl: error: rank 1: out of memory\\n")
        sys.exit(1)
        """)
    assert launch({}, 2) == 1
    assert err_lines(capsys.readouterr().err) == ["gdsl: error: rank 1: out of memory"]


def test_reports_are_printed_once_and_an_internal_error_exits_3(tmp_path, monkeypatch, capsys):
    def scenario(reports: dict) -> str:
        return "".join(f"with open(os.path.join(run_dir, 'rank-{r}.error'), 'w') as f:\n"
                       f"    json.dump({{'rank': {r}, 'message': {m!r}, 'all_ranks': False, 'located': False}}, f)\n"
                       for r, m in reports.items()) + "sys.exit(1)\n"
    fake_mpiexec(tmp_path, monkeypatch, scenario({0: "disk full", 1: "disk full"}))
    assert launch({}, 2) == 1
    assert err_lines(capsys.readouterr().err) == ["gdsl: error: disk full"]
    fake_mpiexec(tmp_path, monkeypatch, scenario({1: "internal error: RuntimeError: x (this is a bug in gdsl)"}))
    assert launch({}, 3) == 3
    assert err_lines(capsys.readouterr().err) == ["gdsl: error: rank 1: internal error: RuntimeError: x (this is a bug in gdsl)"]


def test_a_full_disk_on_stdout_is_an_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    """`gdsl run --np 2 > /dev/full`: the output thread died with a
    traceback and the run exited 0 (helper-76); now as one process: the
    error said, exit 1, rank 0's stderr lines still shown."""
    import errno

    fake_mpiexec(tmp_path, monkeypatch, """\
        print("final (epoch 1)")
        print(MARK + "wrote out.json")
        """)

    class Full:
        def write(self, s):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass
    monkeypatch.setattr(sys, "stdout", Full())
    assert launch({}, 2) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "wrote out.json" in err
    assert err_lines(err) == ["gdsl: error: no space left on device"]


# ---------------------------------------------------------------- the rank watcher

@pytest.fixture
def children():
    procs: list[subprocess.Popen] = []

    def start(*argv: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv], **kw)
        procs.append(p)
        # Popen returns once exec has closed its error pipe, which is before the
        # kernel has set the new argv up: /proc/PID/cmdline can read empty for
        # a moment (a loaded machine: seen once in a full run)
        deadline = time.monotonic() + 10
        while Path("/proc").is_dir() and not Path(f"/proc/{p.pid}/cmdline").read_bytes() \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        return p
    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _state(pid: int, want: bytes) -> None:
    """Wait until process `pid` is in state `want` (Z: zombie, T: stopped)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0] != want:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _zombie(start) -> subprocess.Popen:
    p = start()
    p.kill()
    _state(p.pid, b"Z")
    return p   # killed, not yet reaped


@needs_proc
def test_a_killed_rank_not_yet_reaped_is_gone(children):
    """A rank killed by a signal stays a zombie until hydra reaps it: the
    watcher, the stop and the launcher check must see it as gone."""
    alive, zombie = children(), _zombie(children)
    assert _running(alive.pid) and _exists(alive.pid) and _start_time(alive.pid) is not None
    assert not _running(zombie.pid)
    assert not _exists(zombie.pid)
    assert _start_time(zombie.pid) is None


@needs_proc
def test_watcher_names_no_rank_when_two_are_gone_before_it_looks(tmp_path, children):
    for r in (0, 1):
        (tmp_path / f"rank-{r}.pid").write_text(str(_zombie(children).pid))
    done, first_dead = threading.Event(), []
    _watch_ranks(str(tmp_path), 2, done, first_dead)
    assert first_dead == [None]


@needs_proc
def test_watcher_names_no_rank_when_two_exit_in_one_wakeup(tmp_path, children, monkeypatch):
    """The pidfd path: poll() reports both ranks' descriptors at once."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfds")
    for r in (0, 1):
        (tmp_path / f"rank-{r}.pid").write_text(str(children().pid))

    class AllReady:
        def __init__(self):
            self.fds = []

        def register(self, fd, mask):
            self.fds.append(fd)

        def poll(self, timeout):
            return [(fd, 1) for fd in self.fds]
    monkeypatch.setattr(launch_mod.select, "poll", AllReady)
    done, first_dead = threading.Event(), []
    _watch_ranks(str(tmp_path), 2, done, first_dead)
    assert first_dead == [None]


@needs_proc
def test_only_gdsl_workers_are_taken_for_ranks(tmp_path, children):
    """A pid file whose pid now belongs to another process (the rank died and
    the pid was reused) is not signalled."""
    worker = children("-m", "gdsl.dist.worker")   # argv names it a worker
    other = children()
    (tmp_path / "rank-0.pid").write_text(str(worker.pid))
    (tmp_path / "rank-1.pid").write_text(str(other.pid))
    assert set(_pid_ranks(str(tmp_path))) == {str(worker.pid), str(other.pid)}
    assert _rank_pids(str(tmp_path)) == [worker.pid]


@needs_proc
def test_signal_all_reaches_mpiexecs_process_group(children):
    """mpiexec runs in a session of its own (start_new_session): its whole
    group is signalled, not only the ranks named in pid files."""
    group = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(60)' & wait"],
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 10   # the shell starts its child (a loaded machine: not at once)
        while not (kids := [int(p) for p in Path(f"/proc/{group.pid}/task/{group.pid}/children").read_text().split()]):
            assert time.monotonic() < deadline, "the shell started no child"
            time.sleep(0.05)
        _signal_all(group, [], signal.SIGTERM)
        assert group.wait(5) is not None
        deadline = time.monotonic() + 5
        while any(_exists(k) for k in kids):
            assert time.monotonic() < deadline, "a process of mpiexec's group was not signalled"
            time.sleep(0.05)
    finally:
        if group.poll() is None:
            os.killpg(group.pid, signal.SIGKILL)
            group.wait()


@needs_proc
def test_stop_kills_what_sigterm_does_not_stop(tmp_path, children):
    """An mpiexec that does not exit on SIGTERM and a SIGSTOPped rank in a
    session of its own (as hydra starts them): both gone after the grace."""
    mpiexec = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                                "time.sleep(60)"], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert mpiexec.stdout.readline() == "ready\n"
        rank = children("-m", "gdsl.dist.worker", start_new_session=True)
        (tmp_path / "rank-0.pid").write_text(str(rank.pid))
        os.kill(rank.pid, signal.SIGSTOP)
        _state(rank.pid, b"T")
        t0 = time.monotonic()
        _stop(mpiexec, str(tmp_path), grace=0.5)
        assert mpiexec.poll() == -signal.SIGKILL
        assert rank.wait(5) == -signal.SIGKILL
        assert time.monotonic() - t0 < 5
    finally:
        if mpiexec.poll() is None:
            mpiexec.kill()
        mpiexec.wait()
