"""`gdsl calibrate`: measure this machine's profile for the cost model.

    alpha, beta     ping-pong of numpy buffers, 8 B .. 16 MiB, between two
                    MPI ranks (``mpiexec -n 2 python -m gdsl.cost.calibrate_worker``);
                    half round trip = alpha + beta_bytes * bytes, fitted by
                    least squares; alpha is the intercept of the small-message
                    fit, beta the slope of the fit over all sizes, converted
                    to seconds per 4-byte word. Allreduce of the same sizes is
                    fitted and reported too (not used by the model).
    gamma_gemm      torch.mm on N x 128 @ 128 x 128, best of a few, counted as
                    2 N k m flops (what the cost model counts).
    gamma_spmm      one weighted SpMM (A X, A sparse N x N, X dense N x f) on
                    a random graph per backend: torch.sparse CSR mm for
                    `reference`, the Numba `aggregate` kernel (msg "mul",
                    reduce "sum") for `numba`, counted as
                    4 (2 nnz + nnz f + N f) bytes of traffic (profile.py).

The JSON profile (see docs/cost-model.md "Machine profile") is written
atomically to --out, or to the default location ($GDSL_PROFILE, else
$XDG_CONFIG_HOME/gdsl/profile.json, i.e. ~/.config/gdsl/profile.json), which
`gdsl plan` and `gdsl compile --np` read from then on.

With ``mpiexec -n 2`` on one machine the ranks share its cores and memory:
alpha and beta are then intra-node shared-memory MPI, not a network.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from gdsl.cost.profile import WORD_BYTES, default_profile_path, profile_from_dict
from gdsl.diagnostics import GdslError

__all__ = [
    "BACKENDS",
    "FULL_SIZES",
    "QUICK_SIZES",
    "calibrate",
    "default_profile_path",
    "fit_alpha_beta",
    "machine_info",
    "measure_kernels",
    "measure_network",
    "summary",
    "write_profile",
]

BACKENDS = ("reference", "numba")
FULL_SIZES = [8 << k for k in range(22)]            # 8 B .. 16 MiB, doubling
QUICK_SIZES = [8 << (3 * k) for k in range(8)]      # 8 B, 64 B, ..., 2 MiB, 16 MiB
SMALL_MAX = 4096                                     # alpha: intercept of the fit over sizes <= 4 KiB
NETWORK_TIMEOUT_S = 120.0


# ---------------------------------------------------------------------------
# alpha-beta fit
# ---------------------------------------------------------------------------

def _lsq(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Ordinary least squares y = a + b x; (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def fit_alpha_beta(sizes, times, small_max: int = SMALL_MAX) -> dict:
    """Fit time = alpha + beta_bytes * bytes to message sizes (bytes) and times (s).

    Two least-squares fits: over all sizes ("all", whose slope is the bandwidth
    term, the big messages dominating) and over the sizes <= small_max
    ("small", whose intercept is the start-up latency). The result takes alpha
    from the small fit (the smallest small-message time when that intercept is
    not positive) and beta_bytes from the all-sizes fit; both fits are
    reported. beta (s per 4-byte word) = WORD_BYTES * beta_bytes."""
    pts = sorted((float(s), float(t)) for s, t in zip(sizes, times))
    if len(pts) < 2 or len({s for s, _ in pts}) < 2:
        raise ValueError("fit_alpha_beta needs times for at least two message sizes")
    if any(not (math.isfinite(t) and t > 0) for _, t in pts):
        raise ValueError("fit_alpha_beta: times must be positive and finite")
    xs, ys = [s for s, _ in pts], [t for _, t in pts]
    a_all, b_all = _lsq(xs, ys)
    small = [(s, t) for s, t in pts if s <= small_max]
    if len({s for s, _ in small}) < 2:
        small = pts[:2]
    a_small, b_small = _lsq([s for s, _ in small], [t for _, t in small])
    alpha = a_small if a_small > 0 else min(t for _, t in small)
    beta_bytes = b_all
    if not beta_bytes > 0:
        # a flat all-sizes fit: fall back on the largest message's time per byte
        s_max, t_max = pts[-1]
        beta_bytes = max(t_max - alpha, t_max * 1e-3) / s_max
    return {
        "alpha": alpha,
        "beta_bytes": beta_bytes,
        "beta": beta_bytes * WORD_BYTES,
        "bandwidth": 1.0 / beta_bytes,
        "fits": {
            "all": {"alpha": a_all, "beta_bytes": b_all, "sizes": [min(xs), max(xs)]},
            "small": {"alpha": a_small, "beta_bytes": b_small, "sizes": [small[0][0], small[-1][0]]},
        },
        "alpha_from": "small" if a_small > 0 else "min small-message time",
    }


# ---------------------------------------------------------------------------
# network: mpiexec -n P python -m gdsl.cost.calibrate_worker
# ---------------------------------------------------------------------------

def find_mpiexec() -> str:
    """mpiexec next to the running Python (a virtualenv's mpich), else on PATH."""
    here = Path(sys.executable).parent
    for name in ("mpiexec", "mpirun"):
        cand = here / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    raise GdslError("gdsl calibrate needs an MPI launcher: no mpiexec next to "
                    f"{sys.executable} or on PATH (pip install mpi4py mpich)")


def _check_mpi4py() -> None:
    if importlib.util.find_spec("mpi4py") is None:
        raise GdslError(f"gdsl calibrate needs mpi4py in {sys.executable} to measure alpha and beta "
                        "(pip install mpi4py mpich)")


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


def measure_network(np_: int = 2, sizes=None, reps: int = 50, warmup: int = 5,
                    timeout: float = NETWORK_TIMEOUT_S) -> dict:
    """Run the ping-pong and allreduce worker under ``mpiexec -n np_`` and fit
    alpha and beta. Returns the worker's raw JSON plus "fit" (ping-pong, the
    one the profile uses) and "allreduce_fit"."""
    if np_ < 2:
        raise GdslError(f"--np must be at least 2 to measure messages between ranks, got {np_}")
    _check_mpi4py()
    mpiexec = find_mpiexec()
    sizes = list(sizes or FULL_SIZES)
    cmd = [mpiexec, "-n", str(np_), sys.executable, "-m", "gdsl.cost.calibrate_worker",
           "--sizes", ",".join(str(int(s)) for s in sizes), "--reps", str(reps), "--warmup", str(warmup)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_package_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")     # Open MPI: 2 ranks on fewer slots
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    shown = " ".join(cmd[:6])
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    except OSError as e:
        raise GdslError(f"cannot start {mpiexec}: {e.strerror or e}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # mpiexec and the ranks it started
        except OSError:
            proc.kill()
        proc.communicate()
        raise GdslError(f"the MPI measurement ({shown} ...) did not finish in {timeout:g} s") from None
    except KeyboardInterrupt:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        raise
    result = None
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    if proc.returncode != 0 or result is None or "error" in (result or {}):
        why = (result or {}).get("error") or _tail(err) or _tail(out) or "no output"
        raise GdslError(f"the MPI measurement failed ({shown} ..., exit {proc.returncode}): {why}")
    pp, ar = result["pingpong"], result["allreduce"]
    result["fit"] = fit_alpha_beta(pp["sizes"], pp["times"])
    result["allreduce_fit"] = fit_alpha_beta(ar["sizes"], ar["times"])
    result["command"] = " ".join([Path(mpiexec).name, "-n", str(np_), "python -m gdsl.cost.calibrate_worker"])
    return result


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(ln.strip() for ln in (text or "").strip().splitlines()[-lines:] if ln.strip())


# ---------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------

def _best(fn, reps: int) -> tuple[float, list[float]]:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), ts


def random_graph(n: int, degree: float, seed: int = 0):
    """Distinct random edges (src, dst) of about n * degree, sorted by (dst, src)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    e = int(n * degree)
    key = torch.unique(torch.randint(0, n, (e,), generator=gen) * n + torch.randint(0, n, (e,), generator=gen))
    return key % n, key // n      # src, dst: sorted by dst, then src


def measure_gemm(n: int = 20000, k: int = 128, m: int = 128, reps: int = 5) -> dict:
    """torch.mm rate in flop/s, 2 n k m flops per product (the model's count)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, k, generator=gen), torch.randn(k, m, generator=gen)
    torch.mm(a, b)                                         # warm-up
    best, ts = _best(lambda: torch.mm(a, b), reps)
    flops = 2.0 * n * k * m
    return {"gamma_gemm": flops / best, "kernel": "torch.mm", "n": n, "k": k, "m": m, "flops": flops,
            "times": ts, "torch_threads": torch.get_num_threads()}


def measure_spmm(backend: str, n: int = 50000, degree: float = 10, f: int = 64, reps: int = 5) -> dict:
    """One weighted SpMM A X on a random graph, in bytes/s of the model's traffic
    4 (2 nnz + nnz f + N f)."""
    import torch

    src, dst = random_graph(n, degree)
    nnz = int(src.numel())
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, f, generator=gen)
    w = torch.rand(nnz, generator=gen)
    info: dict = {}
    if backend == "reference":
        crow = torch.zeros(n + 1, dtype=torch.int64)
        crow[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
        with warnings.catch_warnings():     # "sparse CSR support is in beta"
            warnings.simplefilter("ignore")
            a = torch.sparse_csr_tensor(crow, src, w, (n, n), check_invariants=False)
        run = lambda: torch.sparse.mm(a, x)
        info["kernel"] = "torch.sparse.mm (CSR)"
        with torch.no_grad():
            run()                                          # warm-up
            best, ts = _best(run, reps)
    elif backend == "numba":
        try:
            import numba

            from gdsl.backends.numba import (
                COMPILE_FROM_CACHE,
                COMPILE_TIMES,
                CSRGraph,
                aggregate,
            )
        except ImportError as e:
            raise GdslError(f"the numba backend needs numba ({e}); pip install 'gdsl[numba]'") from None
        g = CSRGraph.build(src, dst, n)
        run = lambda: aggregate(g, x, w, "mul", "sum")
        before = dict(COMPILE_TIMES)
        with torch.no_grad():
            t0 = time.perf_counter()
            run()                                          # compile or load from the disk cache
            first = time.perf_counter() - t0
            best, ts = _best(run, reps)
        new = {k: v - before.get(k, 0.0) for k, v in COMPILE_TIMES.items() if v != before.get(k)}
        info.update({"kernel": "gdsl numba aggregate(msg=mul, reduce=sum)",
                     "compile_s": sum(new.values()), "first_call_s": first,
                     "compile_from_cache": bool(new) and all(COMPILE_FROM_CACHE.get(k) for k in new),
                     "numba_threads": numba.get_num_threads()})
    else:
        raise GdslError(f"unknown backend '{backend}' (one of {', '.join(BACKENDS)})")
    traffic = 4.0 * (2 * nnz + nnz * f + n * f)
    return {"gamma_spmm": traffic / best, "n": n, "nnz": nnz, "f": f, "bytes": traffic, "times": ts,
            "torch_threads": torch.get_num_threads(), **info}


def measure_kernels(backend: str, quick: bool = False, gemm: dict | None = None) -> dict:
    """gamma_spmm and gamma_gemm for one backend. Both backends run dense
    products with torch.mm, so a GEMM measurement can be shared (`gemm`)."""
    if quick:
        spmm = measure_spmm(backend, n=50000, degree=10, f=64, reps=3)
    else:
        spmm = measure_spmm(backend, n=200000, degree=10, f=64, reps=5)
    gemm = gemm or (measure_gemm(20000, reps=3) if quick else measure_gemm(100000, reps=5))
    return {"gamma_spmm": spmm["gamma_spmm"], "gamma_gemm": gemm["gamma_gemm"], "spmm": spmm, "gemm": gemm}


# ---------------------------------------------------------------------------
# the profile
# ---------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    info = {"hostname": socket.gethostname(), "cpu": _cpu_model(), "cores": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version()}
    if hasattr(os, "sched_getaffinity"):
        info["cores_available"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return info


def calibrate(np_: int = 2, backends=BACKENDS, quick: bool = False, progress=None) -> dict:
    """Measure and return the profile as a dict (see :func:`write_profile`).
    The top-level gamma_spmm / gamma_gemm are the fastest measured backend's
    (named by "backend"); every backend's are under per_backend."""
    say = progress or (lambda msg: None)
    backends = tuple(backends)
    if not backends:
        raise GdslError("calibrate: no backend to measure")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise GdslError(f"unknown backend '{unknown[0]}' (one of {', '.join(BACKENDS)})")
    load_before = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    sizes = QUICK_SIZES if quick else FULL_SIZES
    say(f"measuring alpha and beta: ping-pong and allreduce, {len(sizes)} sizes, mpiexec -n {np_}")
    net = measure_network(np_, sizes, reps=50 if quick else 100)
    per_backend: dict = {}
    gemm = None
    for b in backends:
        say(f"measuring SpMM and GEMM rates: backend {b}")
        per_backend[b] = measure_kernels(b, quick, gemm)
        gemm = per_backend[b]["gemm"]
    primary = max(per_backend, key=lambda b: per_backend[b]["gamma_spmm"])
    info = machine_info()
    if load_before is not None:
        info["load_average"] = load_before            # before measuring, which adds its own load
    warns = contention_warnings(net, info)
    now = _dt.datetime.now(_dt.timezone.utc).astimezone()
    out = {
        "name": f"calibrated-{info['hostname']}",
        "machine": info,
        "date": now.isoformat(timespec="seconds"),
        "alpha": net["fit"]["alpha"],
        "beta": net["fit"]["beta"],
        "gamma_spmm": per_backend[primary]["gamma_spmm"],
        "gamma_gemm": per_backend[primary]["gamma_gemm"],
        "backend": primary,
        "per_backend": {b: {"gamma_spmm": v["gamma_spmm"], "gamma_gemm": v["gamma_gemm"],
                            **({"compile_s": v["spmm"]["compile_s"],
                                "compile_from_cache": v["spmm"]["compile_from_cache"]}
                               if "compile_s" in v["spmm"] else {})}
                        for b, v in per_backend.items()},
        "source": f"gdsl calibrate --np {np_}{' --quick' if quick else ''} --backend "
                  f"{'all' if set(backends) == set(BACKENDS) else ','.join(backends)}",
        "units": {"alpha": "s/message", "beta": f"s/word ({WORD_BYTES}-byte word)",
                  "gamma_spmm": "bytes/s of 4(2 nnz + nnz f + N f)", "gamma_gemm": "flop/s of 2 N k m"},
        "network": {
            "np": net["np"], "hosts": net["hosts"], "mpi_library": net["mpi_library"],
            "same_machine": len(set(net["hosts"])) == 1, "command": net["command"],
            "pingpong_fit": net["fit"], "allreduce_fit": net["allreduce_fit"],
        },
        "warnings": warns,
        "raw": {"pingpong": net["pingpong"], "allreduce": net["allreduce"],
                "kernels": {b: {"spmm": v["spmm"], "gemm": v["gemm"]} for b, v in per_backend.items()}},
    }
    return out


def contention_warnings(net: dict, info: dict) -> list[str]:
    """Signs that other processes shared the cores while measuring: the
    ping-pong ranks poll, so a descheduled rank turns microseconds into a
    scheduler time slice."""
    out = []
    pp = net["pingpong"]
    small = [(t, lo) for s, t, lo in zip(pp["sizes"], pp["times"], pp.get("min", pp["times"])) if s <= SMALL_MAX]
    if small:
        ratio = max(t / lo for t, lo in small if lo > 0)
        if ratio > 5:
            out.append(f"small-message ping-pong medians are up to {ratio:.0f}x their minimum: the ranks were "
                       "descheduled (other processes on the cores?), so alpha is inflated; rerun on an idle machine")
    load, cores = info.get("load_average"), info.get("cores_available") or info.get("cores")
    if load and cores and load[0] > cores:
        out.append(f"load average {load[0]:.2f} on {cores} cores before measuring: the timings include waiting "
                   "for the CPU; rerun on an idle machine")
    return out


def write_profile(profile: dict, path=None) -> Path:
    """Validate and write `profile` as JSON to `path` (default: the default
    profile location) atomically: a temporary file in the same folder, then
    os.replace. Returns the path written."""
    p = Path(path).expanduser() if path is not None else default_profile_path()
    profile_from_dict(profile, str(p))          # never write a profile load_profile would reject
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)           # mkstemp makes it 0600
            with os.fdopen(fd, "w") as fh:
                json.dump(profile, fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except IsADirectoryError:
        raise GdslError(f"{p}: is a directory; give a file name with --out") from None
    except OSError as e:
        raise GdslError(f"cannot write the profile to {p}: {e.strerror or e}") from None
    return p


def summary(profile: dict, path: Path | None = None) -> str:
    """The table `gdsl calibrate` prints."""
    lines = []
    net = profile.get("network")
    m = profile["machine"]
    if net:
        where = "one machine" if net.get("same_machine", True) else f"{len(set(net['hosts']))} hosts"
        lines.append(f"machine: {m['hostname']}, {m['cpu']}, {m['cores']} cores; MPI: {net['mpi_library']}")
        if net.get("same_machine", True):
            lines.append(f"note: the {net['np']} ranks ran on one machine and share its cores and memory, so alpha "
                         "and beta are intra-node shared-memory MPI, not a network")
        else:
            lines.append(f"note: the {net['np']} ranks ran on {where}")
        lines.append("")
        lines.append(f"{'network':<22}{'alpha':>10}{'bandwidth':>13}{'beta':>16}")
        for label, fit in (("ping-pong (used)", net["pingpong_fit"]), ("allreduce", net["allreduce_fit"])):
            # a space before each column, so wide values (8.32e+03) stay apart
            lines.append(f"{label:<22}{fit['alpha'] * 1e6:>7.3g} us {fit['bandwidth'] / 1e9:>7.3g} GB/s"
                         f" {fit['beta']:>9.3g} s/word")
        lines.append("")
    lines.append(f"{'backend':<22}{'SpMM':>10}{'GEMM':>16}   compile")
    for b, v in profile["per_backend"].items():
        comp = "-"
        if "compile_s" in v:
            comp = f"{v['compile_s']:.2f} s" + (" (disk cache)" if v.get("compile_from_cache") else "")
        mark = " (used)" if b == profile.get("backend") else ""
        lines.append(f"{b + mark:<21} {v['gamma_spmm'] / 1e9:>5.3g} GB/s {v['gamma_gemm'] / 1e9:>8.3g} GFLOP/s   {comp}")
    for w in profile.get("warnings", []):
        lines.append(f"warning: {w}")
    if path is not None:
        lines.append("")
        if Path(path).expanduser().resolve() == default_profile_path().resolve():
            lines.append(f"wrote {path}: `gdsl plan` and `gdsl compile --np` use it from now on")
        else:
            lines.append(f"wrote {path}: use it with `gdsl plan --profile {path}` or GDSL_PROFILE={path} "
                         f"(the default location is {default_profile_path()})")
    return "\n".join(lines)
