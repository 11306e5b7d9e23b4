"""Where a training step of the Triton backend spends its time on a GPU.

    python bench/gpu_profile.py --graph rmat20k --ops gcn_epoch,gat_epoch,copy_sum

Builds the same models as bench/gpu.py's ops (an epoch op: a training step;
copy_sum / copy_mean: the aggregation program's forward), runs a few
warm-up calls (compilation and autotuning) and then profiles `--steps` calls
with torch.profiler: prints the ops by host (CPU) time and by device time,
and the call's wall time without the profiler.  Where the device time per
call is far below the wall time, the host (Python, launches) is the limit.  A diagnosis tool: nothing is
written, nothing asserted.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

import graphs
import torch

EPOCHS = {"gcn_epoch": "gcn128.gd", "sage_epoch": "sage128.gd", "gat_epoch": "gat4x32.gd"}
AGGREGATIONS = {"copy_sum": "copy_sum.gd", "copy_mean": "copy_mean.gd"}


def step(m, opt) -> None:
    """One full-batch training step, as bench/gpu.py times it (opt None: a
    forward without autograd, as it times the aggregations)."""
    if opt is None:
        with torch.no_grad():
            m()
        return
    m.train()
    opt.zero_grad(set_to_none=True)
    m.loss(m()).backward()
    opt.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default="rmat20k", choices=sorted(graphs.ALL))
    ap.add_argument("--ops", default="gcn_epoch,gat_epoch")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    unknown = sorted(set(a.ops.split(",")) - set(EPOCHS) - set(AGGREGATIONS))
    if unknown:
        ap.error(f"unknown ops {unknown}; known: {', '.join([*EPOCHS, *AGGREGATIONS])}")
    if a.steps < 1 or a.rows < 1:   # (was: a ZeroDivisionError after the warm-up steps)
        ap.error(f"--steps and --rows must be at least 1, got {a.steps} and {a.rows}")

    from torch.profiler import ProfilerActivity, profile

    import gdsl
    from gdsl.runtime.trainer import make_optimizer

    warnings.filterwarnings("ignore")
    if not torch.cuda.is_available():
        sys.exit("bench/gpu_profile.py: needs a CUDA GPU")
    src, dst, n = graphs.load(a.graph, "raw")
    x, y, train = (torch.from_numpy(t) for t in graphs.vertex_data(n))
    g = gdsl.Graph.from_edges(src, dst, n, features=x, labels=y, train_mask=train, name=a.graph)
    for op in a.ops.split(","):
        torch.manual_seed(0)
        prog = gdsl.compile(str(HERE / "programs" / {**EPOCHS, **AGGREGATIONS}[op]))
        m = prog.module(g, backend="triton")
        m.output_device = None
        opt = make_optimizer(prog.train.optimizer, prog.train.optimizer_args, m.parameters()) \
            if op in EPOCHS else None

        for _ in range(3):
            step(m, opt)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step(m, opt)
        torch.cuda.synchronize()
        plain = (time.perf_counter() - t0) / a.steps
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(a.steps):
                step(m, opt)
            torch.cuda.synchronize()
        busy = sum(e.time_range.elapsed_us() for e in prof.events()   # kernels and copies, on the device
                   if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / a.steps
        print(f"\n===== {op} on {a.graph}: {plain * 1e3:.3f} ms per call (no profiler); "
              f"device busy {busy:.3f} ms per call")
        ka = prof.key_averages()
        print(ka.table(sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=60))
        print(ka.table(sort_by="self_device_time_total", row_limit=a.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
