"""Shared by the peer scripts (main venv and DGL venv): timing, peak RSS,
a memory watchdog, one JSON line per measurement. numpy only at import.

Every measurement is one JSON object on its own stdout line, prefixed by
``@@`` so that library chatter on stdout cannot be mistaken for a result.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

# What is measured, in order; the runner passes a subset with --ops.
KERNEL_OPS = ("copy_sum", "copy_mean", "src_mul_edge_sum", "gat_layer")
EPOCH_OPS = ("gcn_epoch", "sage_epoch", "gat_epoch")
OPS = KERNEL_OPS + EPOCH_OPS

# The graph variant each op runs on (gdsl's `graph G (...)` options; see graphs.py).
VARIANT = {"copy_sum": "raw", "copy_mean": "raw", "src_mul_edge_sum": "raw", "gat_layer": "loops",
           "gcn_epoch": "sym_loops", "sage_epoch": "raw", "gat_epoch": "loops"}

F = 128          # input feature width
HIDDEN = 128     # GCN / SAGE hidden width
HEADS, HEAD_DIM = 4, 32
EDGE_FEATURE_BYTES = F * 4   # one edge x 128 float32 row

GIB = 1 << 30
_current = {"op": None}


def emit(obj: dict) -> None:
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---- memory
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def start_watchdog(cap_bytes: int, meta: dict) -> None:
    """Exit at once (status 75) when RSS passes cap_bytes, reporting the op
    that was running: the runner records it and goes on with the next ops."""

    def watch():
        while True:
            r = rss_bytes()
            if r > cap_bytes:
                emit({**meta, "op": _current["op"], "error":
                      f"memory cap exceeded: RSS {r / GIB:.2f} GiB > {cap_bytes / GIB:.2f} GiB; stopped"})
                os._exit(75)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


def loadavg() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return float("nan")


# ---- timing
def measure(fn, *, min_reps: int, max_reps: int, budget_s: float, slow_s: float = 10.0) -> dict:
    """One warm-up call (timed as `first_s`: it includes lazy setup and JIT
    compilation), then repetitions until `min_reps` ran and `budget_s` is
    spent, or `max_reps` ran; median and min. When the warm-up alone took
    longer than `slow_s`, fewer repetitions (down to 1) are taken."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > slow_s:
        min_reps = max(1, min(min_reps, int(3 * slow_s / first)))
    times: list[float] = []
    cpu: list[float] = []
    spent = 0.0
    while len(times) < max_reps and (len(times) < min_reps or spent < budget_s):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        cpu.append(time.process_time() - c0)
        times.append(dt)
        spent += dt
    return {"median_s": statistics.median(times), "min_s": min(times), "reps": len(times),
            "first_s": first, "cpu_median_s": statistics.median(cpu), "times": [round(t, 5) for t in times]}


def run_ops(ops, make, meta: dict, *, estimate=None, cap_bytes: int, budgets: dict) -> None:
    """For each op: `make(op)` -> (fn, check[, extra fields]) or a skip message (str); the
    op is timed by `measure` and one JSON line emitted. `estimate(op)` gives
    predicted peak bytes; an op predicted over the cap is skipped."""
    import gc

    for op in ops:
        _current["op"] = op
        row = {**meta, "op": op}
        try:
            if estimate is not None:
                est = estimate(op)
                if est is not None and est > cap_bytes:
                    emit({**row, "skipped": f"needs about {est / GIB:.1f} GiB (E x 128 float tensors) "
                                            f"> the {cap_bytes / GIB:.1f} GiB cap"})
                    continue
            made = make(op)
            if isinstance(made, str):
                emit({**row, "skipped": made})
                continue
            fn, check, *extra = made
            if extra:
                row.update(extra[0])
            gc.collect()
            base = rss_bytes()
            reset_peak()
            load0 = loadavg()
            kind = "epoch" if op in EPOCH_OPS else "kernel"
            res = measure(fn, **budgets[kind])
            peak = peak_bytes()   # the op's calls only: read before the check's own temporaries
            row.update(res)
            row["check"] = check() if check is not None else None
            row["rss_before_gib"] = round(base / GIB, 3)
            row["peak_rss_gib"] = round(peak / GIB, 3)
            row["loadavg"] = [load0, loadavg()]
            emit(row)
            log(f"  {meta.get('framework')} {meta.get('graph')} {op}: median {res['median_s'] * 1000:.1f} ms "
                f"({res['reps']} reps, first {res['first_s'] * 1000:.0f} ms, peak {row['peak_rss_gib']:.2f} GiB)")
        except Exception as e:  # noqa: BLE001 - report and go on with the next op
            emit({**row, "error": f"{type(e).__name__}: {str(e)[:400]}"})
            log(f"  {meta.get('framework')} {meta.get('graph')} {op}: {type(e).__name__}: {e}")
        finally:
            fn = check = made = None
            gc.collect()
    _current["op"] = None


BUDGETS = {"kernel": {"min_reps": 5, "max_reps": 20, "budget_s": 3.0},
           "epoch": {"min_reps": 3, "max_reps": 10, "budget_s": 8.0}}


def pick(ap, flag: str, value: str, allowed) -> list[str]:
    """A comma-separated `flag` value whose every item is one of `allowed`;
    else the parser's usage error, before anything is measured (was: a
    KeyError traceback, or an empty report and exit 0)."""
    allowed = list(allowed)
    items = [v for v in value.split(",") if v]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        what = f"unknown {', '.join(map(repr, bad))}" if bad else "nothing given"
        ap.error(f"{flag}: {what} (choose from {', '.join(allowed)})")
    return items


def check_out(ap, path) -> None:
    """The report `path` (and the .json next to it) can be written: checked
    before measuring (was: a traceback after the whole run, its numbers lost)."""
    import tempfile
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        ap.error(f"--out {path}: is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=".bench-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        ap.error(f"--out {path}: cannot write there ({e.strerror or e})")


def parse_args(argv=None, frameworks=None):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--framework", default=None)
    ap.add_argument("--cap-gib", type=float, default=14.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    a = ap.parse_args(argv)
    a.ops = pick(ap, "--ops", a.ops, OPS)
    if frameworks is not None and a.framework not in frameworks:   # (was: a traceback, or every op "skipped")
        ap.error(f"--framework: {f'unknown {a.framework!r}' if a.framework else 'required'} "
                 f"(choose from {', '.join(frameworks)})")
    import graphs   # (bench/, on the path of every peer script)
    pick(ap, "--graph", a.graph, graphs.ALL)
    if a.threads < 1:
        ap.error(f"--threads must be at least 1, got {a.threads}")
    return a


def budgets(quick: bool) -> dict:
    if not quick:
        return BUDGETS
    return {"kernel": {"min_reps": 3, "max_reps": 5, "budget_s": 0.5},
            "epoch": {"min_reps": 2, "max_reps": 3, "budget_s": 1.0}}


def write_report(name: str, quick: bool, lines: list[str]) -> None:
    """Write a benchmark's Markdown report: bench/RESULTS-<name>.md, or with
    --quick bench/.cache/RESULTS-<name>-quick.md (not tracked, so the
    committed results stay as they are)."""
    from pathlib import Path
    here = Path(__file__).resolve().parent
    out = here / (f".cache/RESULTS-{name}-quick.md" if quick else f"RESULTS-{name}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", file=sys.stderr)
