"""SIGTERM and SIGHUP (what `timeout`, a batch scheduler and a closed
terminal send) stop a run the way Ctrl-C does: raised in the main thread as
`Terminated`, so the trainer ends the epoch loop, the run's summary and
--json are still written, and the exit status is 128 + the signal number.
Used by `gdsl run` in one process (gdsl/cli.py) and by the launcher of
`gdsl run --np P` (gdsl/dist/cli_run.py), which also stops the ranks.
A signal that comes while the process imports is raised when the import
ends (`raise_after_imports`)."""
from __future__ import annotations

import contextlib
import signal
import sys
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
            if _pending:   # the first one waits for an import to end: a second one stops it now
                raise_after_imports(_pending[0], frame)
            return
        fired.append(signum)
        raise_after_imports(KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum), frame)

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
    if _alarm:   # a signal waits for an import to end (raise_after_imports): it waits for the block too
        signal.setitimer(signal.ITIMER_REAL, 0)
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
        if _alarm:
            signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
        raise
    _restore(old)
    if _pending:
        if importing(sys._getframe()):   # the block was part of an import: the signal waits for its end
            signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
        else:
            exc = _pending[0]
            forget_pending()
            raise exc
    if pending:
        signal.raise_signal(pending[0])


def _restore(handlers: dict) -> None:
    for sig, h in handlers.items():
        signal.signal(sig, h)


# -- a signal while the process imports ------------------------------------------------------------
#
# Raised inside an import, KeyboardInterrupt reached code that does not expect it: numpy's C
# extension turned it into an ImportError ("IMPORTANT: PLEASE READ THIS FOR ADVICE ...": gdsl said
# "internal compiler error", exit 3), a pybind11 callback while torch's extension initialised ended
# the process with std::terminate (SIGABRT, status -6). So a stop signal that comes while the main
# thread imports waits for the import to end (torch's, the longest, takes about a second): a timer
# looks every 10 ms, and raises it once no import is on the stack. A second signal meanwhile raises
# at once (an import that hangs can still be stopped).

_pending: list[BaseException] = []
_alarm: list = []   # the SIGALRM handler to give back


def importing(frame) -> bool:
    """Whether the main thread, at `frame`, is inside an import (a module's
    code, or Python called by an extension module while it initialises)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def raise_after_imports(exc: BaseException, frame) -> None:
    """In a signal handler: raise `exc` now, or, while the main thread
    imports, once the import has ended. A second call while one waits
    raises the waiting one at once."""
    if _pending or not importing(frame) or not hasattr(signal, "setitimer"):
        exc = _pending[0] if _pending else exc
        forget_pending()
        raise exc
    _pending.append(exc)
    _alarm.append(signal.signal(signal.SIGALRM, _poll))
    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)


def _poll(signum, frame) -> None:
    if _pending and not importing(frame):
        exc = _pending[0]
        forget_pending()
        raise exc


def forget_pending() -> None:
    """Drop a signal that waits for an import (the process exits with the
    status it has), and stop the timer."""
    if _alarm:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, _alarm.pop())
    _pending.clear()


def interrupt_after_imports() -> None:
    """Ctrl-C in a `gdsl` process (gdsl/__main__.py): KeyboardInterrupt, as
    Python's own handler raises it, but after the import it comes in."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not ignored (a background job)
        signal.signal(signal.SIGINT, lambda signum, frame: raise_after_imports(KeyboardInterrupt(), frame))
