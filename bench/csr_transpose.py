"""The reference backend's CSR backward with A^T kept (backends/reference/
linear.py `transposed`) against multiplying by the CSC view `a.t()` each
time (what it did before, and what torch's own sparse backward does).

    python bench/csr_transpose.py           # Cora and R-MAT N = 100k, degree 16, F = 128
    python bench/csr_transpose.py --quick   # Cora only (-> bench/.cache/RESULTS-csr-transpose-quick.md)

For gcn.gd and sage.gd on the reference backend: one training epoch
(forward, loss, backward, Adam; `gdsl.train`'s step, hoisting on), the
median of epochs 2..8, with the kept transpose and with `transposed`
replaced by `a.t()`. Writes bench/RESULTS-csr-transpose.md (machine,
versions, load, times, ratios). The MPI ranks' local products take the same
path (`gdsl run --np`); they are not timed here.
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
from gdsl.backends.reference import linear  # noqa: E402
from hoist import _epochs, _rmat_graph  # noqa: E402


def epoch(path: Path, g, kept: bool) -> float:
    real = linear.transposed
    if not kept:
        linear.transposed = lambda a: a.t()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = gdsl.compile(path)
            torch.manual_seed(0)
            m = prog.module(g, backend="reference", hoist=True)
        m.dropout_seed = 0
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _epochs(m, opt, lambda: m.loss(m()), 8)[1]
    finally:
        linear.transposed = real


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Cora only")
    ap.add_argument("--out", default=None, help="report path (default bench/RESULTS-csr-transpose.md; "
                                                "quick: bench/.cache/RESULTS-csr-transpose-quick.md)")
    args = ap.parse_args(argv)
    # quick: not tracked (was: it replaced the committed RESULTS-csr-transpose.md)
    args.out = args.out or str(HERE / (".cache/RESULTS-csr-transpose-quick.md" if args.quick
                                       else "RESULTS-csr-transpose.md"))
    common.check_out(ap, args.out)
    cases = [("cora", gdsl.load_graph("cora"))]
    if not args.quick:
        cases.append(("rmat100k-d16-f128", _rmat_graph(100_000, 16, 128)))
    load0 = os.getloadavg()[0]
    rows = ["| graph | program | a.t() each time ms | kept A^T ms | ratio |", "|---|---|---|---|---|"]
    for gname, g in cases:
        for prog in ("gcn.gd", "sage.gd"):
            old = epoch(ROOT / "programs" / prog, g, False)
            new = epoch(ROOT / "programs" / prog, g, True)
            rows.append(f"| {gname} | {prog} | {old * 1e3:.1f} | {new * 1e3:.1f} | {old / new:.2f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    load1 = os.getloadavg()[0]
    text = [f"# The CSR backward with A^T kept (`python bench/csr_transpose.py{' --quick' if args.quick else ''}`)", "",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; torch "
            f"{torch.__version__} ({torch.get_num_threads()} threads); load average {load0:.2f} at the start, "
            f"{load1:.2f} at the end.", "",
            "Reference backend, one training epoch (forward, loss, backward, Adam; hoisting on), median of "
            "epochs 2..8. Ratios above 1: keeping A^T is faster.", "", *rows]
    Path(args.out).write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
