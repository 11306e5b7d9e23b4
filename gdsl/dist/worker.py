"""One MPI rank: `python -m gdsl.dist.worker '<json args>'` (started by gdsl.dist.launch).

Any failure is reported (gdsl/dist/errors.py: to the launcher's run
directory, or `gdsl: error: rank R: ...` on stderr) and followed by
MPI_Abort, so the process manager stops every rank at once (no rank is left
waiting in a collective). A rank whose launcher has died stops itself.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback


COMM_TIMEOUT = 1800.0   # --comm-timeout's default, in seconds: torch.distributed's default timeout


def _message(e: BaseException) -> str:
    from gdsl.diagnostics import CompileError, GdslError, render_all
    if isinstance(e, CompileError):
        return render_all(e)
    if isinstance(e, GdslError):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, MemoryError):
        return "out of memory"
    if isinstance(e, RuntimeError):
        from gdsl.runtime.memory import out_of_memory
        oom = out_of_memory(e)
        if oom is not None:
            return f"out of memory: {oom}"
    if type(e).__module__.startswith("mpi4py"):
        return f"MPI error: {e}"
    # anything else is ours, as the single-process boundary (gdsl/cli.py) says
    return (f"internal error: {type(e).__name__}: {e} "
            "(this is a bug in gdsl; rerun with GDSL_DEBUG=1 for the traceback)")


# Under gdsl's own launcher, rank 0's stderr lines travel on its stdout with
# this mark and the launcher puts them back on stderr: the process manager
# forwards the two streams separately, so `gdsl run --np P ... 2>&1` showed
# the final line (stdout) before the last progress lines (stderr).
STDERR_MARK = "\x1egdsl:stderr\x1e"


class MarkedStderr(io.TextIOBase):
    """Rank 0's sys.stderr under gdsl's launcher: whole lines, marked, on `out`."""

    def __init__(self, out) -> None:
        self.out, self.buf = out, ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        self.buf += s
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.out.write(STDERR_MARK + line + "\n")
        if lines:
            self.out.flush()
        return len(s)

    def flush(self) -> None:
        if self.buf:
            self.out.write(STDERR_MARK + self.buf + "\n")
            self.buf = ""
        self.out.flush()


def run(args: dict) -> int:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    if args.get("launcher") and rank == 0:
        sys.stderr = MarkedStderr(sys.stdout)
    run_dir = args.get("run_dir")
    if run_dir:
        _register_stack_dump(run_dir, rank)   # before the pid file: who finds the pid may ask for it
        try:   # atomically: the launcher's watcher may read it at any moment (was: read empty, int(''))
            tmp = os.path.join(run_dir, f".rank-{rank}.pid.tmp")
            with open(tmp, "w") as f:
                f.write(str(os.getpid()))
            os.replace(tmp, os.path.join(run_dir, f"rank-{rank}.pid"))
        except OSError:
            pass
    if args.get("launcher"):
        watch_launcher(args["launcher"], rank=rank, run_dir=run_dir)
    timeout = args.get("comm_timeout")
    timeout = COMM_TIMEOUT if timeout is None else float(timeout)
    if timeout > 0:
        from gdsl.dist.comm import start_watchdog
        # the peers' watchdogs wake within a second of this one (the grace covers it)
        start_watchdog(timeout, lambda msg: _stop_waiting(rank, msg, run_dir, grace=min(timeout, 5.0)))
    try:
        import warnings

        from gdsl.diagnostics import GdslWarning
        from gdsl.dist.run import run_rank
        from gdsl.runtime import startup
        startup.release()
        from gdsl.dist.stop import catch_signals
        warnings.simplefilter("ignore", GdslWarning)   # the launcher printed the compile warnings once
        catch_signals()   # a signal to the rank itself: the stop after the epoch (gdsl/dist/stop.py)
        return run_rank(args)
    except BaseException as e:  # noqa: BLE001 - every failure must stop all ranks
        from gdsl.diagnostics import CompileError
        from gdsl.dist.errors import AllRanksError, report
        # a compile error comes from the program every rank compiles alike
        report(rank, _message(e), isinstance(e, (AllRanksError, CompileError)), run_dir,
               located=isinstance(e, CompileError))
        if os.environ.get("GDSL_DEBUG") == "1":
            traceback.print_exc()
        sys.stderr.flush()
        output_through(run_dir)
        MPI.COMM_WORLD.Abort(1)
        return 1


ABORT_GRACE = 1.0   # seconds


def output_through(run_dir: str | None) -> None:
    """Before MPI_Abort under another launcher (no run directory: the rank
    printed its report on stderr): give the process manager time to forward
    that line. MPICH's hydra tears the job down on the abort and may drop
    what it had not read yet: the clean CI run at 95996b6 got exit 1 and an
    empty stderr from `mpiexec -n 2 gdsl run --parts DIR`, not even MPICH's
    own "Abort(1)" line. Under `gdsl run --np` the report is a file."""
    if not run_dir:
        time.sleep(ABORT_GRACE)


def _stop_waiting(rank: int, message: str, run_dir: str | None, grace: float) -> None:
    """--comm-timeout: this rank has waited too long in one MPI call (the
    watchdog thread of gdsl/dist/comm.py). Report it like any failure, mark
    this rank as waiting (so the launcher can name the ranks that never
    joined), give the other waiting ranks `grace` seconds to report too, and
    stop every rank: MPI_Abort from this thread where MPI allows calls from
    any thread (MPI_THREAD_MULTIPLE, mpi4py's default), else this process
    dies and the process manager stops the others."""
    from mpi4py import MPI

    from gdsl.dist.errors import mark_waiting, report
    report(rank, message, False, run_dir)
    if run_dir:
        mark_waiting(run_dir, rank)
        _ask_for_stacks(run_dir, rank)
        time.sleep(grace)
    output_through(run_dir)
    if MPI.Query_thread() == MPI.THREAD_MULTIPLE:
        MPI.COMM_WORLD.Abort(1)
    os.kill(os.getpid(), signal.SIGKILL)


_STACK_FILE = None   # rank-R.stack, open for faulthandler for the life of the rank


def _register_stack_dump(run_dir: str, rank: int) -> None:
    """On SIGUSR1, write the Python stacks of this rank's threads to
    rank-R.stack (faulthandler: from the signal handler, so also while the
    main thread is stuck in a C call or holds the GIL). The first line
    names the main thread, whose stack the launcher prints for a rank that
    never joined a collective (gdsl/dist/errors.py, `not_joined`)."""
    global _STACK_FILE
    import faulthandler

    from gdsl.dist.errors import stack_path
    try:
        f = open(stack_path(run_dir, rank), "w")
        f.write(f"main thread 0x{threading.main_thread().ident:016x}\n")
        f.flush()
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
    except (OSError, AttributeError, ValueError, RuntimeError):   # no SIGUSR1 (Windows), or no file
        return
    _STACK_FILE = f


def _ask_for_stacks(run_dir: str, rank: int) -> None:
    """--comm-timeout fired on this rank: ask the ranks that are not waiting
    too (no rank-R.waiting yet) for their stacks, by SIGUSR1. Only the
    ranks of this job on this machine: children of this rank's parent (the
    process manager's proxy), so a pid written by a rank on another node
    never signals a process here."""
    from gdsl.dist.errors import stack_path
    parent = os.getppid()
    for name in os.listdir(run_dir):
        if not (name.startswith("rank-") and name.endswith(".pid")):
            continue
        r = name[5:-4]
        if r == str(rank) or os.path.exists(os.path.join(run_dir, f"rank-{r}.waiting")) \
                or not os.path.exists(stack_path(run_dir, int(r))):
            continue
        try:
            with open(os.path.join(run_dir, name)) as f:
                pid = int(f.read())
            if _parent(pid) == parent:
                os.kill(pid, signal.SIGUSR1)
        except (OSError, ValueError):
            continue


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _parent(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def _start_time(pid: int) -> str | None:
    """The process's start time (Linux /proc), to tell it from a later process with its pid."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else fields[19]   # a zombie has exited


def launcher_alive(info: dict) -> bool:
    pid = int(info["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = info.get("start")
    return start is None or _start_time(pid) == start


def _comm_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "its parent"


def watch_launcher(info: dict, every: float = 1.0, rank: int | None = None, run_dir: str | None = None) -> None:
    """Stop this rank when the `gdsl run` that launched it is gone (killed by
    SIGKILL, say, with no chance to stop its ranks): without this, a rank
    waiting in a collective for a stopped peer waits forever. It removes the
    launcher's temporary directories (`cleanup`) first. Likewise when its
    parent, the MPI process manager's proxy on this node (hydra_pmi_proxy),
    is gone: the rank is then an orphan whose output reaches no one and
    whose end the process manager cannot notice (was: it trained on to the
    end, and the launcher blamed a rank that had died). Only on the
    launcher's machine (a rank on another node cannot see its pid)."""
    if info.get("host") != socket.gethostname():
        return
    parent = os.getppid()
    proxy = _comm_name(parent)

    def watch():
        while True:
            time.sleep(every)
            if not launcher_alive(info):
                for d in info.get("cleanup") or []:   # the launcher's temporary directories
                    shutil.rmtree(d, ignore_errors=True)
                os.kill(os.getpid(), signal.SIGKILL)   # the process manager stops the other ranks
            if os.getppid() != parent:
                if rank is not None:
                    from gdsl.dist.errors import report
                    report(rank, f"MPI's process manager on this node ({proxy}, pid {parent}) died; the ranks "
                           "it started were stopped", True, run_dir)
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="gdsl-launcher-watch", daemon=True).start()


def main() -> None:
    from gdsl.runtime import startup
    startup.hold()   # while it imports torch, mpi4py, numba (gdsl/runtime/startup.py)
    from gdsl.runtime.files import tolerant_stdout
    tolerant_stdout()   # rank 0's lines naming a file that is not UTF-8 (its stderr goes there too, marked)
    args = json.loads(sys.argv[1])
    code = run(args)
    startup.before_exit()
    sys.exit(code)


if __name__ == "__main__":
    main()
