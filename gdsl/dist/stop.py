"""Stopping `gdsl run --np P` the way one process stops: Ctrl-C, SIGTERM or
SIGHUP keep what was trained.

One process stops between two steps and still writes its summary, `--json`
(with "interrupted") and `--save` (gdsl/cli.py). P ranks cannot stop where
each happens to be: one would wait in a collective for the others forever.
So the launcher asks, and the ranks agree on the epoch:

1. the launcher's first signal writes `stop` (the signal's number) into its
   run directory (`request`);
2. each rank looks for it at its epoch's loss all-reduce, which carries one
   more number, so all ranks learn of it in the same epoch (`Stop.seen`,
   gdsl/dist/run.py, `train_loop`); rank 0 answers with `stopping`
   (`acknowledge`);
3. the ranks finish that epoch (step, evaluation, `--checkpoint`), write the
   summary, `--json` and `--save`, and exit; the launcher returns 128 + the
   signal's number, as one process does.

Until the ranks have answered, the launcher waits a few epochs' time (rank 0
writes its last epoch's seconds as `epoch-seconds`, `heartbeat`), and then
two minutes and ten epochs' time for them to end the run: ranks that do not
answer or end in that time (a stopped or hung rank) are stopped at once, as
is every rank on a second signal (gdsl/dist/launch.py). Each rank also takes the first signal it receives itself as the same
request (`catch_signals`): a foreign launcher (mpiexec, srun), which has no
run directory, forwards the signal to every rank, and Slurm or systemd
signal every process of a job, ranks included.
"""
from __future__ import annotations

import os
import signal
import threading

from gdsl.runtime.signals import STOP_SIGNALS

STOP, STOPPING, HEARTBEAT = "stop", "stopping", "epoch-seconds"


def _write(path: str, text: str) -> None:
    """Atomically (the other side may read it at any moment)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---------------------------------------------------------------- the launcher's side

def request(run_dir: str, signum: int) -> None:
    try:
        _write(os.path.join(run_dir, STOP), str(int(signum)))
    except OSError:
        pass   # then no rank stops by itself: the launcher stops them when its wait ends


def acknowledged(run_dir: str) -> bool:
    return os.path.exists(os.path.join(run_dir, STOPPING))


def _epoch_seconds(run_dir: str) -> float | None:
    try:
        epoch = float(_read(os.path.join(run_dir, HEARTBEAT)) or "nan")
    except ValueError:
        return None
    return epoch if epoch == epoch else None


def answer_within(run_dir: str) -> float:
    """How long the ranks get to answer a stop: they look at the next loss
    all-reduce, at most an epoch away (and the first epoch also builds the
    kernels)."""
    epoch = _epoch_seconds(run_dir)
    return 30.0 if epoch is None else 3.0 + 3.0 * epoch


def finish_within(run_dir: str) -> float:
    """How long the ranks get, once they have answered, to end the run: the
    epoch, its checkpoint, --json and --save."""
    epoch = _epoch_seconds(run_dir)
    return 120.0 + 10.0 * (epoch or 0.0)


# ---------------------------------------------------------------- the ranks' side

_RECEIVED: list[int] = []   # the signals this process caught (the first one counts)
_CAUGHT: dict = {}   # signal -> the handler before catch_signals (set once per process)


def catch_signals() -> None:
    """For the rest of a rank's process: its first SIGINT, SIGTERM or SIGHUP
    asks for the stop after the current epoch (`Stop.seen`), and a second
    acts as it did before (Ctrl-C's KeyboardInterrupt, SIGTERM's and
    SIGHUP's default: the rank dies and MPI stops the others). Signals reach
    the ranks themselves from a foreign launcher (mpiexec, mpirun and srun
    forward SIGINT and SIGTERM to every rank; Slurm sends SIGTERM at the
    time limit, SIGKILL later) and, under gdsl's own launcher, from
    whatever signals a whole job (Slurm's scancel, systemd's stop of a
    cgroup): was, there, the ranks dying before they could see the
    launcher's request. Installed once, from the start of a rank's work to
    its exit (a signal while it finalises MPI is no traceback either); a
    no-op outside the main thread."""
    if _CAUGHT or threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        if not _RECEIVED:
            _RECEIVED.append(signum)
            return
        signal.signal(signum, _CAUGHT.get(signum, signal.SIG_DFL))   # the second: as it acted before
        os.kill(os.getpid(), signum)

    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) not in (signal.SIG_IGN, None):   # nohup's SIGHUP stays ignored
            _CAUGHT[sig] = signal.signal(sig, handler)


class Stop:
    """A rank's view of a stop request: the launcher's file in `run_dir`
    (gdsl's own launcher), or a signal the rank caught (`catch_signals`)."""

    def __init__(self, run_dir: str | None, rank: int) -> None:
        self.run_dir, self.rank = run_dir, rank
        self.epoch: int | None = None   # the epoch the ranks stopped after (set by train_loop)

    def seen(self) -> float:
        """1.0 when this rank was asked to stop, else 0.0 (summed over the ranks)."""
        return float(bool(_RECEIVED) or self.run_dir is not None
                     and os.path.exists(os.path.join(self.run_dir, STOP)))

    def acknowledge(self, epoch: int) -> None:
        self.epoch = epoch
        if self.rank == 0 and self.run_dir is not None:
            try:
                _write(os.path.join(self.run_dir, STOPPING), str(epoch))
            except OSError:
                pass

    def heartbeat(self, seconds: float) -> None:
        if self.rank == 0 and self.run_dir is not None:
            try:
                _write(os.path.join(self.run_dir, HEARTBEAT), repr(seconds))
            except OSError:
                pass

    @property
    def signum(self) -> int:
        """The launcher's signal, else this rank's (SIGINT when rank 0 knows neither)."""
        text = _read(os.path.join(self.run_dir, STOP)) if self.run_dir else None
        if text and text.isdigit():
            return int(text)
        return int(_RECEIVED[0]) if _RECEIVED else int(signal.SIGINT)

    def what(self) -> str:
        s = self.signum
        return "interrupted" if s == signal.SIGINT else f"terminated ({signal.Signals(s).name})"
