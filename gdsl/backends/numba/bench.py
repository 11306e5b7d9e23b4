"""Kernel timings of the Numba backend on a uniform random graph.

    python -m gdsl.backends.numba.bench [--nodes 100000] [--edges 2000000] [--feats 128]
        [--blocking]            # also time cache-blocked copy_src/mul sum at several block sizes

Prints compile (or cache-load) seconds per kernel apart from the median run
time of forward and backward, and the same ops in plain torch for reference.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def _median(fn, reps: int) -> float:
    """Median wall seconds of `reps` calls (the minimum is in _LAST_MIN)."""
    global _LAST_MIN
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    _LAST_MIN = min(ts)
    return statistics.median(ts)


_LAST_MIN = 0.0


def main(argv=None) -> None:
    import numba

    from gdsl.backends.numba import (
        COMPILE_FROM_CACHE,
        COMPILE_TIMES,
        CSRGraph,
        aggregate,
        gat_aggregate,
        ops,
    )

    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=2_000_000)
    p.add_argument("--feats", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--blocking", action="store_true")
    p.add_argument("--torch", action="store_true", help="also time plain-torch equivalents")
    a = p.parse_args(argv)
    N, E, F, H = a.nodes, a.edges, a.feats, a.heads
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, N, (E,), generator=gen)
    dst = torch.randint(0, N, (E,), generator=gen)
    t0 = time.perf_counter()
    g = CSRGraph.build(src, dst, N)
    print(f"graph N={N} E={E} F={F}; build {time.perf_counter() - t0:.3f}s; {g}; "
          f"numba threads {numba.get_num_threads()}, torch threads {torch.get_num_threads()}")
    x = torch.randn(N, F, generator=gen, requires_grad=True)
    w = torch.rand(E, generator=gen, requires_grad=True)
    D = F // H
    el = torch.randn(N, H, generator=gen, requires_grad=True)
    er = torch.randn(N, H, generator=gen, requires_grad=True)
    z = torch.randn(N, H, D, generator=gen, requires_grad=True)
    go = torch.randn(N, F, generator=gen)

    def case(name, fwd, grad_out):
        before = set(COMPILE_TIMES)
        out = fwd()                    # first call: compile (or cache load)
        out.backward(grad_out)
        comp = {k: v for k, v in COMPILE_TIMES.items() if k not in before}
        tf = _median(fwd, a.reps)
        tfm = _LAST_MIN
        out = fwd()
        tb = _median(lambda: out.backward(grad_out, retain_graph=True), a.reps)
        tbm = _LAST_MIN
        cs = ", ".join(f"{k} {v:.2f}s{' (disk cache)' if COMPILE_FROM_CACHE.get(k) else ''}" for k, v in comp.items())
        print(f"{name:28s} fwd {tf * 1e3:8.1f} ms (min {tfm * 1e3:7.1f})   bwd {tb * 1e3:8.1f} ms "
              f"(min {tbm * 1e3:7.1f})   compile: {cs or '-'}", flush=True)

    case("copy_src-sum", lambda: aggregate(g, x, None, "copy_src", "sum"), go)
    case("mul-sum (w [E])", lambda: aggregate(g, x, w, "mul", "sum"), go)
    case(f"gat_aggregate H={H} D={D}", lambda: gat_aggregate(g, el, er, z, 0.2), go.view(N, H, D))

    if a.torch:
        def t_copy():
            return torch.zeros(N, F).index_add_(0, dst, x[src])

        def t_mul():
            return torch.zeros(N, F).index_add_(0, dst, x[src] * w[:, None])
        case("torch index_add copy_src", t_copy, go)
        case("torch index_add mul", t_mul, go)

    if a.blocking:
        xd = x.detach()
        wd = w.detach()
        csr = g.in_csr
        auto = ops.block_size_for(csr, F * 4)
        print(f"cache model: LLC {ops._cache_bytes() / 2**20:.0f} MiB -> auto block {auto}")
        prev = ops.set_cache_blocking("off")
        for msg, ww in (("copy_src", None), ("mul", wd)):
            ops.set_cache_blocking("off")
            aggregate(g, xd, ww, msg, "sum")
            base = _median(lambda msg=msg, ww=ww: aggregate(g, xd, ww, msg, "sum"), a.reps)
            print(f"  {msg}-sum unblocked              {base * 1e3:8.1f} ms (min {_LAST_MIN * 1e3:7.1f})", flush=True)
            for B in sorted({2048, 4096, 8192, 16384, 32768, 50000, auto or N}):
                ops.set_cache_blocking("on", B)
                aggregate(g, xd, ww, msg, "sum")
                t = _median(lambda msg=msg, ww=ww: aggregate(g, xd, ww, msg, "sum"), a.reps)
                nb = -(-N // B)
                print(f"  {msg}-sum blocked B={B:6d} nB={nb:3d} {t * 1e3:8.1f} ms (min {_LAST_MIN * 1e3:7.1f})"
                      f"  ({base / t:.2f}x)", flush=True)
        ops.set_cache_blocking(*prev)


if __name__ == "__main__":
    main()
