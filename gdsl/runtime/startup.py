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
