"""Giving freed C-heap memory back to the operating system; capping the
process's data size to the memory available (`cap_data_to_available`,
used by `gdsl run`).

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


def _meminfo_kib(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in keys:
                    out[k] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):   # absent, or "max" (cgroup v2: no limit)
        return None


def _cgroup_headroom() -> int | None:
    """Bytes left under this container's memory limit (cgroup v2, else v1),
    or None without a limit."""
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        lim, use = _read_int(limit), _read_int(usage)
        if lim is not None and use is not None and lim < 2 ** 60:   # v1 writes "no limit" as ~2**63
            return max(0, lim - use)
    return None


def cap_data_to_available(available: int | None = None) -> int | None:
    """Make this process's data limit (RLIMIT_DATA: heap and private
    writable mappings, where torch's and numpy's tensors live) what it uses
    now plus the memory available (`MemAvailable` + free swap, at most what
    a container's cgroup limit leaves): a shape too large for the machine
    then fails at its allocation, reported by `gdsl run` as `out of memory:
    torch could not allocate ...`, instead of filling the machine until the
    kernel's OOM killer ends this process (or another one) without a word. Lowers the soft limit only; returns it in
    bytes, or None where it is not set (not Linux, no /proc, already lower).
    `available` (bytes) replaces the measured amount (tests)."""
    try:
        import resource
    except ImportError:   # not POSIX
        return None
    mine = _meminfo_kib("/proc/self/status", ("VmData",)).get("VmData")
    if mine is None:
        return None
    if available is None:
        info = _meminfo_kib("/proc/meminfo", ("MemAvailable", "SwapFree"))
        if "MemAvailable" not in info:
            return None
        available = (info["MemAvailable"] + info.get("SwapFree", 0)) * 1024
        if (room := _cgroup_headroom()) is not None:   # a container's limit, which /proc/meminfo does not show
            available = min(available, room)
    cap = mine * 1024 + int(available)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    except (ValueError, OSError):
        return None
    return cap


def out_of_memory(e: RuntimeError) -> str | None:
    """torch's allocation failure (a shape too large for this machine: a huge
    hidden width or class count) in one line, or None for other errors."""
    import torch

    text = str(e)
    oom = getattr(torch, "OutOfMemoryError", ())   # (torch >= 2.5; the CUDA one before)
    if not (isinstance(e, oom) or "tried to allocate" in text or "DefaultCPUAllocator" in text):
        return None
    import re

    m = re.search(r"tried to allocate (\d+) bytes", text)
    what = f"a tensor of {int(m.group(1)) / 2**30:,.1f} GiB" if m else "a tensor"
    return f"torch could not allocate {what} (is a dim or a static argument far larger than meant?)"
