"""The Triton backend on a GPU against torch.sparse and PyG on the same GPU.

    python bench/gpu.py                         # CUDA GPU: RMAT 1M x degree 20, f = 128
    python bench/gpu.py --graph rmat20k         # any graph of bench/graphs.py
    TRITON_INTERPRET=1 python bench/gpu.py --smoke   # no GPU: a 256-vertex RMAT on the CPU,
                                                # every path once (checks this script, times nothing)

Writes ``bench/RESULTS-gpu.md`` and ``bench/RESULTS-gpu.json`` (``--smoke``:
under ``bench/.cache/``), with the device named.  What it does, in order:

1. **Machine.** The device (name, SMs, memory), torch / triton / PyG
   versions, and the GPU's *copy bandwidth*: a device-to-device
   ``Tensor.copy_`` of 1 GiB, bytes read plus bytes written over the best
   time of 10.
2. **Checks.** Before any timing, on the benchmark graph itself: gdsl's
   aggregations (sum, mean; row-parallel and balanced kernels) against
   ``torch.sparse`` CSR matmul, and gdsl's GAT layer (forward and the
   gradients of W, al, ar) against the same layer written in torch ops
   (index_add / scatter_reduce) from gdsl's own params.  The full
   equivalence suite is the test files, run on the GPU with the interpreter
   off: ``TRITON_INTERPRET=0 pytest tests/test_triton_kernels.py
   tests/test_triton_backend.py``.
3. **Timings** (CUDA events; one warm-up call, reported as ``first``, which
   includes Triton's compilation and autotuning; then the median of at
   least 10 repetitions):

   | op | gdsl | peers |
   |---|---|---|
   | ``copy_sum``, ``copy_mean`` | ``copy_sum.gd`` / ``copy_mean.gd`` forward, kernel choice auto, row-parallel, balanced | ``torch.sparse.mm`` (CSR), PyG ``MessagePassing`` on ``edge_index`` |
   | ``gat_layer`` | ``gat_layer.gd`` (fused GAT chain), forward + backward | PyG ``GATConv`` (4 heads x 32) |
   | ``gcn_epoch``, ``sage_epoch``, ``gat_epoch`` | a full-batch training step of ``gcn128.gd``, ``sage128.gd``, ``gat4x32.gd`` (forward, backward, Adam) | the PyG models of ``pyg_models.py`` |

   Aggregations also report *achieved bandwidth*: the bytes the op must move
   at least, ``4 f (E + N)`` (each edge's source row read once, each output
   row written once) plus the CSR's column indices and row pointers, over
   the median time, and that as a fraction of the copy bandwidth.  Rows
   gathered twice hit in L2 for skewed graphs, so a fraction near or above
   1 is possible on RMAT; on uniform graphs it is a fair roofline.

A peer that runs out of GPU memory is recorded as such (PyG's edge_index
paths materialise E x 128 tensors: about 11 GB each on RMAT 1M with self
loops).  Nothing here is asserted; tests/ checks correctness.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(HERE), str(ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)

import common
import graphs
import numpy as np

PROGRAMS = HERE / "programs"
GIB = 1 << 30
SMOKE_N, SMOKE_DEG = 256, 6
OPS = ("copy_sum", "copy_mean", "gat_layer", "gcn_epoch", "sage_epoch", "gat_epoch")


# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------

class Timer:
    """Wall time of fn() on the device: CUDA events on a GPU, perf_counter on
    the CPU (the interpreter, --smoke)."""

    def __init__(self, device):
        import torch
        self.torch, self.cuda = torch, device.type == "cuda"

    def once(self, fn) -> float:
        torch = self.torch
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    def measure(self, fn, reps: int, budget_s: float) -> dict:
        if self.cuda:
            self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if self.cuda:
            self.torch.cuda.synchronize()
        first = time.perf_counter() - t0
        times: list[float] = []
        while len(times) < reps or (sum(times) < budget_s and len(times) < 10 * reps):
            times.append(self.once(fn))
        return {"median_s": statistics.median(times), "min_s": min(times), "reps": len(times), "first_s": first}


def copy_bandwidth(device, nbytes: int, timer: Timer) -> dict:
    import torch
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    y = torch.empty_like(x)
    y.copy_(x)
    best = min(timer.once(lambda: y.copy_(x)) for _ in range(10))
    return {"bytes": nbytes, "best_s": best, "bytes_per_s": 2 * nbytes / best}


# --------------------------------------------------------------------------
# the graph, on the host and on the device
# --------------------------------------------------------------------------

def load_graph(name: str, smoke: bool):
    """{variant: (src, dst)} for raw, loops, sym_loops, and n."""
    if smoke:
        src, dst = graphs.rmat(SMOKE_N, SMOKE_DEG)
        n = SMOKE_N
        out = {"raw": (src, dst)}
        out["loops"] = graphs.add_self_loops(src, dst, n)
        out["sym_loops"] = graphs.add_self_loops(*graphs.symmetrize(src, dst, n), n)
        return out, n
    out, n = {}, graphs.ALL[name][1]
    for v in graphs.VARIANTS:
        s, d, n = graphs.load(name, v)
        out[v] = (s, d)
    return out, n


def csr_adj(src, dst, n, device, mean: bool = False):
    """A (dst x src) as a torch sparse CSR tensor on `device` (A @ X sums the
    in-neighbours' rows; with mean, each row scaled by 1 / in-degree)."""
    import torch
    order = np.lexsort((src, dst))
    cols = torch.from_numpy(src[order].astype(np.int64))
    counts = np.bincount(dst, minlength=n)
    ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    vals = torch.ones(cols.numel(), dtype=torch.float32)
    if mean:
        inv = torch.from_numpy(1.0 / np.maximum(counts, 1)).float()
        vals = inv.repeat_interleave(torch.from_numpy(counts))
    return torch.sparse_csr_tensor(ptr, cols, vals, (n, n)).to(device)


def agg_bytes(n: int, e: int, f: int) -> int:
    """The least an aggregation moves: each edge's source row read, each
    output row written (float32), the column indices (int32) and row
    pointers (int32)."""
    return 4 * f * (e + n) + 4 * e + 4 * (n + 1)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default="rmat1m", choices=sorted(graphs.ALL))
    ap.add_argument("--smoke", action="store_true",
                    help="a 256-vertex RMAT, every path once (with TRITON_INTERPRET=1 on a machine without a GPU)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None, help="report path (.md; the .json beside it)")
    a = ap.parse_args()
    ops = [o for o in a.ops.split(",") if o]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        ap.error(f"unknown ops {unknown}; known: {', '.join(OPS)}")
    if a.reps < 1:
        ap.error(f"--reps must be at least 1, got {a.reps}")
    out = Path(a.out) if a.out else (HERE / ".cache" / "RESULTS-gpu-smoke.md" if a.smoke else HERE / "RESULTS-gpu.md")
    common.check_out(ap, out)   # before measuring (was: a traceback after the run, its numbers lost)

    import torch
    warnings.filterwarnings("ignore")
    from gdsl.backends.triton import interpret_mode
    interp = interpret_mode()
    if not torch.cuda.is_available() and not interp:
        sys.exit("bench/gpu.py: no CUDA GPU here; run it where one is, or check the script with "
                 "TRITON_INTERPRET=1 python bench/gpu.py --smoke")
    if interp and not a.smoke:
        sys.exit("bench/gpu.py: TRITON_INTERPRET=1 times nothing meaningful: add --smoke")
    device = torch.device("cpu") if interp else torch.device("cuda")
    timer = Timer(device)
    reps = 1 if a.smoke else a.reps
    budget = 0.0 if a.smoke else 2.0

    import triton

    import gdsl
    from gdsl.backends.triton import ops as tops
    from gdsl.backends.triton.module import dropout_masks_setting
    from gdsl.runtime.trainer import make_optimizer

    res: dict = {"graph": "rmat256 (smoke)" if a.smoke else a.graph, "smoke": a.smoke,
                 "started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
                 "versions": {"torch": torch.__version__, "triton": triton.__version__,
                              "python": platform.python_version()},
                 "checks": [], "rows": [], "gdsl_dropout_masks": dropout_masks_setting()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        res["device"] = {"name": p.name, "sms": p.multi_processor_count, "memory_gib": round(p.total_memory / GIB, 1),
                         "cuda": torch.version.cuda, "capability": f"{p.major}.{p.minor}"}
    else:
        res["device"] = {"name": f"CPU under TRITON_INTERPRET=1 ({platform.processor() or platform.machine()})"}
    try:
        import torch_geometric
        from pyg_models import GAT, GCN, SAGE, Agg, GATConv
        res["versions"]["torch_geometric"] = torch_geometric.__version__
        have_pyg = True
    except ImportError as e:
        res["versions"]["torch_geometric"] = f"not importable: {e}"
        have_pyg = False
    res["copy"] = copy_bandwidth(device, (8 << 20) if a.smoke else GIB, timer)
    bw = res["copy"]["bytes_per_s"]
    print(f"device: {res['device']['name']}; copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)

    variants, n = load_graph(a.graph, a.smoke)
    f = common.F
    x_np, y_np, train_np = graphs.vertex_data(n)
    x = torch.from_numpy(x_np).to(device)
    y = torch.from_numpy(y_np).to(device)
    train = torch.from_numpy(train_np).to(device)
    res["n"], res["e"] = n, {v: int(s.size) for v, (s, _) in variants.items()}
    print(f"graph {res['graph']}: N = {n}, E = {res['e']}", flush=True)
    src_raw, dst_raw = variants["raw"]
    g = gdsl.Graph.from_edges(src_raw, dst_raw, n, features=torch.from_numpy(x_np),
                              labels=torch.from_numpy(y_np), train_mask=torch.from_numpy(train_np), name=res["graph"])

    def gdsl_module(prog_file: str):
        torch.manual_seed(0)
        prog = gdsl.compile(str(PROGRAMS / prog_file))
        m = prog.module(g, backend="triton")
        m.output_device = None   # keep outputs on the GPU (no copy back per call)
        return prog, m

    def row(op, who, t, **extra):
        r = {"op": op, "framework": who, **t, **extra}
        res["rows"].append(r)
        print(f"  {op:10s} {who:28s} median {t['median_s'] * 1e3:9.3f} ms  first {t['first_s']:7.2f} s"
              + "".join(f"  {k} {v}" for k, v in extra.items()), flush=True)

    def attempt(op, who, fn, **extra):
        try:
            row(op, who, timer.measure(fn, reps, budget), **extra)
        except torch.OutOfMemoryError as e:
            res["rows"].append({"op": op, "framework": who, "skipped": f"out of GPU memory: {str(e)[:120]}"})
            print(f"  {op:10s} {who:28s} out of GPU memory", flush=True)
            torch.cuda.empty_cache()

    def check(what, got, want, rtol=1e-4):
        err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        ok = err <= rtol
        res["checks"].append({"check": what, "max_rel_err": err, "ok": ok})
        print(f"check {what}: max |diff| / max |ref| = {err:.2e} {'ok' if ok else 'MISMATCH'}", flush=True)
        return ok

    def free() -> None:
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def bench_aggregation(op: str) -> None:
        mean = op == "copy_mean"
        A = csr_adj(src_raw, dst_raw, n, device, mean=mean)
        _, m = gdsl_module(f"{op}.gd")
        want = torch.sparse.mm(A, x)
        for mode in ("off", "on"):
            prev = tops.set_balance(mode)
            with torch.no_grad():
                check(f"{op} ({'balanced' if mode == 'on' else 'row-parallel'}) vs torch.sparse", m(), want)
            tops.set_balance(*prev)
        want = None
        nbytes = agg_bytes(n, int(src_raw.size), f)

        def bandwidth(t):
            return {"GB_per_s": round(nbytes / t["median_s"] / 1e9, 1),
                    "fraction_of_copy": round(nbytes / t["median_s"] / bw, 3)}

        for mode, who in (("auto", "gdsl-triton (auto)"), ("off", "gdsl-triton (row-parallel)"),
                          ("on", "gdsl-triton (balanced)")):
            prev = tops.set_balance(mode)
            with torch.no_grad():
                t = timer.measure(m, reps, budget)
            tops.set_balance(*prev)
            row(op, who, t, **bandwidth(t))
        t = timer.measure(lambda: torch.sparse.mm(A, x), reps, budget)
        row(op, "torch.sparse CSR", t, **bandwidth(t))
        A = m = None
        free()
        if have_pyg:
            agg = Agg("mean" if mean else "sum")
            ei = torch.stack([torch.from_numpy(src_raw), torch.from_numpy(dst_raw)]).to(device)
            with torch.no_grad():
                attempt(op, "pyg (edge_index)", lambda: agg(x, ei))

    def bench_gat_layer() -> None:
        s, d = variants["loops"]
        gout = torch.randn(n, common.HEADS, common.HEAD_DIM, generator=torch.Generator().manual_seed(1)).to(device)

        def gdsl_side():
            _, m = gdsl_module("gat_layer.gd")
            gat_check(m, x, s, d, n, gout, check)

            def fb():
                m.zero_grad(set_to_none=True)
                m().backward(gout)

            attempt("gat_layer", "gdsl-triton (fused chain)", fb)

        def pyg_side():
            conv = GATConv(f, common.HEAD_DIM, heads=common.HEADS, add_self_loops=False).to(device)
            ei = torch.stack([torch.from_numpy(s), torch.from_numpy(d)]).to(device)
            g2 = gout.reshape(n, -1)

            def fb():
                conv.zero_grad(set_to_none=True)
                conv(x, ei).backward(g2)

            attempt("gat_layer", "pyg GATConv", fb)

        gdsl_side()
        free()
        if have_pyg:
            pyg_side()

    # op: (gdsl program, PyG model, graph variant, PyG's Adam lr and weight decay as in the program)
    epoch_ops = {"gcn_epoch": ("gcn128.gd", "GCN", "sym_loops", (0.01, 5e-4)),
                 "sage_epoch": ("sage128.gd", "SAGE", "raw", (0.003, 0.0)),
                 "gat_epoch": ("gat4x32.gd", "GAT", "loops", (0.005, 5e-4))}

    def bench_epoch(op: str) -> None:
        prog_file, pyg_name, variant, (lr, wd) = epoch_ops[op]

        def gdsl_side():
            prog, m = gdsl_module(prog_file)
            opt = make_optimizer(prog.train.optimizer, prog.train.optimizer_args, m.parameters())

            def step():
                m.train()
                opt.zero_grad(set_to_none=True)
                m.loss(m()).backward()
                opt.step()

            attempt(op, "gdsl-triton", step)

        def pyg_side():
            torch.manual_seed(0)
            model = {"GCN": GCN, "SAGE": SAGE, "GAT": GAT}[pyg_name]().to(device)
            s, d = variants[variant]
            ei = torch.stack([torch.from_numpy(s), torch.from_numpy(d)]).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)

            def step():
                model.train()
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x, ei)[train], y[train]).backward()
                opt.step()

            attempt(op, "pyg", step)

        gdsl_side()
        free()
        if have_pyg:
            pyg_side()
            free()

    for op in ops:
        if op in ("copy_sum", "copy_mean"):
            bench_aggregation(op)
        elif op == "gat_layer":
            bench_gat_layer()
        elif op in epoch_ops:
            bench_epoch(op)
        free()

    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    out.write_text(report(res))
    print(f"wrote {out} and {out.with_suffix('.json').name}")
    if not all(c["ok"] for c in res["checks"]):
        sys.exit("bench/gpu.py: a check failed (see above); the timings are recorded but do not count")


def gat_check(m, x, src, dst, n, gout, check) -> None:
    """gdsl's GAT layer against the same layer in torch ops, from gdsl's
    params: z = X W; s = leaky_relu(<z_src, al> + <z_dst, ar>, 0.2); alpha =
    softmax of s over each destination's in-edges; out = sum alpha z_src + b."""
    import torch
    import torch.nn.functional as Fn
    ps = dict(m.named_parameters())
    W, al, ar, b = (next(v for k, v in ps.items() if k.endswith(suffix)) for suffix in (".W", ".al", ".ar", ".b"))
    m.zero_grad(set_to_none=True)
    out = m()
    out.backward(gout)
    got = [out.detach()] + [p.grad.detach().clone() for p in (W, al, ar)]
    s_t = torch.from_numpy(src).to(x.device)
    d_t = torch.from_numpy(dst).to(x.device)
    Wr, alr, arr, br = (p.detach().clone().requires_grad_(True) for p in (W, al, ar, b))
    z = torch.einsum("nf,fhd->nhd", x, Wr)
    el, er = (z * alr).sum(-1), (z * arr).sum(-1)
    sc = Fn.leaky_relu(el[s_t] + er[d_t], 0.2)
    mx = torch.full((n, sc.shape[1]), float("-inf"), device=x.device).scatter_reduce(
        0, d_t[:, None].expand_as(sc), sc, "amax")
    ex = torch.exp(sc - mx[d_t])
    den = torch.zeros(n, sc.shape[1], device=x.device).index_add(0, d_t, ex)
    alpha = ex / den[d_t]
    ref = torch.zeros_like(z).index_add(0, d_t, alpha[..., None] * z[s_t]) + br
    ref.backward(gout)
    want = [ref.detach(), Wr.grad, alr.grad, arr.grad]
    for what, g_, w_ in zip(("forward", "dW", "dal", "dar"), got, want):
        check(f"gat_layer {what} vs torch ops", g_, w_, rtol=1e-3)


def report(res: dict) -> str:
    d = res["device"]
    bw = res["copy"]["bytes_per_s"]
    lines = [f"# gdsl Triton backend on {d['name']}" + (" (smoke run: nothing here is a timing)" if res["smoke"] else ""),
             "",
             f"Generated by `python bench/gpu.py{' --smoke' if res['smoke'] else ''}` on {res['started']}.",
             "",
             f"- device: {d['name']}" + (f", {d['sms']} SMs, {d['memory_gib']} GiB, CUDA {d['cuda']}, "
                                         f"compute capability {d['capability']}" if "sms" in d else ""),
             "- versions: " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()),
             (f"- copy bandwidth (device-to-device copy of {res['copy']['bytes'] >> 20} MiB, read + write, "
              f"best of 10): {bw / 1e9:.0f} GB/s"),
             f"- graph {res['graph']}: N = {res['n']:,}, E = " + ", ".join(f"{v} {e:,}" for v, e in res["e"].items())
             + f"; f = {common.F}",
             (f"- gdsl's training steps draw their dropout masks: {res.get('gdsl_dropout_masks', 'reference')} "
              "(GDSL_TRITON_DROPOUT; `reference`: the CPU backends' masks, drawn on the host and copied over)"),
             "", "## Checks (before timing)", "", "| check | max rel. error | |", "|---|---|---|"]
    for c in res["checks"]:
        lines.append(f"| {c['check']} | {c['max_rel_err']:.1e} | {'ok' if c['ok'] else 'MISMATCH'} |")
    lines += ["", "## Timings", "",
              ("Median of the repetitions (CUDA events); `first`: the warm-up call, with compilation and "
               "autotuning. Ratio: the peer's median over gdsl's (above 1: gdsl is faster); for aggregations "
               "the peer is torch.sparse, else PyG."), "",
              "| op | framework | median | first | ratio | achieved bandwidth | of copy bw |",
              "|---|---|---|---|---|---|---|"]
    by_op: dict = {}
    for r in res["rows"]:
        by_op.setdefault(r["op"], []).append(r)
    for op, rows in by_op.items():
        peer = next((r for r in rows if r["framework"] in ("torch.sparse CSR", "pyg GATConv", "pyg")
                     and "median_s" in r), None)
        for r in rows:
            if "median_s" not in r:
                lines.append(f"| {op} | {r['framework']} | {r.get('skipped', '')} | | | | |")
                continue
            ratio = f"{peer['median_s'] / r['median_s']:.2f}" if peer and r["framework"].startswith("gdsl") else ""
            lines.append(f"| {op} | {r['framework']} | {r['median_s'] * 1e3:.3f} ms | {r['first_s']:.2f} s | {ratio} "
                         f"| {r.get('GB_per_s', '')}{' GB/s' if 'GB_per_s' in r else ''} "
                         f"| {r.get('fraction_of_copy', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
