"""Giving freed C-heap memory back to the operating system.

glibc's malloc serves a freed block of at least M_MMAP_THRESHOLD bytes with
its own mapping, returned to the system by free(); but each such free raises
the threshold to the block's size (up to 32 MiB), so later tensors of up to
that size come from the heap, and the heap keeps what they free resident.
Binding a program to a graph of a few million edges makes and drops a few
hundred MiB of such temporaries (the symmetric / self-loop edge lists and
their deduplication keys): measured on uniform100k (4.1M edges after the options), the
process kept 215 MiB of freed memory after `Graph.with_options` alone.
`malloc_trim(0)` hands the free pages back; other C libraries (musl, macOS)
have no such call and this is a no-op there.

Backends that keep freed buffers for reuse (the Numba backend's huge-page
output mappings) register a function with `on_release` that drops them: a
newly bound program starts with no buffers kept for an earlier one.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_TRIM: list = []
_DROPS: list = []


def on_release(drop) -> None:
    """Have `release_free_heap` call `drop()` first (a backend's kept buffers)."""
    if drop not in _DROPS:
        _DROPS.append(drop)


def release_free_heap() -> bool:
    """Drop the buffers backends keep for reuse, then return the C heap's free
    pages to the system; True if the C library has malloc_trim."""
    for drop in _DROPS:
        drop()
    if not _TRIM:
        fn = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
            fn = getattr(libc, "malloc_trim", None)
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        except OSError:
            fn = None
        _TRIM.append(fn)
    fn = _TRIM[0]
    if fn is None:
        return False
    fn(0)
    return True
