"""Max aggregation of `src.x`, forward + backward: gdsl's Numba kernels
against torch's scatter_reduce (the reference backend, and what PyG's
`scatter(reduce="max")` runs) and PyG's own call when installed, in one run.

    python bench/maxmin.py            # N = 200k, E = 2M (uniform), F = 64
    python bench/maxmin.py --quick    # N = 20k, E = 200k (-> bench/.cache/RESULTS-maxmin-quick.md)

gdsl's backends give each output element's gradient to the edges that tie
for it, split evenly (gdsl/backends/maxmin.py); the table lists each
framework's sum of the input gradient, so a different rule shows (PyG's
scatter starts from zeros, which torch's backward counts as one more tie
where a max is exactly 0: see executor.scatter_extremum). Writes
bench/RESULTS-maxmin.md (the machine, median times, ratios to gdsl numba,
peak RSS of each framework measured in its own process).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _case(framework: str, n: int, e: int, f: int) -> dict:
    """Runs in a child process: time one framework, report its peak RSS."""
    sys.path[:0] = [str(ROOT), str(HERE)]
    import resource

    import common
    import torch
    torch.manual_seed(0)
    src, dst = torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    x = torch.randn(n, f).relu_()   # after a relu: many ties at 0
    x.requires_grad_()
    g_out = torch.randn(n, f)
    if framework == "gdsl-numba":
        from gdsl.backends.numba.graph import CSRGraph
        from gdsl.backends.numba.ops import aggregate
        g = CSRGraph.build(src, dst, n)

        def fwd():
            return aggregate(g, x, None, "copy_src", "max", "dst")
    elif framework == "gdsl-reference":
        from gdsl.backends.reference.executor import scatter_extremum

        def fwd():
            return scatter_extremum(x.index_select(0, src), dst, n, "max")
    else:
        from torch_geometric.utils import scatter

        def fwd():
            return scatter(x.index_select(0, src), dst, 0, n, reduce="max")

    def step():
        x.grad = None
        fwd().backward(g_out)
    res = common.measure(step, min_reps=3, max_reps=10, budget_s=5.0)
    step()
    res["grad_sum"] = float(x.grad.double().sum())
    res["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    res["threads"] = torch.get_num_threads()
    res["versions"] = {"torch": torch.__version__}
    if framework == "gdsl-numba":
        import numba
        res["versions"]["numba"] = numba.__version__
    elif framework == "pyg":
        import torch_geometric
        res["versions"]["torch_geometric"] = torch_geometric.__version__
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    n, e, f = (20_000, 200_000, 64) if a.quick else (200_000, 2_000_000, 64)
    if a.case:
        print(json.dumps(_case(a.case, n, e, f)))
        return
    sys.path.insert(0, str(HERE))
    from run import machine_info
    frameworks = ["gdsl-numba", "gdsl-reference"]
    try:
        import torch_geometric  # noqa: F401
        frameworks.append("pyg")
    except ImportError:
        print("PyG not installed: skipped", file=sys.stderr)
    results = {}
    for fw in frameworks:
        r = subprocess.run([sys.executable, __file__, "--case", fw] + (["--quick"] if a.quick else []),
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            print(f"{fw}: failed\n{r.stderr[-2000:]}", file=sys.stderr)
            continue
        results[fw] = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{fw}: {results[fw]['median_s'] * 1e3:.1f} ms", file=sys.stderr)
    base = results.get("gdsl-numba")
    sums = {k: v["grad_sum"] for k, v in results.items()}
    run = (f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/maxmin.py{' --quick' if a.quick else ''}`: "
           f"uniform random graph, N = {n}, E = {e}, F = {f} float32, x = relu(randn) (ties at 0), "
           "each framework in its own process, median of the repetitions.")
    machine = (f"Machine: {json.dumps(machine_info())}; os.cpu_count() = {os.cpu_count()}; "
               f"python {platform.python_version()}.")
    header = ("| framework | median (ms) | min (ms) | first call (ms, with JIT) | x numba (time) | peak RSS (GiB) | "
              "threads |")
    lines = ["# Max aggregation of src.x, forward + backward", "", run, "", machine, "", header,
             "|---|---|---|---|---|---|---|"]
    for fw, r in results.items():
        ratio = f"{r['median_s'] / base['median_s']:.2f}" if base else "-"
        lines.append(f"| {fw} | {r['median_s'] * 1e3:.1f} | {r['min_s'] * 1e3:.1f} | {r['first_s'] * 1e3:.0f} | "
                     f"{ratio} | {r['peak_rss_gib']:.2f} | {r['threads']} |")
    versions = {} if "pyg" in frameworks else {"torch_geometric": "not installed (PyG skipped)"}
    for r in results.values():
        versions.update(r["versions"])
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    lines += ["", f"Sum of the input gradients (equal when the tie rule agrees): {json.dumps(sums)}", ""]
    from common import write_report
    write_report("maxmin", a.quick, lines)


if __name__ == "__main__":
    main()
