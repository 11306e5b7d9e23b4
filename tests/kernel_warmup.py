"""The Numba kernels the test suite uses, as gdsl.backends.numba.warm requests.

On a clean checkout (CI) Numba's disk cache is empty and every kernel
specialisation costs 1-6 s of one core to compile.  conftest.py starts
``warm_in_background(REQUESTS)`` when the session starts: one low-priority
process compiles them on the core the (mostly single-threaded) early tests
leave idle, in this order: first what the programs use on the numba backend
(float32, the early test files train them), then the variant matrix of
tests/test_numba_kernels.py (whose module fixtures call ``warm(REQUESTS)``
too, so that file alone also compiles them in parallel workers).  A kernel
missing here is still compiled when first used: the list only moves work
earlier, it changes no result.

Plain data (no torch import): dtypes are names.
"""
from __future__ import annotations

import itertools

F32, F64 = "float32", "float64"

# tests/test_numba_kernels.py: (msg, reduce, to, edge-data kind)


def _variants():
    out = []
    for reduce, to in itertools.product(("sum", "max", "min", "mean"), ("dst", "src")):
        out.append(("copy_src", reduce, to, "copy_src"))
        out.append(("copy_edge", reduce, to, "copy_edge"))
        for msg, kind in itertools.product(("add", "sub", "mul", "div"), ("scalar", "head", "full")):
            out.append((msg, reduce, to, kind))
    return out


VARIANTS = _variants()
F32_VARIANTS = [("copy_src", "sum", "dst", "copy_src"), ("copy_src", "max", "src", "copy_src"),
                ("mul", "sum", "dst", "head"), ("mul", "mean", "src", "scalar"), ("div", "max", "dst", "full")]
SCALE_CASES = [("copy_src", "copy_src", "sum"), ("copy_src", "copy_src", "mean"), ("mul", "scalar", "sum"),
               ("mul", "head", "mean"), ("mul", "full", "sum")]

_BCAST = {"copy_src": "none", "copy_edge": "none", "scalar": "scalar", "head": "head", "full": "full"}


def _agg(msg, reduce, kind, dtype, **flags):
    return ("aggregate", {"msg": msg, "reduce": reduce, "bcast": _BCAST[kind], **flags}, dtype)


_EPILOGUES = [{"act": a, "bias": b, "drop": d} for a in ("none", "relu", "elu")
              for b in (False, True) for d in (False, True) if (a != "none" or d)]


def _programs() -> list:
    """What gcn / gat / sage and the other test programs run on the numba
    backend: float32, plus float64 for the double-precision module tests."""
    reqs = [("epilogue", e, F32) for e in _EPILOGUES]
    reqs += [_agg("mul", "sum", "scalar", F32, wperm=True), _agg("mul", "sum", "scalar", F32),
             _agg("copy_src", "sum", "copy_src", F32), _agg("copy_src", "mean", "copy_src", F32),
             _agg("copy_src", "sum", "copy_src", F32, xscale=True), _agg("copy_edge", "sum", "copy_edge", F32),
             ("gat_aggregate", {}, F32), ("head_dot", {}, F32), ("edge_softmax", {}, F32),
             ("sddmm", {"op": "dot"}, F32), ("sddmm", {"op": "add"}, F32), _agg("mul", "sum", "head", F32)]
    reqs += [_agg(m, r, k, F32) for m, k in (("copy_src", "copy_src"), ("copy_edge", "copy_edge"))
             for r in ("max", "min")]
    reqs += [_agg("mul", "sum", "scalar", F64, wperm=True)] + [("epilogue", e, F64) for e in _EPILOGUES]
    return reqs


def _kernel_tests() -> list:
    """tests/test_numba_kernels.py: every variant in float64 (forward and
    gradcheck), a float32 subset, fused scales, CSR-ordered edge data,
    cache-blocked and prefetching kernels."""
    reqs = [_agg(m, r, k, F64) for m, r, k in sorted({(m, r, k) for m, r, _, k in VARIANTS})]
    reqs += [("aggregate", {"msg": "copy_src", "reduce": "sum", "index_dtype": "int64"}, F64)]
    for msg, kind in (("copy_src", "copy_src"), ("mul", "head")):
        reqs += [_agg(msg, r, kind, F64, blocked=True) for r in ("sum", "mean")]
    reqs += [("sddmm", {"op": o}, F64) for o in ("dot", "add", "sub", "mul", "div")]
    reqs += [("edge_softmax", {}, F64), ("gat_aggregate", {}, F64), ("head_dot", {}, F64)]
    reqs += [_agg(m, r, k, F32) for m, r, _, k in F32_VARIANTS]
    for msg, kind, reduce in SCALE_CASES:
        for flags in ({"xscale": True}, {"oscale": True}, {"xscale": True, "oscale": True}):
            reqs.append(_agg(msg, reduce, kind, F64, **flags))
    for blocked in (False, True):
        reqs += [_agg("mul", "sum", "scalar", dt, wperm=True, blocked=blocked, **f)
                 for f in ({}, {"oscale": True}, {"xscale": True, "oscale": True}) for dt in (F64, F32)]
        reqs += [_agg("copy_src", "mean", "copy_src", F64, xscale=True, blocked=blocked)]
    for kind, msg in (("copy_src", "copy_src"), ("scalar", "mul"), ("head", "mul"), ("full", "add"),
                      ("full", "div")):
        reqs += [_agg(msg, r, kind, F64, prefetch=True) for r in ("sum", "mean")]
    reqs += [_agg("mul", "sum", "scalar", F64, wperm=True, prefetch=True, xscale=True, oscale=True),
             _agg("copy_src", "mean", "copy_src", F64, xscale=True, prefetch=True)]
    return reqs


def _dedup(reqs: list) -> list:
    seen, out = set(), []
    for op, params, dt in reqs:
        key = (op, tuple(sorted(params.items())), dt)
        if key not in seen:
            seen.add(key)
            out.append((op, params, dt))
    return out


REQUESTS = _dedup(_programs() + _kernel_tests())
