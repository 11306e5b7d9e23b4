"""The machine's memory bandwidth (STREAM triad) and random row-gather rate.

    python bench/machine.py [--gather N:E ...] [--threads T]

- STREAM triad ``a = b + s * c`` on float64 arrays of 2**25 elements
  (256 MiB each, far beyond any cache), best of several; counted as STREAM
  counts it, 3 x 8 bytes per element (no write-allocate). Two versions: a
  Numba ``prange`` loop on all threads (the machine's bandwidth), and numpy
  (one thread, and two passes, so it moves 5 arrays while 3 are counted).
- Random row gather, for each ``N:E``: ``E`` rows picked uniformly at random
  from an ``N x 128`` float32 matrix, the size of an aggregation over a graph
  with N vertices and E edges. Counted bytes: ``E * 128 * 4`` (the rows
  read). Three versions: Numba ``prange`` on all threads, each thread
  copying rows into its own small (L2-sized) buffer, so only the reads reach
  memory (the bound a gather-based aggregation can reach); torch
  ``index_select`` in chunks of 2**16 rows into a reused buffer (reads and
  writes); numpy ``x[idx]`` in chunks (one thread).

Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

TRIAD_N = 1 << 25
F = 128


def best(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def median(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def numba_kernels():
    import numba
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def triad(a, b, c, s):
        for i in prange(a.size):
            a[i] = b[i] + s * c[i]

    @njit(parallel=True, cache=False)
    def gather(x, idx, bufs, block):
        nblocks = (idx.size + block - 1) // block
        f = x.shape[1]
        for k in prange(nblocks):
            t = numba.get_thread_id()
            lo = k * block
            hi = min(lo + block, idx.size)
            for i in range(lo, hi):
                r = idx[i]
                for j in range(f):
                    bufs[t, i - lo, j] = x[r, j]

    return triad, gather, numba.get_num_threads(), numba.__version__


def triad_rates(reps: int = 8) -> dict:
    rng = np.random.default_rng(0)
    b = rng.random(TRIAD_N)
    c = rng.random(TRIAD_N)
    a = np.empty_like(b)
    s = 3.0
    counted = 3 * 8 * TRIAD_N
    out = {"array_mib": TRIAD_N * 8 / 2**20}

    def np_triad():
        np.multiply(c, s, out=a)
        np.add(a, b, out=a)

    out["numpy_1thread_gbs"] = counted / best(np_triad, reps) / 1e9
    try:
        triad, _, threads, ver = numba_kernels()
        out["numba_gbs"] = counted / best(lambda: triad(a, b, c, s), reps) / 1e9
        out["numba_threads"], out["numba"] = threads, ver
    except ImportError as e:
        out["numba_error"] = str(e)
    out["gbs"] = out.get("numba_gbs", out["numpy_1thread_gbs"])
    return out


def gather_rates(n: int, e: int, reps: int = 5) -> dict:
    rng = np.random.default_rng([n, e])
    x = rng.standard_normal((n, F), dtype=np.float32)
    idx = rng.integers(0, n, e, dtype=np.int64)
    counted = e * F * 4
    res = {"n": n, "e": e, "bytes": counted}
    try:
        _, gather, threads, _ = numba_kernels()
        block = 2048  # 1 MiB per thread buffer
        bufs = np.empty((threads, block, F), np.float32)
        res["numba_s"] = median(lambda: gather(x, idx, bufs, block), reps)
        res["numba_gbs"] = counted / res["numba_s"] / 1e9
    except ImportError as ex:
        res["numba_error"] = str(ex)
    try:
        import torch

        xt, it = torch.from_numpy(x), torch.from_numpy(idx)
        chunk = 1 << 16
        buf = torch.empty(chunk, F)

        def tgather():
            for lo in range(0, e, chunk):
                sl = it[lo:lo + chunk]
                torch.index_select(xt, 0, sl, out=buf[: sl.numel()])

        res["torch_s"] = median(tgather, reps)
        res["torch_gbs"] = counted / res["torch_s"] / 1e9
        res["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    chunk = 1 << 16
    nbuf = np.empty((chunk, F), np.float32)

    def npgather():
        for lo in range(0, e, chunk):
            sl = idx[lo:lo + chunk]
            np.take(x, sl, axis=0, out=nbuf[: sl.size])

    res["numpy_s"] = median(npgather, max(2, reps // 2))
    res["numpy_gbs"] = counted / res["numpy_s"] / 1e9
    res["gbs"] = max(res.get("numba_gbs", 0.0), res.get("torch_gbs", 0.0), res["numpy_gbs"])
    res["s"] = counted / res["gbs"] / 1e9
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gather", nargs="*", default=["100000:2000000"], help="N:E pairs")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if a.threads < 1:
        ap.error(f"--threads must be at least 1, got {a.threads}")
    sizes = {}
    for spec in a.gather:   # checked before measuring (was: a ValueError traceback after the triad)
        try:
            sizes[spec] = n, e = tuple(int(v) for v in spec.split(":"))
        except ValueError:
            n = e = 0
        if n < 1 or e < 1:
            ap.error(f"--gather: {spec!r} is not N:E (two positive integers)")
    try:
        import torch
        torch.set_num_threads(a.threads)
    except ImportError:
        pass
    out = {"triad": triad_rates(), "gather": {}}
    for spec, (n, e) in sizes.items():
        out["gather"][spec] = gather_rates(n, e)
    print("@@" + json.dumps(out))


if __name__ == "__main__":
    main()
