"""What a `gdsl run` process costs before and after its training: one epoch
of gcn.gd on the embedded Cora, the whole process timed from outside, in one
run against a floor and a peer.

    python bench/startup.py           # 7 repetitions of each
    python bench/startup.py --quick   # 3 (-> bench/.cache/RESULTS-startup-quick.md)

Cases, each a fresh process, median wall time:
- `python -c "import torch"`: the floor every case pays;
- `gdsl run programs/gcn.gd --epochs 1`: the command (gdsl/runtime/startup.py
  holds Python's cyclic collector while it imports, freezes after, and
  freezes before exit);
- the same command through `gdsl.cli.main` with the collector untouched (what
  `gdsl run` did before 7a156e1): the ratio is what startup.py saves;
- `gdsl run --np 2 --epochs 1` (mpiexec, 2 ranks and the launcher), when
  mpiexec and mpi4py are there;
- PyG, when `torch_geometric` is importable: a script that loads the same
  cora.npz with numpy and trains one epoch of a two-layer GCNConv (16 hidden,
  Adam), the peer a user would otherwise run.
Writes bench/RESULTS-startup.md (the machine, medians, ratios to the command).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORA = ROOT / "gdsl" / "data" / "cora.npz"
RUN = ["run", "programs/gcn.gd", "--epochs", "1"]
UNTOUCHED = ("import sys; from gdsl import cli; cli._PROCESS['cap_memory'] = True; "
             "sys.exit(cli.main(sys.argv[1:]))")
PYG = f"""
import numpy as np, torch
from torch_geometric.nn import GCNConv
d = np.load({str(CORA)!r})
x = torch.from_numpy(d["features"]).float()
ei = torch.from_numpy(np.stack([d["src"], d["dst"]])).long()
y = torch.from_numpy(d["labels"]).long()
train = torch.from_numpy(d["train_mask"]).bool()
c1, c2 = GCNConv(x.shape[1], 16), GCNConv(16, int(y.max()) + 1)
opt = torch.optim.Adam([*c1.parameters(), *c2.parameters()], lr=0.01, weight_decay=5e-4)
out = c2(torch.relu(c1(x, ei)), ei)
loss = torch.nn.functional.cross_entropy(out[train], y[train])
loss.backward(); opt.step()
print(float(loss))
"""


def cases() -> dict[str, list[str]]:
    py = sys.executable
    out = {"import torch (floor)": [py, "-c", "import torch"],
           "gdsl run": [py, "-m", "gdsl", *RUN],
           "gdsl run, collector untouched": [py, "-c", UNTOUCHED, *RUN]}
    has_mpi = (Path(py).parent / "mpiexec").exists() or shutil.which("mpiexec")
    if has_mpi and subprocess.run([py, "-c", "import mpi4py"], capture_output=True).returncode == 0:
        out["gdsl run --np 2"] = [py, "-m", "gdsl", *RUN, "--np", "2"]
    if subprocess.run([py, "-c", "import torch_geometric"], capture_output=True).returncode == 0:
        out["PyG script, one epoch"] = [py, "-c", PYG]
    else:
        print("PyG not installed: skipped", file=sys.stderr)
    return out


def time_it(cmd: list[str], reps: int) -> dict:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])} ...: exit {r.returncode}\n{r.stderr[-2000:]}")
    return {"median_s": statistics.median(times), "min_s": min(times), "reps": reps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reps = 3 if a.quick else 7
    sys.path.insert(0, str(HERE))
    from run import machine_info
    todo = cases()
    results = {}
    for name, cmd in todo.items():
        time_it(cmd, 1)   # warm the file cache and numba's kernel cache
        results[name] = time_it(cmd, reps)
        print(f"{name}: {results[name]['median_s']:.2f} s", file=sys.stderr)
    base = results["gdsl run"]["median_s"]
    lines = ["# A `gdsl run` process: one epoch of gcn.gd on Cora, timed from outside", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python bench/startup.py{' --quick' if a.quick else ''}`: "
             f"each case a fresh process, {reps} repetitions after one warm-up, median wall time.", "",
             f"Machine: {json.dumps(machine_info())}; os.cpu_count() = {os.cpu_count()}; "
             f"python {platform.python_version()}. `--np 2` runs 3 processes (launcher and 2 ranks)"
             + (" on 2 cores (oversubscribed)." if (os.cpu_count() or 1) < 3 else "."), "",
             "| case | median (s) | min (s) | x `gdsl run` |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['median_s'] / base:.2f} |")
    ask = ("import torch; print('torch', torch.__version__)\n"
           "try:\n import torch_geometric as g; print('torch_geometric', g.__version__)\n"
           "except ImportError: print('torch_geometric not installed (PyG skipped)')")
    versions = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True).stdout.split("\n")
    lines += ["", "Versions: " + ", ".join(v for v in versions if v) + "."]
    from common import write_report
    write_report("startup", a.quick, lines)

if __name__ == "__main__":
    main()
