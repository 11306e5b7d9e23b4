"""`gdsl run --np P` failing well: one report per error (not one per rank,
never two glued on a line), what can be checked checked before the ranks
start, user messages instead of Python exceptions for bad checkpoints and
outputs, and SIGTERM / SIGHUP / a killed launcher leaving no rank, mpiexec
or temporary directory behind."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from gdsl.dist.errors import format_reports
from helpers import gdsl_here

ROOT = Path(__file__).resolve().parent.parent
GCN, GAT = str(ROOT / "programs" / "gcn.gd"), str(ROOT / "programs" / "gat.gd")
MPIEXEC = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
    else shutil.which("mpiexec")


def _has_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC is not None


mpi = [pytest.mark.mpi, pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")]


def _env(extra: dict | None = None) -> dict:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(extra or {})}
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID"):
        e.pop(k, None)
    return e


def gdsl(*args, timeout=300, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "gdsl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(env), cwd=cwd, check=False)


def errors(r) -> list[str]:
    lines = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert "Traceback" not in r.stderr, r.stderr
    for ln in lines:   # one message per line: never two reports run together
        assert ln.count("gdsl: error:") <= 1, ln
    return lines


# ---------------------------------------------------------------- one report per error

def test_reports_are_grouped_by_message():
    assert format_reports({1: ("boom", False, False)}, 4) == ["gdsl: error: rank 1: boom"]
    assert format_reports({0: ("x", False, False), 2: ("x", False, False)}, 4) == ["gdsl: error: ranks 0, 2: x"]
    assert format_reports({0: ("x", False, False), 1: ("x", False, False)}, 2) == ["gdsl: error: x"]
    assert format_reports({3: ("x", True, False)}, 4) == ["gdsl: error: x"]        # every rank's alike
    assert format_reports({2: ("b", False, False), 0: ("a", False, False)}, 4) == \
        ["gdsl: error: rank 0: a", "gdsl: error: rank 2: b"]
    assert format_reports({1: ("p.gd:1:2: error: bad\n  1 | x", True, True)}, 2) == ["p.gd:1:2: error: bad\n  1 | x"]


def test_resume_from_an_empty_directory_is_one_error_before_launch(tmp_path):
    """Was `rank 1: ...missing)gdsl: error: rank 0: ...`: once per rank, glued."""
    (tmp_path / "emptyck").mkdir()
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "3", "--resume", str(tmp_path / "emptyck"))
    assert r.returncode == 1
    assert errors(r) == [f"gdsl: error: {tmp_path / 'emptyck'}: no checkpoint here (checkpoint.json missing)"]
    assert "partitioned in" not in r.stderr   # refused before partitioning and starting the ranks


@pytest.mark.parametrize("P", [2, 3])
@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_a_diverged_run_is_reported_once(tmp_path, P):
    prog = tmp_path / "nan.gd"
    prog.write_text(Path(GCN).read_text().replace("lr = 0.01", "lr = 1e30"))   # (1e400 is a compile error)
    r = gdsl("run", str(prog), "--np", str(P), "--partition", "rows", "--epochs", "3")
    assert r.returncode == 1
    assert errors(r) == ["gdsl: error: epoch 2: the loss is nan; training diverged (try a smaller lr)"]


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_a_nonfinite_gradient_stops_every_rank_before_its_step(tmp_path):
    """A finite loss whose gradient is NaN (rsqrt(0) outside the loss's mask, helper-70): the ranks agree
    through the loss's all-reduce and stop before the step, saving nothing (was: NaN params saved, exit 0)."""
    import numpy as np
    from test_trainer_summary import ZERO_IN, zero_in_degree_graph
    g = zero_in_degree_graph()
    np.savez(tmp_path / "z.npz", src=g.src.numpy(), dst=g.dst.numpy(), features=g.features.numpy(),
             labels=g.labels.numpy(), **{f"{k}_mask": v.numpy() for k, v in g.masks.items()})
    (tmp_path / "z.gd").write_text(ZERO_IN)
    r = gdsl("run", str(tmp_path / "z.gd"), "--data", str(tmp_path / "z.npz"), "--np", "2", "--partition", "rows",
             "--save", str(tmp_path / "m.pt"))
    assert r.returncode == 1 and not (tmp_path / "m.pt").exists(), r.stderr
    (line,) = errors(r)
    assert line.startswith("gdsl: error: epoch 1: the gradient of GCNConv_1.W is nan though the loss is finite "
                           "(0.8940)"), line


def test_a_named_plan_the_ranks_cannot_run_is_refused_before_partitioning(tmp_path):
    """The ranks' own check, made by the launcher (and by `gdsl partition`):
    nothing is partitioned or started, and the op's place is named."""
    r = gdsl_here("run", GAT, "--np", "3", "--partition", "redistribute", "--epochs", "1")
    assert r.returncode == 1 and "partitioned in" not in r.stderr
    (line,) = errors(r)
    assert line.startswith("gdsl: error: --partition redistribute: partition = redistribute (RDM) cannot run op %a "
                           "(gat_aggregate)") and line.endswith("gat.gd:17:19)"), line
    r = gdsl_here("partition", GAT, "--np", "2", "--partition", "rows_replicated(2)", "--out", str(tmp_path / "p"))
    assert r.returncode == 1 and not (tmp_path / "p").exists()
    assert errors(r)[0].startswith("gdsl: error: --partition rows_replicated(2): partition = rows_replicated "
                                   "cannot run op %a (gat_aggregate): an edge softmax needs")


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_a_plan_every_rank_refuses_is_reported_once(tmp_path):
    """The ranks check a plan again (a partition written by other means): every
    rank refuses it alike, and it is reported once."""
    import gdsl as g
    from gdsl.dist.part import parse_spec
    from gdsl.dist.run import write_partition
    write_partition(g.compile(GAT), g.load_graph(), parse_spec("redistribute"), 3, tmp_path / "p")
    r = gdsl("run", GAT, "--np", "3", "--parts", str(tmp_path / "p"), "--epochs", "1")
    assert r.returncode == 1
    (line,) = errors(r)
    assert line.startswith("gdsl: error: partition = redistribute (RDM) cannot run op")


# ---------------------------------------------------------------- outputs checked before training

def test_checkpoint_path_that_is_a_file_is_refused_before_training(tmp_path):
    f = tmp_path / "ckfile"
    f.write_text("mine\n")
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--checkpoint", str(f))
    assert r.returncode == 1
    assert errors(r) == [f"gdsl: error: --checkpoint {f}: exists and is not a directory (a checkpoint is a directory)"]
    assert "partitioned in" not in r.stderr and f.read_text() == "mine\n"
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--checkpoint", str(f / "sub"))
    assert r.returncode == 1 and errors(r) == [f"gdsl: error: --checkpoint {f / 'sub'}: {f} is not a directory"]


def test_a_delay_beyond_the_epochs_is_refused_before_partitioning(tmp_path):
    """Was accepted: --delay 1000000 built a million bins per aggregation
    (minutes, gigabytes) for a pipeline that never delivers."""
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "vertex_cut", "--delay", "1000000", "--epochs", "3")
    assert r.returncode == 1
    (line,) = errors(r)
    assert line.startswith("gdsl: error: delay = 1000000 (--delay or the schedule's delay): cd-r delivers")
    assert "give r <= 3" in line and "partitioned" not in r.stderr
    # a partition written with that delay is refused the same way
    parts = tmp_path / "parts"
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "vertex_cut", "--delay", "50", "--out", str(parts))
    assert r.returncode == 0, r.stderr
    r = gdsl_here("run", GCN, "--np", "2", "--parts", str(parts), "--epochs", "3")
    assert r.returncode == 1 and "delay = 50" in errors(r)[0]


def test_json_destination_is_checked_before_training(tmp_path):
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--json", str(tmp_path))
    assert r.returncode == 1
    assert errors(r) == [f"gdsl: error: --json {tmp_path}: is a directory (give a file name)"]
    assert "partitioned in" not in r.stderr
    out = tmp_path / "no" / "such" / "o.json"
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--json", str(out))
    assert r.returncode == 1 and errors(r) == [f"gdsl: error: --json {out}: no such directory: {out.parent}"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_json_in_a_directory_nothing_can_be_written_to_is_refused_before_training():
    """As root os.access passes for /proc (and read-only mounts); a probe write
    now decides. Was: trained, then lost the run at the end (an internal error under --np)."""
    r = gdsl_here("run", GCN, "--epochs", "2", "--json", "/proc/gdsl-x.json")
    assert r.returncode == 1 and "epoch 1" not in r.stderr
    assert errors(r)[0].startswith("gdsl: error: --json /proc/gdsl-x.json: cannot write in /proc ("), r.stderr


# ---------------------------------------------------------------- bad checkpoints

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    if not _has_mpi():
        pytest.skip("needs mpi4py and mpiexec")
    ck = tmp_path_factory.mktemp("ck") / "ck"
    r = gdsl("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "1", "--checkpoint", str(ck))
    assert r.returncode == 0, r.stderr
    return ck


def _copy(ck: Path, tmp_path: Path) -> Path:
    d = tmp_path / "ck"
    shutil.copytree(ck, d)
    return d


def test_checkpoint_json_records_what_wrote_it(checkpoint):
    info = json.loads((checkpoint / "checkpoint.json").read_text())
    assert info["format"] == "gdsl-checkpoint-1" and info["epoch"] == 1 and info["size"] == 2
    assert info["dir"] == "epoch-1" and sorted(p.name for p in (checkpoint / "epoch-1").iterdir()) == \
        ["rank-0.pt", "rank-1.pt"]
    ident = info["identity"]
    assert ident["program"] == GCN and ident["train"] == "cora" and ident["overrides"] == {}
    assert ident["plan"] == "rows(hash) halo=alltoallv" and len(ident["source"]) == 16 and ident["graph"]


@pytest.mark.mpi
@pytest.mark.parametrize("garbage", ["{not json", "[1, 2]", '{"epoch": "x", "size": 2}'])
def test_garbage_checkpoint_json_is_not_a_checkpoint(checkpoint, tmp_path, garbage):
    d = _copy(checkpoint, tmp_path)
    (d / "checkpoint.json").write_text(garbage)
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--resume", str(d))
    assert r.returncode == 1
    (line,) = errors(r)
    assert line.startswith(f"gdsl: error: {d / 'checkpoint.json'}: not a gdsl checkpoint (")
    assert "JSONDecodeError" not in line and "partitioned in" not in r.stderr


@pytest.mark.mpi
def test_a_corrupt_rank_file_is_named_without_suggesting_unsafe_loading(checkpoint, tmp_path):
    d = _copy(checkpoint, tmp_path)
    bad = d / json.loads((d / "checkpoint.json").read_text())["dir"] / "rank-1.pt"
    bad.write_bytes(b"garbage, not a torch file\n")
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--resume", str(d))
    assert r.returncode == 1
    assert errors(r) == [(f"gdsl: error: rank 1: {bad}: corrupt, or not a gdsl checkpoint file "
                          "(torch.load: UnpicklingError)")]
    assert "weights_only" not in r.stderr + r.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("change,why", [
    (["--program", GAT], f"it was written by {GCN}, this run is {GAT}"),
    (["--set", "hidden=8"], "it was written with no --set, this run has --set hidden=8"),
    (["--partition", "vertex_cut"], ("it was written by plan rows(hash) halo=alltoallv, this run's plan is "
                                     "vertex_cut delay=0 (cd-0)")),
    (["--data", "citeseer"], "it was written for another graph (--data)"),
    (["--np", "3"], "checkpoint of 2 ranks, this run has 3 (resume with --np 2)"),
])
def test_resuming_another_programs_checkpoint_names_the_difference(checkpoint, change, why):
    """Was `RuntimeError: Error(s) in loading state_dict ...` from the ranks."""
    args = {"--program": GCN, "--np": "2", "--partition": "rows"}
    extra = []
    for k, v in zip(change[::2], change[1::2]):
        if k in args:
            args[k] = v
        else:
            extra += [k, v]
    r = gdsl_here("run", args["--program"], "--np", args["--np"], "--partition", args["--partition"], "--epochs", "2",
             "--resume", str(checkpoint), *extra)
    assert r.returncode == 1
    (line,) = errors(r)
    assert line.startswith(f"gdsl: error: {checkpoint}: ") and why in line, line
    assert "partitioned in" not in r.stderr


@pytest.mark.mpi
def test_the_ranks_check_the_parameters_of_a_checkpoint_without_identity(checkpoint, tmp_path):
    """A checkpoint index that records no identity (written before it did) is
    not checked up front; the ranks then refuse parameters of other shapes
    with a message, not torch's load_state_dict error."""
    d = _copy(checkpoint, tmp_path)
    info = json.loads((d / "checkpoint.json").read_text())
    del info["identity"], info["format"]
    (d / "checkpoint.json").write_text(json.dumps(info))
    r = gdsl("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--resume", str(d), "--set", "hidden=8")
    assert r.returncode == 1
    (line,) = errors(r)
    assert line.startswith(f"gdsl: error: {d}: the checkpoint's parameters do not fit this program: "
                           "GCNConv_1.W is [1433, 16] in the checkpoint, [1433, 8] here")
    assert "state_dict" not in r.stderr


@pytest.mark.mpi
def test_resume_still_reproduces_the_run(checkpoint, tmp_path):
    full, res = tmp_path / "full.json", tmp_path / "res.json"
    assert gdsl("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "2", "--json", str(full)).returncode == 0
    r = gdsl("run", GCN, "--np", "2", "--partition", "rows", "--halo", "bcast", "--epochs", "2",
             "--resume", str(checkpoint), "--json", str(res))
    assert r.returncode == 0, r.stderr
    curves = [[e["loss"] for e in json.loads(f.read_text())["epochs"]] for f in (full, res)]
    assert curves[0] == pytest.approx(curves[1], rel=1e-6)


@pytest.mark.mpi
def test_resuming_a_checkpoint_at_or_after_the_last_epoch_is_refused(checkpoint):
    """Was: "resuming after epoch 1", no epoch trained, the old run's final line, exit 0."""
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "1", "--resume", str(checkpoint))
    assert r.returncode == 1
    assert errors(r) == [f"gdsl: error: --resume {checkpoint}: the checkpoint is after epoch 1, and this run ends at "
                         "epoch 1: nothing is left to train (--epochs N with N > 1 trains on from it)"]
    assert "partitioned in" not in r.stderr


# ---------------------------------------------------------------- signals

class Run:
    """`gdsl run --np 2` in the background, its temporary directories in a TMPDIR of its own."""

    def __init__(self, tmp_path: Path, epochs: int = 2000, extra: tuple = ()):
        self.prog = tmp_path / f"sig_{os.getpid()}_{time.monotonic_ns()}.gd"   # unique: find this run's processes
        self.prog.write_text(Path(GCN).read_text())
        self.tmp = tmp_path / "tmpdir"
        self.tmp.mkdir()
        # under nohup (or as a background job) SIGHUP / SIGINT arrive ignored, and gdsl keeps them so:
        # restore the defaults, then exec gdsl (same pid)
        argv = [sys.executable, "-m", "gdsl.cli", "run", str(self.prog), "--np", "2", "--partition", "rows",
                "--epochs", str(epochs), "--log-every", "1", *map(str, extra)]
        boot = ("import os, signal, sys\n"
                "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):\n"
                "    signal.signal(s, signal.SIG_DFL)\n"
                "os.execv(sys.executable, sys.argv[1:])\n")
        self.proc = subprocess.Popen([sys.executable, "-c", boot, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=_env({"TMPDIR": str(self.tmp)}))
        self.err: list[str] = []
        self.reader = threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 120
        while not any(ln.startswith("epoch") for ln in list(self.err)):
            assert self.proc.poll() is None and time.monotonic() < deadline, "".join(self.err)
            time.sleep(0.1)

    def pids(self, ranks_only: bool = False) -> list[int]:
        out = subprocess.run(["pgrep", "-f", str(self.prog)], capture_output=True, text=True,
                             check=False).stdout.split()
        pids = [int(p) for p in out if int(p) != self.proc.pid]
        if ranks_only:
            pids = [p for p in pids if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[1:3] ==
                    [b"-m", b"gdsl.dist.worker"]]
        return pids

    def leftovers(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("gdsl-"))

    def gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.pids():
                return True
            time.sleep(0.1)
        return False

    def cleanup(self) -> None:   # only this run's own processes, by pid
        for p in self.pids() + ([self.proc.pid] if self.proc.poll() is None else []):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _signal_run(tmp_path, sig, stop_a_rank=False, extra=(), again=None):
    run = Run(tmp_path, extra=extra)
    try:
        assert run.leftovers(), "the run has no temporary directories to remove"
        if stop_a_rank:
            os.kill(run.pids(ranks_only=True)[0], signal.SIGSTOP)
        t0 = time.monotonic()
        run.proc.send_signal(sig)
        if again is not None:   # a second signal while the launcher waits for the ranks to answer
            while not any("the ranks stop after their current epoch" in ln for ln in list(run.err)):
                assert time.monotonic() - t0 < 10 and run.proc.poll() is None, "".join(run.err)
                time.sleep(0.02)
            run.proc.send_signal(again)
        rc = run.proc.wait(30)
        took = time.monotonic() - t0
        run.reader.join(5)
        return run, rc, took
    except BaseException:
        run.cleanup()
        raise


def _foreign_launch_then_signal(tmp_path, args: list[str], marker: str, sig, env: dict | None = None):
    """`mpiexec -n 2 gdsl run GCN ARGS` (a foreign launcher): `sig` to mpiexec
    once a line holding `marker` is printed; (exit status, output)."""
    p = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "gdsl.cli", "run", GCN, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=_env(env),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while marker not in (p.stdout.readline() or "") and time.monotonic() < deadline:
            assert p.poll() is None
        p.send_signal(sig)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, out


def _what(sig) -> str:
    return "interrupted" if sig == signal.SIGINT else f"terminated ({signal.Signals(sig).name})"


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi() or not Path("/proc").is_dir(), reason="needs MPI and /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_lets_the_ranks_finish_their_epoch_and_keep_what_they_trained(tmp_path, sig):
    """What `timeout`, a batch scheduler, a closed terminal and Ctrl-C send:
    the ranks stop together after an epoch and write what one process writes
    when stopped (was: every rank killed at once, --json and --save not
    written), with the exit status 128 + the signal; the temporary
    directories are removed and no process is left. `--resume` of the
    checkpoint written at the stop trains on exactly."""
    js, saved, ck = tmp_path / "r.json", tmp_path / "w.pt", tmp_path / "ck"
    run, rc, took = _signal_run(tmp_path, sig, extra=("--json", js, "--save", saved, "--checkpoint", ck))
    try:
        err = "".join(run.err)
        assert rc == 128 + sig, err
        assert f"gdsl: {_what(sig)}: the ranks stop after their current epoch and keep what they trained (" \
               f"{'Ctrl-C again' if sig == signal.SIGINT else 'a second signal'} stops them at once)" in err
        m = re.search(rf"gdsl: {re.escape(_what(sig))} after (\d+) epochs?; {re.escape(str(ck))} holds the "
                      r"checkpoint after epoch (\d+)", err)
        assert m and m.group(1) == m.group(2), err
        n = int(m.group(1))
        assert f"wrote {saved} (the params when stopped after epoch {n}, as one process holds them" in err
        out = json.loads(js.read_text())
        assert out["interrupted"] is True and len(out["epochs"]) == n and out["final"]["epoch"] == n
        assert json.loads((ck / "checkpoint.json").read_text())["epoch"] == n
        assert set(torch.load(saved)) == {"GCNConv_1.W", "GCNConv_1.b", "GCNConv_2.W", "GCNConv_2.b"}
        assert took < 10
        assert run.gone_within(2), "mpiexec or a rank left running"
        assert run.leftovers() == []
    finally:
        run.cleanup()


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi() or not Path("/proc").is_dir(), reason="needs MPI and /proc")
def test_a_signal_to_the_launcher_and_the_ranks_alike_stops_them_after_their_epoch(tmp_path):
    """Slurm's time limit and scancel, systemd's stop: SIGTERM to every
    process of the job, ranks included (was: the ranks died of it, `rank 0
    died (signal 15)`, exit 1, nothing written; helper-3)."""
    js = tmp_path / "r.json"
    run = Run(tmp_path, extra=("--json", js))
    try:
        ranks = run.pids(ranks_only=True)
        for p in [run.proc.pid, *ranks]:
            os.kill(p, signal.SIGTERM)
        rc = run.proc.wait(30)
        run.reader.join(5)
        err = "".join(run.err)
        assert rc == 128 + signal.SIGTERM, err
        assert re.search(r"gdsl: terminated \(SIGTERM\) after \d+ epochs", err) and "died" not in err, err
        assert json.loads(js.read_text())["interrupted"] is True
        assert run.gone_within(2) and run.leftovers() == []
    finally:
        run.cleanup()


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi() or not Path("/proc").is_dir(), reason="needs MPI and /proc")
@pytest.mark.parametrize("again", [None, signal.SIGINT])
def test_ranks_that_cannot_finish_their_epoch_are_stopped_at_once(tmp_path, again):
    """A SIGSTOPped rank cannot answer: after a few epochs' time (or at a
    second signal) every rank is stopped at once (SIGTERM, then SIGKILL),
    --json is said not to be written, and nothing is left behind."""
    js, ck = tmp_path / "r.json", tmp_path / "ck"
    run, rc, took = _signal_run(tmp_path, signal.SIGTERM, stop_a_rank=True, extra=("--json", js, "--checkpoint", ck,
                                                                                   "--checkpoint-every", 1), again=again)
    try:
        err = "".join(run.err).strip().splitlines()
        assert rc == 128 + signal.SIGTERM, err
        why = "gdsl: Ctrl-C again: stopping the ranks at once" if again else \
            "gdsl: the ranks did not answer within"
        assert any(ln.startswith(why) for ln in err), err
        epoch = json.loads((ck / "checkpoint.json").read_text())["epoch"]
        assert err[-3:] == ["gdsl: terminated (SIGTERM); all ranks stopped",
                            f"gdsl: --json {js}: not written (the ranks were stopped at once)",
                            f"gdsl: --checkpoint {ck}: holds the checkpoint after epoch {epoch} (--resume {ck} "
                            "continues from it)"]
        assert not js.exists()
        assert took < 15
        assert run.gone_within(2), "mpiexec or a rank left running"
        assert run.leftovers() == []
    finally:
        run.cleanup()


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi() or not Path("/proc").is_dir(), reason="needs MPI and /proc")
def test_ranks_of_a_killed_launcher_stop_themselves(tmp_path):
    """SIGKILL to `gdsl run` (no handler runs) with one rank SIGSTOPped: the
    other rank notices its launcher is gone, removes the temporary
    directories and dies, and the process manager takes down the rest."""
    run, rc, _ = _signal_run(tmp_path, signal.SIGKILL, stop_a_rank=True)
    try:
        assert rc == -signal.SIGKILL
        assert run.gone_within(15), "orphaned mpiexec or ranks still running"
        assert run.leftovers() == []
    finally:
        run.cleanup()


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi() or not Path("/proc").is_dir(), reason="needs MPI and /proc")
def test_ranks_whose_process_manager_died_stop_and_say_so(tmp_path):
    """SIGKILL to MPICH's proxy (hydra_pmi_proxy, the ranks' parent): was the
    ranks training on to the end as orphans, their output lost, then
    `rank 1 died (exit code 255)`."""
    run = Run(tmp_path)
    try:
        rank = run.pids(ranks_only=True)[0]
        proxy = int(Path(f"/proc/{rank}/stat").read_text().rpartition(")")[2].split()[1])
        t0 = time.monotonic()
        os.kill(proxy, signal.SIGKILL)
        rc = run.proc.wait(30)
        run.reader.join(5)
        err = "".join(run.err).strip().splitlines()
        assert rc == 1 and time.monotonic() - t0 < 10, err
        assert err[-1].startswith(f"gdsl: error: MPI's process manager on this node (") and \
            err[-1].endswith(f", pid {proxy}) died; the ranks it started were stopped"), err
        assert run.gone_within(2), "a rank left running"
        assert run.leftovers() == []
    finally:
        run.cleanup()


# ---------------------------------------------------------------- found by fuzzing the subcommands (session 8)
@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("extra,message", [
    (("--data", "citeseer"), "partitioned for another graph"),                        # was: Cora's partition, silently
    (("--partition", "vertex_cut"), "partitioned as rows(hash)"),
    # session 11: the name before "(" was all that was compared, --halo and --delay not at all
    (("--partition", "rows(metis)"), "partitioned as rows(hash) halo=alltoallv, but --partition asks for rows(metis)"),
    (("--halo", "bcast"), "partitioned with halo = alltoallv, but --halo asks for bcast"),
])
def test_parts_written_for_another_graph_or_plan_are_refused(tmp_path, extra, message):
    d = tmp_path / "pc"
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows(hash)", "--out", str(d))
    assert r.returncode == 0, r.stderr
    r = gdsl_here("run", GCN, "--np", "2", "--parts", str(d), "--epochs", "1", *extra)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    if extra[0] != "--data":   # under a foreign launcher too (was: not checked there at all)
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gdsl.cli", "run", GCN, "--parts", str(d),
                            "--epochs", "1", *extra], capture_output=True, text=True, timeout=300, env=_env(),
                           check=False)
        assert r.returncode != 0 and message in r.stderr, r.stderr


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_rank_files_of_two_partitions_are_refused(tmp_path):
    """part-0 of one `gdsl partition`, part-1 of another (same program, graph,
    P and plan; another --seed): was MPI's own "See the MPI_ERROR field"
    after the forward exchange had moved rows by mismatched tables
    (helper-72). The headers carry the partition's key; the ranks compare it."""
    import shutil
    for name, seed in (("a", "1"), ("b", "2")):
        r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows(random)", "--seed", seed,
                      "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
    mix = tmp_path / "a"
    shutil.copy(tmp_path / "b" / "part-1.npz", mix / "part-1.npz")
    r = gdsl_here("run", GCN, "--np", "2", "--parts", str(mix), "--epochs", "1")
    assert r.returncode == 1 and errors(r) == [
        f"gdsl: error: {mix}: part-1.npz belongs to another partition than part-0.npz (a directory refreshed in "
        "part, or a stale copy): partition again with `gdsl partition`, or leave out --parts"], r.stderr


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_foreign_launcher_partitions_each_graph_and_plan_apart_and_never_hangs(tmp_path):
    """Under mpiexec, .gdsl-parts/ was keyed by program and P only: a run on
    another --data or --partition reused the first partition (trained Cora
    for CiteSeer). An OSError in rank 0's checks left rank 1 in bcast."""
    def foreign(*extra, timeout=300):
        return subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gdsl.cli", "run", GCN, "--epochs", "1",
                               *extra], capture_output=True, text=True, timeout=timeout, env=_env(), cwd=tmp_path,
                              check=False)
    a = foreign("--partition", "rows(hash)")
    b = foreign("--partition", "rows(hash)", "--data", "citeseer")
    c = foreign("--partition", "rows(random)")
    assert a.returncode == b.returncode == c.returncode == 0, a.stderr + b.stderr + c.stderr
    assert len(list((tmp_path / ".gdsl-parts").iterdir())) == 3
    assert "rows(random)" in c.stdout and "rows(hash)" in a.stdout
    final = [r.stdout.strip().splitlines()[-1] for r in (a, b)]
    assert final[0] != final[1]
    (tmp_path / "afile").write_text("x")
    r = foreign("--parts", str(tmp_path / "afile" / "p"), timeout=120)   # not a directory: an OSError
    assert r.returncode != 0 and "Traceback" not in r.stderr and "afile" in r.stderr, r.stderr
    # a bad --json: rank 0 checks it for all, so it is printed once (was: once per rank; helper-61)
    r = foreign("--json", str(tmp_path / "nodir" / "x.json"), timeout=120)
    assert r.returncode != 0 and r.stderr.count("no such directory") == 1, r.stderr


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_ranks_of_a_foreign_launcher_stop_after_their_epoch_on_its_signal(tmp_path):
    """`mpiexec -n 2 gdsl run ...` given SIGTERM (what Slurm sends at the time
    limit; MPICH's mpiexec forwards it to every rank): the ranks stop together
    after the epoch and write --json and the --checkpoint of that epoch, as
    under gdsl's own launcher, and exit 128 + 15 (was: killed, nothing
    written)."""
    js, ck = tmp_path / "r.json", tmp_path / "ck"
    rc, out = _foreign_launch_then_signal(
        tmp_path, ["--partition", "rows", "--epochs", "3000", "--log-every", "1", "--json", str(js),
                   "--checkpoint", str(ck), "--checkpoint-every", "1000"], "epoch    2/3000", signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM, out[-3000:]
    m = re.search(rf"gdsl: terminated \(SIGTERM\) after (\d+) epochs; {re.escape(str(ck))} holds the checkpoint after "
                  r"epoch (\d+)", out)
    assert m and m.group(1) == m.group(2), out[-3000:]
    r = json.loads(js.read_text())
    assert r["interrupted"] is True and len(r["epochs"]) == int(m.group(1)) >= 2
    assert json.loads((ck / "checkpoint.json").read_text())["epoch"] == int(m.group(1))


@pytest.mark.mpi
@pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")
def test_a_foreign_launchers_signal_while_rank_0_partitions_never_hangs(tmp_path):
    """Ctrl-C (SIGINT forwarded to every rank) while rank 0 partitions: was a
    KeyboardInterrupt on rank 0 alone, the others busy-waiting in its bcast
    for ever (helper-3). The first signal is now the stop after an epoch."""
    js = tmp_path / "r.json"
    rc, out = _foreign_launch_then_signal(
        tmp_path, ["--partition", "vertex_cut", "--epochs", "50", "--json", str(js)], "gdsl-test: partitioning",
        signal.SIGINT, env={"GDSL_TEST_HOLD_PARTITION": "3"})
    assert rc == 130, out[-3000:]
    assert "gdsl: interrupted after 1 epoch" in out and "Traceback" not in out and "error" not in out, out[-3000:]
    assert json.loads(js.read_text())["interrupted"] is True


def test_temporary_directories_of_a_gone_launcher_are_removed_by_the_next_run(tmp_path):
    """kill -9 of `gdsl run --np` while rank 0 printed: mpiexec died with it
    and took the ranks before they could remove gdsl-run-* and gdsl-parts-*
    (the partitioned graph; helper-3). The next run removes those of
    launchers that are gone, on this machine, and nothing else."""
    import socket

    from gdsl.dist.launch import _OWNER, reap_stale_temp_dirs
    host = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    made = {}
    for name, owner in (("gdsl-run-gone", {"pid": dead.pid, "start": "1", "host": host}),
                        ("gdsl-parts-gone", {"pid": dead.pid, "start": None, "host": host}),
                        ("gdsl-parts-alive", {"pid": os.getpid(), "start": None, "host": host}),
                        ("gdsl-run-elsewhere", {"pid": dead.pid, "start": "1", "host": host + "-other"}),
                        ("gdsl-run-noowner", None), ("other-gone", {"pid": dead.pid, "start": "1", "host": host})):
        d = tmp_path / name
        d.mkdir()
        (d / "part-0.npz").write_bytes(b"x")
        if owner is not None:
            (d / _OWNER).write_text(json.dumps(owner))
        made[name] = d
    reap_stale_temp_dirs(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gdsl-parts-alive", "gdsl-run-elsewhere",
                                                          "gdsl-run-noowner", "other-gone"]


def test_partition_out_keeps_files_it_did_not_write(tmp_path):
    d = tmp_path / "ud"
    d.mkdir()
    (d / "part-old.npz").write_text("mine")     # was: an internal error on int('old')
    (d / "part-7.npz").write_text("mine too")   # was: deleted as a stale rank file
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows(hash)", "--out", str(d))
    assert r.returncode == 0, r.stderr
    assert (d / "part-old.npz").read_text() == "mine" and (d / "part-7.npz").read_text() == "mine too"


@pytest.mark.parametrize("m", mpi)
def test_an_unwritable_checkpoint_is_refused_before_training(tmp_path, m):
    r = gdsl_here("run", GCN, "--np", "2", "--checkpoint", "/proc/gdsl-ck", "--epochs", "1")
    assert r.returncode == 1 and "--checkpoint /proc/gdsl-ck: cannot write there" in r.stderr, r.stderr
    assert "epoch 1" not in r.stdout + r.stderr    # found out before the ranks train


def test_a_profile_with_a_huge_integer_is_not_valid(tmp_path):
    prof = {"alpha": 10 ** 400, "beta": 1e-9, "gamma_spmm": 1e-9, "gamma_gemm": 1e-10}
    (tmp_path / "p.json").write_text(json.dumps(prof))
    r = gdsl_here("plan", GCN, "--data", "cora", "--np", "4", "--profile", str(tmp_path / "p.json"))
    assert r.returncode == 1 and "alpha must be positive and finite, got an integer of 401 digits" in r.stderr, r.stderr


def test_rank_watcher_skips_a_pid_file_being_written(tmp_path):
    """Was: the watcher thread read a rank's pid file while the rank wrote it,
    died on int('') with a traceback, and named no dead rank afterwards."""
    from gdsl.dist.launch import _pid_ranks, _watch_ranks
    (tmp_path / "rank-0.pid").write_text(str(os.getpid()))
    (tmp_path / "rank-1.pid").write_text("")
    assert _pid_ranks(str(tmp_path)) == {str(os.getpid()): "0"}
    done, first_dead = threading.Event(), []
    t = threading.Thread(target=_watch_ranks, args=(str(tmp_path), 2, done, first_dead))
    t.start()
    time.sleep(0.1)
    (tmp_path / "rank-1.pid").write_text("999999999")   # a rank that is already gone
    t.join(5)
    assert not t.is_alive() and first_dead == ["1"]


def test_features_refuses_a_later_layer_that_reads_x_again_saying_so():
    """`a @ W + X @ Wx` in every layer: layer 2 reads X again after layer 1's
    sync. Was: "op %t_1 (add) in layer 1 mixes layer-1 partial results with
    synced rows" (the op is in layer 2)."""
    import gdsl
    from gdsl.diagnostics import GdslError
    from gdsl.dist.module import feature_region
    src = (ROOT / "programs" / "gcn.gd").read_text()
    src = src.replace("transform t = a @ W", "transform t = a @ W + X @ Wx").replace(
        "param W : f32[din, dout] = glorot", "param W : f32[din, dout] = glorot\n    param Wx : f32[F, dout] = glorot")
    assert "X @ Wx" in src and "param Wx" in src
    module = gdsl.compile(src).bind(gdsl.load_graph("cora")).module
    with pytest.raises(GdslError, match=r"op %t_1 \(add\) mixes a product of X's feature columns .* cannot be read "
                                        r"again after a sync; use rows"):
        feature_region(module)
