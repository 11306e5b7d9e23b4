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
is every rank on a second signal (gdsl/dist/launch.py). Under a foreign launcher (mpiexec,
srun) there is no run directory: the launcher forwards the signal to every
rank, and each rank takes its first as the same request (`Stop.catch_signals`).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

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

class Stop:
    """A rank's view of a stop request: the launcher's file in `run_dir`
    (gdsl's own launcher), or, under a foreign launcher (no `run_dir`), a
    signal the rank itself receives (`catch_signals`)."""

    def __init__(self, run_dir: str | None, rank: int) -> None:
        self.run_dir, self.rank = run_dir, rank
        self.epoch: int | None = None   # the epoch the ranks stopped after (set by train_loop)
        self.received: int | None = None   # a signal this rank caught (foreign launcher)

    def seen(self) -> float:
        """1.0 when this rank was asked to stop, else 0.0 (summed over the ranks)."""
        return float(self.received is not None or self.run_dir is not None
                     and os.path.exists(os.path.join(self.run_dir, STOP)))

    @contextlib.contextmanager
    def catch_signals(self):
        """Under a foreign launcher (mpiexec, mpirun, srun forward SIGINT and
        SIGTERM to every rank; Slurm sends SIGTERM at the time limit, then
        SIGKILL): the first SIGINT, SIGTERM or SIGHUP asks for the stop
        after this epoch, as gdsl's own launcher does; a second acts as
        before (Ctrl-C's KeyboardInterrupt, SIGTERM's default: MPI stops
        every rank)."""
        if self.run_dir is not None or threading.current_thread() is not threading.main_thread():
            yield
            return
        sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
        old = {}

        def handler(signum, frame):
            if self.received is None:
                self.received = signum
                return
            signal.signal(signum, old.get(signum, signal.SIG_DFL))   # the second: as it acted before
            os.kill(os.getpid(), signum)

        for sig in sigs:
            if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                old[sig] = signal.signal(sig, handler)
        try:
            yield
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

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
        """The launcher's signal, or this rank's (SIGINT when rank 0 cannot read it)."""
        if self.received is not None:
            return int(self.received)
        text = _read(os.path.join(self.run_dir, STOP)) if self.run_dir else None
        return int(text) if text and text.isdigit() else int(signal.SIGINT)

    def what(self) -> str:
        s = self.signum
        return "interrupted" if s == signal.SIGINT else f"terminated ({signal.Signals(s).name})"
