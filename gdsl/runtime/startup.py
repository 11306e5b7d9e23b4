"""The cyclic garbage collector in gdsl's own processes (`gdsl`, an MPI rank).

Importing torch, sympy, numba and Lark creates about a million objects that
live to the end of the process. CPython's cyclic collector walks all of them
again at every full collection while they load, and once more at exit: about
0.2 s of start-up and 0.4-0.6 s of exit for each process, and a `gdsl run
--np P` starts P + 1 of them. So a gdsl process holds the collector while it
imports (`hold`), then freezes what exists (`release`: it is never walked
again, and it lives to the end anyway) and collects as usual from there on;
at exit it freezes what is left (`before_exit`): the interpreter frees it by
reference counts without walking it (the objects in cycles are left to the
operating system, as at any exit). A caller's own process (`gdsl.compile` in
a notebook, the tests) is not touched: only `gdsl.cli.entry` and the rank's
`main` call these."""
from __future__ import annotations

import gc

_held = [False]


def hold() -> None:
    """Stop the cyclic collector while the process imports."""
    if gc.isenabled():
        gc.disable()
        _held[0] = True


def release() -> None:
    """The imports are done: freeze what exists and collect from here on."""
    if _held[0]:
        _held[0] = False
        gc.freeze()
        gc.enable()


def before_exit() -> None:
    """Freeze what exists, so the interpreter's exit does not walk it."""
    gc.freeze()


def keep_status(code: int) -> None:
    """The command is done and `code` is its exit status: a signal that comes
    while the process exits no longer changes it. Was: a Ctrl-C in Python's
    exit (its atexit callbacks: torch's, concurrent.futures' thread joins)
    printed "Exception ignored in atexit callback" and a traceback; one in
    the interpreter's teardown killed the process by SIGINT (status -2)
    though `gdsl: interrupted` and exit 130 had been decided. Now SIGINT,
    SIGTERM and SIGHUP end the process at once with `code` (an exit that
    hangs can still be stopped), and SIGINT is ignored in the last part of
    the teardown, where Python gives its signals back to their default
    action (`ignore_sigint_at_teardown`, registered first, runs last)."""
    import os
    import signal
    import sys

    def at_once(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed pipe, a write it interrupted: what is lost is lost
                pass
        os._exit(code)

    for sig in (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()):
        if signal.getsignal(sig) in (signal.SIG_IGN, None):
            continue   # ignored (nohup, a background job), or set outside Python: left as it is
        signal.signal(sig, at_once)


def ignore_sigint_at_teardown() -> None:
    """Register (first: atexit runs its callbacks last-in first-out, so this
    one runs after all the others) a callback that ignores SIGINT: after the
    atexit callbacks the interpreter puts the signals Python handled back to
    their default action (a SIGINT then killed the process, status -2) and
    frees the modules (torch's take a while)."""
    import atexit
    import signal

    def ignore() -> None:
        if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    atexit.register(ignore)
