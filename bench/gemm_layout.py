"""The dense products of a transform with a narrow output, in the two
layouts gdsl/backends/gemm.py chooses between, and one training epoch of
programs whose last layer is such a product with the choice on and off.

    python bench/gemm_layout.py            # the grid, then Cora and R-MAT 100k epochs
    python bench/gemm_layout.py --quick    # a smaller grid, Cora only (-> bench/.cache/RESULTS-gemm-quick.md)

Grid: for x [n, din] and W [din, dout], the forward `x @ W` with W
row-major (gdsl's params) against W column-major (`x @ (W^T)^T`, W^T
contiguous: nn.Linear's layout), and W's gradient `x^T @ G` against
`(G^T @ x)^T`; the median of repeated runs. Epochs: `gdsl.train`'s step
(forward, loss, backward, Adam), hoisting on as `gdsl run` does, median of
epochs 2..12, with gemm.NARROW as shipped and with it 0 (never narrow).
Writes bench/RESULTS-gemm.md (machine, versions, load, times, ratios).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import common  # noqa: E402
import gdsl  # noqa: E402
from gdsl.backends import gemm  # noqa: E402
from hoist import _epochs, _rmat_graph  # noqa: E402
from machine import median  # noqa: E402


def _time(fn, reps: int = 9) -> float:
    return median(fn, reps) * 1e3


def grid(quick: bool) -> list[str]:
    rows = ["| n | din | dout | x @ W ms | x @ (W^T)^T ms | ratio | x^T G ms | (G^T x)^T ms | ratio | narrow |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    ns = [2708, 100_000] if quick else [2708, 20_000, 100_000]
    dins = [128, 1433] if quick else [16, 64, 128, 500, 1433]
    for n in ns:
        for din in dins:
            for dout in (2, 7, 8, 15, 16, 41, 64):
                torch.manual_seed(0)
                x, g, w = torch.randn(n, din), torch.randn(n, dout), torch.randn(din, dout)
                wt = w.t().contiguous()
                a, b = _time(lambda: x @ w), _time(lambda: x @ wt.t())
                c, d = _time(lambda: x.t() @ g), _time(lambda: (g.t() @ x).t())
                rows.append(f"| {n} | {din} | {dout} | {a:.2f} | {b:.2f} | {a / b:.2f} | {c:.2f} | {d:.2f} | "
                            f"{c / d:.2f} | {'yes' if gemm.narrow(n, din, dout) else 'no'} |")
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def epoch(path: Path, g, backend: str, on: bool) -> tuple[float, float, list]:
    """(first epoch s, median of the rest s, the [din, dout] of the products
    that took the column-major layout in one forward)."""
    saved, real = gemm.NARROW, gemm._colmajor
    taken: list = []
    gemm.NARROW = saved if on else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = gdsl.compile(path)
            torch.manual_seed(0)
            m = prog.module(g, backend=backend, hoist=True)
        m.dropout_seed = 0
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        gemm._colmajor = lambda w: taken.append(list(w.shape)) or real(w)
        m()
        gemm._colmajor = real
        return (*_epochs(m, opt, lambda: m.loss(m()), 12), taken)
    finally:
        gemm.NARROW, gemm._colmajor = saved, real


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a smaller grid, Cora only")
    ap.add_argument("--out", default=None,
                    help="report path (default bench/RESULTS-gemm.md; quick: bench/.cache/RESULTS-gemm-quick.md)")
    args = ap.parse_args(argv)
    # quick: not tracked (was: it replaced the committed RESULTS-gemm.md)
    args.out = args.out or str(HERE / (".cache/RESULTS-gemm-quick.md" if args.quick else "RESULTS-gemm.md"))
    common.check_out(ap, args.out)
    load0 = os.getloadavg()[0]
    lines = grid(args.quick)
    backends = ["reference"]
    try:
        import numba
        backends.append("numba")
    except ImportError:
        numba = None
    cases = [("cora", gdsl.load_graph("cora"))]
    if not args.quick:
        cases.append(("rmat100k-d16-f128", _rmat_graph(100_000, 16, 128)))
    ep = ["| graph | program | backend | narrow products | row-major ms | narrow layout ms | ratio |",
          "|---|---|---|---|---|---|---|"]
    for gname, g in cases:
        for prog in ("extra/sgc.gd", "extra/mlp.gd"):
            for backend in backends:
                off = epoch(ROOT / "programs" / prog, g, backend, False)[1]
                _, on, taken = epoch(ROOT / "programs" / prog, g, backend, True)
                shapes = ", ".join(f"{a} x {b}" for a, b in taken) or "none (the same code both times)"
                ep.append(f"| {gname} | {prog} | {backend} | {shapes} | {off * 1e3:.1f} | {on * 1e3:.1f} | "
                          f"{off / on:.2f} |")
                print(ep[-1], file=sys.stderr, flush=True)
    load1 = os.getloadavg()[0]
    text = [
        f"# Narrow dense products: row-major W against column-major W (`python bench/gemm_layout.py"
        f"{' --quick' if args.quick else ''}`)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads); "
        f"numba {numba.__version__ if numba else 'not installed'}; load average {load0:.2f} at the start, "
        f"{load1:.2f} at the end.",
        "",
        f"Rule (gdsl/backends/gemm.py): column-major when dout < {gemm.NARROW} and n * din >= {gemm.BIG}. "
        "Ratios above 1: the column-major layout is faster. Median of 9 runs.",
        "",
        *lines,
        "",
        "One training epoch (forward, loss, backward, Adam; hoisting on), median of epochs 2..12:",
        "",
        *ep,
    ]
    Path(args.out).write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
