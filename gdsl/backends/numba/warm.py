"""Compile kernels ahead of time, in parallel worker processes.

Numba compiles one parallel kernel in about 1.3 s of a single core (and holds
the GIL meanwhile), so a program or test suite needing dozens of kernel
specialisations spends a minute compiling on first run.  ``warm`` runs each
requested op (forward and backward) on a tiny graph in worker processes, so
every kernel it uses lands in the on-disk cache; later calls in any process
only load them.  Requests (a list of (op, params) pairs):

    ("aggregate", {"msg": "mul", "reduce": "sum", "bcast": "head", "to": "dst"})
        bcast: "none" (copy_src / copy_edge, or w shaped like x), "scalar" (w [E]),
        "head" (w [E, H], x [N, H, D]), "full" (w [E, *fs]); optional
        "blocked": True (cache-blocked kernel), "index_dtype": "int64",
        "xscale" / "oscale": True (fused vertex / row scales), "wperm": True
        (constant w read in CSR order), "prefetch": True (software prefetch
        forced on); reduce "mean" is sum with the fused 1 / degree row scale
    ("epilogue", {"act": "relu", "bias": True, "drop": True})
    ("head_dot", {})
    ("sddmm", {"op": "dot"})
    ("edge_softmax", {})
    ("gat_aggregate", {})
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _run_one(op: str, params: dict, dtype: str) -> None:
    import numpy as np
    import torch

    from gdsl.backends.numba import dense, ops
    from gdsl.backends.numba.graph import CSRGraph

    dt = getattr(torch, dtype)
    params = dict(params)
    idx = params.pop("index_dtype", None)
    g = CSRGraph.build(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 1, 0, 2]), 3,
                       index_dtype=np.dtype(idx).type if idx else None)
    N, E = g.num_nodes, g.num_edges

    def t(*shape):
        return torch.rand(shape, dtype=dt).add_(0.5).requires_grad_()
    if op == "aggregate":
        msg, reduce = params["msg"], params.get("reduce", "sum")
        bcast, to = params.get("bcast", "none"), params.get("to", "dst")
        x = w = None
        if msg != "copy_edge":
            x = t(N, 2, 2)
        if msg != "copy_src":
            w = {"none": lambda: t(E, 2, 2), "full": lambda: t(E, 2, 2), "scalar": lambda: t(E),
                 "head": lambda: t(E, 2)}[bcast]()
        if msg == "copy_edge":
            w = t(E, 2, 2)
        kw = {}
        if params.get("xscale"):
            kw["xscale"] = torch.rand(N, dtype=dt)
        if params.get("oscale"):
            kw["oscale"] = torch.rand(N, dtype=dt)
        if params.get("wperm") and w is not None:
            w = w.detach()
            kw["w_perm"] = ops.permute_edge_data(g, w, to)
        prev = ops.set_cache_blocking("on", 1) if params.get("blocked") else ops.set_cache_blocking("off")
        prev_p = ops.set_prefetch("on" if params.get("prefetch") else "off")
        try:
            ops.aggregate(g, x, w, msg, reduce, to, **kw).sum().backward()
        finally:
            ops.set_cache_blocking(*prev)
            ops.set_prefetch(prev_p)
    elif op == "sddmm":
        ops.sddmm(g, t(N, 2, 2), t(N, 2, 2), params["op"]).sum().backward()
    elif op == "edge_softmax":
        ops.edge_softmax(g, t(E, 2)).backward(torch.rand(E, 2, dtype=dt))
    elif op == "epilogue":
        act = params.get("act", "none")
        b = t(2, 2) if params.get("bias") else None
        p = 0.5 if params.get("drop", True) else 0.0
        dense.epilogue(t(N, 2, 2), b, act, p, 1 if p else None).sum().backward()
    elif op == "head_dot":
        sum(dense.head_dot(t(N, 2, 2), t(2, 2), t(2, 2))).sum().backward()
    elif op == "gat_aggregate":
        ops.gat_aggregate(g, t(N, 2), t(N, 2), t(N, 2, 2), 0.2).backward(torch.rand(N, 2, 2, dtype=dt))
    else:
        raise ValueError(f"unknown op {op!r}")


def _worker(tasks: list) -> dict:
    from gdsl.backends.numba import codegen
    for op, params, dtype in tasks:
        _run_one(op, params, dtype)
    return dict(codegen.COMPILE_TIMES)


def _stamp(tasks: list) -> str:
    import numba
    h = hashlib.sha256(json.dumps(tasks, sort_keys=True).encode())
    h.update(numba.__version__.encode())
    here = Path(__file__).parent
    for f in ("codegen.py", "codegen_dense.py", "ops.py", "dense.py", "graph.py", "warm.py"):
        h.update((here / f).read_bytes())
    return h.hexdigest()[:20]


def _tasks(requests: list, dtypes) -> list:
    """[op, params, dtype name] for each request and dtype, in request order."""
    tasks = []
    for req in requests:
        op, params, *own = req
        for dt in (own or dtypes):
            tasks.append([op, dict(params), str(dt).replace("torch.", "")])
    return tasks


def _child_env() -> dict:
    """Environment of a worker process: this checkout's gdsl, this cache."""
    from gdsl.backends.numba import codegen
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["GDSL_NUMBA_CACHE_DIR"] = str(codegen.cache_dir())
    return env


def warm_in_background(requests: list, dtypes=("float32",)) -> subprocess.Popen | None:
    """Start ``warm(requests, dtypes, processes=1)`` in one child process at
    the lowest CPU priority and return it (None when the stamp says it is
    done).  It compiles on a core the caller leaves idle; a process that
    needs a kernel meanwhile compiles it itself, or waits for the child to
    finish that one and loads it (see codegen._compile_lock), never both.
    The caller may terminate the child at any time: kernels already saved
    stay in the cache, the stamp is written only when all are."""
    from gdsl.backends.numba import codegen
    tasks = _tasks(requests, dtypes)
    if not tasks or (codegen.cache_dir() / f"warm-{_stamp(tasks)}.stamp").exists():
        return None
    nice = (lambda: os.nice(19)) if hasattr(os, "nice") else None
    p = subprocess.Popen([sys.executable, "-m", "gdsl.backends.numba.warm", "--stamp"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_child_env(), text=True,
                         preexec_fn=nice)
    p.stdin.write(json.dumps(tasks))
    p.stdin.close()
    return p


def warm(requests: list, dtypes=("float32",), processes: int | None = None, skip_if_done: bool = True) -> dict:
    """Compile every kernel that `requests` (forward and backward, in each of
    `dtypes`, or in the dtype a request names as its third element, e.g.
    ("sddmm", {"op": "dot"}, torch.float64)) use into the disk cache, spread over `processes` worker
    processes (default: the CPU count; 1 or fewer: in this process).
    Returns {kernel: compile seconds} from the workers.  With skip_if_done,
    a stamp in the cache directory (keyed by the requests and this backend's
    source) skips work already done."""
    from gdsl.backends.numba import codegen
    tasks = _tasks(requests, dtypes)
    if not tasks:
        return {}
    stamp = codegen.cache_dir() / f"warm-{_stamp(tasks)}.stamp"
    if skip_if_done and stamp.exists():
        return {}
    procs = processes if processes is not None else (os.cpu_count() or 1)
    procs = max(1, min(procs, len(tasks)))
    if procs == 1:
        times = _worker(tasks)
    else:
        groups = [tasks[i::procs] for i in range(procs)]
        env = _child_env()
        ps = [subprocess.Popen([sys.executable, "-m", "gdsl.backends.numba.warm"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
              for _ in groups]
        times = {}
        errors = []
        for p, grp in zip(ps, groups):
            out, err = p.communicate(json.dumps(grp))
            if p.returncode != 0:
                errors.append(err[-2000:])
            else:
                times.update(json.loads(out.strip().splitlines()[-1]))
        if errors:
            raise RuntimeError("kernel warm-up worker failed:\n" + "\n".join(errors))
    stamp.write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    return times


if __name__ == "__main__":
    _tasks_in = json.loads(sys.stdin.read())
    if "--stamp" in sys.argv[1:]:   # warm_in_background: all of them, then the stamp
        warm(_tasks_in, processes=1)
    else:
        print(json.dumps(_worker(_tasks_in)))
