"""The reference backend's dropout (backends/reference/executor.py
`dropout`, `dropout_keep`) against how it applied the mask before df66304:
a bool mask `torch.rand(x.shape, generator) >= p` and `x * keep / (1 - p)`
(torch converts the bool mask to floats inside the product and allocates
a second tensor for the division). Now a float32 CPU input whose mask
autograd will not save gets the mask as 0/1 floats written over the draw,
and the scale is applied in place: the same numbers (tests/
test_executor_numerics.py checks it bit for bit).

    python bench/dropout_apply.py            # the ops and gcn.gd's epoch on Cora and CiteSeer
    python bench/dropout_apply.py --quick    # Cora only (-> bench/.cache/RESULTS-dropout-quick.md)

Times one dropout of the input features (the best of 30; the draw included,
which neither version changes: torch's CPU generator) and one reference training epoch of
gcn.gd (forward, loss, backward, Adam; hoisting on), the median of several,
on 1 thread and on all threads. Writes bench/RESULTS-dropout.md (machine,
versions, load, times, ratios).
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
from gdsl.backends.reference.executor import ReferenceModule  # noqa: E402
from hoist import _epochs  # noqa: E402
from machine import best  # noqa: E402


def _old_dropout(self, op, x):
    """The dropout before df66304 (a bool mask, the scale out of place)."""
    p = op.attrs["p"]
    if not self.training or p == 0.0 or not isinstance(x, torch.Tensor):
        return x
    keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(self.mask_seed(op))) >= p
    return x * keep / (1.0 - p)


def measure(g, old: bool) -> tuple[float, float]:
    """(one dropout of the features s, one gcn.gd epoch s) with the old or the current dropout."""
    real = ReferenceModule.dropout
    if old:
        ReferenceModule.dropout = _old_dropout
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = gdsl.compile(ROOT / "programs" / "gcn.gd")
            torch.manual_seed(0)
            m = prog.module(g, backend="reference", hoist=True)
        m.dropout_seed = 0
        x, p = g.features, 0.5
        # the op as each version computes it (the module's own call shares the module's allocator history:
        # Program.module returns free heap to the system, so its next calls take fresh pages)
        if old:
            one = best(lambda: x * (torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) >= p) / (1 - p), 30)
        else:
            one = best(lambda: (x * torch.rand(x.shape, generator=torch.Generator().manual_seed(1)).ge_(p)).div_(
                1 - p), 30)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = _epochs(m, opt, lambda: m.loss(m()), 12)[1]
        return one, ep
    finally:
        ReferenceModule.dropout = real


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Cora only")
    ap.add_argument("--out", default=None,
                    help="report path (default bench/RESULTS-dropout.md; quick: bench/.cache/RESULTS-dropout-quick.md)")
    args = ap.parse_args(argv)
    # quick: not tracked (was: it replaced the committed RESULTS-dropout.md)
    args.out = args.out or str(HERE / (".cache/RESULTS-dropout-quick.md" if args.quick else "RESULTS-dropout.md"))
    common.check_out(ap, args.out)
    names = ["cora"] if args.quick else ["cora", "citeseer"]
    load0 = os.getloadavg()[0]
    all_threads = torch.get_num_threads()
    rows = ["| graph | features | threads | dropout before ms | now ms | ratio | gcn.gd epoch before ms | now ms | ratio |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        g = gdsl.load_graph(name)
        for threads in sorted({1, all_threads}):
            torch.set_num_threads(threads)
            # three alternating rounds, the best of each (the order and the allocator's state move single runs)
            rounds = [(measure(g, True), measure(g, False)) for _ in range(3)]
            d0, e0 = (min(r[0][i] for r in rounds) for i in (0, 1))
            d1, e1 = (min(r[1][i] for r in rounds) for i in (0, 1))
            rows.append(f"| {name} | {g.features.shape[0]} x {g.features.shape[1]} | {threads} | {d0 * 1e3:.1f} | "
                        f"{d1 * 1e3:.1f} | {d0 / d1:.2f} | {e0 * 1e3:.1f} | {e1 * 1e3:.1f} | {e0 / e1:.2f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    torch.set_num_threads(all_threads)
    load1 = os.getloadavg()[0]
    text = [f"# Dropout applied without the bool-to-float copy (`python bench/dropout_apply.py"
            f"{' --quick' if args.quick else ''}`)", "",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; torch "
            f"{torch.__version__}; load average {load0:.2f} at the start, {load1:.2f} at the end.", "",
            "Reference backend. `dropout`: one dropout of the input features, p = 0.5, the uniform draw included "
            "(unchanged: torch's CPU generator), best of 30 (single calls swing 1.5-2x with the allocator's state); "
            "`epoch`: one gcn.gd training epoch (forward, loss, backward, "
            "Adam; hoisting on), median of epochs 2..12; each the best of three rounds run alternately. Before: a bool mask and `x * keep / (1 - p)`; now: 0/1 "
            "floats over the draw and the scale in place (the same numbers). Ratios above 1: now is faster.",
            "", *rows]
    Path(args.out).write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
