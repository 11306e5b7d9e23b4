"""Training epochs with and without hoisting the values that are the same in
every epoch (passes/invariant.py; `prog.module(graph, hoist=...)`), against
PyG's SGConv with `cached=True` / `cached=False` when PyG is installed.

    python bench/hoist.py            # Cora, and R-MAT N = 100k, degree 16, F = 128
    python bench/hoist.py --quick    # Cora only (-> bench/.cache/RESULTS-hoist-quick.md)

For each program (programs/extra/sgc.gd: K = 3 propagations then one linear
layer; programs/extra/gin.gd; programs/sage.gd), backend (reference, numba)
and hoist (off, on) one training epoch is timed as `gdsl.train` runs it
(forward, masked cross-entropy, backward, Adam step), the median of the
epochs after the first; the first epoch is listed apart (with hoisting it
computes the kept values). Hoisting on and off run the same IR (both
modules bound with hoist=True, one then set `model.hoist = False`), so
"off" is the propagation recomputed each epoch in the order the hoisting
compile chose; `order by width` is the IR `prog.module(graph)` builds by
default, without hoisting. PyG's SGConv(K=3) + Adam is the peer for
sgc.gd. Writes bench/RESULTS-hoist.md (the machine, versions, load,
times and ratios).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import common  # noqa: E402
import gdsl  # noqa: E402
import graphs  # noqa: E402

PROGRAMS = ["extra/sgc.gd", "extra/gin.gd", "sage.gd"]


def _epochs(model, opt, loss_fn, n: int) -> tuple[float, float]:
    """(first epoch s, median of the rest s)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[1:])


def _gdsl(path: Path, g, backend: str, mode: str, n: int) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = gdsl.compile(path)
        torch.manual_seed(0)
        m = prog.module(g, backend=backend, hoist=mode != "width")
    m.hoist = mode == "on"
    m.dropout_seed = 0
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    return _epochs(m, opt, lambda: m.loss(m()), n)


def _pyg_sgc(g, cached: bool, n: int) -> tuple[float, float]:
    from torch_geometric.nn import SGConv
    from torch_geometric.utils import to_undirected
    ei = to_undirected(torch.stack([g.src, g.dst]), num_nodes=g.num_nodes)
    conv = SGConv(g.features.shape[1], int(g.labels.max()) + 1, K=3, cached=cached)
    opt = torch.optim.Adam(conv.parameters(), lr=0.01)
    x, y, mask = g.features, g.labels, g.masks["train"]
    return _epochs(conv, opt, lambda: torch.nn.functional.cross_entropy(conv(x, ei)[mask], y[mask]), n)


def _rmat_graph(n: int, deg: int, f: int) -> gdsl.Graph:
    src, dst = graphs.rmat(n, deg)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, f), dtype=np.float32)
    y = rng.integers(0, 8, n)
    train = np.zeros(n, bool)
    train[rng.choice(n, n // 10, replace=False)] = True
    return gdsl.Graph.from_edges(src, dst, n, features=x, labels=y, train_mask=train, val_mask=~train,
                                 test_mask=~train)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Cora only")
    ap.add_argument("--epochs", type=int, default=12, help="epochs per case, at least 2 (the first is listed apart)")
    ap.add_argument("--out", default=None,
                    help="report path (default bench/RESULTS-hoist.md; quick: bench/.cache/RESULTS-hoist-quick.md)")
    args = ap.parse_args(argv)
    if args.epochs < 2:
        ap.error(f"--epochs must be at least 2 (the median is of the epochs after the first), got {args.epochs}")
    # quick: not tracked (was: it replaced the committed RESULTS-hoist.md)
    args.out = args.out or str(HERE / (".cache/RESULTS-hoist-quick.md" if args.quick else "RESULTS-hoist.md"))
    common.check_out(ap, args.out)
    backends = ["reference"]
    try:
        import numba
        backends.append("numba")
    except ImportError:
        numba = None
    try:
        import torch_geometric
        pyg = torch_geometric.__version__
    except ImportError:
        pyg = None
    cases = [("cora", gdsl.load_graph("cora"))]
    if not args.quick:
        cases.append(("rmat100k-d16-f128", _rmat_graph(100_000, 16, 128)))
    rows = []
    load0 = os.getloadavg()[0]
    for gname, g in cases:
        for prog in PROGRAMS:
            for backend in backends:
                t = {mode: _gdsl(ROOT / "programs" / prog, g, backend, mode, args.epochs)
                     for mode in ("width", "off", "on")}
                rows.append((gname, prog, backend, t))
                print(gname, prog, backend, {k: f"{v[1] * 1e3:.1f} ms" for k, v in t.items()}, file=sys.stderr)
        if pyg:
            t = {"off": _pyg_sgc(g, False, args.epochs), "on": _pyg_sgc(g, True, args.epochs)}
            rows.append((gname, "PyG SGConv(K=3)", "torch", t))
    load1 = os.getloadavg()[0]
    lines = [
        "# Hoisting the values that are the same in every epoch "
        f"(`python bench/hoist.py{' --quick' if args.quick else ''}`)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads); "
        f"numba {numba.__version__ if numba else 'not installed'}; PyG {pyg or 'not installed'}; "
        f"load average {load0:.2f} at the start, {load1:.2f} at the end (other work on the machine "
        "slows every column alike only if it stays the same).",
        "",
        f"Median of epochs 2..{args.epochs} (first epoch apart), one training epoch: forward, loss, backward, Adam.",
        "`width`: the default module (`prog.module(graph)`: the order pass by width, nothing kept); "
        "`off`: the hoisting compile's IR with `model.hoist = False`; `on`: hoisted. "
        "For PyG: SGConv(K=3, cached=False / True).",
        "",
        "| graph | program | backend | width ms | off ms | on ms | width / on | off / on | first epoch on ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for gname, prog, backend, t in rows:
        w = t.get("width")
        lines.append(f"| {gname} | {prog} | {backend} | {w[1] * 1e3:.1f} | " if w else
                     f"| {gname} | {prog} | {backend} | - | ")
        lines[-1] += (f"{t['off'][1] * 1e3:.1f} | {t['on'][1] * 1e3:.1f} | "
                      f"{(w[1] / t['on'][1]) if w else float('nan'):.2f} | {t['off'][1] / t['on'][1]:.2f} | "
                      f"{t['on'][0] * 1e3:.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
