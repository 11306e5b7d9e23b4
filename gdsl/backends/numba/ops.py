"""The fused graph ops as torch.autograd.Functions over generated Numba kernels.

Public functions (plain torch tensors in and out, independent of the IR):
aggregate (with constant vertex / row scales fused into the kernel, and
constant edge data read in CSR order: permute_edge_data), sddmm,
edge_softmax and gat_aggregate (the dense ops are in dense.py).  Data
is computed in float32 (accumulating in float32) or float64 (used by
gradcheck), dispatched on the inputs' dtype.  Backward passes compute only
the gradients that ctx.needs_input_grad asks for.

Every parallel kernel runs on torch's intra-op thread count (_threads), its
prange handing out degree-balanced row chunks dynamically, and writes its
large outputs into huge-page mappings (_empty).
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch

from gdsl.backends.maxmin import maxmin_backward
from gdsl.backends.numba import codegen
from gdsl.backends.numba.codegen import BINARY, MSGS, SDDMM_OPS, get_kernel
from gdsl.backends.numba.graph import CSR, CSRGraph
from gdsl.backends.once import KernelFunction, differentiable_once
from gdsl.runtime.memory import on_release

_FLOATS = (torch.float32, torch.float64)
_NP = {torch.float32: np.float32, torch.float64: np.float64}
_DUMMY: dict = {}

# --------------------------------------------------------------------------
# cache blocking (DistGNN Alg. 2)
# --------------------------------------------------------------------------
# Measured on this project's machine: 2-core AMD EPYC VM (L2 1 MiB per core,
# L3 32 MiB shared), numba 0.68.1, float32, a uniform random graph with
# N = 100k, E = 2M (avg degree 20), F = 128 (x = 51 MB, larger than L3), the
# forward kernel alone, blocked and unblocked calls interleaved, 25-40 rounds
# each, the machine shared with other jobs (load 4-5, so medians):
#   copy_src-sum  unblocked 202-205 ms | B=16384 (nB=7) 170 | B=32768 (nB=4) 163-164
#                 | B=50000 (nB=2) 171 | B=8192 211 | B=4096 323 | B=2048 440
#   mul-sum (w [E]) unblocked 241-251 ms | B=32768 236-242 | B=16384 241 | B=4096 377
# i.e. about 1.25x for copy_src and 1.02-1.04x for mul with blocks of about
# half the last-level cache, and much slower with L2-sized blocks (each block
# is one more pass over the output rows).  On a power-law graph whose edges
# come from few sources (zipf, 6.7k distinct sources of 100k) forced blocking
# was 1.3-1.8x slower, and the cache model below declines it there (the active
# source rows fit in cache).  So blocking is kept, in "auto" mode: only for
# copy_src / mul sum (and mean) aggregation, only when the active rows of x
# exceed half the last-level cache, with blocks of half the last-level cache.
# Since software prefetch (PREFETCH below), auto mode no longer blocks
# copy_src sum / mean where it prefetches: re-measured with the unrolled
# kernel of today, the blocked kernel was 1.6-2.8x slower than the
# prefetched unblocked one on uniform100k and rmat1m (bench/PREFETCH.md).
CACHE_BLOCKING = "auto"   # "off" | "auto" | "on"; see set_cache_blocking
_BLOCK_OVERRIDE: int | None = None


def set_cache_blocking(mode: str, block: int | None = None) -> tuple[str, int | None]:
    """mode "off": never block; "on": always block (with `block` source
    vertices per block, or the size from the cache model); "auto" (default):
    block when the model says the gathered features do not fit in cache.
    Returns the previous (mode, block)."""
    global CACHE_BLOCKING, _BLOCK_OVERRIDE
    if mode not in ("off", "auto", "on"):
        raise ValueError(f"cache blocking mode must be off, auto or on, got {mode!r}")
    prev = (CACHE_BLOCKING, _BLOCK_OVERRIDE)
    CACHE_BLOCKING, _BLOCK_OVERRIDE = mode, block
    return prev


@functools.lru_cache(maxsize=1)
def _cache_bytes() -> int:
    """Size of the last-level cache (the block of x is shared by all threads)."""
    best = 0
    try:
        import glob
        for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
            with open(d + "/type") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(d + "/size") as f:
                s = f.read().strip()
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(s[-1], 1)
            best = max(best, int(s.rstrip("KMG")) * mult)
    except OSError:
        pass
    return best or 8 * 1024**2


def block_size_for(csr: CSR, row_bytes: int) -> int | None:
    """Source vertices per block such that the active rows of one block of x
    take about half the last-level cache; None when x fits anyway."""
    if _BLOCK_OVERRIDE is not None:
        return _BLOCK_OVERRIDE
    n_src = csr.max_col() + 1 if csr.num_edges else 0
    if n_src == 0:
        return None
    active = max(1e-9, csr.active_fraction())
    budget = _cache_bytes() // 2
    block = int(budget / (row_bytes * active))
    if block >= n_src:
        return None
    return max(block, 1)


# --------------------------------------------------------------------------
# software prefetch of the gathered rows (codegen.PREFETCH_DISTANCE)
# --------------------------------------------------------------------------
# Measured (bench/PREFETCH.md): copy_src sum, f = 128 float32, 2 threads,
# interleaved A/B on the shared VM, the kernels alone: uniform100k (x 51 MB)
# unprefetched 68 ms, prefetched 46-48 ms, cache-blocked (the old auto
# choice) slower than both; rmat1m (x 512 MB, 286 MB active) 612 / 380-400
# ms, blocked 1.5-2.8x the prefetched time; blocked + prefetch was worse
# than blocked (the prefetched slots j + 16 lie in other blocks).  On
# graphs whose x fits the cache the effect is within noise (uniform20k,
# rmat20k: 0.9-1.05x), so "auto" prefetches copy_src and mul sums / means
# only where the cache model would block (active rows of x over half the
# last-level cache) and x is at least PREFETCH_MIN_BYTES, and then does not
# block.  mul (src * one weight per edge: GCN's normalised aggregation, DGL's
# u_mul_e) joined on 2026-11-21: src_mul_edge_sum, prefetched vs blocked,
# same session, 2 threads: rmat1m 190 vs 526 ms, uniform100k 20 vs 27 ms;
# and no block pointers ((blocks + 1) x N ints, 68 MiB on rmat1m).
# (Below that size, on a machine with a small cache, blocking was not
# measured against prefetching and the blocking model still decides.)
# "on" prefetches in every unblocked sum of a message that reads x
# (copy_src, add, sub, mul, div), at any size, and leaves the blocking
# decision to CACHE_BLOCKING alone (the blocked kernel never prefetches);
# "off" never prefetches.  $GDSL_NUMBA_PREFETCH sets the initial mode.
PREFETCH = os.environ.get("GDSL_NUMBA_PREFETCH", "auto")
PREFETCH_MIN_BYTES = 16 << 20


def set_prefetch(mode: str) -> str:
    """mode "auto" (default), "on" or "off" (see PREFETCH); returns the previous mode."""
    global PREFETCH
    if mode not in ("off", "auto", "on"):
        raise ValueError(f"prefetch mode must be off, auto or on, got {mode!r}")
    prev, PREFETCH = PREFETCH, mode
    return prev


def _prefetch_plan(csr: CSR, msg: str, row_bytes: int, n_src: int) -> int:
    """Lines to prefetch per gathered row (0: none) for a sum aggregation."""
    if PREFETCH == "off" or msg == "copy_edge" or csr.num_edges == 0:
        return 0
    if PREFETCH == "on":
        return codegen.prefetch_lines(row_bytes)
    if msg not in ("copy_src", "mul") or n_src * row_bytes < PREFETCH_MIN_BYTES:
        return 0
    # block_size_for's model (without a forced block size): the active
    # source rows outgrow half the last-level cache
    active_bytes = (csr.max_col() + 1) * max(1e-9, csr.active_fraction()) * row_bytes
    return codegen.prefetch_lines(row_bytes) if active_bytes > _cache_bytes() // 2 else 0


# --------------------------------------------------------------------------
# raw kernel launchers (no autograd)
# --------------------------------------------------------------------------

# Below this many element operations (slots x features + rows x features) a
# kernel runs on the calling thread only: a parallel region costs tens of
# microseconds to start, and far more (its tail) when the cores are shared.
SERIAL_BELOW = 32768


def _threads() -> int:
    """Threads for a parallel kernel: torch's intra-op thread count (so that
    the Numba and torch parts of a model use the same cores), at most the
    size of Numba's pool."""
    import numba
    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


# prange hands out its iterations (our degree-balanced row chunks, about 16
# per thread) one at a time, dynamically, instead of in equal static blocks
# per thread: with power-law degrees, and on a machine shared with other
# processes where one of the threads may get less of its core, the threads
# that are ahead take the remaining chunks.
PARALLEL_CHUNKSIZE = 1


def _launch(kernel, work: int, *args):
    import numba
    want = 1 if work < SERIAL_BELOW else _threads()
    nt = numba.get_num_threads()
    cs = numba.set_parallel_chunksize(PARALLEL_CHUNKSIZE)
    try:
        if want != nt:
            numba.set_num_threads(want)
            try:
                return kernel(*args)
            finally:
                numba.set_num_threads(nt)
        return kernel(*args)
    finally:
        numba.set_parallel_chunksize(cs)


def _dummy(dt, ndim: int = 2) -> np.ndarray:
    a = _DUMMY.get((dt, ndim))
    if a is None:
        a = _DUMMY[(dt, ndim)] = np.zeros((1,) * ndim, dtype=dt)
    return a


# Fresh memory costs a page fault per 4 KiB page on first touch: on the bench
# VM about 0.4 ms per MiB (22 ms for a 100k x 128 float32 tensor, 220 ms for
# 1M x 128; the kernels themselves write it in 1.5 / 15 ms).  Outputs of at
# least this many bytes are placed in their own anonymous mapping with
# madvise(MADV_HUGEPAGE), 2 MiB aligned: one fault per 2 MiB (measured 10x
# cheaper).  When the last tensor using a mapping dies, the mapping goes to
# a free list for the next output of its size (_FREE_MAPPINGS below).
HUGE_ALLOC_BYTES = 8 << 20
_HUGE = 2 << 20
_huge_ok = [hasattr(__import__("mmap"), "MADV_HUGEPAGE")]
_NPDT = {torch.float32: np.float32, torch.float64: np.float64, torch.int32: np.int32, torch.int64: np.int64,
         torch.uint8: np.uint8}


def _empty(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype), in huge pages when large (see HUGE_ALLOC_BYTES)."""
    if dtype not in _NPDT:
        return torch.empty(shape, dtype=dtype)
    npdt = np.dtype(_NPDT[dtype])
    nbytes = math.prod(shape) * npdt.itemsize
    if nbytes < HUGE_ALLOC_BYTES or not _huge_ok[0]:
        return torch.empty(shape, dtype=dtype)
    import mmap
    import weakref
    try:
        free = _FREE_MAPPINGS.get(nbytes)
        m = free.pop() if free else None
        if m is None:
            m = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            m.madvise(mmap.MADV_HUGEPAGE)
        base = np.frombuffer(m, dtype=np.uint8)
        off = (-base.ctypes.data) % _HUGE
        arr = base[off:off + nbytes].view(npdt).reshape(shape)
        weakref.finalize(base, _release_mapping, nbytes, m)
        return torch.from_numpy(arr)
    except (OSError, ValueError, AttributeError):
        _huge_ok[0] = False
        return torch.empty(shape, dtype=dtype)


# A released mapping is kept (at most FREE_MAPPINGS_PER_SIZE per size) for
# the next output of the same size: its huge pages are already faulted in.
# Fresh huge pages are not free either: with the kernel's THP defrag =
# madvise, a fault may compact memory first; measured on the bench VM, the
# first calls of a 100k x 128 copy_src sum took 78-129 ms before settling at
# 19-28 ms (31-42 ms with ordinary pages), and reusing the mapping avoids that.
# Binding a new program drops them all (gdsl.runtime.memory.release_free_heap):
# the sizes an earlier module used are dead weight for the next one.
FREE_MAPPINGS_PER_SIZE = 1
_FREE_MAPPINGS: dict[int, list] = {}
on_release(_FREE_MAPPINGS.clear)


def _release_mapping(nbytes: int, m) -> None:
    free = _FREE_MAPPINGS.setdefault(nbytes, [])
    if len(free) < FREE_MAPPINGS_PER_SIZE:
        free.append(m)


def _data_dtype(*ts) -> torch.dtype:
    dt = None
    for t in ts:
        if t is None:
            continue
        dt = t.dtype if dt is None else torch.promote_types(dt, t.dtype)
    return dt if dt in _FLOATS else torch.float32


def _mat(t: torch.Tensor, dt: torch.dtype, rows: int, cols: int) -> torch.Tensor:
    return t.detach().to(dt).reshape(rows, cols).contiguous()


def _vec(t: torch.Tensor | None, dt: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dt).reshape(-1).contiguous()


def agg_raw(csr: CSR, x2: torch.Tensor | None, w2: torch.Tensor | None, msg: str, reduce: str,
            bcast: str, H: int, D: int, dt: torch.dtype, mean: bool = False, *,
            xs: torch.Tensor | None = None, rs: torch.Tensor | None = None, wperm: bool = False):
    """out [nrows, H*D] (and arg [nrows, H*D] edge ids for max/min) of one
    aggregation over `csr`; x2 [N, H*D]; w2 [E, H] (bcast "w"), [E] or [E, 1]
    (bcast "s") or [E, H*D]; in CSR slot order when `wperm`.  xs [N]: scale
    of each gathered vertex; rs [nrows]: scale of each output row (mean
    multiplies it by 1 / in-degree)."""
    F = H * D
    npdt = _NP[dt]
    maxmin = reduce in ("max", "min")
    if msg not in BINARY:
        bcast = "none"
    if bcast == "w" and H == 1:
        bcast = "s"
    if mean:
        inv = csr.inv_degree(dt)
        rs = inv if rs is None else rs * inv
    if maxmin and (xs is not None or rs is not None or wperm):
        raise ValueError("max / min aggregation takes no scales or permuted edge data")
    out = _empty((csr.nrows, F), dt)
    arg = _empty((csr.nrows, F), torch.from_numpy(csr.eid[:0]).dtype) if maxmin else None
    heads = msg in BINARY and bcast == "w"   # [rows, H, D] views; else [rows, F]
    shp = (lambda n: (n, H, D)) if heads else (lambda n: (n, F))
    xa = x2.numpy().reshape(shp(x2.shape[0])) if x2 is not None else _dummy(npdt, len(shp(0)))
    if w2 is None:
        wa = _dummy(npdt, 1)
    elif msg == "copy_edge" or bcast == "none":
        wa = w2.numpy().reshape(w2.shape[0], F)
    elif bcast == "w":
        wa = w2.numpy().reshape(w2.shape[0], H)
    else:
        wa = w2.numpy().reshape(w2.shape[0])
    xsa = xs.numpy() if xs is not None else _dummy(npdt, 1)
    rsa = rs.numpy() if rs is not None else _dummy(npdt, 1)
    outa = out.numpy().reshape(shp(csr.nrows))
    arga = arg.numpy().reshape(shp(csr.nrows)) if maxmin else _dummy(csr.eid.dtype, len(shp(0)))
    flags = {"wperm": bool(wperm), "xscale": xs is not None, "rscale": rs is not None}
    row_bytes = F * np.dtype(npdt).itemsize
    pf = 0 if maxmin else _prefetch_plan(csr, msg, row_bytes, xa.shape[0])
    # auto prefetch replaces auto blocking (see PREFETCH)
    instead_of_blocking = bool(pf) and PREFETCH == "auto" and CACHE_BLOCKING == "auto"
    block = None
    if (not maxmin and msg in ("copy_src", "mul") and CACHE_BLOCKING != "off"
            and csr.num_edges > 0 and csr.nrows > 0 and not instead_of_blocking):
        block = block_size_for(csr, row_bytes)
        if CACHE_BLOCKING == "on" and block is None:
            block = max(1, csr.nrows)
    work = (csr.num_edges + csr.nrows) * F
    args = (xa, wa, xsa, rsa, outa, arga, npdt(0))
    if block is not None:
        k = get_kernel("aggregate", msg=msg, reduce="sum", bcast=bcast, blocked=True, **flags)
        _launch(k, work, csr.chunks, csr.blocked(block), csr.indices, csr.eid, *args)
    else:
        if pf:
            flags["prefetch"] = pf
        k = get_kernel("aggregate", msg=msg, reduce=reduce, bcast=bcast, **flags)
        _launch(k, work, csr.chunks, csr.indptr, csr.indices, csr.eid, *args)
    return out, arg


def sddmm_raw(g: CSRGraph, a2: torch.Tensor, b2: torch.Tensor, op: str, P: int, K: int,
              dt: torch.dtype) -> torch.Tensor:
    """[E, P] (dot over K) or [E, P*K] (elementwise) from a2, b2 [N, P*K]."""
    csr = g.in_csr
    out = _empty((g.num_edges, P if op == "dot" else P * K), dt)
    k = get_kernel("sddmm", op=op)
    _launch(k, (csr.num_edges + csr.nrows) * P * K, csr.chunks, csr.indptr, csr.indices, csr.eid,
            a2.numpy(), b2.numpy(), out.numpy(), P, K, _NP[dt](0))
    return out


# --------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------

def _classify(g: CSRGraph, x, w, msg: str):
    """(bcast, H, D, feature shape) of one aggregate call."""
    N, E = g.num_nodes, g.num_edges
    if x is not None and x.shape[0] != N:
        raise ValueError(f"x has {x.shape[0]} rows, the graph {N} vertices")
    if w is not None and w.shape[0] != E:
        raise ValueError(f"w has {w.shape[0]} rows, the graph {E} edges")
    if msg == "copy_src":
        if x is None:
            raise ValueError("copy_src needs x")
        fs = tuple(x.shape[1:])
        return "none", 1, math.prod(fs), fs
    if msg == "copy_edge":
        if w is None:
            raise ValueError("copy_edge needs w")
        fs = tuple(w.shape[1:])
        return "none", 1, math.prod(fs), fs
    if x is None or w is None:
        raise ValueError(f"message {msg} needs both x and w")
    fs, wf = tuple(x.shape[1:]), tuple(w.shape[1:])
    if wf == fs:
        return "none", 1, math.prod(fs), fs
    ws = wf
    while ws and ws[-1] == 1:
        ws = ws[:-1]
    if fs[:len(ws)] == ws:
        return "w", math.prod(ws), math.prod(fs[len(ws):]), fs
    raise ValueError(f"edge data of shape {tuple(w.shape)} does not broadcast against vertex data "
                     f"{tuple(x.shape)} (expected [E], [E, *leading feature axes] or [E, *features])")


class _AggregateFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, x, w, msg, reduce, to, info, xs, os, wp):
        bcast, H, D, fs = info
        dt = _data_dtype(x, w)
        F, N, E = H * D, g.num_nodes, g.num_edges
        csr = g.csr(to)
        x2 = _mat(x, dt, N, F) if msg != "copy_edge" else None
        Wf = H if bcast == "w" else F
        if wp is not None:
            w2, wperm = _mat(wp[0], dt, E, Wf), True
        else:
            w2, wperm = (_mat(w, dt, E, Wf) if msg != "copy_src" else None), False
        xs, rs = _vec(xs, dt), _vec(os, dt)
        if reduce == "mean":
            inv = csr.inv_degree(dt)
            rs = inv if rs is None else rs * inv
        base = "sum" if reduce == "mean" else reduce
        out, arg = agg_raw(csr, x2, w2, msg, base, bcast, H, D, dt, xs=xs, rs=rs, wperm=wperm)
        ctx.g, ctx.msg, ctx.reduce, ctx.to, ctx.info, ctx.dt = g, msg, reduce, to, info, dt
        ctx.arg, ctx.xs, ctx.rs, ctx.wp = arg, xs, rs, wp
        ctx.save_for_backward(x, w)
        return out.reshape((csr.nrows,) + fs)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_x, need_w = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        none = (None,) * 8
        if not (need_x or need_w):
            return (None, None, None) + none
        x, w = ctx.saved_tensors
        g, msg, reduce, to, dt = ctx.g, ctx.msg, ctx.reduce, ctx.to, ctx.dt
        xs, rs, wp = ctx.xs, ctx.rs, ctx.wp
        bcast, H, D, _ = ctx.info
        F, N, E = H * D, g.num_nodes, g.num_edges
        csr = g.csr(to)
        Wf = H if bcast == "w" else F
        x2 = _mat(x, dt, N, F) if x is not None else None
        w2 = _mat(w, dt, E, Wf) if w is not None else None
        G = _mat(grad, dt, csr.nrows, F)
        dx = dw = None
        if reduce in ("max", "min") and msg == "copy_src":   # ties share the gradient, as in the reference
            dx = _maxmin_copy_src_dx(g, csr, to, ctx.arg, G, x2, dt)
        elif reduce in ("max", "min"):
            dx, dw = maxmin_backward(ctx.arg, G, csr.row_of_edge, csr.col_of_edge, x2, w2, msg, bcast, H, D,
                                     need_x, need_w)
        else:
            # out[v] = rs[v] * sum over e = (u -> v) of MSG(x[u] * xs[u], w[e]):
            # d x[u] = xs[u] * sum over the out-edges of u of rs[v] G[v] (*, / w[e]),
            # the reverse aggregation with the two scales swapped
            if need_x and msg != "copy_edge":
                rev = g.reverse_of(to)
                if msg == "mul":
                    if wp is not None:
                        wb, wperm = _mat(wp[1], dt, E, Wf), True
                    else:
                        wb, wperm = w2, False
                    dx, _ = agg_raw(rev, G, wb, "mul", "sum", bcast, H, D, dt, xs=rs, rs=xs, wperm=wperm)
                elif msg == "div":
                    Gs = G * rs.unsqueeze(1) if rs is not None else G
                    dx, _ = agg_raw(rev, Gs, w2, "div", "sum", bcast, H, D, dt)
                else:  # copy_src, add, sub: d msg / d x = 1
                    dx, _ = agg_raw(rev, G, None, "copy_src", "sum", "none", 1, F, dt, xs=rs, rs=xs)
            if need_w and msg != "copy_src":
                Gs = G * rs.unsqueeze(1) if rs is not None else G
                if msg in ("copy_edge", "add", "sub"):
                    Gr = Gs.view(csr.nrows, H, D).sum(-1) if bcast == "w" else Gs
                    dw = Gr.index_select(0, csr.row_of_edge)
                    if msg == "sub":
                        dw = dw.neg_()
                else:  # mul, div: x[col] (.) G[row], as sddmm over (src, dst)
                    xsx = x2 * xs.unsqueeze(1) if xs is not None else x2
                    a, b = (xsx, Gs) if to == "dst" else (Gs, xsx)
                    if bcast == "w":
                        dw = sddmm_raw(g, a, b, "dot", H, D, dt)
                    else:
                        dw = sddmm_raw(g, a, b, "mul", 1, F, dt)
                    if msg == "div":
                        dw = dw.div_(w2 * w2).neg_()
        if dx is not None:
            dx = dx.reshape(x.shape).to(x.dtype)
        if dw is not None:
            dw = dw.reshape(w.shape).to(w.dtype)
        return (None, dx, dw) + none


def _maxmin_copy_src_dx(g: CSRGraph, csr: CSR, to: str, arg: torch.Tensor, G: torch.Tensor, x2: torch.Tensor,
                        dt: torch.dtype) -> torch.Tensor:
    """gdsl/backends/maxmin.py's backward for the message `src.x` (max / min's
    usual form) on two kernels (codegen.gen_maxmin_ties): [rows, F] and
    [N, F] temporaries instead of [E, F] ones."""
    nrows, F = G.shape
    if csr.num_edges == 0 or F == 0:
        return torch.zeros((x2.shape[0], F), dtype=dt)
    a = arg.reshape(nrows, F).to(torch.int64).clamp_(min=0)   # rows without edges: read, never used
    won = x2.gather(0, csr.col_of_edge.index_select(0, a.reshape(-1)).reshape(nrows, F))
    count = _empty((nrows, F), dt)
    work = (csr.num_edges + nrows) * F
    _launch(get_kernel("maxmin_ties", fn="ties_count"), work, csr.chunks, csr.indptr, csr.indices, x2.numpy(),
            won.numpy(), count.numpy())
    s = G / count.clamp_(min=1)
    rev = g.reverse_of(to)
    dx = _empty((x2.shape[0], F), dt)
    _launch(get_kernel("maxmin_ties", fn="ties_dx"), work, rev.chunks, rev.indptr, rev.indices, x2.numpy(),
            won.numpy(), s.numpy(), dx.numpy())
    return dx


def aggregate(g: CSRGraph, x: torch.Tensor | None, w: torch.Tensor | None, msg: str, reduce: str,
              to: str = "dst", *, xscale: torch.Tensor | None = None, oscale: torch.Tensor | None = None,
              w_perm: "PermutedEdgeData | None" = None) -> torch.Tensor:
    """out[v] = REDUCE over the edges e = (u -> v) of MSG(x[u], w[e]) (to="dst"),
    or over the out-edges of u with x read at the destination (to="src").

    msg: copy_src (x only), copy_edge (w only), add, sub, mul, div (x[.] OP w[e]);
    reduce: sum, max, min (and mean = sum / in-degree).  x: [N, *fs]; w: [E]
    (one scalar per edge), [E, H] with x [N, H, D] (per-head, broadcast over
    the trailing axes), or [E, *fs].  Rows without edges are 0.

    Constant scales fused into the kernel (sum and mean; copy_src and mul
    messages): xscale [N] multiplies each gathered vertex (x[u] * xscale[u]),
    oscale [rows] each output row (after the mean's 1 / degree).  Neither gets
    a gradient.  w_perm: `permute_edge_data(g, w, to)` of a constant w (no
    gradient), read in CSR order instead of through the edge ids."""
    if msg not in MSGS:
        raise ValueError(f"unknown message op {msg!r} (one of {MSGS})")
    if reduce not in ("sum", "max", "min", "mean"):
        raise ValueError(f"unknown reduction {reduce!r} (sum, max, min, mean)")
    csr = g.csr(to)
    info = _classify(g, x, w, msg)
    if msg == "copy_src":
        w = None
        w_perm = None
    elif msg == "copy_edge":
        x = None
    if xscale is not None or oscale is not None:
        if reduce not in ("sum", "mean"):
            raise ValueError("scales are fused into sum and mean aggregation only")
        if xscale is not None and msg not in ("copy_src", "mul"):
            raise ValueError("a source-vertex scale is fused for copy_src and mul messages only")
        if xscale is not None and xscale.numel() != g.num_nodes:
            raise ValueError(f"xscale has {xscale.numel()} values, the graph {g.num_nodes} vertices")
        if oscale is not None and oscale.numel() != csr.nrows:
            raise ValueError(f"oscale has {oscale.numel()} values, the output {csr.nrows} rows")
    if w_perm is not None:
        if w is not None and w.requires_grad:
            raise ValueError("w_perm is for constant edge data (w needs no gradient)")
        if msg != "mul" or reduce not in ("sum", "mean"):
            w_perm = None  # only the mul kernels read permuted edge data
    return _AggregateFn.apply(g, x, w, msg, reduce, to, info, xscale, oscale, w_perm)


class PermutedEdgeData:
    """A constant edge tensor in the slot order of the CSR that aggregates
    `to` ([0], the forward) and of the reverse CSR ([1], the backward), so
    that the kernels read it sequentially instead of at random edge ids.
    Each order is made on first use: a forward-only run never needs [1], nor
    the reverse CSR it is read from."""

    def __init__(self, g: CSRGraph, w: torch.Tensor, to: str) -> None:
        self.g, self.w, self.to = g, w.detach(), to
        self._orders: list = [None, None]

    def __getitem__(self, i: int) -> torch.Tensor:
        t = self._orders[i]
        if t is None:
            csr = self.g.csr(self.to) if i == 0 else self.g.reverse_of(self.to)
            t = self._orders[i] = self.w.index_select(0, torch.from_numpy(csr.eid)).contiguous()
        return t


def permute_edge_data(g: CSRGraph, w: torch.Tensor, to: str = "dst") -> PermutedEdgeData:
    """`w` in CSR slot order, forward ([0]) and backward ([1]): PermutedEdgeData."""
    return PermutedEdgeData(g, w, to)


# --------------------------------------------------------------------------
# sddmm
# --------------------------------------------------------------------------

class _SddmmFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, a, b, op):
        dt = _data_dtype(a, b)
        N, E = g.num_nodes, g.num_edges
        fs = tuple(a.shape[1:])
        if op == "dot":
            P, K, ofs = math.prod(fs[:-1]), fs[-1], fs[:-1]
        else:
            P, K, ofs = 1, math.prod(fs), fs
        a2, b2 = _mat(a, dt, N, P * K), _mat(b, dt, N, P * K)
        out = sddmm_raw(g, a2, b2, op, P, K, dt)
        ctx.g, ctx.op, ctx.PK, ctx.dt = g, op, (P, K), dt
        ctx.save_for_backward(a, b)
        return out.reshape((E,) + ofs)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_a, need_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if not (need_a or need_b):
            return None, None, None, None
        a, b = ctx.saved_tensors
        g, op, (P, K), dt = ctx.g, ctx.op, ctx.PK, ctx.dt
        N, E, F = g.num_nodes, g.num_edges, P * K
        a2, b2 = _mat(a, dt, N, F), _mat(b, dt, N, F)
        da = db = None
        if op == "dot":
            G = _mat(grad, dt, E, P)
            if need_a:   # da[u, p, :] = sum over out-edges of g[e, p] * b[v, p, :]
                da, _ = agg_raw(g.out_csr, b2, G, "mul", "sum", "w", P, K, dt)
            if need_b:
                db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "w", P, K, dt)
        else:
            G = _mat(grad, dt, E, F)
            if op in ("add", "sub"):
                if need_a:
                    da, _ = agg_raw(g.out_csr, None, G, "copy_edge", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, None, G, "copy_edge", "sum", "none", 1, F, dt)
                    if op == "sub":
                        db = db.neg_()
            elif op == "mul":
                if need_a:
                    da, _ = agg_raw(g.out_csr, b2, G, "mul", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "none", 1, F, dt)
            else:  # div: a[u] / b[v]
                if need_a:
                    da, _ = agg_raw(g.out_csr, (1 / b2).contiguous(), G, "mul", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "none", 1, F, dt)
                    db = db.div_(b2 * b2).neg_()
        if da is not None:
            da = da.reshape(a.shape).to(a.dtype)
        if db is not None:
            db = db.reshape(b.shape).to(b.dtype)
        return None, da, db, None


def sddmm(g: CSRGraph, a: torch.Tensor, b: torch.Tensor, op: str) -> torch.Tensor:
    """Per edge e = (u -> v): dot: sum over the last axis of a[u] * b[v]
    (a, b: [N, *p, k] -> [E, *p]); add, sub, mul, div: a[u] OP b[v]
    (a, b: [N, *fs] -> [E, *fs])."""
    if op not in SDDMM_OPS:
        raise ValueError(f"unknown sddmm op {op!r} (one of {SDDMM_OPS})")
    if a.shape != b.shape:
        raise ValueError(f"sddmm operands differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.shape[0] != g.num_nodes:
        raise ValueError(f"sddmm operands have {a.shape[0]} rows, the graph {g.num_nodes} vertices")
    if op == "dot" and a.dim() < 2:
        raise ValueError("sddmm dot needs a feature axis to sum over")
    return _SddmmFn.apply(g, a, b, op)


# --------------------------------------------------------------------------
# edge softmax
# --------------------------------------------------------------------------

class _EdgeSoftmaxFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, s):
        dt = _data_dtype(s)
        N, E = g.num_nodes, g.num_edges
        K = math.prod(s.shape[1:])
        s2 = _mat(s, dt, E, K)
        y = _empty((E, K), dt)
        mx = torch.empty((N, K), dtype=dt)
        den = torch.empty((N, K), dtype=dt)
        csr = g.in_csr
        _launch(get_kernel("edge_softmax", fn="edge_softmax_fwd"), (E + N) * K,
            csr.chunks, csr.indptr, csr.eid, s2.numpy(), y.numpy(), mx.numpy(), den.numpy(), K)
        ctx.g, ctx.K, ctx.dt = g, K, dt
        out = y.reshape(s.shape)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None
        (y,) = ctx.saved_tensors
        g, K, dt = ctx.g, ctx.K, ctx.dt
        N, E = g.num_nodes, g.num_edges
        G = _mat(grad, dt, E, K)
        y2 = _mat(y, dt, E, K)
        ds = _empty((E, K), dt)
        acc = torch.empty((N, K), dtype=dt)
        csr = g.in_csr
        _launch(get_kernel("edge_softmax", fn="edge_softmax_bwd"), (E + N) * K,
            csr.chunks, csr.indptr, csr.eid, y2.numpy(), G.numpy(), ds.numpy(), acc.numpy(), K)
        return None, ds.reshape(y.shape)


def edge_softmax(g: CSRGraph, s: torch.Tensor) -> torch.Tensor:
    """s: [E, *hs]; softmax over the incoming edges of each destination
    (max-subtracted)."""
    if s.shape[0] != g.num_edges:
        raise ValueError(f"s has {s.shape[0]} rows, the graph {g.num_edges} edges")
    return _EdgeSoftmaxFn.apply(g, s)


# --------------------------------------------------------------------------
# fused GAT aggregation
# --------------------------------------------------------------------------

class _GatFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, el, er, z, slope):
        dt = _data_dtype(el, er, z)
        N = g.num_nodes
        H, D = z.shape[1], z.shape[2]
        F = H * D
        el2, er2, z2 = _mat(el, dt, N, H), _mat(er, dt, N, H), _mat(z, dt, N, F)
        out = _empty((N, F), dt)
        lse = torch.empty((N, H), dtype=dt)
        den = torch.empty((N, H), dtype=dt)
        csr = g.in_csr
        _launch(get_kernel("gat", fn="gat_fwd"), (g.num_edges + N) * F,
            csr.chunks, csr.indptr, csr.indices, el2.numpy(), er2.numpy(), z2.numpy().reshape(N, H, D),
            out.numpy().reshape(N, H, D), lse.numpy(), den.numpy(), _NP[dt](slope))
        ctx.g, ctx.dt, ctx.HD, ctx.slope = g, dt, (H, D), slope
        out = out.reshape(N, H, D)
        ctx.save_for_backward(el, er, z, out, lse)
        return out

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_el, need_er, need_z = ctx.needs_input_grad[1:4]
        if not (need_el or need_er or need_z):
            return None, None, None, None, None
        el, er, z, out, lse = ctx.saved_tensors
        g, dt, (H, D), slope = ctx.g, ctx.dt, ctx.HD, ctx.slope
        N, E, F = g.num_nodes, g.num_edges, H * D
        npdt = _NP[dt]
        need_att = need_el or need_er
        el2, er2, z2 = _mat(el, dt, N, H), _mat(er, dt, N, H), _mat(z, dt, N, F)
        G = _mat(grad, dt, N, F)
        if need_att:
            delta = (G.view(N, H, D) * out.to(dt).view(N, H, D)).sum(-1).contiguous()
            draw = _empty((E, H), dt)
        else:
            delta = draw = torch.from_numpy(_dummy(npdt))
        dz = _empty((N, F), dt) if need_z else None
        dl = torch.empty((N, H), dtype=dt)
        csr = g.out_csr
        _launch(get_kernel("gat", fn="gat_bwd"), (E + N) * F,
            csr.chunks, csr.indptr, csr.indices, csr.eid, el2.numpy(), er2.numpy(), z2.numpy().reshape(N, H, D),
            lse.numpy(), G.numpy().reshape(N, H, D), delta.numpy(),
            dz.numpy().reshape(N, H, D) if need_z else _dummy(npdt, 3), dl.numpy(), draw.numpy(),
            npdt(slope), npdt(0), bool(need_z), bool(need_att))
        del_ = dl.reshape(el.shape).to(el.dtype) if need_el else None
        der = None
        if need_er:
            der, _ = agg_raw(g.in_csr, None, draw, "copy_edge", "sum", "none", 1, H, dt)
            der = der.reshape(er.shape).to(er.dtype)
        dzr = dz.reshape(z.shape).to(z.dtype) if need_z else None
        return None, del_, der, dzr, None


def gat_aggregate(g: CSRGraph, el: torch.Tensor, er: torch.Tensor, z: torch.Tensor,
                  slope: float = 0.2) -> torch.Tensor:
    """out[v, h, :] = sum over e = (u -> v) of alpha[e, h] * z[u, h, :] with
    alpha = softmax over the in-edges of v of leaky_relu(el[u, h] + er[v, h], slope);
    one pass per destination (online softmax), no E x H x D tensor; the
    backward recomputes alpha from the saved per-(v, h) log-sum-exp."""
    if z.dim() != 3:
        raise ValueError(f"z must be [N, H, D], got {tuple(z.shape)}")
    N, H = z.shape[0], z.shape[1]
    for name, t in (("el", el), ("er", er)):
        if t.shape[0] != N or t.numel() != N * H:
            raise ValueError(f"{name} must be [N, H] = [{N}, {H}], got {tuple(t.shape)}")
    if N != g.num_nodes:
        raise ValueError(f"z has {N} rows, the graph {g.num_nodes} vertices")
    return _GatFn.apply(g, el, er, z, float(slope))


compile_report = codegen.compile_report
