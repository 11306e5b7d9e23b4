"""Starting distributed runs and turning rank failures into one clear error.

`gdsl run --np P` started from a shell partitions the graph (unless `--parts`
names a partition already written) and starts `mpiexec -n P python -m
gdsl.dist.worker`; started by a launcher (`mpiexec`, `mpirun`, `srun`), it
runs as the rank it was given and starts nothing.

Failures: a rank that raises prints `gdsl: error: rank R: ...` and calls
MPI_Abort, which makes the process manager kill every rank at once; a rank
killed by a signal is noticed by the process manager, which kills the
others. The launcher then prints which rank failed and why, and returns 1.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from gdsl.diagnostics import GdslError

# set by MPICH/Intel MPI (PMI_*), Open MPI (OMPI_*), PMIx, Slurm's srun
_LAUNCHER_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID")


def under_launcher() -> bool:
    if any(k in os.environ for k in _LAUNCHER_ENV):
        return True
    return "SLURM_PROCID" in os.environ and "SLURM_STEP_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1


def find_mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise GdslError("--np needs MPI: no mpiexec found (pip install mpi4py mpich, or load your cluster's MPI)")
    return found


def check_mpi4py() -> None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise GdslError("--np needs mpi4py: pip install mpi4py mpich (or 'gdsl[mpi]')") from None


_NOISE = re.compile(r"^(=+|\s*$|.*BAD TERMINATION.*|.*CLEANING UP REMAINING PROCESSES.*|"
                    r".*YOU CAN IGNORE THE BELOW CLEANUP MESSAGES.*|.*RUNNING AT .*|.*EXIT CODE: .*|"
                    r".*KILLED BY SIGNAL.*|\[mpiexec@.*|.*application called MPI_Abort.*|"
                    r".*Abort\(\d+\) on node.*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING.*|"
                    r"This typically refers to a problem with your application.*|"
                    r"Please see the FAQ page for debugging suggestions.*)")


def launch(args: dict, P: int, extra_env: dict | None = None, timeout: float | None = None) -> int:
    """Run the worker on P ranks; stream rank 0's output; return the exit code."""
    check_mpi4py()
    mpiexec = find_mpiexec()
    env = dict(os.environ)
    cores = os.cpu_count() or 1
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // P)))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra_env or {})
    run_dir = tempfile.mkdtemp(prefix="gdsl-run-")
    args = {**args, "run_dir": run_dir}  # each rank writes its pid there, to name a rank that dies
    cmd = [mpiexec, "-n", str(P), sys.executable, "-m", "gdsl.dist.worker", json.dumps(args)]
    # the process manager reports a dead rank on stdout: both streams are filtered
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)
    kept: list[str] = []
    killed: list[str] = []

    def pump(stream, out):
        for line in stream:
            m = re.search(r"PID (\d+) RUNNING AT", line)
            if m:
                pid_rank = _pid_ranks(run_dir)
                killed.append(pid_rank.get(m.group(1), "?"))
            sig = re.search(r"(?:KILLED BY SIGNAL: (\d+) \(([^)]*)\)|EXIT STRING: ([^(]*)\(signal (\d+)\))", line)
            if sig:
                num, name = (sig.group(1), sig.group(2)) if sig.group(1) else (sig.group(4), sig.group(3).strip())
                killed.append(f"signal {num} ({name})")
            if _NOISE.match(line):
                continue
            kept.append(line)
            out.write(line)
            out.flush()

    threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout=timeout)
    except KeyboardInterrupt:
        _kill(proc)
        for t in threads:
            t.join(5)
        print("gdsl: interrupted; all ranks stopped", file=sys.stderr)
        return 130
    except subprocess.TimeoutExpired:
        _kill(proc)
        for t in threads:
            t.join(5)
        raise GdslError(f"the distributed run did not finish within {timeout:.0f} s; all ranks stopped") from None
    for t in threads:
        t.join(10)
    shutil.rmtree(run_dir, ignore_errors=True)
    if rc == 0:
        return 0
    if not any("gdsl: error: rank" in ln for ln in kept):
        who = killed[0] if killed and killed[0].isdigit() else "a rank"
        why = next((k for k in killed if k.startswith("signal")), f"exit code {rc}")
        print(f"gdsl: error: rank {who} died ({why}); all {P} ranks were stopped" if who != "a rank"
              else f"gdsl: error: a rank died ({why}); all {P} ranks were stopped", file=sys.stderr)
    return 1


def _pid_ranks(run_dir: str) -> dict[str, str]:
    out = {}
    for f in Path(run_dir).glob("rank-*.pid"):
        try:
            out[f.read_text().strip()] = f.stem.split("-")[1]
        except OSError:
            pass
    return out


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def temp_parts_dir() -> str:
    return tempfile.mkdtemp(prefix="gdsl-parts-")
