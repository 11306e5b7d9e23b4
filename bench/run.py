"""Run every CPU benchmark in one go and write bench/RESULTS.md.

    python bench/run.py            # full sizes: uniform 100k x deg 20, RMAT 1M x deg 20
    python bench/run.py --quick    # 20k-vertex graphs, fewer repetitions (-> bench/.cache/RESULTS-quick.md)

Run it with the main environment's Python (gdsl's: torch, numpy, numba;
PyG when installed). It:

1. builds or reuses the graphs (bench/graphs.py, cached in bench/.cache/);
2. measures the machine: STREAM triad and a random row gather the size of
   each graph's aggregation (bench/machine.py);
3. creates or reuses DGL 2.1's own virtualenv, bench/.dgl-venv (DGL 2.1
   needs torch <= 2.2 and numpy < 2, so it cannot share the main one), and
   skips DGL with a message when that fails;
4. runs, per graph, one process per framework: gdsl `reference`, gdsl
   `numba` (skipped with a message while gdsl.api.BACKENDS lacks it), PyG
   (bench/peer_pyg.py) and DGL (bench/peer_dgl.py in its venv). A process
   that dies (the memory watchdog, a crash) has its op recorded as failed
   and is restarted for the ops after it;
5. writes the tables (and the raw numbers, RESULTS.json) next to this file.
"""
from __future__ import annotations

import argparse
import datetime as dt
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
sys.path.insert(0, str(HERE))

import common
import graphs

DGL_VENV = Path(os.environ.get("BENCH_DGL_VENV", HERE / ".dgl-venv"))
# How DGL 2.1's environment is made. PyPI's torch 2.2.1 for Linux is the
# CUDA build: it pulls the nvidia-* wheels (~2.7 GB) and needs them to import
# even on a CPU-only machine; it runs on the CPU here. The venv is ~5 GB.
DGL_INSTALL = [
    ["-m", "pip", "install", "--disable-pip-version-check", "-q",
     "torch==2.2.1", "numpy<2", "setuptools<70", "dgl==2.1.0", "torchdata==0.7.1",
     "pandas", "pyyaml", "pydantic", "psutil"],
]
FRAMEWORKS = ("gdsl-reference", "gdsl-numba", "pyg", "dgl")
# The order the processes run in: gdsl numba right before DGL, so that the
# ratio the report leads with is measured in adjacent windows of a machine
# whose load drifts.
RUN_ORDER = ("gdsl-reference", "pyg", "gdsl-numba", "dgl")
LABEL = {"gdsl-reference": "gdsl reference", "gdsl-numba": "gdsl numba", "pyg": "PyG", "dgl": "DGL 2.1"}
OP_LABEL = {
    "copy_sum": "aggregate copy_src + sum (f=128)",
    "copy_mean": "aggregate copy_src + mean (f=128)",
    "src_mul_edge_sum": "aggregate src * edge, sum (f=128)",
    "gat_layer": "GAT layer 128 -> 4x32, fwd + bwd",
    "gcn_epoch": "GCN epoch (2 layers, hidden 128)",
    "sage_epoch": "SAGE-mean epoch (2 layers, hidden 128)",
    "gat_epoch": "GAT epoch (4 heads x 32, 2 layers)",
}
AGG_OPS = ("copy_sum", "copy_mean", "src_mul_edge_sum")
# The DGL 2.1 figures quoted in the issue (seconds), for comparison.
ISSUE_TARGETS = {("uniform100k", "copy_sum"): 0.056, ("rmat1m", "copy_sum"): 0.52,
                 ("uniform100k", "gcn_epoch"): 0.27, ("rmat1m", "gcn_epoch"): 3.2,
                 ("uniform100k", "gat_epoch"): 1.5}


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- environment
def sh(cmd: list[str], **kw) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, **kw).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict:
    lscpu = {}
    for line in sh(["lscpu"]).splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    caches = {k: lscpu[k] for k in ("L1d cache", "L2 cache", "L3 cache") if k in lscpu}
    return {"cpu": lscpu.get("Model name", platform.processor()), "cpus": os.cpu_count(),
            "threads_per_core": lscpu.get("Thread(s) per core"), "hypervisor": lscpu.get("Hypervisor vendor"),
            "caches": caches, "memory": mem, "kernel": platform.release(), "python": platform.python_version()}


def cpu_pressure() -> str:
    try:
        return open("/proc/pressure/cpu").readline().strip()
    except OSError:
        return ""


def git_rev() -> str:
    rev = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = sh(["git", "-C", str(ROOT), "status", "--porcelain", "--", "gdsl"])
    return rev + (" + uncommitted changes under gdsl/" if dirty else "")


# ---- the DGL virtualenv
def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def dgl_python() -> tuple[str | None, str]:
    """The DGL venv's python (created if missing), or None and why not."""
    py = DGL_VENV / "bin" / "python"
    probe = ["-c", ("import os; os.environ['DGLBACKEND']='pytorch'; import dgl, torch, numpy; "
                    "print(dgl.__version__, torch.__version__, numpy.__version__)")]

    def works() -> str | None:
        if not py.exists():
            return None
        r = subprocess.run([str(py), *probe], capture_output=True, text=True, cwd="/tmp", check=False)
        return r.stdout.strip() if r.returncode == 0 else None

    v = works()
    if v:
        return str(py), f"reused {_rel(DGL_VENV)} ({v})"
    say(f"creating DGL 2.1's virtualenv in {DGL_VENV} (torch 2.2.1 + CUDA wheels from PyPI: ~2.7 GB, minutes)")
    base = shutil.which("python3.11") or shutil.which("python3") or sys.executable
    try:
        if DGL_VENV.exists():
            shutil.rmtree(DGL_VENV)
        subprocess.run([base, "-m", "venv", str(DGL_VENV)], check=True)
        for args in DGL_INSTALL:
            subprocess.run([str(py), *args], check=True, timeout=3600)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not create the DGL virtualenv: {e}"
    v = works()
    return (str(py), f"created {_rel(DGL_VENV)} ({v})") if v else (None, "the DGL virtualenv does not import dgl")


# ---- running one framework on one graph
def run_peer(python: str, script: str, graph: str, framework: str, ops: list[str], args, timeout: float) -> list[dict]:
    """Run a peer script for `ops`; restart after a death for the ops left.
    Returns every JSON row it emitted, plus an error row per op it died on."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               NUMBA_NUM_THREADS=str(args.threads), DGLBACKEND="pytorch", PYTHONUNBUFFERED="1")
    rows: list[dict] = []
    left = list(ops)
    while left:
        cmd = [python, str(HERE / script), "--graph", graph, "--framework", framework, "--ops", ",".join(left),
               "--cap-gib", str(args.cap_gib), "--threads", str(args.threads)] + (["--quick"] if args.quick else [])
        t0 = time.perf_counter()
        out, err, rc = _run_streaming(cmd, env, timeout)
        got = [json.loads(line[2:]) for line in out.splitlines() if line.startswith("@@")]
        rows.extend(got)
        done = {r["op"] for r in got if r.get("op")}
        if any("unavailable" in r for r in got):
            return rows
        left = [o for o in left if o not in done]
        if rc == 0 and not left:
            break
        if not left:
            break
        if rc == 75:
            continue  # the watchdog reported the op it stopped; go on with the rest
        dead = left.pop(0)
        tail = "\n".join((err or "").strip().splitlines()[-6:])
        why = ("killed (SIGKILL: out of memory?)" if rc == -9 else f"exit status {rc}")
        rows.append({"framework": framework, "graph": graph, "op": dead,
                     "error": f"the process died during this op: {why}"})
        say(f"{framework} {graph}: died during {dead} ({why}, {time.perf_counter() - t0:.0f} s); "
            f"stderr tail:\n{tail}")
    return rows


def _run_streaming(cmd: list[str], env: dict, timeout: float) -> tuple[str, str, object]:
    """Run `cmd`; echo its progress lines (stderr lines starting with two
    spaces) as they come; return (stdout, stderr, exit status or 'timeout')."""
    import threading

    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(HERE))
    out: list[str] = []
    err: list[str] = []

    def pump(stream, sink, echo):
        for line in stream:
            sink.append(line)
            if echo and line.startswith("  "):
                print(line.rstrip("\n"), flush=True)

    threads = [threading.Thread(target=pump, args=(p.stdout, out, False), daemon=True),
               threading.Thread(target=pump, args=(p.stderr, err, True), daemon=True)]
    for t in threads:
        t.start()
    try:
        rc: object = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = "timeout"
    for t in threads:
        t.join(timeout=10)
    return "".join(out), "".join(err) + (f"\ntimed out after {timeout:.0f} s" if rc == "timeout" else ""), rc


# ---- the report
def fmt_t(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def cell(r: dict | None) -> str:
    if r is None:
        return "—"
    if "median_s" in r:
        extra = " (adj_t)" if r.get("mode") == "adj_t" else ""
        return fmt_t(r["median_s"]) + extra
    if "skipped" in r:
        return "skipped¹"
    if "error" in r:
        return "failed²"
    return "—"


def ratio(r: dict | None, base: dict | None) -> str:
    if not r or not base or "median_s" not in r or "median_s" not in base:
        return "—"
    return f"{r['median_s'] / base['median_s']:.2f}×"


def write_report(path: Path, res: dict) -> None:
    m, mach = res["machine"], res["bandwidth"]
    tri = mach.get("triad", {})
    L = []
    L.append("# CPU benchmark results" + (" (quick: small graphs, few repetitions)" if res["quick"] else ""))
    L.append("")
    L.append(f"Written by `python bench/run.py{' --quick' if res['quick'] else ''}` on {res['date']} "
             f"(wall time {res['wall_s'] / 60:.1f} min). gdsl at {res['gdsl_rev']}.")
    L.append("")
    load, threads = res.get("mean_load"), res["threads"]
    # the bench's own process keeps `threads` runnable: a load above that is other work
    known = load is not None and load == load   # nan: no measurement ran
    busy = not known or load > threads + 0.5
    L.append(f"**All timings were taken on a {m['cpus']}-core VM** ({m['cpu']}, {m['memory']} memory, "
             f"{m.get('hypervisor') or 'no'} hypervisor), every framework with {threads} threads. "
             + ("No measurement ran, so no load was recorded." if not known else
                "The machine was shared with other work while this ran (CPU pressure and load below), so times "
                "carry noise; compare within a run, and see the CPU-time tables: where CPU time is close to wall "
                "time, the process got about one core's worth of the two."
                if busy else
                f"The mean load during the measurements ({load:.1f}) was no more than the bench's own {threads} "
                "threads: no other work of note ran. A VM's neighbours still add noise; compare within a run."))
    L.append("")
    L.append("## Machine and versions")
    L.append("")
    L.append(f"- CPU: {m['cpu']}, {m['cpus']} logical CPUs ({m['threads_per_core']} thread per core), caches "
             + ", ".join(f"{k} {v}" for k, v in m["caches"].items()))
    L.append(f"- Memory: {m['memory']}; kernel {m['kernel']}")
    L.append(f"- CPU pressure (/proc/pressure/cpu, `some`): at start `{res['pressure'][0]}`; at end `{res['pressure'][1]}`; "
             + (f"mean 1-min load average during the measurements {load:.1f} on {m['cpus']} CPUs"
                if known else "no measurement ran, so no load average"))
    L.append(f"- STREAM triad: **{tri.get('gbs', float('nan')):.1f} GB/s** (best of: Numba prange on "
             f"{tri.get('numba_threads', '?')} threads {tri.get('numba_gbs', float('nan')):.1f} GB/s; numpy, one thread, "
             f"{tri.get('numpy_1thread_gbs', float('nan')):.1f} GB/s), arrays of {tri.get('array_mib', 0):.0f} MiB")
    for g, gr in mach.get("gather", {}).items():
        L.append(f"- Random row gather, {g} (N:E, rows of 128 float32): **{gr['gbs']:.2f} GB/s** = {fmt_t(gr['s'])} "
                 f"for E rows (Numba {gr.get('numba_gbs', float('nan')):.2f}, torch index_select "
                 f"{gr.get('torch_gbs', float('nan')):.2f}, numpy {gr.get('numpy_gbs', float('nan')):.2f} GB/s)")
    v = res["versions"]
    L.append(f"- Main environment: Python {m['python']}, " + ", ".join(f"{k} {val}" for k, val in v["main"].items()))
    L.append(f"- DGL environment: {v.get('dgl_env', 'not available')}")
    L.append("")
    L.append("Setup: graphs from `bench/graphs.py` (deterministic; cached). The aggregations run on the graph as "
             "generated; the GAT layer and GAT epoch on it with one self loop per vertex (gat.gd's `self_loops`); "
             "the GCN epoch on it symmetrised plus self loops (gcn.gd's `symmetric, self_loops`); SAGE on it as "
             "generated. Every framework gets the same edge arrays. Features N x 128 standard normal, 16 classes, "
             "loss on a random half of the vertices. An epoch is forward + backward + Adam step (no evaluation "
             "pass), dropout as in the .gd programs (bench/programs/). Times are medians after one warm-up call "
             "(`first_s` in RESULTS.json has that call, which includes lazy setup and JIT compilation).")
    L.append("")
    L.append("In the tables, `X / DGL` is X's time over DGL's (below 1: faster than DGL), and `gdsl numba / gdsl "
             "reference` the generated kernels' time over plain torch's, both measured in this run. `(adj_t)`: PyG on a "
             "sparse CSR adjacency instead of `edge_index` (see Notes). The issue's DGL figures are quoted for "
             "comparison with the DGL times measured here.")
    L.append("")
    L.append("The Triton backend on a GPU (against torch.sparse and PyG, with the device named) is benchmarked by `bench/gpu.py`: `RESULTS-gpu.md`.")
    L.append("")
    for g, ginfo in res["graphs"].items():
        L.append(f"## {g}: {ginfo['kind']}, N = {ginfo['n']:,}, E = {ginfo['e_raw']:,} "
                 f"(with self loops {ginfo['e_loops']:,}; symmetric + self loops {ginfo['e_sym_loops']:,})")
        L.append("")
        L.append(f"Max in-degree {ginfo.get('max_in_degree', '?'):,}, vertices without in-edges "
                 f"{ginfo.get('zero_in_degree', '?'):,}.")
        L.append("")
        rows = res["rows"].get(g, {})
        fws = [f for f in FRAMEWORKS]
        # (numba / reference: a ratio measured in the same run even where no peer ran)
        head = "| op | " + " | ".join(LABEL[f] for f in fws) + " | " + \
               " | ".join(f"{LABEL[f]} / DGL" for f in fws if f != "dgl") + \
               " | gdsl numba / gdsl reference | issue's DGL figure |"
        L.append(head)
        L.append("|" + "---|" * (1 + len(fws) + len(fws) - 1 + 2))
        for op in common.OPS:
            base = rows.get("dgl", {}).get(op)
            cells = [cell(rows.get(f, {}).get(op)) for f in fws]
            ratios = [ratio(rows.get(f, {}).get(op), base) for f in fws if f != "dgl"]
            ratios.append(ratio(rows.get("gdsl-numba", {}).get(op), rows.get("gdsl-reference", {}).get(op)))
            tgt = ISSUE_TARGETS.get((g, op))
            L.append(f"| {OP_LABEL[op]} | " + " | ".join(cells) + " | " + " | ".join(ratios) +
                     f" | {fmt_t(tgt) if tgt else ''} |")
        L.append("")
        gr = mach.get("gather", {}).get(f"{ginfo['n']}:{ginfo['e_raw']}")
        if gr:
            L.append(f"Aggregations as a fraction of the random-gather rate ({gr['gbs']:.2f} GB/s: E rows of 128 "
                     f"float32 in {fmt_t(gr['s'])}); 1.0 = as fast as gathering the E source rows alone. The gather picks "
                     "rows uniformly at random; above 1, a kernel gains from cache reuse (hot rows of the RMAT "
                     "graph, or a feature matrix that partly fits the L3 cache):")
            L.append("")
            L.append("| op | " + " | ".join(LABEL[f] for f in fws) + " |")
            L.append("|" + "---|" * (1 + len(fws)))
            for op in AGG_OPS:
                cs = []
                for f in fws:
                    r = rows.get(f, {}).get(op)
                    cs.append(f"{gr['s'] / r['median_s']:.2f}" if r and "median_s" in r else "—")
                L.append(f"| {OP_LABEL[op]} | " + " | ".join(cs) + " |")
            L.append("")
        L.append("CPU time per call (user + system, all threads; median), less sensitive than wall time to other "
                 f"work on the machine: with {res['threads']} threads fully busy it is {res['threads']}x the wall time:")
        L.append("")
        L.append("| op | " + " | ".join(LABEL[f] for f in fws) + " |")
        L.append("|" + "---|" * (1 + len(fws)))
        for op in common.OPS:
            cs = []
            for f in fws:
                r = rows.get(f, {}).get(op)
                cs.append(fmt_t(r["cpu_median_s"]) if r and "cpu_median_s" in r else "—")
            L.append(f"| {OP_LABEL[op]} | " + " | ".join(cs) + " |")
        L.append("")
        firsts = [(op, r["first_s"], r["median_s"]) for op, r in rows.get("gdsl-numba", {}).items() if "first_s" in r]
        if firsts:
            L.append("gdsl numba, first call (the warm-up: JIT compilation, or a kernel cache hit) against the median: "
                     + "; ".join(f"{op} {fmt_t(a)} / {fmt_t(b)}" for op, a, b in firsts) + ".")
            L.append("")
        L.append("Peak resident memory of the process during each op's calls (GiB; includes the graph and features; read before the result check, see bench/README.md):")
        L.append("")
        L.append("| op | " + " | ".join(LABEL[f] for f in fws) + " |")
        L.append("|" + "---|" * (1 + len(fws)))
        for op in common.OPS:
            cs = []
            for f in fws:
                r = rows.get(f, {}).get(op)
                cs.append(f"{r['peak_rss_gib']:.2f}" if r and "peak_rss_gib" in r else "—")
            L.append(f"| {OP_LABEL[op]} | " + " | ".join(cs) + " |")
        L.append("")
    prev = res.get("previous")
    if prev and prev.get("ratios"):
        L.append(f"## gdsl numba / DGL: this run against the previous report ({prev.get('date')}, gdsl at "
                 f"{prev.get('gdsl_rev')})")
        L.append("")
        L.append("Ratios of medians measured in each run (below 1: faster than DGL); both runs on this shared "
                 "2-core VM, so each ratio carries the noise of its run.")
        L.append("")
        L.append("| graph | op | previous | this run |")
        L.append("|---|---|---|---|")
        for g, per in res["rows"].items():
            nb, d = per.get("gdsl-numba", {}), per.get("dgl", {})
            for op in common.OPS:
                now = (nb[op]["median_s"] / d[op]["median_s"]) if ("median_s" in nb.get(op, {})
                                                                   and "median_s" in d.get(op, {})) else None
                before = prev["ratios"].get(g, {}).get(op)
                if now is None and before is None:
                    continue
                L.append(f"| {g} | {OP_LABEL[op]} | {f'{before:.2f}×' if before else '—'} | "
                         f"{f'{now:.2f}×' if now else '—'} |")
        L.append("")
    fusion = res.get("fusion")
    if fusion:
        L.append("## Fused UPDATE (DistGNN-MB §3.3): measured fused against unfused")
        L.append("")
        L.append("`bench/fused_update.py`, per graph, each pair interleaved, median wall time per call (CPU time, "
                 "all threads, in parentheses). Kept: what `NumbaModule` runs.")
        L.append("")
        L.append("| graph | what | unfused | fused | fused / unfused | kept |")
        L.append("|---|---|---|---|---|---|")
        kept = {"epilogue": "yes", "scale": "yes", "bias": "no", "gemm": "no", "wperm": "yes", "head_dot": "yes",
                "linear": "yes"}
        for g, exps in fusion.items():
            for e in exps:
                a, b = e["order"]
                ra, rb = e[a], e[b]
                L.append(f"| {g} | {e['what']} | {a}: {fmt_t(ra['median_s'])} ({fmt_t(ra['cpu_median_s'])}) | "
                         f"{b}: {fmt_t(rb['median_s'])} ({fmt_t(rb['cpu_median_s'])}) | "
                         f"{rb['median_s'] / ra['median_s']:.2f} | {kept.get(e['exp'], '')} |")
        L.append("")
        L.append("The bias row is an upper bound: a bias folded into the aggregation's epilogue would save at most "
                 "the add's forward pass (its backward, the gradient summed over rows, stays); where that is a "
                 "few percent of the aggregation it is not worth a kernel variant, and the bias add stays on "
                 "torch (or in the layer epilogue, when an activation or dropout follows it). The GEMM row: "
                 "one Numba kernel that multiplies each aggregated row by W while it is in cache, against the "
                 "aggregation kernel plus torch's GEMM (MKL); the aggregated rows are written either way (the "
                 "backward needs them for dW).")
        L.append("")
    notes = res.get("notes", [])
    L.append("## Notes")
    L.append("")
    L.append("¹ skipped, ² failed — the reasons, per graph and framework:")
    L.append("")
    for g, per in res["rows"].items():
        for f, ops in per.items():
            for op, r in ops.items():
                if "skipped" in r or "error" in r:
                    L.append(f"- {g} / {LABEL[f]} / {op}: {r.get('skipped') or r.get('error')}")
    adj = sorted({f"{g} / {op}" for g, per in res["rows"].items() for op, r in per.get("pyg", {}).items()
                  if r.get("mode") == "adj_t"})
    if adj:
        L.append("- (adj_t): PyG's default `edge_index` path materialises E x 128 message tensors that would pass "
                 "the memory cap here, so these ran on a sparse CSR `adj_t` (PyG's spmm path, torch.sparse): "
                 + ", ".join(adj) + ".")
    for n in notes:
        L.append(f"- {n}")
    L.append("")
    path.write_text("\n".join(L) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k-vertex graphs, fewer repetitions")
    ap.add_argument("--graphs", default=None, help="comma-separated graph names (see graphs.py)")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--ops", default=",".join(common.OPS))
    ap.add_argument("--no-dgl-install", action="store_true", help="use bench/.dgl-venv only if it already works")
    ap.add_argument("--cap-gib", type=float, default=14.0, help="memory cap per measuring process")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=1800, help="per framework and graph, seconds")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from its .json, measuring nothing")
    ap.add_argument("--no-fusion", action="store_true", help="skip the fused UPDATE measurements (fused_update.py)")
    ap.add_argument("--previous", default=None,
                    help="a RESULTS.json to compare gdsl numba / DGL against (default: the report being replaced)")
    ap.add_argument("--out", default=None, help="report path (default bench/RESULTS.md; quick: bench/.cache/RESULTS-quick.md)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    names = common.pick(ap, "--graphs", args.graphs, graphs.ALL) if args.graphs else \
        list(graphs.QUICK if args.quick else graphs.FULL)
    fws = common.pick(ap, "--frameworks", args.frameworks, FRAMEWORKS)
    ops = common.pick(ap, "--ops", args.ops, common.OPS)
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, got {args.threads}")
    for flag in ("cap_gib", "timeout"):   # (was: every op skipped, or every process timed out, into a report)
        if not getattr(args, flag) > 0:
            ap.error(f"--{flag.replace('_', '-')} must be more than 0, got {getattr(args, flag)}")
    if args.previous and not Path(args.previous).is_file():   # (was: silently no comparison)
        ap.error(f"--previous {args.previous}: no such file")
    out = Path(args.out) if args.out else (graphs.CACHE / "RESULTS-quick.md" if args.quick else HERE / "RESULTS.md")
    if args.report_only and not out.with_suffix(".json").is_file():
        ap.error(f"--report-only: no {out.with_suffix('.json')} to rewrite the report from")
    if not args.report_only:
        common.check_out(ap, out)

    if args.report_only:
        res = json.loads(out.with_suffix(".json").read_text())
        write_report(out, res)
        say(f"rewrote {out} from {out.with_suffix('.json').name}")
        return
    previous = _previous_ratios(Path(args.previous) if args.previous else out.with_suffix(".json"))
    say(f"graphs {names}: building or reusing the cache in {graphs.CACHE}")
    ginfo = graphs.prepare(names)
    for nm in names:
        ginfo[nm].update(graphs.degree_stats(nm))
    res = {"quick": args.quick, "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "threads": args.threads,
           "machine": machine_info(), "gdsl_rev": git_rev(), "graphs": ginfo, "rows": {}, "notes": [],
           "pressure": [cpu_pressure(), ""], "versions": {"main": {}}, "previous": previous}

    say("machine: STREAM triad and random row gather")
    env = dict(os.environ, NUMBA_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    sizes = [f"{ginfo[nm]['n']}:{ginfo[nm]['e_raw']}" for nm in names]
    p = subprocess.run([sys.executable, str(HERE / "machine.py"), "--threads", str(args.threads), "--gather", *sizes],
                       capture_output=True, text=True, env=env, check=False)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("@@")), None)
    res["bandwidth"] = json.loads(line[2:]) if line else {}
    if not line:
        res["notes"].append(f"machine.py failed: {p.stderr.strip()[-300:]}")
    tri = res["bandwidth"].get("triad", {})
    if tri:
        tri["gbs"] = max(tri.get("numba_gbs", 0.0), tri.get("numpy_1thread_gbs", 0.0))
        say(f"  triad {tri['gbs']:.1f} GB/s; gather " + ", ".join(
            f"{k} {v['gbs']:.2f} GB/s" for k, v in res["bandwidth"]["gather"].items()))

    dgl_py = None
    if "dgl" in fws:
        if args.no_dgl_install and not (DGL_VENV / "bin" / "python").exists():
            why = "bench/.dgl-venv does not exist and --no-dgl-install was given"
        else:
            dgl_py, why = dgl_python()
        say(f"DGL: {why}")
        res["versions"]["dgl_env"] = why
        if dgl_py is None:
            res["notes"].append(f"DGL skipped: {why}")

    loads = []
    for g in names:
        res["rows"][g] = {}
        for f in sorted(fws, key=lambda f: RUN_ORDER.index(f) if f in RUN_ORDER else len(RUN_ORDER)):
            if f == "dgl" and dgl_py is None:
                continue
            say(f"{g}: {LABEL[f]}")
            python, script = (dgl_py, "peer_dgl.py") if f == "dgl" else (sys.executable, "peer_pyg.py")
            rows = run_peer(python, script, g, f, ops, args, args.timeout)
            per = {}
            for r in rows:
                if "info" in r:
                    key = "main" if f != "dgl" else "dgl"
                    res["versions"].setdefault(key, {}).update(r["info"])
                elif "unavailable" in r:
                    res["notes"].append(f"{LABEL[f]} on {g}: {r['unavailable']}")
                    say(f"  {r['unavailable']}")
                elif r.get("op"):
                    per[r["op"]] = r
                    if "skipped" in r:
                        say(f"  {r['op']}: skipped: {r['skipped']}")
                    if "loadavg" in r:
                        loads.extend(r["loadavg"])
            res["rows"][g][f] = per
    if "gdsl-numba" in fws and not args.no_fusion:
        res["fusion"] = {}
        for g in names:
            say(f"{g}: fused UPDATE measurements (bench/fused_update.py)")
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                       NUMBA_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
            cmd = [sys.executable, str(HERE / "fused_update.py"), "--graph", g, "--threads", str(args.threads),
                   "--reps", "3" if args.quick else "7"]
            out_, err_, rc = _run_streaming(cmd, env, args.timeout)
            res["fusion"][g] = [json.loads(ln[2:]) for ln in out_.splitlines() if ln.startswith("@@")]
            if rc != 0:
                res["notes"].append(f"fused_update.py on {g} failed ({rc}): {err_.strip()[-300:]}")
    res["pressure"][1] = cpu_pressure()
    res["mean_load"] = statistics.mean(loads) if loads else float("nan")
    res["wall_s"] = time.perf_counter() - t_start
    _tidy_versions(res)
    _checks(res)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(out, res)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    say(f"wrote {out} and {out.with_suffix('.json').name} ({res['wall_s'] / 60:.1f} min)")


def _previous_ratios(path: Path) -> dict | None:
    """gdsl numba / DGL per graph and op from the report being replaced (its
    .json), to show next to this run's; None without one."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ratios = {}
    for g, per in old.get("rows", {}).items():
        nb, d = per.get("gdsl-numba", {}), per.get("dgl", {})
        ratios[g] = {op: nb[op]["median_s"] / d[op]["median_s"] for op in common.OPS
                     if "median_s" in nb.get(op, {}) and "median_s" in d.get(op, {})}
    return {"date": old.get("date"), "gdsl_rev": old.get("gdsl_rev"), "ratios": ratios}


def _tidy_versions(res: dict) -> None:
    v = res["versions"]
    main = {k: val for k, val in v.get("main", {}).items() if k not in ("threads", "gdsl_backends")}
    backends = v.get("main", {}).get("gdsl_backends")
    if backends:
        main["gdsl backends"] = "/".join(backends)
    v["main"] = main
    d = v.pop("dgl", None)
    if d:
        v["dgl_env"] = (f"{_rel(DGL_VENV)}: dgl {d.get('dgl')}, torch {d.get('torch')} (PyPI's CUDA build, run on "
                        f"the CPU), numpy {d.get('numpy')}")


def _checks(res: dict) -> None:
    """The aggregations' outputs must agree across frameworks (same graphs)."""
    for g, per in res["rows"].items():
        base = per.get("dgl", {}) or per.get("gdsl-reference", {})
        for op in AGG_OPS + ("gat_layer",):
            ref = (base.get(op) or {}).get("check")
            if ref is None or op == "gat_layer":
                continue  # the GAT layer's params differ per framework: no check
            for f, ops in per.items():
                c = (ops.get(op) or {}).get("check")
                if c is not None and abs(c - ref) > 1e-4 * max(1.0, abs(ref)):
                    res["notes"].append(f"{g} / {op}: {LABEL[f]}'s output checksum {c:.6g} differs from {ref:.6g}")
        agree = [op for op in AGG_OPS if sum(1 for ops in per.values() if (ops.get(op) or {}).get("check") is not None) > 1]
        if agree:
            res["notes"].append(f"{g}: the aggregations' outputs (sum of |out|) agree across the frameworks that ran "
                                f"them ({', '.join(agree)}), unless a line above says otherwise.")


if __name__ == "__main__":
    main()
