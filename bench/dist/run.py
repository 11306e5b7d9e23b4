"""Distributed GCN benchmark: every executable plan at P = 1, 2, 4 over MPI.

    python bench/dist/run.py [--n 200000] [--deg 10] [--f 128] [--epochs 5] [--quick]

Writes an R-MAT graph once to bench/.cache/, then runs

    gdsl run programs/gcn.gd --data GRAPH.npz --np P --partition SPEC [--halo H] [--delay D]
             --epochs E --json OUT.json [--set hidden=128]

once per (model, strategy, P), each in its own process tree with a timeout,
and reads the per-epoch records of OUT.json: "train_time" (forward, backward,
optimizer step), "time" (the epoch with its evaluation pass), and per
collective the bytes each rank sent and the seconds it spent inside the
collective. The first --warmup epochs are dropped. Results go to
bench/dist/RESULTS.md and RESULTS.json (--quick: bench/.cache/dist-RESULTS-quick.*).

Numbers per run:
  train step   mean over the kept epochs of rank 0's train_time
  comm         per epoch, each rank's summed "seconds" over the training-step
               collectives, averaged over ranks; then the mean over epochs.
               Time inside a collective includes waiting for the slowest rank.
  compute      train step - comm
  epoch        mean "time" (train step + evaluation pass + loss/accuracy reductions)
  bytes        training-step bytes sent per epoch: total over ranks, and the
               largest rank; the evaluation pass's total separately
  vs base      epoch time / the P = 1 replicate epoch time of the same model
  peak RSS     the largest sum of the resident sizes of the run's processes
               (launcher + mpiexec + ranks), sampled every 0.5 s
  other jobs   runnable processes outside the run's process tree (other
               users' work on the same cores), mean of the samples
  CPU          user + system seconds of the whole process tree (from wait4)

All ranks run on the same machine; on the 2-core machine this was written for
they share 2 cores, so P > 1 measures overheads and communication volume, not
speed-up.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = ROOT / "bench" / ".cache"
PROGRAM = "programs/gcn.gd"

# (key, label, --partition, extra flags, the P it runs at)
# At P = 1 the rows variants (hash/metis, alltoallv/bcast) build the same part and
# the three vertex-cut variants have no split vertex, so each runs once there.
STRATEGIES = [
    ("replicate", "replicate (baseline)", "replicate", [], (1,)),
    ("rows_hash", "rows(hash), halo alltoallv", "rows(hash)", ["--halo", "alltoallv"], (1, 2, 4)),
    ("rows_hash_bcast", "rows(hash), halo bcast", "rows(hash)", ["--halo", "bcast"], (2, 4)),
    ("rows_metis", "rows(metis)", "rows(metis)", [], (2, 4)),
    ("rows_replicated", "rows_replicated(2) (1.5D)", "rows_replicated(2)", [], (4,)),
    ("redistribute", "redistribute (RDM)", "redistribute", [], (1, 2, 4)),
    ("features", "features (P3)", "features", [], (1, 2, 4)),
    ("vc_cd0", "vertex_cut cd-0", "vertex_cut", ["--delay", "0"], (1, 2, 4)),
    ("vc_cd5", "vertex_cut cd-5 (approx.)", "vertex_cut", ["--delay", "5"], (2, 4)),
    ("vc_0c", "vertex_cut 0c (approx.)", "vertex_cut", ["--delay", "none"], (2, 4)),
]
MODELS = [("gcn16", "GCN, hidden 16 (programs/gcn.gd as written)", []),
          ("gcn128", "GCN, hidden 128 (--set hidden=128)", ["--set", "hidden=128"])]


def _delay(strat) -> int:
    """The cd-r delay r a strategy runs with (0 without one): `gdsl run`
    refuses an r beyond the epochs trained."""
    flags = strat[3]
    d = flags[flags.index("--delay") + 1] if "--delay" in flags else ""
    return int(d) if d.isdigit() else 0


def say(msg: str) -> None:
    print(f"[bench/dist {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------ machine
def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


_PROBE = """
import json, platform, numpy, torch, mpi4py
from importlib import metadata
from mpi4py import MPI
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
v = MPI.Get_library_version().splitlines()
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
                  "mpi4py": mpi4py.__version__, "pymetis": version("pymetis"),
                  "mpi": " ".join(v[0].replace("Version:", "").split()) if v else "",
                  "mpi_device": next((" ".join(l.split(":", 1)[1].split()) for l in v if "Device" in l), ""),
                  "torch_threads_default": torch.get_num_threads()}))
"""


def machine_info(python: str) -> dict:
    lscpu = {}
    for line in sh(["lscpu"]).splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    try:
        vers = json.loads(sh([python, "-c", _PROBE]).splitlines()[-1])
    except (ValueError, IndexError):
        vers = {"error": f"could not probe {python}"}
    return {"cpu": lscpu.get("Model name", platform.processor()), "cpus": os.cpu_count(),
            "threads_per_core": lscpu.get("Thread(s) per core"), "hypervisor": lscpu.get("Hypervisor vendor"),
            "memory": mem, "kernel": platform.release(), **vers}


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return ""


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        return float("nan")


def source_rev() -> str:
    """The checked-out commit, read from .git (no git command is run)."""
    try:
        head = (ROOT / ".git" / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:7]
        ref = head[5:]
        p = ROOT / ".git" / ref
        if p.exists():
            return p.read_text().strip()[:7]
        for line in (ROOT / ".git" / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line[:7]
    except OSError:
        pass
    return "?"


CODE_VERSIONS: dict[str, dict[str, list]] = {}   # digest -> {path: [size, mtime]}


def _code_files() -> list[Path]:
    """The sources a distributed run can import: gdsl/ without the other backends."""
    return sorted(p for p in (ROOT / "gdsl").rglob("*.py")
                  if not (p.parent.parent.name == "backends" and p.parent.name != "reference"))


def code_stamp() -> str:
    """A digest of the names, sizes and mtimes of the sources: tells whether the code a run
    used changed while the benchmark ran (others may edit the repository meanwhile)."""
    h = hashlib.sha256()
    files = {}
    for p in _code_files():
        try:
            st = p.stat()
        except OSError:
            continue
        rel = str(p.relative_to(ROOT))
        files[rel] = [st.st_size, st.st_mtime]
        h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns};".encode())
    d = h.hexdigest()[:12]
    CODE_VERSIONS.setdefault(d, files)
    return d


def _changed(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


# ------------------------------------------------------------------ graph
def make_graph(n: int, deg: int, f: int, classes: int, seed: int) -> tuple[Path, dict]:
    """The R-MAT graph as an .npz in gdsl's data format (gdsl/data/README.md), cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"rmat_n{n}_d{deg}_f{f}_c{classes}_s{seed}.npz"
    meta_path = path.with_suffix(".json")
    if path.exists() and meta_path.exists():
        return path, json.loads(meta_path.read_text())
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from gdsl.graph.synthetic import rmat_graph
    t0 = time.perf_counter()
    g = rmat_graph(n, deg, f, classes, seed)
    src, dst = g.src.numpy().astype(np.int64), g.dst.numpy().astype(np.int64)
    masks = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=bool) for k, v in g.masks.items()}
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, src=src, dst=dst, features=g.features.numpy().astype(np.float32),
             labels=g.labels.numpy().astype(np.int64), **{f"{k}_mask": m for k, m in masks.items()})
    os.replace(tmp, path)
    indeg = np.bincount(dst, minlength=n)
    meta = {"n": n, "avg_degree_asked": deg, "f": f, "classes": classes, "seed": seed,
            "directed_edges": int(src.size), "avg_degree": round(src.size / n, 2),
            "max_in_degree": int(indeg.max()), "isolated": int((indeg == 0).sum()),
            "train": int(masks["train"].sum()), "seconds": round(time.perf_counter() - t0, 1),
            "bytes": path.stat().st_size}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return path, meta


# ------------------------------------------------------------------ one run
def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process (from /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            out[int(d)] = (int(fields[1]), fields[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _tree(root: int, procs: dict | None = None) -> list[int]:
    """The pids of `root` and its descendants."""
    procs = _procs() if procs is None else procs
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _rss(pids) -> int:
    tot = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    tot += int(line.split()[1]) * 1024
                    break
        except OSError:
            pass
    return tot


def run_one(cmd: list[str], env: dict, timeout: float, log_path: Path) -> dict:
    """Run `cmd` (the gdsl launcher) with a timeout; returns rc, wall, CPU, peak RSS, other load."""
    t0 = time.perf_counter()
    load0 = loadavg()
    me = os.getpid()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        peak, timed_out, status, ru = 0, False, None, None
        others = []   # runnable processes outside this run's tree, per sample
        while True:
            pid, st, r = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                status, ru = st, r
                break
            procs = _procs()
            mine = set(_tree(proc.pid, procs))
            peak = max(peak, _rss(mine))
            others.append(sum(1 for q, (_, state) in procs.items() if state == "R" and q not in mine and q != me))
            if time.perf_counter() - t0 > timeout:
                timed_out = True
                pids = [(q, _start_time(q)) for q in _tree(proc.pid)]
                os.kill(proc.pid, signal.SIGINT)   # the launcher stops its ranks on SIGINT
                deadline = time.perf_counter() + 20
                while time.perf_counter() < deadline:
                    pid, st, r = os.wait4(proc.pid, os.WNOHANG)
                    if pid == proc.pid:
                        status, ru = st, r
                        break
                    time.sleep(0.2)
                for q, started in pids:  # what is left of this run's own process tree
                    if started is not None and _start_time(q) == started:  # the same process, not a reused pid
                        try:
                            os.kill(q, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                if status is None:
                    _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
    return {"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
            "wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2) if ru else None, "peak_rss_bytes": peak,
            "loadavg_before": load0, "loadavg_after": loadavg(),
            "other_runnable": round(sum(others) / len(others), 2) if others else None}


def summarise(js: dict, warmup: int) -> dict:
    eps = js["epochs"]
    kept = eps[warmup:] if len(eps) > warmup else eps[-1:]

    def mean(xs):
        xs = list(xs)
        return sum(xs) / len(xs) if xs else float("nan")

    def rank_sums(rec, key):
        c = rec.get(key) or {}
        P = max((len(v["seconds"]) for v in c.values()), default=1)
        secs = [sum(v["seconds"][r] for v in c.values()) for r in range(P)]
        sent = [sum(v["sent"][r] for v in c.values()) for r in range(P)]
        return secs, sent

    comm_mean, comm_max, sent_tot, sent_max, eval_tot, eval_comm = [], [], [], [], [], []
    for e in kept:
        secs, sent = rank_sums(e, "comm")
        comm_mean.append(mean(secs))
        comm_max.append(max(secs))
        sent_tot.append(sum(sent))
        sent_max.append(max(sent))
        es, esent = rank_sums(e, "comm_eval")
        eval_tot.append(sum(esent))
        eval_comm.append(mean(es))
    last = kept[-1]
    per_op = {k: {"calls": v["calls"], "sent_total": sum(v["sent"]), "sent_max": max(v["sent"]),
                  "seconds_mean": mean(v["seconds"]), "seconds_max": max(v["seconds"])}
              for k, v in (last.get("comm") or {}).items()}
    train = mean(e["train_time"] for e in kept)
    comm = mean(comm_mean)
    return {"epochs_kept": [e["epoch"] for e in kept], "epoch_s": mean(e["time"] for e in kept),
            "train_s": train, "comm_s": comm, "comm_max_rank_s": mean(comm_max), "compute_s": train - comm,
            "eval_comm_s": mean(eval_comm),
            "train_s_all": [e["train_time"] for e in eps], "epoch_s_all": [e["time"] for e in eps],
            "bytes_total": round(mean(sent_tot)), "bytes_max_rank": round(mean(sent_max)),
            "eval_bytes_total": round(mean(eval_tot)), "bytes_vary": len(set(sent_tot)) > 1,
            "loss": last.get("loss"), "test_acc": last.get("test_acc"), "per_op_last": per_op,
            "plan": js.get("plan"), "exact": js.get("exact")}


_PART = re.compile(r"partitioned in ([\d.]+) s(?:, replication factor ([\d.]+))?")


def bench_one(args, graph: Path, model, strat, P: int, env: dict, workdir: Path, rid: str) -> dict:
    mkey, _, mflags = model
    skey, _, spec, sflags, _ = strat
    workdir.mkdir(parents=True, exist_ok=True)
    js_path = workdir / f"{rid}.json"
    log_path = workdir / f"{rid}.log"
    parts = workdir / "parts" / rid
    shutil.rmtree(parts, ignore_errors=True)
    js_path.unlink(missing_ok=True)
    cmd = [args.python, "-m", "gdsl.cli", "run", PROGRAM, "--data", str(graph), "--np", str(P),
           "--partition", spec, *sflags, "--epochs", str(args.epochs), "--json", str(js_path),
           "--parts", str(parts), *mflags]
    rec = {"model": mkey, "strategy": skey, "P": P, "spec": spec, "flags": sflags + mflags,
           "cmd": " ".join(cmd[1:]).replace(str(ROOT) + "/", ""), "omp_threads": env.get("OMP_NUM_THREADS", "auto"),
           "code": code_stamp(), "started": dt.datetime.now().strftime("%H:%M:%S")}
    res = run_one(cmd, env, args.timeout, log_path)
    rec.update(res)
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    m = _PART.search(text)
    if m:
        rec["partition_s"] = float(m.group(1))
        if m.group(2):
            rec["replication_factor"] = float(m.group(2))
    pj = parts / "partition.json"
    if pj.exists():
        info = json.loads(pj.read_text())
        for k in ("rows_per_rank", "edges_per_rank", "local_rows_per_rank", "halo_rows_per_rank"):
            if k in info:
                rec[k] = info[k]
    shutil.rmtree(parts, ignore_errors=True)
    if res["rc"] != 0 or not js_path.exists():
        lines = [ln for ln in text.splitlines() if ln.strip()]
        errs = [ln for ln in lines if "error" in ln.lower()]
        rec["error"] = (f"timed out after {args.timeout:.0f} s" if res["timed_out"] else
                        (errs[-1] if errs else (lines[-1] if lines else f"exit code {res['rc']}")))[:400]
        rec["log_tail"] = "\n".join(lines[-15:])
        return rec
    rec.update(summarise(json.loads(js_path.read_text()), args.warmup))
    return rec


# ------------------------------------------------------------------ report
def fmt_t(s) -> str:
    if s is None or math.isnan(s):
        return "–"
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


def fmt_b(b) -> str:
    if b is None:
        return "–"
    if b == 0:
        return "0"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.1f} {unit}" if b / k < 100 else f"{b / k:.0f} {unit}"
    return f"{b} B"


def other(r: dict) -> str:
    """Runnable processes of other jobs during the run; * = re-measured with --merge."""
    v = r.get("other_runnable")
    return ("–" if v is None else f"{v:.1f}") + (" *" if r.get("remeasured") else "")


def imbalance(r: dict) -> str:
    """Edges of the busiest rank over the mean (1.00 = balanced). Not for RDM, whose
    aggregations run on the whole graph split by feature columns."""
    e = r.get("edges_per_rank") if r.get("strategy") != "redistribute" else None
    if not e or len(e) < 2 or not sum(e):
        return "–"
    return f"{max(e) / (sum(e) / len(e)):.2f}"


def write_report(path: Path, res: dict) -> None:
    mi, g = res["machine"], res["graph"]
    wall = res["wall_min"] + res.get("wall_min_before", 0)
    L = ["# Distributed GCN benchmark" + (" (quick)" if res["quick"] else ""), ""]
    L.append(f"Written by `{res['command']}` on {res['date']} (wall time {wall:.1f} min). gdsl at {res['rev']}.")
    L.append("")
    L.append(f"**All P ranks share the same {mi['cpus']} cores of one machine** ({mi['cpu']}, {mi['memory']}): "
             f"the times at P > 1 measure the overheads of each plan and its communication volume, "
             f"not speed-up; there is no second machine, and MPI ({mi.get('mpi', '?')}, device "
             f"{mi.get('mpi_device', '?')}) moves the bytes through shared memory, so the communication "
             f"times are memory copies plus waiting for the other ranks, far below what a network would cost. "
             f"The bytes are what a network would carry.")
    L.append("")
    thr = res["omp_threads"]
    if thr == "auto":
        L.append(f"Threads: the launcher's default, OMP_NUM_THREADS = max(1, {mi['cpus']} // P) per rank.")
    else:
        L.append(f"Threads: OMP_NUM_THREADS = {thr} per rank for every run (so P = 1 uses one core, P = 2 both, "
                 f"P = 4 runs 4 ranks on {mi['cpus']} cores). The launcher's own default ({mi['cpus']} // P "
                 f"threads per rank) is measured for the P = 1 baseline as `replicate, launcher threads`.")
    L.append("")
    L.append(f"Machine load: other jobs shared the machine while this ran. 1-min load average at the start of "
             f"each run: mean {res['load_mean']:.1f}, max {res['load_max']:.1f} on {mi['cpus']} CPUs (this "
             f"benchmark's own ranks included); CPU pressure at start `{res['pressure_start']}`, at end "
             f"`{res['pressure_end']}`. The **other jobs** column gives, per run, the mean number of runnable "
             f"processes that were not part of it. Times carry that noise; bytes do not.")
    L.append("")
    L.append("## Machine and versions")
    L.append("")
    L.append(f"- CPU: {mi['cpu']}, {mi['cpus']} logical CPUs ({mi.get('threads_per_core', '?')} thread per core), "
             f"hypervisor {mi.get('hypervisor') or 'none'}; memory {mi['memory']}; kernel {mi['kernel']}")
    L.append(f"- Python {mi.get('python')}, torch {mi.get('torch')}, numpy {mi.get('numpy')}, mpi4py "
             f"{mi.get('mpi4py')}, {mi.get('mpi')}, pymetis {mi.get('pymetis') or '–'}")
    L.append(f"- Date: {res['date']}")
    L.append("")
    L.append("## Setup")
    L.append("")
    L.append(f"Graph: `gdsl.graph.synthetic.rmat_graph(n={g['n']}, avg_degree={g['avg_degree_asked']}, "
             f"features={g['f']}, classes={g['classes']}, seed={g['seed']})`: N = {g['n']:,}, "
             f"{g['directed_edges']:,} directed edges (symmetric, deduplicated; average degree {g['avg_degree']}), "
             f"max in-degree {g['max_in_degree']:,}, {g['isolated']:,} isolated vertices, "
             f"f = {g['f']}, {g['classes']} classes, {g['train']:,} training vertices; "
             f"gcn.gd adds self loops. Cached in `{res['graph_file']}`.")
    L.append("")
    L.append(f"Each row is one `gdsl run {PROGRAM} --np P --partition SPEC ... --epochs {res['epochs']}` "
             f"(the launcher starts `mpiexec -n P`), timeout {res['timeout']:.0f} s. The first "
             f"{res['warmup']} epoch(s) are dropped as warm-up; the numbers are means over the other "
             f"{res['epochs'] - res['warmup']}.")
    L.append("")
    L.append("Columns: **train step** = forward + backward + optimizer step (rank 0's `train_time`); "
             "**comm** = per rank, the summed seconds inside the training step's collectives, averaged over "
             "ranks (time inside a collective includes waiting for the slowest rank, so on shared cores it "
             "also holds the other ranks' compute); **compute** = train step - comm; **epoch** = the whole epoch "
             "incl. the evaluation pass; **bytes/epoch** = bytes the training step's collectives sent "
             "(a rank's own block is not counted), total over ranks and the largest rank; **eval bytes** = "
             "the evaluation pass's total; **edge imbal.** = edges on the busiest rank / the mean over ranks "
             "(compute balance); **vs base** = epoch / the P = 1 replicate epoch of the same model; "
             "**peak RSS** = the largest sampled sum of the run's processes' resident sizes (the launcher, "
             "which loads the whole graph and partitions it, plus all ranks); **wall** = the whole command "
             "(start, partitioning, all epochs); **other jobs** = runnable processes outside the run while it "
             "ran (above 0, the run competed for the cores; `*`: re-measured with `--merge`). The loss after "
             "the last epoch shows the approximate plans' (cd-5, 0c) drift; after a few epochs on R-MAT's "
             "random labels the test accuracy is the majority class's share (every plan predicts one class), "
             "so it is no evidence either way.")
    L.append("")
    for mkey, mlabel, _ in MODELS:
        rows = [r for r in res["runs"] if r["model"] == mkey]
        if not rows:
            continue
        L.append(f"## {mlabel}")
        L.append("")
        L.append("| strategy | P | train step | comm | compute | epoch | vs base | bytes/epoch total | "
                 "max rank | eval bytes | edge imbal. | loss | test acc | peak RSS | wall | other jobs |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        base = next((r for r in rows if r["strategy"] == "replicate" and r["P"] == 1 and "error" not in r
                     and r.get("omp_threads") == res["omp_threads"]), None)
        for r in rows:
            lab = r.get("label", r["strategy"])
            if "error" in r:
                L.append(f"| {lab} | {r['P']} | **failed** (rc {r['rc']}): {r['error'].replace('|', '/')} "
                         f"| | | | | | | | | | | {fmt_b(r.get('peak_rss_bytes'))} | {r['wall_s']:.0f} s | {other(r)} |")
                continue
            ratio = f"{r['epoch_s'] / base['epoch_s']:.2f}×" if base else "–"
            acc = f"{r['test_acc']:.4f}" if r.get("test_acc") is not None else "–"
            L.append(f"| {lab} | {r['P']} | {fmt_t(r['train_s'])} | {fmt_t(r['comm_s'])} | "
                     f"{fmt_t(r['compute_s'])} | {fmt_t(r['epoch_s'])} | {ratio} | {fmt_b(r['bytes_total'])} | "
                     f"{fmt_b(r['bytes_max_rank'])} | {fmt_b(r['eval_bytes_total'])} | {imbalance(r)} | "
                     f"{r['loss']:.4f} | {acc} | "
                     f"{fmt_b(r.get('peak_rss_bytes'))} | {r['wall_s']:.0f} s | {other(r)} |")
        L.append("")
        skipped = [s for s in res.get("skipped", []) if s.startswith(mkey)]
        if skipped:
            L.append("Not run: " + ", ".join(skipped))
            L.append("")
    if res.get("notes"):
        L.append("## Notes")
        L.append("")
        for n in res["notes"]:
            L.append(f"- {n}")
        L.append("")
    L.append("Raw numbers (per-epoch times, per-collective bytes and seconds of the last epoch, "
             "rows, edges and halo rows per rank, partitioning time, CPU seconds of each run) are in "
             f"`{res['json_name']}`.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(L) + "\n")


def notes(res: dict) -> list[str]:
    """Automatic remarks on the results."""
    out = []
    stamps = []
    for r in res["runs"]:
        if r.get("code") not in stamps:
            stamps.append(r.get("code"))
    if res.get("code_end") not in stamps:
        stamps.append(res.get("code_end"))
    vers = res.get("code_versions", {})
    if len(stamps) > 1:
        steps = []
        for a, b in itertools.pairwise(stamps):
            first = next((r for r in res["runs"] if r.get("code") == b), None)
            where = f"before {first['model']} {first['strategy']} P={first['P']}" if first else "after the last run"
            files = _changed(vers.get(a, {}), vers.get(b, {}))
            steps.append(f"{where}: {', '.join(files[:8]) or '?'}" + (" ..." if len(files) > 8 else ""))
        out.append("**gdsl/ changed while this ran** (edited by others): " + "; ".join(steps)
                   + ". Rows run on different versions may not be comparable (each row's version is `code` "
                   "in the JSON).")
    for mkey, _, _ in MODELS:
        rows = {(r["strategy"], r["P"], r.get("omp_threads")): r for r in res["runs"]
                if r["model"] == mkey and "error" not in r}
        a = rows.get(("replicate", 1, res["omp_threads"]))
        b = rows.get(("replicate", 1, "auto"))
        if a and b and res["omp_threads"] != "auto":
            out.append(f"{mkey}: replicate at P = 1 with {res['omp_threads']} thread(s): epoch {fmt_t(a['epoch_s'])}; "
                       f"with the launcher's default ({res['machine']['cpus']} threads): {fmt_t(b['epoch_s'])} "
                       f"({b['epoch_s'] / a['epoch_s']:.2f}×).")
        vary = [f"{r['strategy']} P={r['P']}" for r in rows.values() if r.get("bytes_vary")]
        if vary:
            out.append(f"{mkey}: bytes per epoch differ between epochs for " + ", ".join(vary) + " (mean shown).")
    return out


# ------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="vertices (default 200000; --quick 20000)")
    ap.add_argument("--deg", type=int, default=10, help="average degree asked of R-MAT (default 10)")
    ap.add_argument("--f", type=int, default=128, help="feature width (default 128)")
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=None, help="epochs per run (default 5; --quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="epochs dropped (default 2; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="20k vertices, 3 epochs; writes under bench/.cache/")
    ap.add_argument("--models", default="gcn16,gcn128", help="gcn16 and/or gcn128 (default both)")
    ap.add_argument("--strategies", default=None, help="comma-separated keys (default all): "
                    + ",".join(s[0] for s in STRATEGIES))
    ap.add_argument("--nps", default="1,2,4", help="P values (default 1,2,4)")
    ap.add_argument("--threads", default="1", help="OMP_NUM_THREADS per rank, or 'auto' for the launcher's "
                    "cores // P (default 1)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    ap.add_argument("--budget-min", type=float, default=40,
                    help="start no run after this many minutes (default 40); the rest is listed as not run")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs of the existing RESULTS.json that this invocation does not repeat "
                         "(to re-measure a few rows, e.g. after a noisy period)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md from the existing RESULTS.json, run nothing")
    ap.add_argument("--python", default=None, help="Python with torch + mpi4py for the ranks (default: this one)")
    ap.add_argument("--out", default=None, help="report path (default bench/dist/RESULTS.md)")
    args = ap.parse_args()
    # (was: 0 silently became the default, -1 failed every run with exit 0; --f/--deg/--classes 0 a traceback)
    for flag in ("n", "epochs", "deg", "f", "classes"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    for flag in ("timeout", "budget_min"):   # (was: every run timed out, or none ran, into a report)
        if not getattr(args, flag) > 0:
            ap.error(f"--{flag.replace('_', '-')} must be more than 0, got {getattr(args, flag)}")
    if args.warmup is not None and args.warmup < 0:
        ap.error(f"--warmup must be at least 0, got {args.warmup}")
    if args.threads != "auto" and not (args.threads.isdigit() and int(args.threads) >= 1):
        ap.error(f"--threads is a number of threads >= 1 or 'auto', got {args.threads!r}")
    args.n = args.n or (20000 if args.quick else 200000)
    args.epochs = args.epochs or (3 if args.quick else 5)
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    args.warmup = min(args.warmup, args.epochs - 1)
    if args.python is None:   # (was: /tmp/venv/bin/python whenever it existed, whatever it held)
        args.python = sys.executable
    out = Path(args.out).resolve() if args.out else (CACHE / "dist-RESULTS-quick.md" if args.quick
                                                      else HERE / "RESULTS.md")
    sys.path.insert(0, str(ROOT / "bench"))
    import common
    chosen_models = common.pick(ap, "--models", args.models, [m[0] for m in MODELS])
    chosen = common.pick(ap, "--strategies", args.strategies, [s[0] for s in STRATEGIES]) if args.strategies else None
    try:
        nps = [int(p) for p in args.nps.split(",") if p]
    except ValueError:
        ap.error(f"--nps is a comma-separated list of rank counts, got {args.nps!r}")
    if not nps or min(nps) < 1:
        ap.error(f"--nps: rank counts are at least 1, got {args.nps!r}")
    if args.report_only and not out.with_suffix(".json").is_file():
        ap.error(f"--report-only: no {out.with_suffix('.json')} to rewrite the report from")
    if not args.report_only:
        common.check_out(ap, out)
    out_json = out.with_suffix(".json")
    workdir = CACHE / ("dist-quick" if args.quick else "dist")
    workdir.mkdir(parents=True, exist_ok=True)
    partial = workdir / "partial-RESULTS.json"   # a copy under .cache, updated after every run
    models = [m for m in MODELS if m[0] in chosen_models]
    strats = [s for s in STRATEGIES if chosen is None or s[0] in chosen]
    if not any(P in s[4] for s in strats for P in nps):   # (was: an empty report written over RESULTS.md)
        ap.error(f"no run: none of the strategies runs at --nps {args.nps} ("
                 + "; ".join(f"{s[0]} at P = {','.join(map(str, s[4]))}" for s in strats) + ")")
    # of those that run at --nps (was: all strategies, so `--strategies vc_cd5,replicate --nps 2
    # --epochs 3` ran nothing and wrote an empty report)
    at_nps = [s for s in strats if any(P in s[4] for P in nps)]
    if all(_delay(s) > args.epochs for s in at_nps):
        ap.error(f"no run: {', '.join(s[0] for s in at_nps)} needs --epochs >= {min(_delay(s) for s in at_nps)} "
                 f"(gdsl run refuses a cd-r delay beyond the epochs trained), got {args.epochs}")

    if args.report_only:
        res = json.loads(out_json.read_text())
        res["notes"] = notes(res)
        write_report(out, res)
        say(f"wrote {out} from {out_json.name}")
        return

    t_start = time.perf_counter()
    say(f"graph: R-MAT n={args.n} deg={args.deg} f={args.f}")
    graph, gmeta = make_graph(args.n, args.deg, args.f, args.classes, args.seed)
    say(f"  {graph.relative_to(ROOT)}: {gmeta['directed_edges']:,} edges")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args.threads != "auto":
        env["OMP_NUM_THREADS"] = args.threads
    else:
        env.pop("OMP_NUM_THREADS", None)
    res = {"quick": args.quick, "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
           "command": "python bench/dist/run.py " + " ".join(sys.argv[1:]), "rev": source_rev(),
           "machine": machine_info(args.python), "graph": gmeta, "graph_file": str(graph.relative_to(ROOT)),
           "epochs": args.epochs, "warmup": args.warmup, "timeout": args.timeout, "omp_threads": args.threads,
           "pressure_start": cpu_pressure(), "code_start": code_stamp(), "runs": [], "skipped": [], "notes": []}
    try:
        res["json_name"] = str(out_json.relative_to(HERE)) if out.parent == HERE else str(out_json.relative_to(ROOT))
    except ValueError:
        res["json_name"] = str(out_json)
    old_runs = []
    if args.merge and out_json.exists():
        old = json.loads(out_json.read_text())
        # the graph's description without its generation time (was: every rebuilt cache "another graph")
        same = {k: v for k, v in (old.get("graph") or {}).items() if k != "seconds"} == \
            {k: v for k, v in gmeta.items() if k != "seconds"}
        for ok, what, was, now in ((same, "graph", old.get("graph"), gmeta),
                                   (old.get("epochs") == args.epochs, "epoch count (--epochs)", old.get("epochs"),
                                    args.epochs),
                                   (old.get("omp_threads") == args.threads, "thread setting (--threads)",
                                    old.get("omp_threads"), args.threads)):
            if not ok:
                sys.exit(f"--merge: the existing results in {out_json} are for another {what}: {was}, this run: {now}")
        old_runs = old["runs"]
        res["code_versions"] = old.get("code_versions", {})
        res["date"] = old.get("date_first", old["date"]) + " to " + res["date"]
        res["date_first"] = old.get("date_first", old["date"])
        res["command"] = old["command"] + "; then " + res["command"]
        res["pressure_start"] = old.get("pressure_start", "")
        res["wall_min_before"] = old.get("wall_min_before", 0) + old.get("wall_min", 0)

    plan = []
    for model in models:
        for strat in strats:
            delay = _delay(strat)
            for P in strat[4]:
                if P in nps and delay > args.epochs:
                    # gdsl run refuses a cd-r delay beyond the epochs trained (was: a failed row per P)
                    res["skipped"].append(f"{model[0]} {strat[1]} P={P} (cd-{delay} needs --epochs >= {delay})")
                elif P in nps:
                    plan.append((model, strat, P, env, f"{model[0]}-{strat[0]}-P{P}"))
            if strat[0] == "replicate" and 1 in nps and args.threads != "auto":
                e2 = dict(env)
                e2.pop("OMP_NUM_THREADS", None)
                plan.append((model, (strat[0], "replicate, launcher threads", *strat[2:]), 1, e2,
                             f"{model[0]}-{strat[0]}-P1-auto"))

    for i, (model, strat, P, e, rid) in enumerate(plan):
        if (time.perf_counter() - t_start) / 60 > args.budget_min:
            res["skipped"].append(f"{model[0]} {strat[1]} P={P} (time budget, `--budget-min`)")
            continue
        say(f"[{i + 1}/{len(plan)}] {rid} ...")
        rec = bench_one(args, graph, model, strat, P, e, workdir, rid)
        rec["label"] = strat[1]
        if e is not env:
            rec["omp_threads"] = "auto"
        res["runs"].append(rec)
        if "error" in rec:
            say(f"    FAILED rc={rec['rc']}: {rec['error']}")
        else:
            say(f"    train {fmt_t(rec['train_s'])} (comm {fmt_t(rec['comm_s'])}), epoch {fmt_t(rec['epoch_s'])}, "
                f"{fmt_b(rec['bytes_total'])}/epoch, wall {rec['wall_s']:.0f} s, peak RSS "
                f"{fmt_b(rec['peak_rss_bytes'])}, other jobs {other(rec)}")
        res["wall_min"] = (time.perf_counter() - t_start) / 60
        partial.write_text(json.dumps(res, indent=1) + "\n")

    res["pressure_end"] = cpu_pressure()
    res["wall_min"] = (time.perf_counter() - t_start) / 60
    if old_runs:
        def key(r):
            return (r["model"], r["strategy"], r["P"], r.get("omp_threads"))
        for r in res["runs"]:
            r["remeasured"] = True
        new = {key(r): r for r in res["runs"]}
        order = [(m[0], s[0]) for m in MODELS for s in STRATEGIES]
        merged = [new.pop(key(r), r) for r in old_runs] + list(new.values())
        res["runs"] = sorted(merged, key=lambda r: (order.index((r["model"], r["strategy"])), r["P"],
                                                    r.get("omp_threads") == "auto"))
    loads = [r["loadavg_before"] for r in res["runs"]]
    res["load_mean"] = sum(loads) / len(loads) if loads else float("nan")
    res["load_max"] = max(loads) if loads else float("nan")
    res["code_end"] = code_stamp()
    res["code_versions"] = {**res.get("code_versions", {}), **CODE_VERSIONS}
    res["notes"] = notes(res)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(res, indent=1) + "\n")
    partial.write_text(json.dumps(res, indent=1) + "\n")
    write_report(out, res)
    total = res["wall_min"] + res.get("wall_min_before", 0)
    say(f"wrote {out} and {out_json.name} ({res['wall_min']:.1f} min"
        + (f"; {total:.1f} min with the merged runs)" if old_runs else ")"))
    failed = [r for r in res["runs"] if "error" in r]
    if failed:
        say(f"{len(failed)} run(s) failed: " + "; ".join(f"{r['model']} {r['strategy']} P={r['P']}" for r in failed))


if __name__ == "__main__":
    main()
