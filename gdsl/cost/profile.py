"""Machine profiles and the time model.

predicted time per epoch = SpMM bytes / gamma_spmm + GEMM flops / gamma_gemm
                           + alpha * messages + beta * words
(alpha-beta model of CAGNET §III-A; kernel rates per gdsl ARCHITECTURE "Cost
model"). A strategy whose communication overlaps computation (DistGNN cd-r,
§5.3) takes the larger of the two instead of their sum.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import sympy

from gdsl.cost import symbols as sy
from gdsl.cost.record import Cost, _keys, _subs
from gdsl.cost.symbols import Expr, WORD_BYTES, is_num, smax


@dataclass(frozen=True)
class Profile:
    """alpha (s/message), beta (s/word), gamma_spmm (bytes/s), gamma_gemm (flop/s)."""

    name: str
    alpha: float
    beta: float
    gamma_spmm: float
    gamma_gemm: float
    source: str = ""
    path: str = ""          # the file it was loaded from ("" for a built-in profile)

    def values(self) -> dict:
        return {sy.alpha: self.alpha, sy.beta: self.beta,
                sy.gamma_spmm: self.gamma_spmm, sy.gamma_gemm: self.gamma_gemm}

    @property
    def bandwidth(self) -> float:
        """Bytes per second implied by beta."""
        return WORD_BYTES / self.beta


# Kernel rates measured on the development machine (2-core AMD EPYC VM,
# torch 2.13 CPU, 2 threads): torch.mm on N x 128 @ 128 x 128 .. N x 256 @
# 256 x 256 with N = 200,000 ran at 22-28 GFLOP/s; torch.sparse.mm (CSR) on a
# random graph (N = 100,000-200,000, degree 16-50, width 16-128) at 1.9-3.2
# GB/s of the traffic the model counts (4 * (2 nnz + nnz f + N f) bytes).
# Network: Mellanox HDR InfiniBand (the interconnect of DistGNN §6.1's
# cluster), 200 Gb/s = 25 GB/s per direction, so beta = 4 B / 25 GB/s; alpha
# = 2 us is an assumed MPI small-message latency on such a fabric (none of the
# papers in shared/papers reports one). `gdsl calibrate` should replace all four.
DEFAULT_PROFILE = Profile(
    name="dev-cpu+hdr",
    alpha=2e-6,
    beta=WORD_BYTES / 25e9,
    gamma_spmm=2.5e9,
    gamma_gemm=25e9,
    source="kernel rates measured with torch on the 2-core dev VM; HDR InfiniBand 25 GB/s; alpha assumed",
)

# The machine of CAGNET's experiments (§V-B): V100 GPUs on Summit, each
# socket's 3 GPUs sharing 12.5 GB/s of InfiniBand injection bandwidth, so
# beta = 4 B / 12.5 GB/s. Kernel rates are taken from the V100 (SXM2)
# datasheet, not measured: 15.7 TFLOP/s FP32 peak, of which cuBLAS SGEMM
# reaches about 14; 900 GB/s HBM2, of which an SpMM's gathers are assumed to
# reach half. alpha = 10 us is an assumed NCCL collective start-up. Use it to
# reason about the GPU papers' regime, where communication dominates.
SUMMIT_V100_PROFILE = Profile(
    name="summit-v100",
    alpha=10e-6,
    beta=WORD_BYTES / 12.5e9,
    gamma_spmm=450e9,
    gamma_gemm=14e12,
    source="CAGNET §V-B network; V100 datasheet rates (derated); alpha assumed",
)

PROFILES = {p.name: p for p in (DEFAULT_PROFILE, SUMMIT_V100_PROFILE)}

# ---------------------------------------------------------------------------
# Profile files (written by `gdsl calibrate`, gdsl/cost/calibrate.py)
# ---------------------------------------------------------------------------

PROFILE_KEYS = ("alpha", "beta", "gamma_spmm", "gamma_gemm")


def default_profile_path() -> Path:
    """$GDSL_PROFILE if set, else $XDG_CONFIG_HOME/gdsl/profile.json (~/.config by default)."""
    env = os.environ.get("GDSL_PROFILE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gdsl" / "profile.json"


def profile_from_dict(data, where: str = "<profile>", backend: str | None = None) -> Profile:
    """A Profile from a profile file's JSON object; GdslError naming `where` and
    the problem when it is not one. `backend` takes gamma_spmm and gamma_gemm
    from ``per_backend[backend]`` instead of the top level."""
    from gdsl.diagnostics import GdslError

    def bad(msg: str) -> GdslError:
        return GdslError(f"{where}: not a valid gdsl profile: {msg} (rerun `gdsl calibrate`, or remove the file "
                         f"to use the built-in default)")

    if not isinstance(data, dict):
        raise bad(f"expected a JSON object, got {type(data).__name__}")
    src = dict(data)
    if backend is not None:
        per = data.get("per_backend")
        if not isinstance(per, dict) or not isinstance(per.get(backend), dict):
            have = ", ".join(sorted(per)) if isinstance(per, dict) else "none"
            raise bad(f"no rates for backend '{backend}' under per_backend (has: {have})")
        src.update({k: per[backend][k] for k in ("gamma_spmm", "gamma_gemm") if k in per[backend]})
    missing = [k for k in PROFILE_KEYS if k not in src]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    vals = {}
    for k in PROFILE_KEYS:
        v = src[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise bad(f"{k} must be a number, got {json.dumps(v)}")
        try:
            f = float(v)   # an int beyond float's range overflows here
        except OverflowError:
            raise bad(f"{k} must be positive and finite, got an integer of {len(str(v))} digits") from None
        if not math.isfinite(f) or f <= 0 or f < 1e-300:   # a denormal rate predicts inf seconds
            raise bad(f"{k} must be positive and finite (at least 1e-300), got {v}")
        vals[k] = f
    name = data.get("name") or Path(where).stem
    source = data.get("source") or ""
    if data.get("date"):
        source = f"{source}, {data['date']}" if source else str(data["date"])
    return Profile(name=str(name), source=str(source), path=str(where), **vals)


def load_profile(path=None, backend: str | None = None) -> Profile:
    """The machine profile: `path` if given (it must exist), else the default
    location (:func:`default_profile_path`) when that file exists, else
    DEFAULT_PROFILE. A file that is not a valid profile is a GdslError that
    names it and says what is wrong."""
    from gdsl.diagnostics import GdslError

    if path is not None:
        p = Path(path).expanduser()
        if not p.exists():
            raise GdslError(f"{p}: no such profile file (make one with `gdsl calibrate --out {p}`)")
    else:
        p = default_profile_path()
        if not p.exists():
            return DEFAULT_PROFILE
    try:
        text = p.read_text()
    except IsADirectoryError:
        raise GdslError(f"{p}: is a directory, not a profile file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise GdslError(f"{p}: cannot read the profile: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise GdslError(f"{p}: not a valid gdsl profile: invalid JSON ({e.msg} at line {e.lineno} column {e.colno}) "
                        f"(rerun `gdsl calibrate`, or remove the file to use the built-in default)") from None
    except RecursionError:   # was: an internal error
        raise GdslError(f"{p}: not a valid gdsl profile: nested too deeply (rerun `gdsl calibrate`, or remove the "
                        f"file to use the built-in default)") from None
    return profile_from_dict(data, str(p), backend)


def describe_profile(profile: Profile) -> str:
    """One line saying which profile a prediction used."""
    if profile.path:
        return f"profile: {profile.name} from {profile.path}" + (f" ({profile.source})" if profile.source else "")
    if profile is DEFAULT_PROFILE or profile == DEFAULT_PROFILE:
        return (f"profile: {profile.name} (built-in default; `gdsl calibrate` measures this machine into "
                f"{default_profile_path()})")
    return f"profile: {profile.name} (built-in)"


def compute_time(cost: Cost) -> Expr:
    e = cost.epoch
    return e.sparse_bytes / sy.gamma_spmm + e.dense_flops / sy.gamma_gemm


def comm_time(cost: Cost) -> Expr:
    e = cost.epoch
    return sy.alpha * e.messages + sy.beta * e.words


def predict_time(cost: Cost, profile: Profile | None = DEFAULT_PROFILE) -> Expr:
    """Seconds per epoch; a float when the cost is numeric and a profile is given,
    otherwise an expression in alpha, beta, gamma_spmm, gamma_gemm and the sizes."""
    comp, comm = compute_time(cost), comm_time(cost)
    if cost.overlap:
        hidden = [o for o in cost.ops if o.overlapped]
        c_hidden = sy.alpha * sum((o.messages * o.count for o in hidden), 0) + \
            sy.beta * sum((o.words * o.count for o in hidden), 0)
        t = smax(comp, c_hidden) + (comm - c_hidden)
    else:
        t = comp + comm
    if profile is None:
        return t
    return _subs(t, profile.values())


def evaluate(x, values: dict):
    """Substitute numbers: a Cost gives a Cost of numbers, an expression a float
    (or what remains symbolic). Keys may be symbols or their names."""
    if isinstance(x, Cost):
        return x.subs(values)
    vals = _keys(values)
    if is_num(x) and not isinstance(x, sympy.Basic):
        return x
    return _subs(x, vals)
