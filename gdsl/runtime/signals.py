"""SIGTERM and SIGHUP (what `timeout`, a batch scheduler and a closed
terminal send) stop a run the way Ctrl-C does: raised in the main thread as
`Terminated`, so the trainer ends the epoch loop, the run's summary and
--json are still written, and the exit status is 128 + the signal number.
Used by `gdsl run` in one process (gdsl/cli.py) and by the launcher of
`gdsl run --np P` (gdsl/dist/cli_run.py), which also stops the ranks."""
from __future__ import annotations

import contextlib
import signal
import threading


# what stops a run: Ctrl-C, `timeout` / a batch scheduler, a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


class Terminated(BaseException):
    """SIGTERM or SIGHUP to `gdsl run` (what `timeout` and a closed terminal
    send), raised in the main thread as SIGINT raises
    KeyboardInterrupt; a BaseException, so no `except Exception` keeps it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def stop_on_signals():
    """While a run goes on: SIGTERM and SIGHUP raise `Terminated`, SIGINT
    KeyboardInterrupt; only the first signal does, later ones are ignored
    while the run stops (the launcher stops its ranks and removes the
    temporary files)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum, frame):
        if fired:
            return
        fired.append(signum)
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    old = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            continue   # nohup's SIGHUP, a background job's SIGINT: stay ignored
        old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT, SIGTERM and SIGHUP over a block that must not stop
    halfway (the optimizer's step updates the params one at a time: Ctrl-C
    inside it left some params a step ahead of the others, saved by `--save`
    as "the params after epoch K"; helper-10). A signal that arrives is
    recorded, the handlers are put back, and it is raised again at the
    block's end, to the handler that was there (KeyboardInterrupt,
    `Terminated`, or the default action). Outside the main thread the
    block runs as it is (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for sig in STOP_SIGNALS:
        h = signal.getsignal(sig)
        if h in (signal.SIG_IGN, None):
            continue   # ignored (nohup), or set outside Python: left as it is
        old[sig] = signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    except BaseException:   # the block's own error (a diverged step) wins over a signal that came meanwhile
        _restore(old)
        raise
    _restore(old)
    if pending:
        signal.raise_signal(pending[0])


def _restore(handlers: dict) -> None:
    for sig, h in handlers.items():
        signal.signal(sig, h)
